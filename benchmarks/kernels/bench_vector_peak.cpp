// The per-thread vector peaks the non-AMX rows of docs/benchmarks.md are read against: register-
// only loops of 12 independent accumulators (more than the FMA latency times the ports on any
// host we ran), float32 FMA (32 FLOP per zmm instruction, 16 per ymm on an AVX2-only build) and
// vdpbf16ps (64 FLOP: 16 lanes x 2 pairs x multiply-add). Whether vdpbf16ps issues at the FMA rate
// decides the bf16 path of the avx512_bf16 level (docs/decisions.md, op_plugin::bf16_dot_full_rate()).
// Build and run for this host's widest vectors:
//   g++ -O2 -march=native benchmarks/kernels/bench_vector_peak.cpp -o /tmp/peak && /tmp/peak
// GCC 12 reports its own _mm512_reduce_add_ps (`__m256d __Y = __Y;`) as uninitialized: a known
// false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <chrono>
#include <cstdio>

namespace {

constexpr int kAcc = 12;
constexpr long kIters = 200000000;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The widest vectors this build has; fold() gives one float that depends on a vector.
#if defined(__AVX512F__)
using Vec = __m512;
constexpr double kFmaFlop = 32.0;
const char* const kWidth = "zmm";
Vec splat(float x) { return _mm512_set1_ps(x); }
Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
float fold(Vec v) { return _mm512_reduce_add_ps(v); }
#else
using Vec = __m256;
constexpr double kFmaFlop = 16.0;
const char* const kWidth = "ymm";
Vec splat(float x) { return _mm256_set1_ps(x); }
Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
float fold(Vec v) { return _mm256_cvtss_f32(v); }
#endif

// The accumulators are folded and printed only when they hit a value they never reach, so the
// compiler cannot drop the loop.
void keep(const Vec* acc) {
  float x = 0;
  for (int i = 0; i < kAcc; ++i) x += fold(acc[i]);
  if (x == 42.0f) std::puts("");
}

// GFLOP/s of kIters x kAcc applications of `step` (one instruction of `flop` FLOP each) to
// independent accumulators.
template <class Step>
double gflops(Step step, double flop) {
  Vec acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = splat(static_cast<float>(i));
  const auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < kIters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = step(acc[i]);
  }
  const double s = seconds_since(t0);
  keep(acc);
  return kIters * kAcc * flop / s / 1e9;
}

double fma_gflops() {
  const Vec a = splat(1.0001f), b = splat(0.9999f);
  return gflops([&](Vec c) { return fma(a, c, b); }, kFmaFlop);
}

#if defined(__AVX512BF16__)
double dpbf16_gflops() {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f80);  // 1.0 bf16
  return gflops([&](__m512 c) { return _mm512_dpbf16_ps(c, a, b); }, 64.0);
}
#endif

}  // namespace

int main() {
  for (int r = 0; r < 3; ++r) {
    std::printf("one thread: float32 FMA (%s) %.0f GFLOP/s", kWidth, fma_gflops());
#if defined(__AVX512BF16__)
    std::printf(", vdpbf16ps %.0f GFLOP/s", dpbf16_gflops());
#endif
    std::printf("\n");
  }
}
