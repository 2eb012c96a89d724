// Micro-benchmark of flash_attn / flash_attn_grad, and of swa_forward / swa_backward on the same
// engine, at the issues' target shapes (torch-free).
// Pair with bench_flash_attention_sdpa.py (torch SDPA and GEMM peak at the same shapes, same run).
// Prints: name  median_ms  useful GFLOP/s. FLOPs: fwd 4*B*N*pairs*D, fwd+bwd 3.5x fwd, where
// pairs counts the (query, key) pairs the mask allows (FA2 convention).
//
// Build: g++ -O3 -std=c++17 -Icsrc/include -Icsrc -I<generated include> bench_flash_attention.cpp
//        <kernel library .a> -lpthread
// Usage: bench_flash_attention [threads] [filter]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common/scalar_types.h"
#include "op_plugin/ops/flash_attn.h"
#include "op_plugin/ops/flash_attn_grad.h"
#include "op_plugin/ops/swa_backward.h"
#include "op_plugin/ops/swa_forward.h"

using namespace op_plugin;

// ---- a persistent thread pool as the parallel backend (as a host runtime would install) ----
namespace pool {
int nthreads = 1;
thread_local int tid = 0;
std::mutex mu;
std::condition_variable cv, done_cv;
std::vector<std::thread> workers;
int64_t generation = 0, pending = 0;
std::function<void(int)> job;
void worker(int id) {
  tid = id;
  int64_t seen = 0;
  for (;;) {
    std::function<void(int)> j;
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return generation != seen; });
      seen = generation;
      j = job;
    }
    j(id);
    std::lock_guard<std::mutex> lk(mu);
    if (--pending == 0) done_cv.notify_all();
  }
}
int max_threads() { return nthreads; }
int thread_num() { return tid; }
void parallel_for(int64_t begin, int64_t end, int64_t grain, void (*body)(void*, int64_t, int64_t), void* ctx) {
  const int64_t n = end - begin;
  const int64_t chunks = std::min<int64_t>(nthreads, (n + grain - 1) / grain);
  if (chunks <= 1) { body(ctx, begin, end); return; }
  const int64_t per = (n + chunks - 1) / chunks;
  auto run = [=](int id) {
    const int64_t b = begin + id * per, e = std::min(end, b + per);
    if (b < e) body(ctx, b, e);
  };
  {
    std::lock_guard<std::mutex> lk(mu);
    job = run;
    pending = chunks - 1;
    ++generation;
  }
  cv.notify_all();
  run(0);
  std::unique_lock<std::mutex> lk(mu);
  done_cv.wait(lk, [] { return pending == 0; });
}
void start(int n) {
  nthreads = n;
  for (int i = 1; i < n; ++i) { workers.emplace_back(worker, i); workers.back().detach(); }
}
const opParallelBackend backend{max_threads, thread_num, parallel_for};
}  // namespace pool

// Reports a failed stage 1 and leaves at once: the pool's workers are detached and wait on its
// condition variable, whose static destructor would wait for them forever at exit.
[[noreturn]] static void fail(const char* what, const char* message) {
  std::fprintf(stderr, "%s error: %s\n", what, message);
  std::fflush(nullptr);
  std::_Exit(1);
}

struct T4 {
  std::vector<unsigned char> mem;
  opTensor t{};
  T4(opDataType dt, std::vector<int64_t> shape) {
    t.dtype = dt;
    t.ndim = static_cast<int>(shape.size());
    int64_t n = 1;
    for (int d = t.ndim - 1; d >= 0; --d) { t.shape[d] = shape[d]; t.strides[d] = n; n *= shape[d]; }
    mem.resize(static_cast<size_t>(n * dtype_size(dt)));
    t.data = mem.data();
  }
  void randn(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    const int64_t n = numel(t);
    for (int64_t i = 0; i < n; ++i) {
      const float x = nd(rng);
      if (t.dtype == OP_DT_FLOAT) static_cast<float*>(t.data)[i] = x;
      else if (t.dtype == OP_DT_BF16) static_cast<BFloat16*>(t.data)[i] = to_bfloat16(x);
      else if (t.dtype == OP_DT_FLOAT16) static_cast<Half*>(t.data)[i] = to_half(x);
    }
  }
};

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Shape {
  const char* name;
  opDataType dt;
  int64_t B, N, S, D, mode, wl, wr;
  bool bwd;
  int reps;
  bool tnd = false;  // TND with kTndLengths (B, S ignored)
  bool swa = false;  // swa_forward / swa_backward: mode 4 = sparse_mode 4 band (pre = wl, next = wr);
                     // mode 0 = sparse_mode 0 with a full [1, 1, S, S] mask (triu(1)) and pre/next
  double keep_prob = 1.0;
  bool bnsd = false;  // BNSD instead of BSND (benchmarks/bench_flash_attn.py's layout)
  bool pse = false;   // swa: a [1, N, S, S] pse (and its dpse)
  const int64_t* lengths = nullptr;  // TND lengths (default kTndLengths)
  int64_t sq = 0;  // few query rows: q has sq rows against S keys (0: S), dense only
  int64_t n2 = 0;  // kv heads (0: N)
};

// TND benchmark: 8 sequences of mixed lengths summing to 8192.
static const int64_t kTndLengths[8] = {512, 1024, 1536, 256, 2048, 768, 1280, 768};
// benchmarks/bench_flash_attn_peers.py's lengths (issue 3's TND row against padded SDPA).
static const int64_t kTndPeerLengths[8] = {256, 512, 768, 1024, 1280, 1536, 1024, 1792};

static void run(const Shape& s) {
  const bool tnd = s.tnd;
  const int64_t* lens = s.lengths ? s.lengths : kTndLengths;
  const int64_t T = 8192;
  const int64_t sq = s.sq ? s.sq : s.S, n2 = s.n2 ? s.n2 : s.N;
  const std::vector<int64_t> shp = tnd      ? std::vector<int64_t>{T, s.N, s.D}
                                   : s.bnsd ? std::vector<int64_t>{s.B, s.N, sq, s.D}
                                            : std::vector<int64_t>{s.B, sq, s.N, s.D};
  const std::vector<int64_t> kv_shp = tnd      ? std::vector<int64_t>{T, n2, s.D}
                                      : s.bnsd ? std::vector<int64_t>{s.B, n2, s.S, s.D}
                                               : std::vector<int64_t>{s.B, s.S, n2, s.D};
  const std::vector<int64_t> lshp = tnd ? std::vector<int64_t>{s.N, T} : std::vector<int64_t>{s.B, s.N, sq};
  const char* layout = tnd ? "TND" : s.bnsd ? "BNSD" : "BSND";
  T4 q(s.dt, shp), k(s.dt, kv_shp), v(s.dt, kv_shp);
  T4 out(s.dt, shp), dout(s.dt, shp), lse(OP_DT_FLOAT, lshp);
  T4 dq(s.dt, shp), dk(s.dt, kv_shp), dv(s.dt, kv_shp);
  T4 mask(OP_DT_INT8, {2048, 2048});
  T4 cu(OP_DT_INT32, {9});
  for (int b = 0, acc = 0; b <= 8; ++b) {
    static_cast<int32_t*>(cu.t.data)[b] = acc;
    if (b < 8) acc += static_cast<int32_t>(lens[b]);
  }
  const opTensor* cuq = tnd ? &cu.t : nullptr;
  q.randn(1); k.randn(2); v.randn(3); dout.randn(4);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
  const opTensor* m = s.mode ? &mask.t : nullptr;
  std::vector<unsigned char> ws;
  // swa: softmax_max / softmax_sum [B, N, S, 8], the 2048x2048 template mask of sparse_mode 4
  T4 smax(OP_DT_FLOAT, {s.B, s.N, s.S, 8}), ssum(OP_DT_FLOAT, {s.B, s.N, s.S, 8}), sout(s.dt, {0});
  T4 tmpl(OP_DT_BOOL, {2048, 2048}), none(s.dt, {0}), none_f32(OP_DT_FLOAT, {0});  // absent dpse (inputs' dtype), dsink (float32)
  T4 full(OP_DT_BOOL, {1, 1, s.swa && s.mode == 0 ? s.S : 1, s.swa && s.mode == 0 ? s.S : 1});
  for (int64_t i = 0; i < full.t.shape[2]; ++i)
    for (int64_t j = 0; j < full.t.shape[3]; ++j) static_cast<uint8_t*>(full.t.data)[i * full.t.shape[3] + j] = j > i;
  const opTensor* swa_mask = s.mode == 0 ? (s.wr == 2147483647 ? nullptr : &full.t) : &tmpl.t;
  T4 pse(s.dt, {1, s.N, s.pse ? s.S : 0, s.pse ? s.S : 0}), dpse(s.dt, {1, s.N, s.pse ? s.S : 0, s.pse ? s.S : 0});
  if (s.pse) pse.randn(5);
  const int64_t sparse_mode = s.mode == 0 ? 0 : 4;
  int64_t seed = 0, offset = 0, numels = 0;
  auto swa_fwd = [&] {
    uint64_t n = 0;
    opExecutor* ex = nullptr;
    opStatus st = SwaForwardGetWorkspaceSize(&q.t, &k.t, &v.t, s.N, layout, s.pse ? &pse.t : nullptr, nullptr, swa_mask, scale,
                                             s.keep_prob, s.wl, s.wr, 0, nullptr, nullptr, nullptr, sparse_mode, true,
                                             false, "",
                                             nullptr, 1234, 0, &out.t, &smax.t, &ssum.t, &sout.t, &seed, &offset,
                                             &numels, &n, &ex);
    if (st != OP_SUCCESS) fail("swa fwd", opGetLastErrorMessage());
    if (ws.size() < n) ws.resize(n);
    SwaForward(ws.data(), n, ex, nullptr);
  };
  auto swa_bwd = [&] {
    uint64_t n = 0;
    opExecutor* ex = nullptr;
    opStatus st = SwaBackwardGetWorkspaceSize(&q.t, &k.t, &v.t, &dout.t, s.N, layout, s.pse ? &pse.t : nullptr, nullptr,
                                              swa_mask,
                                              &smax.t, &ssum.t, nullptr, &out.t, scale, s.keep_prob, s.wl, s.wr, 0,
                                              seed, offset, numels, nullptr, nullptr, nullptr, sparse_mode, true,
                                              false, "",
                                              nullptr, &dq.t, &dk.t, &dv.t, s.pse ? &dpse.t : &none.t, &none_f32.t, &n, &ex);
    if (st != OP_SUCCESS) fail("swa bwd", opGetLastErrorMessage());
    if (ws.size() < n) ws.resize(n);
    SwaBackward(ws.data(), n, ex, nullptr);
  };
  auto fa_fwd = [&] {
    uint64_t n = 0;
    opExecutor* ex = nullptr;
    opStatus st = FlashAttnGetWorkspaceSize(&q.t, &k.t, &v.t, nullptr, cuq, cuq, nullptr, nullptr, nullptr, m,
                                            nullptr, scale, s.mode, s.wl, s.wr, -1, -1, layout, layout, layout, true,
                                            &out.t, &lse.t, &n, &ex);
    if (st != OP_SUCCESS) fail("fwd", opGetLastErrorMessage());
    if (ws.size() < n) ws.resize(n);
    FlashAttn(ws.data(), n, ex, nullptr);
  };
  auto fa_bwd = [&] {
    uint64_t n = 0;
    opExecutor* ex = nullptr;
    opStatus st = FlashAttnGradGetWorkspaceSize(&q.t, &k.t, &v.t, &dout.t, &out.t, &lse.t, cuq, cuq, nullptr,
                                                nullptr, nullptr, m, nullptr, scale, s.mode, s.wl, s.wr, -1, -1,
                                                layout, layout, layout, &dq.t, &dk.t, &dv.t, &n, &ex);
    if (st != OP_SUCCESS) fail("bwd", opGetLastErrorMessage());
    if (ws.size() < n) ws.resize(n);
    FlashAttnGrad(ws.data(), n, ex, nullptr);
  };
  auto fwd = [&] { s.swa ? swa_fwd() : fa_fwd(); };
  auto bwd = [&] { s.swa ? swa_bwd() : fa_bwd(); };
  fwd();
  if (s.bwd) bwd();
  std::vector<double> ts, cs;
  for (int r = 0; r < s.reps; ++r) {
    const double t0 = now_ms(), c0 = cpu_ms();
    fwd();
    if (s.bwd) bwd();
    ts.push_back(now_ms() - t0);
    cs.push_back(cpu_ms() - c0);
  }
  // useful (query, key) pairs
  double pairs = 0;
  const int nseq = tnd ? 8 : 1;
  for (int sidx = 0; sidx < nseq; ++sidx) {
    const int64_t S = tnd ? lens[sidx] : s.S;
    if (s.sq) pairs += static_cast<double>(s.sq) * S;  // few rows: dense
    for (int64_t i = 0; i < (s.sq ? 0 : S); ++i) {
      int64_t lo = 0, hi = S - 1;
      if (s.mode == 3 || (s.swa && s.mode == 0 && s.wr == 0)) hi = i;
      if (s.mode == 4 || s.swa) { if (s.wl >= 0) lo = std::max<int64_t>(0, i - s.wl); if (s.wr >= 0) hi = std::min<int64_t>(S - 1, i + s.wr); }
      pairs += static_cast<double>(hi - lo + 1);
    }
  }
  const double flops = 4.0 * (tnd ? 1 : s.B) * s.N * pairs * s.D * (s.bwd ? 3.5 : 1.0);
  const double ms = median(ts);
  // cpu: GFLOP per CPU-second, i.e. per busy core (insensitive to other load on the machine)
  std::printf("%-44s %10.2f ms %8.1f GFLOP/s  (cpu %.1f GFLOP/s/core)\n", s.name, ms, flops / ms / 1e6,
              flops / median(cs) / 1e6);
  std::fflush(stdout);
}

// Workspace of one forward + backward at S = 32768, N = 8, D = 128, float32 (stage 1 only):
// everything the kernels use beyond the tensors themselves; linear in S.
static void report_workspace() {
  for (const char* layout : {"BNSD", "BSND"}) {
    const int64_t B = 1, N = 8, S = 32768, D = 128;
    const bool bnsd = layout[1] == 'N';
    std::vector<int64_t> shape = bnsd ? std::vector<int64_t>{B, N, S, D} : std::vector<int64_t>{B, S, N, D};
    opTensor q{};
    q.dtype = OP_DT_FLOAT;
    q.ndim = 4;
    int64_t n = 1;
    for (int d = 3; d >= 0; --d) { q.shape[d] = shape[d]; q.strides[d] = n; n *= shape[d]; }
    static float dummy[4];
    q.data = dummy;  // stage 1 never reads tensor data (only cu_seqlens / seqused)
    opTensor lse = q;
    lse.ndim = 3;
    lse.shape[0] = B; lse.shape[1] = N; lse.shape[2] = S;
    lse.strides[2] = 1; lse.strides[1] = S; lse.strides[0] = N * S;
    uint64_t fw = 0, bw = 0;
    opExecutor* ex = nullptr;
    FlashAttnGetWorkspaceSize(&q, &q, &q, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1.0, 0,
                              -1, -1, -1, -1, layout, layout, layout, true, &q, &lse, &fw, &ex);
    opDestroyExecutor(ex);
    FlashAttnGradGetWorkspaceSize(&q, &q, &q, &q, &q, &lse, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                  1.0, 0, -1, -1, -1, -1, layout, layout, layout, &q, &q, &q, &bw, &ex);
    opDestroyExecutor(ex);
    const double tensor_mb = static_cast<double>(n) * 4 / (1 << 20);
    std::printf("workspace S=32768 N=8 D=128 float32 %s: fwd %.1f MiB, bwd %.1f MiB (one q/k/v tensor: %.1f MiB)\n",
                layout, fw / 1048576.0, bw / 1048576.0, tensor_mb);
  }
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const char* filter = argc > 2 ? argv[2] : "";
  pool::start(threads);
  opSetParallelBackend(&pool::backend);
  std::printf("threads %d\n", threads);
  if (std::strcmp(filter, "workspace") == 0) {
    report_workspace();
    std::fflush(stdout);
    std::_Exit(0);
  }
  const Shape shapes[] = {
      {"dense float32 fwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, -1, -1, false, 7},
      {"dense float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, -1, -1, true, 5},
      {"causal float32 fwd", OP_DT_FLOAT, 1, 8, 2048, 128, 3, -1, -1, false, 7},
      {"causal float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 2048, 128, 3, -1, -1, true, 5},
      {"dense bfloat16 fwd", OP_DT_BF16, 1, 8, 2048, 128, 0, -1, -1, false, 7},
      {"dense bfloat16 fwd+bwd", OP_DT_BF16, 1, 8, 2048, 128, 0, -1, -1, true, 5},
      {"causal bfloat16 fwd", OP_DT_BF16, 1, 8, 2048, 128, 3, -1, -1, false, 7},
      {"causal bfloat16 fwd+bwd", OP_DT_BF16, 1, 8, 2048, 128, 3, -1, -1, true, 5},
      {"window512 S8192 D64 float32 fwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, false, 5},
      {"window512 S8192 D64 float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, true, 5},
      {"window512 S8192 D64 bfloat16 fwd", OP_DT_BF16, 1, 8, 8192, 64, 4, 511, 0, false, 5},
      {"window512 S8192 D64 bfloat16 fwd+bwd", OP_DT_BF16, 1, 8, 8192, 64, 4, 511, 0, true, 5},
      // swa_forward / swa_backward, sparse_mode 4 band pre=511 next=0: the window512 work above
      {"swa band512 S8192 D64 float32 fwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, false, 5, false, true},
      {"swa band512 S8192 D64 float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, true, 5, false, true},
      {"swa band512 S8192 D64 float32 kp0.9 fwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, false, 5, false, true, 0.9},
      {"swa band512 S8192 D64 float32 kp0.9 fwd+bwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, true, 5, false, true, 0.9},
      {"swa band512 S8192 D64 bfloat16 fwd", OP_DT_BF16, 1, 8, 8192, 64, 4, 511, 0, false, 5, false, true},
      {"swa band512 S8192 D64 bfloat16 fwd+bwd", OP_DT_BF16, 1, 8, 8192, 64, 4, 511, 0, true, 5, false, true},
      {"swa band512 S8192 D64 bfloat16 kp0.9 fwd", OP_DT_BF16, 1, 8, 8192, 64, 4, 511, 0, false, 5, false, true, 0.9},
      {"swa band512 S8192 D64 bfloat16 kp0.9 fwd+bwd", OP_DT_BF16, 1, 8, 8192, 64, 4, 511, 0, true, 5, false, true, 0.9},
      // sparse_mode 0 with a full causal mask and next = 0 (same tiles as causal; the mask is read per element)
      {"swa mode0 fullmask causal float32 fwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, 2147483647, 0, false, 7, false, true},
      {"swa mode0 fullmask causal float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, 2147483647, 0, true, 5, false, true},
      // no mask, a [1, N, S, S] pse: compare with "dense float32"
      {"swa pse dense float32 fwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, 2147483647, 2147483647, false, 7, false, true, 1.0, false, true},
      {"swa pse dense float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, 2147483647, 2147483647, true, 5, false, true, 1.0, false, true},
      // the same in BNSD (bench_flash_attn.py's layout), flash_attn mask_mode 4 next to swa
      {"bnsd window512 S8192 D64 float32 fwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, false, 5, false, false, 1.0, true},
      {"bnsd window512 S8192 D64 float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, true, 5, false, false, 1.0, true},
      {"bnsd swa band512 S8192 D64 float32 fwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, false, 5, false, true, 1.0, true},
      {"bnsd swa band512 S8192 D64 float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, true, 5, false, true, 1.0, true},
      {"bnsd swa band512 S8192 D64 float32 kp0.9 fwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, false, 5, false, true, 0.9, true},
      {"bnsd swa band512 S8192 D64 float32 kp0.9 fwd+bwd", OP_DT_FLOAT, 1, 8, 8192, 64, 4, 511, 0, true, 5, false, true, 0.9, true},
      // few query rows (speculative decoding), 8 query heads on 2 kv heads, 2,048 keys, dense: the row
      // kernels (flash_attention_small.h) up to small_rows_limit() rows (flash_attention_plan.h), the
      // tiles above
      {"rows4 of 2048 GQA8:2 D128 float32 fwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, -1, -1, false, 41, false, false, 1.0, false, false, nullptr, 4, 2},
      {"rows4 of 2048 GQA8:2 D128 float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, -1, -1, true, 21, false, false, 1.0, false, false, nullptr, 4, 2},
      {"rows8 of 2048 GQA8:2 D128 float32 fwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, -1, -1, false, 41, false, false, 1.0, false, false, nullptr, 8, 2},
      {"rows8 of 2048 GQA8:2 D128 float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, -1, -1, true, 21, false, false, 1.0, false, false, nullptr, 8, 2},
      {"rows11 of 2048 GQA8:2 D128 float32 fwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, -1, -1, false, 41, false, false, 1.0, false, false, nullptr, 11, 2},
      {"rows1 of 2048 GQA8:2 D128 float32 fwd", OP_DT_FLOAT, 1, 8, 2048, 128, 0, -1, -1, false, 81, false, false, 1.0, false, false, nullptr, 1, 2},
      {"rows4 of 2048 GQA8:2 D128 bfloat16 fwd", OP_DT_BF16, 1, 8, 2048, 128, 0, -1, -1, false, 41, false, false, 1.0, false, false, nullptr, 4, 2},
      {"rows8 of 1024 D64 float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 1024, 64, 0, -1, -1, true, 21, false, false, 1.0, false, false, nullptr, 8, 8},
      {"tnd8 T8192 causal float32 fwd", OP_DT_FLOAT, 1, 8, 0, 128, 3, -1, -1, false, 5, true},
      {"tnd8 T8192 causal float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 0, 128, 3, -1, -1, true, 3, true},
      {"tnd8 T8192 causal bfloat16 fwd", OP_DT_BF16, 1, 8, 0, 128, 3, -1, -1, false, 5, true},
      {"tnd8 T8192 causal bfloat16 fwd+bwd", OP_DT_BF16, 1, 8, 0, 128, 3, -1, -1, true, 3, true},
      {"tndpeers T8192 causal float32 fwd", OP_DT_FLOAT, 1, 8, 0, 128, 3, -1, -1, false, 7, true, false, 1.0, false,
       false, kTndPeerLengths},
      {"tndpeers T8192 causal float32 fwd+bwd", OP_DT_FLOAT, 1, 8, 0, 128, 3, -1, -1, true, 3, true, false, 1.0, false,
       false, kTndPeerLengths},
      {"tndpeers T8192 causal bfloat16 fwd", OP_DT_BF16, 1, 8, 0, 128, 3, -1, -1, false, 7, true, false, 1.0, false,
       false, kTndPeerLengths},
      {"tndpeers T8192 causal bfloat16 fwd+bwd", OP_DT_BF16, 1, 8, 0, 128, 3, -1, -1, true, 3, true, false, 1.0, false,
       false, kTndPeerLengths},
  };
  for (const Shape& s : shapes)
    if (std::strstr(s.name, filter)) run(s);
  std::fflush(stdout);
  std::_Exit(0);  // the pool's workers are still parked on the condition variable
}
