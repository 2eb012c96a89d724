// The AMX tile building block of kernels/common/amx_tile.h against a float64 reference
// (torch-free): the tile GEMM in both modes over every block shape it has (2x2, 2x1, 1x2, 1x1
// tiles of 16, so M and N of 16 .. 112 and K of 32 .. 256), fed by both packers (B from rows,
// B from a transposed matrix) with odd sizes, odd leading dimensions and tails that must read
// as zero. Skipped (and says so) where the CPU or OP_PLUGIN_ISA gives no AMX.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common/amx_tile.h"
#include "kernels/common/scalar_types.h"
#include "op_plugin/isa.h"
#include "avx512_test_main.h"

namespace amx = op_plugin::isa_avx512::amx;

static int g_pass = 0, g_fail = 0;

static uint16_t to_bf16(float x) { return op_plugin::to_bfloat16(x).bits; }
static double from_bf16(uint16_t h) { return op_plugin::to_float(op_plugin::BFloat16{h}); }

#define EXPECT(cond, ...)                \
  do {                                   \
    if (cond) {                          \
      ++g_pass;                          \
    } else {                             \
      ++g_fail;                          \
      std::printf("FAIL: " __VA_ARGS__); \
      std::printf("\n");                 \
    }                                    \
  } while (0)

// C (=|+=) A * B with B packed from a row-major X (K rows of N values, row stride ldx), or from
// the rows of a transposed Xt (N rows of K values, row stride ldx): both give B(k, n).
static void check(int64_t M, int64_t N, int64_t K, int64_t kvalid, bool accumulate, bool transposed, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t lda = K + 32, ldc = N + 16, Np = (N + 15) / 16 * 16;
  std::vector<uint16_t> A(static_cast<size_t>(M * lda));
  for (auto& x : A) x = to_bf16(nd(rng));
  // the contraction stops at kvalid: A's columns past it are zero (as P past the visible keys)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = kvalid; k < K; ++k) A[m * lda + k] = 0;
  // X holds B(k, n) for k < kvalid, n < N; an odd leading dimension, garbage past the valid part
  const int64_t ldx = transposed ? kvalid + 3 : N + 3;
  std::vector<uint16_t> X(static_cast<size_t>((transposed ? N : kvalid) * ldx + 8));
  for (auto& x : X) x = to_bf16(nd(rng));
  auto b_at = [&](int64_t k, int64_t n) { return from_bf16(transposed ? X[n * ldx + k] : X[k * ldx + n]); };
  // packed B: panels of 16 columns; garbage first so that what the packer leaves is caught
  const int64_t ldp = 16 * K;
  std::vector<uint16_t> Bp(static_cast<size_t>(Np / 16 * ldp), 0x7fc0);  // NaN
  if (transposed)
    amx::pack_b_transposed(X.data(), ldx, N, kvalid, Bp.data(), K);
  else
    amx::pack_b_rows(X.data(), ldx, kvalid, N, Bp.data(), ldp, K);
  std::vector<float> C(static_cast<size_t>(M * ldc));
  for (auto& x : C) x = nd(rng);
  const std::vector<float> C0 = C;
  {
    amx::TileScope tiles;
    if (accumulate)
      amx::gemm<true>(M, Np, K, A.data(), lda, Bp.data(), ldp, C.data(), ldc);
    else
      amx::gemm<false>(M, Np, K, A.data(), lda, Bp.data(), ldp, C.data(), ldc);
  }
  int bad = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < ldc; ++n) {
      double ref = 0, mag = 0;
      if (n < N)
        for (int64_t k = 0; k < kvalid; ++k) {
          const double p = from_bf16(A[m * lda + k]) * b_at(k, n);
          ref += p;
          mag += std::fabs(p);
        }
      const double c0 = C0[m * ldc + n];
      if (n >= Np) ref = c0;  // past the padded columns: untouched
      else if (accumulate) ref += c0;
      const double tol = n >= Np ? 0.0 : 1e-5 * (mag + std::fabs(c0)) + 1e-6;
      if (!(std::fabs(C[m * ldc + n] - ref) <= tol)) ++bad;
    }
  EXPECT(bad == 0, "M=%lld N=%lld K=%lld valid=%lld %s %s: %d wrong elements", (long long)M, (long long)N,
         (long long)K, (long long)kvalid, accumulate ? "accumulate" : "overwrite", transposed ? "B^T" : "B", bad);
}

static bool test_can_run(const char** why) {
  static char text[64];
  std::snprintf(text, sizeof text, "no AMX at this level (%s)", op_plugin::isa_name(op_plugin::active_isa()));
  *why = text;
  return op_plugin::active_isa() == op_plugin::Isa::kAvx512Amx;
}

static int run_checks() {
  std::mt19937 rng(11);
  for (int64_t M : {16, 32, 48, 64, 112})
    for (int64_t N : {5, 16, 31, 48, 64, 100})
      for (int64_t K : {32, 64, 256})
        for (int64_t kvalid : {K, K - 1, K - 17})
          for (bool acc : {false, true})
            for (bool tr : {false, true}) check(M, N, K, kvalid, acc, tr, rng);
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
