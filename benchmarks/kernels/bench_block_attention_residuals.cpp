// Torch-free micro-benchmark of BlockAttentionResiduals / BlockAttentionResidualsGrad at the
// issue's shape (T = 8192, N = 8, H = 4096), float32 and bfloat16, with 1 and 2 threads.
// Prints the median time of several runs and the effective bandwidth on the bytes the op must
// move:
//   forward : read (N+1) T H + 2 H elements, write T H elements + 2 T (N+1) fp32 statistics
//   backward: read (N+1) T H + T H elements + 2 T (N+1) fp32 + 2 H, write (N+1) T H + 2 H elements
// and, for reference, a memcpy of 1 GiB on the same threads (read + write bytes), timed in between
// the kernel runs so that the ratio holds on a machine shared with other work.
//
// Build, after tests/kernels/build_and_run.sh has made build/kernel_tests/libop_plugin_kernels.a
// (one command line):
//   g++ -std=c++17 -O3 -pthread -Icsrc/include -Ibuild/generated/include
//       benchmarks/kernels/bench_block_attention_residuals.cpp
//       build/kernel_tests/libop_plugin_kernels.a -o /tmp/bench_bar
// Options: bench_bar [runs=7] [T=8192] [N=8] [H=4096]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "../../csrc/kernels/common/scalar_types.h"
#include "op_plugin/op_api.h"
#include "op_plugin/ops/block_attention_residuals.h"
#include "op_plugin/ops/block_attention_residuals_grad.h"
#include "op_plugin/workspace.h"

using namespace op_plugin;

namespace {

// std::thread backend: splits [begin, end) into up to g_threads pieces of >= grain.
int g_threads = 1;
thread_local int t_index = 0;
int max_threads() { return g_threads; }
int thread_num() { return t_index; }
void parallel(int64_t begin, int64_t end, int64_t grain, void (*body)(void*, int64_t, int64_t),
              void* ctx) {
  const int64_t n = end - begin;
  int64_t parts = g_threads;
  if (grain > 0) parts = std::min<int64_t>(parts, std::max<int64_t>(1, n / grain));
  const int64_t step = (n + parts - 1) / parts;
  std::vector<std::thread> pool;
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t b = begin + p * step, e = std::min(end, b + step);
    if (b >= e) break;
    pool.emplace_back([=] {
      t_index = static_cast<int>(p);
      body(ctx, b, e);
    });
  }
  body(ctx, begin, std::min(end, begin + step));
  for (std::thread& t : pool) t.join();
}
const opParallelBackend kBackend{max_threads, thread_num, parallel};

void* alloc(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) {
    std::fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    std::exit(1);
  }
  return p;
}

// Random-ish values in [-1, 1) stored as T, filled in parallel (first touch on both threads).
template <class T>
T* random_tensor(size_t n, uint64_t seed) {
  T* p = static_cast<T*>(alloc(n * sizeof(T)));
  struct Ctx { T* p; uint64_t seed; } ctx{p, seed};
  parallel(0, static_cast<int64_t>(n), 1 << 20, [](void* c, int64_t b, int64_t e) {
    const Ctx& x = *static_cast<Ctx*>(c);
    uint64_t s = x.seed ^ static_cast<uint64_t>(b) * 0x9e3779b97f4a7c15ull;
    for (int64_t k = b; k < e; ++k) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x.p[k] = from_double<T>(-1.0 + 2.0 * static_cast<double>(s >> 11) / 9007199254740992.0);
    }
  }, &ctx);
  return p;
}

opTensor desc(void* data, opDataType dtype, std::vector<int64_t> shape) {
  opTensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// memcpy of 1 GiB split over the threads (read + write bytes = 2 GiB).
constexpr size_t kCopyBytes = size_t(1) << 30;
char* g_copy_src = nullptr;
char* g_copy_dst = nullptr;
void copy_gib() {
  parallel(0, static_cast<int64_t>(kCopyBytes), 1 << 24, [](void*, int64_t s, int64_t e) {
    std::memcpy(g_copy_dst + s, g_copy_src + s, static_cast<size_t>(e - s));
  }, nullptr);
}

void check(opStatus s, const char* what) {
  if (s != OP_SUCCESS) {
    std::fprintf(stderr, "%s failed: %d %s\n", what, s, opGetLastErrorMessage());
    std::exit(1);
  }
}

template <class T>
void bench(const char* name, opDataType dt, int runs, int64_t T_, int64_t N, int64_t H) {
  const int64_t R = N + 1;
  const size_t e = sizeof(T);
  T* pb = random_tensor<T>(T_ * H, 1);
  T* br = random_tensor<T>(T_ * N * H, 2);
  T* pw = random_tensor<T>(H, 3);
  T* nw = random_tensor<T>(H, 4);
  T* gh = random_tensor<T>(T_ * H, 5);
  T* hidden = random_tensor<T>(T_ * H, 6);
  float* inv = random_tensor<float>(T_ * R, 7);
  float* probs = random_tensor<float>(T_ * R, 8);
  T* gpb = random_tensor<T>(T_ * H, 9);
  T* gbr = random_tensor<T>(T_ * N * H, 10);
  T* gpw = random_tensor<T>(H, 11);
  T* gnw = random_tensor<T>(H, 12);
  opTensor t_pb = desc(pb, dt, {T_, H}), t_br = desc(br, dt, {T_, N, H});
  opTensor t_pw = desc(pw, dt, {1, H}), t_nw = desc(nw, dt, {H}), t_gh = desc(gh, dt, {T_, H});
  opTensor t_hidden = desc(hidden, dt, {T_, H});
  opTensor t_inv = desc(inv, OP_DT_FLOAT, {T_, R}), t_probs = desc(probs, OP_DT_FLOAT, {T_, R});
  opTensor t_gpb = desc(gpb, dt, {T_, H}), t_gbr = desc(gbr, dt, {T_, N, H});
  opTensor t_gpw = desc(gpw, dt, {1, H}), t_gnw = desc(gnw, dt, {H});

  // The workspace 64-byte aligned, as the binding's torch buffer is (a vector's 16-byte
  // alignment splits the kernels' 32-byte loads of sw / gsw across cache lines).
  std::vector<float> ws_store;
  auto ws_at_least = [&](uint64_t bytes) {
    if (ws_store.size() * sizeof(float) < bytes + 64) ws_store.resize(bytes / sizeof(float) + 32);
    return align_workspace(ws_store.data());
  };
  auto run_fwd = [&] {
    uint64_t ws = 0;
    opExecutor* ex = nullptr;
    check(BlockAttentionResidualsGetWorkspaceSize(&t_pb, &t_br, &t_pw, &t_nw, -1, 1e-6, &t_hidden,
                                                  &t_inv, &t_probs, &ws, &ex),
          "forward stage 1");
    check(BlockAttentionResiduals(ws_at_least(ws), ws, ex, nullptr), "forward stage 2");
  };
  auto run_bwd = [&] {
    uint64_t ws = 0;
    opExecutor* ex = nullptr;
    check(BlockAttentionResidualsGradGetWorkspaceSize(&t_pb, &t_br, &t_pw, &t_nw, &t_gh, &t_inv,
                                                      &t_probs, -1, &t_gpb, &t_gbr, &t_gpw,
                                                      &t_gnw, &ws, &ex),
          "backward stage 1");
    check(BlockAttentionResidualsGrad(ws_at_least(ws), ws, ex, nullptr), "backward stage 2");
  };
  const double big = static_cast<double>(T_) * static_cast<double>(H);
  const double fwd_bytes = (R * big + 2.0 * H) * e + big * e + 2.0 * T_ * R * 4;
  const double bwd_bytes = (R * big + big + 2.0 * H) * e + 2.0 * T_ * R * 4 + (R * big + 2.0 * H) * e;
  for (int threads : {1, 2}) {
    g_threads = threads;
    run_fwd();  // warm-up; real statistics for the backward
    run_bwd();
    copy_gib();
    // Interleaved runs: on a shared machine the copy measured next to each kernel run tells how
    // much bandwidth was actually available at that moment.
    std::vector<double> tf, tb, tc;
    for (int r = 0; r < runs; ++r) {
      tf.push_back(seconds(run_fwd));
      tc.push_back(seconds(copy_gib));
      tb.push_back(seconds(run_bwd));
    }
    const double f = median(tf), b = median(tb), c = median(tc);
    const double copy_gbs = 2.0 * kCopyBytes / c / 1e9;
    std::printf("%-8s T=%lld N=%lld H=%lld threads=%d  fwd %8.2f ms %6.2f GB/s   bwd %8.2f ms %6.2f GB/s"
                "   fwd+bwd %8.2f ms   memcpy %6.2f GB/s (fwd %3.0f%%, bwd %3.0f%% of it)\n",
                name, static_cast<long long>(T_), static_cast<long long>(N),
                static_cast<long long>(H), threads, f * 1e3, fwd_bytes / f / 1e9, b * 1e3,
                bwd_bytes / b / 1e9, (f + b) * 1e3, copy_gbs, 100.0 * fwd_bytes / f / 1e9 / copy_gbs,
                100.0 * bwd_bytes / b / 1e9 / copy_gbs);
    std::fflush(stdout);
  }
  for (void* p : {static_cast<void*>(pb), static_cast<void*>(br), static_cast<void*>(pw),
                  static_cast<void*>(nw), static_cast<void*>(gh), static_cast<void*>(hidden),
                  static_cast<void*>(inv), static_cast<void*>(probs), static_cast<void*>(gpb),
                  static_cast<void*>(gbr), static_cast<void*>(gpw), static_cast<void*>(gnw)})
    std::free(p);
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 7;
  const int64_t T_ = argc > 2 ? std::atoll(argv[2]) : 8192;
  const int64_t N = argc > 3 ? std::atoll(argv[3]) : 8;
  const int64_t H = argc > 4 ? std::atoll(argv[4]) : 4096;
  opSetParallelBackend(&kBackend);
  std::printf("ISA %s, median of %d runs\n", isa_name(active_isa()), runs);
  g_copy_src = static_cast<char*>(alloc(kCopyBytes));
  g_copy_dst = static_cast<char*>(alloc(kCopyBytes));
  std::memset(g_copy_src, 1, kCopyBytes);
  std::memset(g_copy_dst, 2, kCopyBytes);
  bench<float>("float32", OP_DT_FLOAT, runs, T_, N, H);
  bench<BFloat16>("bfloat16", OP_DT_BF16, runs, T_, N, H);
  return 0;
}
