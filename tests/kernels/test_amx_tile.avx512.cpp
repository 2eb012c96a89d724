// The AMX tile building block of kernels/common/amx_tile.h against a float64 reference
// (torch-free): the tile GEMM in both modes over every block shape it has (2x2, 2x1, 1x2, 1x1
// tiles of 16, so M and N of 16 .. 112 and K of 32 .. 256), fed by both packers (B from rows,
// B from a transposed matrix) with odd sizes, odd leading dimensions and tails that must read
// as zero; the same for float (float16) operands in three (two) bf16 parts. Skipped (and says so) where the CPU or OP_PLUGIN_ISA gives no AMX.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>
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
// the rows of a transposed Xt (N rows of K values, row stride ldx): both give B(k, n). streamed:
// B's tiles loaded with the non-temporal hint (gemm_parts' kStreamB), which must not change C.
static void check(int64_t M, int64_t N, int64_t K, int64_t kvalid, bool accumulate, bool transposed, bool streamed,
                  std::mt19937& rng) {
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
    if (streamed && accumulate)
      amx::gemm_parts<true, 1, false, true>(M, Np, K, A.data(), lda, 0, Bp.data(), ldp, 0, C.data(), ldc, [] {});
    else if (streamed)
      amx::gemm_parts<false, 1, false, true>(M, Np, K, A.data(), lda, 0, Bp.data(), ldp, 0, C.data(), ldc, [] {});
    else if (accumulate)
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
  EXPECT(bad == 0, "M=%lld N=%lld K=%lld valid=%lld %s %s%s: %d wrong elements", (long long)M, (long long)N,
         (long long)K, (long long)kvalid, accumulate ? "accumulate" : "overwrite", transposed ? "B^T" : "B",
         streamed ? " streamed" : "", bad);
}

// float operands in three bf16 parts (gemm_parts<.., 3>, the packers' _split variants): the six
// kept products must give float32's accuracy. A bf16x3 (two parts) or a dropped pair is off by
// about 2^-16 of the products' magnitude, 7 times the tolerance here. float16 operands in two
// parts (kParts 2): every product exact, so float32 accumulation only, as for three parts.
template <int kParts>
static void check_parts(int64_t M, int64_t N, int64_t K, int64_t kvalid, bool accumulate, bool transposed,
                        std::mt19937& rng) {
  using T = std::conditional_t<kParts == 2, op_plugin::Half, float>;
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> ex(kParts == 2 ? -6 : -20, kParts == 2 ? 6 : 20);
  auto value = [&] {  // exponents far apart
    const float x = std::ldexp(nd(rng), ex(rng));
    if constexpr (kParts == 2) return op_plugin::to_half(x); else return x;
  };
  auto as_double = [](T x) {
    if constexpr (kParts == 2) return static_cast<double>(op_plugin::to_float(x)); else return static_cast<double>(x);
  };
  const int64_t lda = K + 32, ldc = N + 16, Np = (N + 15) / 16 * 16, lds = K + 7;
  std::vector<T> Af(static_cast<size_t>(M * lds));
  for (auto& x : Af) x = value();
  // X holds B(k, n) for k < kvalid, n < N, with an odd leading dimension
  const int64_t ldx = transposed ? kvalid + 3 : N + 3;
  std::vector<T> X(static_cast<size_t>((transposed ? N : kvalid) * ldx + 8));
  for (auto& x : X) x = value();
  auto b_at = [&](int64_t k, int64_t n) { return as_double(transposed ? X[n * ldx + k] : X[k * ldx + n]); };
  const int64_t apart = M * lda, ldp = 16 * K, bpart = Np / 16 * ldp;
  std::vector<uint16_t> A(static_cast<size_t>(kParts * apart), 0x7fc0), Bp(static_cast<size_t>(kParts * bpart), 0x7fc0);
  amx::pack_a_rows_split<kParts>(Af.data(), lds, M, kvalid, A.data(), lda, K, apart);
  if (transposed)
    amx::pack_b_transposed_split<kParts>(X.data(), ldx, N, kvalid, Bp.data(), K, bpart);
  else
    amx::pack_b_rows_split<kParts>(X.data(), ldx, kvalid, N, Bp.data(), ldp, K, bpart);
  std::vector<float> C(static_cast<size_t>(M * ldc));
  for (auto& x : C) x = nd(rng);
  const std::vector<float> C0 = C;
  {
    amx::TileScope tiles;
    if (accumulate)
      amx::gemm_parts<true, kParts>(M, Np, K, A.data(), lda, apart, Bp.data(), ldp, bpart, C.data(), ldc, [] {});
    else
      amx::gemm_parts<false, kParts>(M, Np, K, A.data(), lda, apart, Bp.data(), ldp, bpart, C.data(), ldc, [] {});
  }
  int bad = 0;
  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < ldc; ++n) {
      double ref = 0, mag = 0;
      if (n < N)
        for (int64_t k = 0; k < kvalid; ++k) {
          const double p = as_double(Af[m * lds + k]) * b_at(k, n);
          ref += p;
          mag += std::fabs(p);
        }
      const double c0 = C0[m * ldc + n];
      if (n >= Np) ref = c0;
      else if (accumulate) ref += c0;
      // float32 accumulation of 4-6 K products: the worst seen is 3e-7 of the magnitude on the
      // tiles and 1.3e-6 under the software tiles (OP_PLUGIN_AMX_EMULATE, which sums in another
      // order), as for any float32 dot product of this length
      const double scale = mag + std::fabs(c0);
      const double tol = n >= Np ? 0.0 : 2e-6 * scale;
      const double err = std::fabs(C[m * ldc + n] - ref);
      if (!(err <= tol)) ++bad;
      if (scale > 0) worst = std::fmax(worst, err / scale);
    }
  EXPECT(bad == 0, "%d parts: M=%lld N=%lld K=%lld valid=%lld %s %s: %d wrong elements (worst %.3g of the magnitude)",
         kParts, (long long)M, (long long)N, (long long)K, (long long)kvalid, accumulate ? "accumulate" : "overwrite",
         transposed ? "B^T" : "B", bad, worst);
}

// kSwapParts: C = A B^T and C' = B A^T (the forward's S = Q K^T, the backward's S^T = K Q^T), with
// C' walking the part pairs swapped, round alike: C'^T == C bit for bit. Returns how many elements
// of C' differ from C^T without kSwapParts (for the message: the pair order does reach the bits).
template <int kParts>
static int check_swapped_parts(int64_t M, int64_t N, int64_t K, std::mt19937& rng) {
  using T = std::conditional_t<kParts == 2, op_plugin::Half, float>;
  std::normal_distribution<float> nd(0.f, 4.f);
  auto value = [&] {
    if constexpr (kParts == 2) return op_plugin::to_half(nd(rng)); else return nd(rng);
  };
  std::vector<T> Xa(static_cast<size_t>(M * K)), Xb(static_cast<size_t>(N * K));
  for (auto& x : Xa) x = value();
  for (auto& x : Xb) x = value();
  // rows of one as A and the other as B^T panels, both ways
  auto product = [&](const std::vector<T>& rows, int64_t R, const std::vector<T>& cols, int64_t Cn, bool swap) {
    const int64_t apart = R * K, ldp = 16 * K, bpart = Cn / 16 * ldp;
    std::vector<uint16_t> A(static_cast<size_t>(kParts * apart)), Bp(static_cast<size_t>(kParts * bpart));
    amx::pack_a_rows_split<kParts>(rows.data(), K, R, K, A.data(), K, K, apart);
    amx::pack_b_transposed_split<kParts>(cols.data(), K, Cn, K, Bp.data(), K, bpart);
    std::vector<float> C(static_cast<size_t>(R * Cn));
    amx::TileScope tiles;
    if (swap)
      amx::gemm_parts<false, kParts, true>(R, Cn, K, A.data(), K, apart, Bp.data(), ldp, bpart, C.data(), Cn, [] {});
    else
      amx::gemm_parts<false, kParts>(R, Cn, K, A.data(), K, apart, Bp.data(), ldp, bpart, C.data(), Cn, [] {});
    return C;
  };
  const std::vector<float> C = product(Xa, M, Xb, N, false);
  const std::vector<float> Cs = product(Xb, N, Xa, M, true), Cn = product(Xb, N, Xa, M, false);
  int bad = 0, differ = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      bad += std::memcmp(&C[m * N + n], &Cs[n * M + m], sizeof(float)) != 0;
      differ += std::memcmp(&C[m * N + n], &Cn[n * M + m], sizeof(float)) != 0;
    }
  EXPECT(bad == 0, "%d parts: M=%lld N=%lld K=%lld: %d elements of B A^T (pairs swapped) differ from A B^T", kParts,
         (long long)M, (long long)N, (long long)K, bad);
  return differ;
}

// split<3> is exact: the three parts sum to the float (when no part falls below 2^-126).
static void check_split3(std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> ex(-60, 60);  // parts below 2^-126 flush to zero
  int bad = 0;
  for (int it = 0; it < 4096; ++it) {
    alignas(64) float x[16];
    for (auto& v : x) v = std::ldexp(nd(rng), ex(rng));
    const auto s = amx::split<3>(_mm512_load_ps(x));
    alignas(64) uint16_t part[3][16];
    for (int i = 0; i < 3; ++i) _mm256_store_si256(reinterpret_cast<__m256i*>(part[i]), s.part[i]);
    for (int l = 0; l < 16; ++l) {
      const double sum = from_bf16(part[0][l]) + from_bf16(part[1][l]) + from_bf16(part[2][l]);
      if (sum != static_cast<double>(x[l])) ++bad;
    }
  }
  EXPECT(bad == 0, "split<3>: %d of 65536 floats not the exact sum of their parts", bad);
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
            for (bool tr : {false, true}) {
              for (bool streamed : {false, true}) check(M, N, K, kvalid, acc, tr, streamed, rng);
              check_parts<3>(M, N, K, kvalid, acc, tr, rng);
              check_parts<2>(M, N, K, kvalid, acc, tr, rng);
            }
  int unswapped = 0;
  for (int64_t M : {16, 48, 64})
    for (int64_t N : {32, 112})
      for (int64_t K : {32, 128}) unswapped += check_swapped_parts<3>(M, N, K, rng) + check_swapped_parts<2>(M, N, K, rng);
  std::printf("(without kSwapParts, %d elements of B A^T differ from A B^T)\n", unswapped);
  check_split3(rng);
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
