// The vector GEMM micro-kernel (kernels/common/gemm_ukernel.h, no AMX) at the fused Floyd
// backward's GEMM shapes, one thread, bf16 pairs (vdpbf16ps) and float32 (FMA), with C in three
// places: hot in L1 (the same block every call); walking 4.4 MB (the dK1/dV1 accumulators and
// partial rows one tile step touches: more than this core's L2, held in L3); walking 35.6 MB (a
// work group's dK2/dV2 partials, which the backward sweeps once per n block: more than L3, so
// from memory). A shape fast in the first two columns and slow in the third is bound by where
// its accumulators live, not by the micro-kernel.
// Figures are GFLOP/s, best of 7 timings in thread CPU time; read them against the register-only
// peak of bench_vector_peak.cpp.
//
// Build and run: bash benchmarks/kernels/bench_vector_gemm.sh
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <vector>

#include "kernels/common/gemm_ukernel.h"
#include "op_plugin/isa.h"

namespace e = op_plugin::isa_avx512;

static double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One Floyd backward GEMM shape: C[M][N] += A[M][depth] B[depth][N] over `depth` elements
// (depth / KP steps of the micro-kernel), A's step p of row i at a[i*sam + p*sak], B's step p at
// b[p*ldb], C rows ldc apart (strides in elements, as the backward passes them).
struct Shape {
  const char* name;
  int64_t M, N, depth, sam, sak, ldb, ldc;
};

// Operand values: bf16 bits of 1.0 / 0.5 for the pairs, the same values as floats.
template <class T> T operand(bool one) {
  if constexpr (sizeof(T) == 2) return static_cast<T>(one ? 0x3f80 : 0x3f00);
  else return one ? 1.0f : 0.5f;
}

template <class Ops>
double gflops(const Shape& s, int64_t stream_bytes) {
  using T = typename Ops::T;
  constexpr int KP = Ops::KP;
  const int64_t steps = s.depth / KP;
  std::vector<T> a(static_cast<size_t>(s.M * s.sam + steps * s.sak + 64));
  std::vector<T> b(static_cast<size_t>(steps * s.ldb + s.N * KP + 64));
  for (size_t i = 0; i < a.size(); ++i) a[i] = operand<T>(i % 7 == 0);
  for (size_t i = 0; i < b.size(); ++i) b[i] = operand<T>(i % 5 == 0);
  // Streamed: C blocks of M rows x ldc over stream_bytes, N of their columns at a time: every
  // row block at one column offset, then the next offset (the key blocks k0 of the backward's
  // loop); hot (stream_bytes 0): one block.
  const bool stream = stream_bytes > 0;
  const int64_t block = s.M * s.ldc, blocks = stream ? std::max<int64_t>(1, stream_bytes / 4 / block) : 1;
  const int64_t offsets = stream ? std::max<int64_t>(1, (s.ldc - 16) / s.N) : 1;
  std::vector<float> c(static_cast<size_t>(block * blocks + 64), 0.0f);
  const int64_t calls = 16384;
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    const double t0 = thread_seconds();
    for (int64_t i = 0; i < calls; ++i)
      e::gemm<Ops>(s.M, s.N, steps, a.data(), s.sam, s.sak, b.data(), s.ldb,
                   c.data() + (i % blocks) * block + ((i / blocks) % offsets) * s.N, s.ldc, nullptr, e::kAccumulate);
    best = std::min(best, thread_seconds() - t0);
  }
  return 2.0 * s.M * s.N * s.depth * calls / best * 1e-9;
}

int main() {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) {
    std::printf("this CPU has no AVX512_BF16: nothing to measure\n");
    return 0;
  }
  // LT = 80 floats per logit row, Kc = 272 (K = 256), TM = TN = 16, DE = D = 64.
  const Shape bf16[] = {
      // logits S / dP: 16 rows m of one n, 64 keys, depth d; B "along d" (rows of 2*256+16).
      {"S, dP     (16 x 64, depth 64)", 16, 64, 64, 64, 2, 528, 80},
      // dK1^T / dV1^T: rows d, keys, depth m; A = Q^T [d][16], B = paired dS rows (2*LT).
      {"dK1, dV1  (64 x 64, depth 16)", 64, 64, 16, 16, 2, 160, 272},
      {"dK deep   (256 x 64, depth 256)", 256, 64, 256, 2, 544, 128, 64},
      {"dK deep   (256 x 64, depth 128)", 256, 64, 128, 2, 544, 128, 64},
      {"dK deep   (256 x 64, depth 64)", 256, 64, 64, 2, 544, 128, 64},
  };
  const Shape fp32[] = {
      {"S, dP     (16 x 64, depth 64)", 16, 64, 64, 64, 1, 272, 80},
      // float dK (kd layout): rows k, d, depth m; A = dS^T (k stride 1, m stride LT), B = Q rows.
      {"dK1, dV1  (64 x 64, depth 16)", 64, 64, 16, 1, 80, 64, 64},
      {"dK deep   (256 x 64, depth 256)", 256, 64, 256, 1, 272, 64, 64},
      {"dK deep   (256 x 64, depth 128)", 256, 64, 128, 1, 272, 64, 64},
  };
  const int64_t tile_step = 4400000, partials = 2 * 17800000;
  std::printf("ISA %s, one thread; GFLOP/s of gemm<Ops>, C hot in L1 / streamed over 4.4 MB / over 35.6 MB\n",
              op_plugin::isa_name(op_plugin::active_isa()));
  for (const Shape& s : bf16)
    std::printf("  bf16 pairs  %s  %6.1f / %6.1f / %6.1f\n", s.name, gflops<e::Ops512Bf16>(s, 0),
                gflops<e::Ops512Bf16>(s, tile_step), gflops<e::Ops512Bf16>(s, partials));
  for (const Shape& s : fp32)
    std::printf("  float32     %s  %6.1f / %6.1f / %6.1f\n", s.name, gflops<e::Ops512F>(s, 0),
                gflops<e::Ops512F>(s, tile_step), gflops<e::Ops512F>(s, partials));
}
