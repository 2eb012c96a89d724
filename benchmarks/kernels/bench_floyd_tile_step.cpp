// One tile step of Floyd's bf16 forward (floyd_attention_kernel.inc), torch-free, one thread: the
// logits (16 GEMMs over the rows m of each n against K1[n], 16 over the rows n of each m against
// K2[m], each 16 x 64 keys, depth D = 64 as 32 bf16 pairs) and the output contraction (the same
// 32 GEMMs against V1 / V2, 16 x D over 64 keys), with the kernel's layouts and strides, the
// key blocks walking K and the m blocks walking M (K2 / V2 of every m block streamed, as every
// n block streams them). Printed: the GEMM phases' GFLOP/s for the pieces alone and together,
// at several key counts, against the same calls with one m block (K2 / V2 reused).
// docs/benchmarks.md (2026-12-04) reads these figures: each piece alone runs near the hot rate
// of the micro-kernel, the whole step falls as K grows (the live set per core, not the GEMM).
//
// Build and run: bash benchmarks/kernels/bench_vector_gemm.sh bench_floyd_tile_step
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <vector>

#include "kernels/common/gemm_ukernel.h"
#include "op_plugin/isa.h"

namespace e = op_plugin::isa_avx512;
using Ops = e::Ops512Bf16;
using T = Ops::T;

static double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

constexpr int64_t TN = 16, TM = 16, KB = 64, LT = KB + 16, D = 64;

// GFLOP/s of the GEMM phases of `steps` tile steps (best of 7): logits and/or contraction.
double tile_step(int64_t K, int64_t m_blocks, bool logits, bool contract) {
  const int64_t ldb = K * 2 + 16, bd = (D / 2) * ldb, bk = K * D;  // packed slice sizes (bf16)
  std::vector<T> q1(TN * TM * D, 0x3f80), q2(TN * TM * D, 0x3f80), pa(TN * TM * LT, 0x3f80);
  std::vector<T> k1(TN * bd, 0x3f00), v1(TN * bk, 0x3f00);
  std::vector<T> k2(m_blocks * TM * bd, 0x3f00), v2(m_blocks * TM * bk, 0x3f00);
  std::vector<float> s(TN * TM * LT), acc(TN * TM * D), rs(TN * TM, 0.5f);
  const int64_t steps = 1024;
  e::GemmTaskScope<Ops> tiles;  // as the kernel's tasks: one tile configuration on an AMX host
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    double gemm = 0;
    for (int64_t it = 0; it < steps; ++it) {
      const int64_t k0 = (it % (K / KB)) * KB, mb = (it / (K / KB)) % m_blocks;
      const double t0 = thread_seconds();
      if (logits) {
        for (int64_t n = 0; n < TN; ++n)
          e::gemm<Ops>(TM, KB, D / 2, q1.data() + n * TM * D, D, 2, k1.data() + n * bd + k0 * 2, ldb,
                       s.data() + n * TM * LT, LT, nullptr, e::kOverwrite);
        for (int64_t m = 0; m < TM; ++m)
          e::gemm<Ops>(TN, KB, D / 2, q2.data() + m * TN * D, D, 2, k2.data() + (mb * TM + m) * bd + k0 * 2, ldb,
                       s.data() + m * LT, TM * LT, nullptr, e::kAccumulate);
      }
      const double t1 = thread_seconds();
      // P from the logits (stands in for the softmax: the contraction reads what it wrote).
      for (int64_t r = 0; r < TN * TM; ++r)
        for (int64_t k = 0; k < KB; ++k) pa[r * LT + k] = static_cast<T>(0x3f00 + (static_cast<int>(s[r * LT + k]) & 0x7f));
      const double t2 = thread_seconds();
      if (contract) {
        for (int64_t n = 0; n < TN; ++n)
          e::gemm<Ops>(TM, D, KB / 2, pa.data() + n * TM * LT, LT, 2, v1.data() + n * bk + k0 * D, D * 2,
                       acc.data() + n * TM * D, D, rs.data() + n * TM, e::kScaleAccumulate);
        for (int64_t m = 0; m < TM; ++m)
          e::gemm<Ops>(TN, D, KB / 2, pa.data() + m * LT, TM * LT, 2, v2.data() + (mb * TM + m) * bk + k0 * D, D * 2,
                       acc.data() + m * D, TM * D, nullptr, e::kAccumulate);
      }
      gemm += (t1 - t0) + (thread_seconds() - t2);
    }
    best = std::min(best, gemm);
  }
  const double flops = 2.0 * TN * TM * KB * D * ((logits ? 2 : 0) + (contract ? 2 : 0)) * steps;
  return flops / best * 1e-9;
}

int main() {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) {
    std::printf("needs AVX512_BF16\n");
    return 0;
  }
  std::printf("ISA %s, one thread; GFLOP/s of the GEMM phases of a Floyd bf16 tile step (16 x 16 rows, 64 keys, D 64)\n",
              op_plugin::isa_name(op_plugin::active_isa()));
  std::printf("%6s  %-28s %-28s\n", "keys", "M=256 (16 m blocks streamed)", "one m block (K2/V2 reused)");
  for (int64_t K : {64, 128, 256, 512}) {
    const int64_t blocks = 256 / TM;
    std::printf("%6lld  logits %5.0f contract %5.0f both %5.0f   both %5.0f\n", static_cast<long long>(K),
                tile_step(K, blocks, true, false), tile_step(K, blocks, false, true), tile_step(K, blocks, true, true),
                tile_step(K, 1, true, true));
  }
  return 0;
}
