// The AMX tile instructions the tile GEMMs use (amx_tile.h, gemm_amx.h), as OP_TILE_* macros: the
// hardware intrinsics, or, in a build with -DOP_PLUGIN_AMX_EMULATE, a software model of them.
// Included after simd.h (the model lives in its OP_ISA_NS and uses its bf16_to_float).
//
// Why the model: the AMX dataflow (tile layouts, packing, block order, tails) must stay correct
// and tested on every host CI may land on, and most hosts have no AMX. The kernel tests built
// against a library compiled with the model (tests/kernels/build_and_run.sh with
// OP_PLUGIN_AMX_EMULATE=1, run by ci/test.sh where the CPU has no AMX) run the avx512_amx level's
// code paths, TileScope included, with every tile instruction done in plain C++: the results
// are those of the hardware's pseudo-code (Intel SDM, TDPBF16PS: products of the bf16 pair
// added to the fp32 accumulator one after the other, k ascending), except that the hardware also
// flushes denormal inputs and outputs to zero. Never used by the wheel: the model is slow.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(OP_PLUGIN_AMX_EMULATE)

#define OP_AMX_TARGET

namespace op_plugin {
namespace OP_ISA_NS {
namespace amx_model {

// Palette 1: eight tiles of at most 16 rows of 64 bytes, shaped by the configuration.
struct Tiles {
  uint8_t rows[8];
  uint16_t colsb[8];
  alignas(64) unsigned char data[8][16 * 64];
};
inline thread_local Tiles tiles;

inline void loadconfig(const void* config) {
  // The 64-byte configuration: palette (byte 0), colsb[16] at byte 16, rows[16] at byte 48.
  const unsigned char* c = static_cast<const unsigned char*>(config);
  for (int t = 0; t < 8; ++t) {
    std::memcpy(&tiles.colsb[t], c + 16 + 2 * t, 2);
    tiles.rows[t] = c[48 + t];
  }
}
inline void release() { std::memset(&tiles, 0, sizeof tiles); }
inline void zero(int t) { std::memset(tiles.data[t], 0, sizeof tiles.data[t]); }
inline void loadd(int t, const void* base, int64_t stride) {
  for (int r = 0; r < tiles.rows[t]; ++r)
    std::memcpy(tiles.data[t] + r * 64, static_cast<const char*>(base) + r * stride, tiles.colsb[t]);
}
inline void stored(int t, void* base, int64_t stride) {
  for (int r = 0; r < tiles.rows[t]; ++r)
    std::memcpy(static_cast<char*>(base) + r * stride, tiles.data[t] + r * 64, tiles.colsb[t]);
}
inline float bf16(const unsigned char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return bf16_to_float(h);  // simd.h's
}
// C[m][n] += A[m][2k] * B[k][2n], then += A[m][2k+1] * B[k][2n+1], for k ascending.
inline void dpbf16ps(int c, int a, int b) {
  const int M = tiles.rows[c], N = tiles.colsb[c] / 4, K = tiles.colsb[a] / 4;
  for (int m = 0; m < M; ++m) {
    float acc[16];
    std::memcpy(acc, tiles.data[c] + m * 64, sizeof acc);
    const unsigned char* arow = tiles.data[a] + m * 64;
    for (int k = 0; k < K; ++k) {
      const float a0 = bf16(arow + 4 * k), a1 = bf16(arow + 4 * k + 2);
      const unsigned char* brow = tiles.data[b] + k * 64;
      for (int n = 0; n < N; ++n) {
        acc[n] += a0 * bf16(brow + 4 * n);
        acc[n] += a1 * bf16(brow + 4 * n + 2);
      }
    }
    std::memcpy(tiles.data[c] + m * 64, acc, sizeof acc);
  }
}

}  // namespace amx_model
}  // namespace OP_ISA_NS
}  // namespace op_plugin

#define OP_TILE_LOADCONFIG(config) ::op_plugin::OP_ISA_NS::amx_model::loadconfig(config)
#define OP_TILE_RELEASE() ::op_plugin::OP_ISA_NS::amx_model::release()
#define OP_TILE_ZERO(t) ::op_plugin::OP_ISA_NS::amx_model::zero(t)
#define OP_TILE_LOADD(t, base, stride) ::op_plugin::OP_ISA_NS::amx_model::loadd(t, base, stride)
#define OP_TILE_STREAM_LOADD(t, base, stride) ::op_plugin::OP_ISA_NS::amx_model::loadd(t, base, stride)
#define OP_TILE_STORED(t, base, stride) ::op_plugin::OP_ISA_NS::amx_model::stored(t, base, stride)
#define OP_TILE_DPBF16PS(c, a, b) ::op_plugin::OP_ISA_NS::amx_model::dpbf16ps(c, a, b)

#else

#define OP_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))
#define OP_TILE_LOADCONFIG(config) _tile_loadconfig(config)
#define OP_TILE_RELEASE() _tile_release()
#define OP_TILE_ZERO(t) _tile_zero(t)
#define OP_TILE_LOADD(t, base, stride) _tile_loadd(t, base, stride)
#define OP_TILE_STREAM_LOADD(t, base, stride) _tile_stream_loadd(t, base, stride)  // tileloaddt1
#define OP_TILE_STORED(t, base, stride) _tile_stored(t, base, stride)
#define OP_TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)

#endif
