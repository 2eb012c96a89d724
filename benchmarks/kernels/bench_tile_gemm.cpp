// Micro-benchmark of the AMX tile-GEMM building block (kernels/common/amx_tile.h) on the
// attention GEMM shapes, one thread, against:
//   * the tile peak, measured in the same run: a register-only TDPBF16PS loop (4 independent
//     accumulators, no memory traffic), the ceiling any AMX kernel can reach;
//   * the previous per-call tile kernel (kernels/common/gemm_amx.h, one accumulator tile,
//     configuration loaded per call, C through a stack block);
//   * oneDNN's ukernel brgemm as PyTorch exports it (at::native::cpublas::brgemm, the candidate
//     building block of issue 16's option b), B in its VNNI order (packing not timed);
//   * torch.mm (at::mm) at the same shapes, one thread.
// Operands stay cache-resident (as inside an attention tile loop); each figure is the best and
// the median of repeated timings in thread CPU time, so other load on the machine inflates them
// less than wall time would.
//
// Build and run: bash benchmarks/kernels/bench_tile_gemm.sh   (needs torch for the peers)
#include <ATen/ATen.h>
#include <ATen/native/CPUBlas.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <vector>

#include "kernels/common/amx_tile.h"
#include "kernels/common/gemm_ukernel.h"
#include "op_plugin/isa.h"

namespace amx = op_plugin::isa_avx512::amx;
namespace e = op_plugin::isa_avx512;

static double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Stat {
  double best, median;
};

// Times fn() (which does `flop` FLOP) `reps` times after a warm-up; GFLOP/s best and median.
static Stat gflops(double flop, int inner, const std::function<void()>& fn, int reps = 15) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double t0 = thread_seconds();
    for (int i = 0; i < inner; ++i) fn();
    t.push_back((thread_seconds() - t0) / inner);
  }
  std::sort(t.begin(), t.end());
  return {flop / t.front() / 1e9, flop / t[t.size() / 2] / 1e9};
}

__attribute__((target("amx-tile,amx-bf16"))) static void peak_loop(int64_t iters) {
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

static uint16_t bf16(float x) { return e::float_to_bf16(x); }

// 64-byte aligned storage, as the kernels' workspace regions are (std::vector's 16-byte
// alignment splits tile rows across cache lines and halves the tile load rate).
template <class T>
struct Aligned {
  T* p;
  size_t n;
  explicit Aligned(size_t count, T fill = T()) : n(count) {
    p = static_cast<T*>(std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64));
    for (size_t i = 0; i < n; ++i) p[i] = fill;
  }
  ~Aligned() { std::free(p); }
  T* data() { return p; }
  T* begin() { return p; }
  T* end() { return p + n; }
  T& operator[](size_t i) { return p[i]; }
};

__attribute__((target("amx-tile,amx-bf16"))) static void peak_tiles(const uint16_t* data) {
  _tile_loadd(4, data, 64);
  _tile_loadd(5, data + 512, 64);
  _tile_loadd(6, data + 1024, 64);
  _tile_loadd(7, data + 1536, 64);
}

int main() {
  if (op_plugin::active_isa() != op_plugin::Isa::kAvx512Amx) {
    std::printf("this CPU (or OP_PLUGIN_ISA) has no AMX-BF16: nothing to measure\n");
    return 0;
  }
  at::set_num_threads(1);
  std::printf("one thread; GFLOP/s best / median of 15 timings (thread CPU time)\n");
  // The peak loop runs on tiles of non-zero bf16 data: on zero tiles TDPBF16PS runs about twice
  // as fast, a rate no real data reaches. First two seconds of tile work: the unit wakes up
  // (the first second or so of AMX use runs at about half speed on this host).
  Aligned<uint16_t> tile_data(4 * 512);
  for (size_t i = 0; i < tile_data.n; ++i) tile_data[i] = bf16(0.5f + 0.001f * static_cast<float>(i % 97));
  const int64_t iters = 20000;
  Stat peak;
  {
    amx::TileScope tiles;
    peak_tiles(tile_data.data());
    const double t0 = thread_seconds();
    while (thread_seconds() - t0 < 2.0) peak_loop(1000);
    peak = gflops(4.0 * iters * 16 * 16 * 32 * 2, 1, [&] { peak_loop(iters); });
  }
  std::printf("%-44s %8.0f / %8.0f\n", "tile peak (register-only TDPBF16PS)", peak.best, peak.median);
  std::fflush(stdout);

  struct Case {
    const char* name;
    int64_t M, N, K;
    bool acc;
  };
  // Forward: S = Q K^T per 32-row strip over a key block; O += P V. Backward (per key block):
  // dV += P^T dO, dK += dS^T Q (M = keys), dQ += dS K; D = 64 and 128.
  const Case cases[] = {
      {"fwd S = Q K^T   32x512x128", 32, 512, 128, false},
      {"fwd O += P V    32x128x512", 32, 128, 512, true},
      {"fwd S = Q K^T   32x512x64", 32, 512, 64, false},
      {"fwd O += P V    32x64x512", 32, 64, 512, true},
      {"fwd S = Q K^T  128x512x128", 128, 512, 128, false},
      {"bwd dV += P^T dO 64x128x64", 64, 128, 64, true},
      {"bwd dV += P^T dO 64x128x256", 64, 128, 256, true},
      {"bwd dQ += dS K  64x128x64", 64, 128, 64, true},
      {"square 256x256x256", 256, 256, 256, true},
  };
  std::printf("%-30s %19s %19s %19s %19s %19s\n", "shape (M x N x K)", "amx_tile.h", "f32 as 3 parts (x6)",
              "gemm_amx.h (old)", "cpublas::brgemm", "at::mm");
  std::mt19937 rng(0);
  std::normal_distribution<float> nd;
  for (const Case& c : cases) {
    Aligned<uint16_t> A(c.M * c.K), B(c.K * c.N), Bp(c.K * c.N);
    for (auto& x : A) x = bf16(nd(rng));
    for (auto& x : B) x = bf16(nd(rng));  // row-major K x N
    Aligned<float> C(c.M * c.N, 0.0f), C2(c.M * c.N, 0.0f);
    const double flop = 2.0 * c.M * c.N * c.K;
    const int inner = std::max<int>(1, static_cast<int>(2e7 / flop));
    // ours: B as VNNI panels
    amx::pack_b_rows(B.data(), c.N, c.K, c.N, Bp.data(), c.K * 16, c.K);
    Stat ours;
    {
      amx::TileScope tiles;
      ours = gflops(flop, inner, [&] {
        if (c.acc)
          amx::gemm<true>(c.M, c.N, c.K, A.data(), c.K, Bp.data(), c.K * 16, C.data(), c.N);
        else
          amx::gemm<false>(c.M, c.N, c.K, A.data(), c.K, Bp.data(), c.K * 16, C.data(), c.N);
      });
    }
    // float32 operands in three bf16 parts (gemm_parts<.., 3>): six tile GEMMs; tile GFLOP/s
    Aligned<uint16_t> A3(3 * c.M * c.K), B3(3 * c.K * c.N);
    for (auto& x : A3) x = bf16(nd(rng));
    for (auto& x : B3) x = bf16(nd(rng));
    Stat parts;
    {
      amx::TileScope tiles;
      parts = gflops(6 * flop, inner, [&] {
        if (c.acc)
          amx::gemm_parts<true, 3>(c.M, c.N, c.K, A3.data(), c.K, c.M * c.K, B3.data(), c.K * 16, c.K * c.N, C.data(),
                                   c.N, [] {});
        else
          amx::gemm_parts<false, 3>(c.M, c.N, c.K, A3.data(), c.K, c.M * c.K, B3.data(), c.K * 16, c.K * c.N,
                                    C.data(), c.N, [] {});
      });
    }
    // old: B rows of pairs (VNNI, row-major pairs of k: [K/2][N][2])
    Aligned<uint16_t> Bpairs(c.K * c.N);
    for (int64_t r = 0; r < c.K / 2; ++r)
      for (int64_t n = 0; n < c.N; ++n) {
        Bpairs[(r * c.N + n) * 2] = B[(2 * r) * c.N + n];
        Bpairs[(r * c.N + n) * 2 + 1] = B[(2 * r + 1) * c.N + n];
      }
    const Stat old = gflops(flop, inner, [&] {
      e::amx::gemm_bf16(c.M, c.N, c.K / 2, A.data(), c.K / 2 * 2, 2, Bpairs.data(), c.N * 2, C2.data(), c.N, nullptr,
                        c.acc ? e::kAccumulate : e::kOverwrite);
    });
    // oneDNN brgemm through torch, B in VNNI order ([K/2][N][2], as Bpairs)
    const Stat dnnl = gflops(flop, inner, [&] {
      at::native::cpublas::brgemm(c.M, c.N, c.K, c.K, c.N, c.N, c.acc, reinterpret_cast<const at::BFloat16*>(A.data()),
                                  reinterpret_cast<const at::BFloat16*>(Bpairs.data()), C2.data(), true);
    });
    at::native::cpublas::brgemm_release(true);
    // at::mm
    at::Tensor ta = at::randn({c.M, c.K}).to(at::kBFloat16), tb = at::randn({c.K, c.N}).to(at::kBFloat16);
    const Stat mm = gflops(flop, inner, [&] { (void)at::mm(ta, tb); });
    std::printf("%-30s %8.0f / %8.0f %8.0f / %8.0f %8.0f / %8.0f %8.0f / %8.0f %8.0f / %8.0f\n", c.name, ours.best,
                ours.median, parts.best, parts.median, old.best, old.median, dnnl.best, dnnl.median, mm.best, mm.median);
  }
  return 0;
}
