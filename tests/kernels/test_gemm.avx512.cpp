// The bf16 pair GEMM of kernels/common/gemm_ukernel.h against a float64 reference (torch-free).
//
// Compiled with the AVX-512 flags (build_and_run.sh gives *.avx512.cpp tests the library's ISA
// flags). At the native level on a CPU with AMX this runs the tile kernel of gemm_amx.h; at
// OP_PLUGIN_ISA=avx512_bf16 the vdpbf16ps micro-kernel. Every shape has tails in M, N and K
// pairs, A comes row-major (pairs contiguous along k: the tile kernel loads it in place when there
// are no tails) and transposed (copied through 16 x 16 transposes of pairs), and every mode is
// checked, including the padded columns the contract says are written.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common/gemm_ukernel.h"
#include "kernels/common/scalar_types.h"
#include "op_plugin/isa.h"
#include "avx512_test_main.h"

using op_plugin::isa_avx512::Ops512Bf16;

static int g_pass = 0, g_fail = 0;

static uint16_t to_bf16(float x) { return op_plugin::to_bfloat16(x).bits; }
static double from_bf16(uint16_t h) { return op_plugin::to_float(op_plugin::BFloat16{h}); }

// One case: C (mode)= A * B with M rows, N columns and K pairs.
static void check(int64_t M, int64_t N, int64_t K, bool a_transposed, int mode, bool with_rs, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t Np = (N + 15) / 16 * 16;
  // A(m, k) pair at A + m*sam + k*sak; a spare pair between rows (or columns) keeps strides odd-sized.
  const int64_t sam = a_transposed ? 2 : 2 * K + 2, sak = a_transposed ? 2 * M + 2 : 2;
  std::vector<uint16_t> A(static_cast<size_t>(a_transposed ? K * sak : M * sam)), B(static_cast<size_t>(K * 2 * N));
  for (auto& x : A) x = to_bf16(nd(rng));
  for (auto& x : B) x = to_bf16(nd(rng));
  const int64_t ldc = Np + 16;
  std::vector<float> C(static_cast<size_t>(M * ldc)), rs(static_cast<size_t>(M));
  for (auto& x : C) x = nd(rng);
  for (auto& x : rs) x = 0.5f + std::fabs(nd(rng));
  const std::vector<float> C0 = C;
  op_plugin::isa_avx512::gemm<Ops512Bf16>(M, N, K, A.data(), sam, sak, B.data(), 2 * N, C.data(), ldc,
                                          with_rs ? rs.data() : nullptr, mode);
  int bad = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < ldc; ++n) {
      double ref = 0, mag = 0;
      if (n < N) {
        for (int64_t k = 0; k < K; ++k)
          for (int h = 0; h < 2; ++h) {
            const double p = from_bf16(A[m * sam + k * sak + h]) * from_bf16(B[k * 2 * N + 2 * n + h]);
            ref += p;
            mag += std::fabs(p);
          }
      }
      const double c0 = C0[m * ldc + n];
      if (n >= Np) {  // beyond the padded columns: untouched
        ref = c0;
      } else if (mode == op_plugin::isa_avx512::kAccumulate || (mode == op_plugin::isa_avx512::kScaleAccumulate && !with_rs)) {
        ref += c0;
      } else if (mode == op_plugin::isa_avx512::kScaleAccumulate) {
        ref += c0 * rs[m];
      }
      mag += std::fabs(ref);
      // fp32 accumulation of exact bf16 products: a few roundings per term at most.
      if (std::fabs(C[m * ldc + n] - ref) > 1e-6 * (2.0 * static_cast<double>(K) + 4.0) * mag + 1e-30) {
        if (++bad <= 3)
          std::printf("FAIL M=%lld N=%lld K=%lld %s mode=%d rs=%d: C[%lld][%lld] = %.9g, expected %.9g\n",
                      static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
                      a_transposed ? "A^T" : "A", mode, with_rs, static_cast<long long>(m), static_cast<long long>(n),
                      C[m * ldc + n], ref);
      }
    }
  (bad ? g_fail : g_pass)++;
}

static bool test_can_run(const char** why) {
  *why = "no AVX512_BF16 at this level: the bf16 pair GEMM is not used here";
  return static_cast<int>(op_plugin::active_isa()) >= static_cast<int>(op_plugin::Isa::kAvx512Bf16);
}

static int run_checks() {
  std::printf("ISA level %s\n", op_plugin::isa_name(op_plugin::active_isa()));
  std::mt19937 rng(7);
  // M: full 16-row strips of C (held in tiles) and partial ones; N: one group of up to four
  // column tiles and two (80); K: 128 pairs is the tile kernel's longest, 129 and 520 run the
  // vector kernel.
  for (int64_t M : {1, 5, 16, 17, 40, 48})
    for (int64_t N : {1, 7, 16, 33, 64, 80})
      for (int64_t K : {1, 3, 16, 20, 48, 128, 129, 520})
        for (bool a_transposed : {false, true})
          for (int mode : {0, 1, 2})
            for (bool with_rs : {false, true}) {
              if (mode != 2 && with_rs) continue;
              check(M, N, K, a_transposed, mode, with_rs, rng);
            }
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
