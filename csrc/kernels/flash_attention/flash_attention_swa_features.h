// swa_forward / swa_backward extras of the flash attention engine (torch-free): compile-time
// features of the same loops (kFeat), so flash_attn's instantiation carries none of them.
// kFeatBias adds an additive tile (c2 * pse, -inf where the full mask is set) to the logits;
// kFeatDropout multiplies P by the counter-based keep mask (counter_rng.h) where it feeds P V
// (forward) or dV and dP (backward), never the sums.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/counter_rng.h"
#include "kernels/common/simd.h"
#include "kernels/flash_attention/flash_attention_common.h"

namespace op_plugin {
namespace OP_ISA_NS {
namespace fa {

enum Feat : int { kFeatBias = 1, kFeatDropout = 2 };
template <int V>
struct IntConst {
  static constexpr int value = V;
};

inline int features_of(const FlashAttnFwdParams& p) {
  return (p.full_mask || p.pse ? kFeatBias : 0) | (p.keep_prob < 1.0 ? kFeatDropout : 0);
}

inline float load_float(const void* base, opDataType dt, int64_t idx) {
  switch (dt) {
    case OP_DT_DOUBLE: return static_cast<float>(static_cast<const double*>(base)[idx]);
    case OP_DT_BF16: return bf16_to_float(static_cast<const uint16_t*>(base)[idx]);
    case OP_DT_FLOAT16: return half_bits_to_float(static_cast<const uint16_t*>(base)[idx]);
    default: return static_cast<const float*>(base)[idx];
  }
}

// Additive tile bias[j * Br + i] (log2 units) for query rows i0 + [0, rows) and keys j0 + [0, nc)
// of head n, batch b: c2 * pse, or -inf where the full mask is set; lanes past `rows` get 0.
// The mask rows are transposed as bytes first (mt: Bc x Br scratch), so the masking is a
// contiguous select the compiler vectorises.
template <class S>
inline void build_bias(const FlashAttnFwdParams& p, int64_t b, int64_t n, int64_t i0, int64_t rows, int64_t j0,
                       int64_t nc, S c2, S* bias, uint8_t* mt) {
  const int64_t Br = kBlockQ;
  for (int64_t x = 0; x < nc * Br; ++x) bias[x] = S(0);
  if (p.pse) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t base = b * p.pse_batch_stride + n * p.pse_head_stride + (i0 + i) * p.pse_row_stride + j0;
      S* col = bias + i;
      if (p.pse_dtype == OP_DT_DOUBLE) {
        const double* x = static_cast<const double*>(p.pse) + base;
        for (int64_t j = 0; j < nc; ++j) col[j * Br] = c2 * static_cast<S>(x[j]);
      } else {
        for (int64_t j = 0; j < nc; ++j) col[j * Br] = c2 * static_cast<S>(load_float(p.pse, p.pse_dtype, base + j));
      }
    }
  }
  if (p.full_mask) {
    const uint8_t* m = p.full_mask + b * p.full_mask_batch_stride + n * p.full_mask_head_stride +
                       i0 * p.full_mask_row_stride + j0;
    transpose_bytes(m, p.full_mask_row_stride, rows, nc, mt, Br);
    for (int64_t j = 0; j < nc; ++j) {
      S* bj = bias + j * Br;
      const uint8_t* tj = mt + j * Br;
      for (int64_t i = 0; i < rows; ++i) bj[i] = tj[i] ? static_cast<S>(-INFINITY) : bj[i];
    }
  }
}

// First dropout element index of row i of head n, batch b (key 0).
inline uint64_t dropout_row0(const FlashAttnFwdParams& p, int64_t b, int64_t n, int64_t i) {
  const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b];
  return static_cast<uint64_t>(p.elem_start[b] + (n * sq + i) * skv);
}

// (flash_attn: 0).
template <class Go>
inline void with_features(const FlashAttnFwdParams& p, const Go& go) {
  switch (features_of(p)) {
    case 0: go(IntConst<0>{}); break;
    case kFeatBias: go(IntConst<kFeatBias>{}); break;
    case kFeatDropout: go(IntConst<kFeatDropout>{}); break;
    default: go(IntConst<kFeatBias | kFeatDropout>{}); break;
  }
}

}  // namespace fa
}  // namespace OP_ISA_NS
}  // namespace op_plugin
