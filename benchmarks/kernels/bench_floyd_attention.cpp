// Micro-benchmark of FusedFloydAttention + FusedFloydAttentionGrad (forward + backward), torch-free.
// Usage: bench_floyd_attention [N=M=K] [dtype: float32|bfloat16|float16] [threads] [reps] [H] [D]
// Prints the median time of forward, backward and both, and the peak workspace bytes.
#include <algorithm>
#include <chrono>
#include <sys/resource.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common/scalar_types.h"
#include "op_plugin/op_api.h"
#include "op_plugin/ops/fused_floyd_attention.h"
#include "op_plugin/ops/fused_floyd_attention_grad.h"

using namespace op_plugin;

namespace {
int g_threads = 1;
thread_local int t_index = 0;
int bk_max() { return g_threads; }
int bk_num() { return t_index; }
void bk_for(int64_t b, int64_t e, int64_t, void (*body)(void*, int64_t, int64_t), void* ctx) {
  std::vector<std::thread> pool;
  const int64_t n = e - b;
  for (int c = 1; c < g_threads; ++c)
    pool.emplace_back([=] { t_index = c; body(ctx, b + n * c / g_threads, b + n * (c + 1) / g_threads); });
  t_index = 0;
  body(ctx, b, b + n / g_threads);
  for (auto& t : pool) t.join();
}
const opParallelBackend kBackend{bk_max, bk_num, bk_for};

struct Buf {
  std::vector<unsigned char> bytes;
  opTensor t{};
  Buf(opDataType dt, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    bytes.assign(n * dtype_size(dt), 0);
    t.data = bytes.data(); t.dtype = dt; t.ndim = (int)shape.size();
    int64_t st = 1;
    for (int i = t.ndim - 1; i >= 0; --i) { t.shape[i] = shape[i]; t.strides[i] = st; st *= shape[i]; }
  }
  void randomize(std::mt19937& rng) {  // cheap uniform(-1.7, 1.7) values (unit variance)
    uint32_t x = static_cast<uint32_t>(rng());
    const int64_t n = numel(t);
    for (int64_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      const float v = (static_cast<float>(x >> 8) * (1.0f / 16777216.0f) - 0.5f) * 3.4641f;
      if (t.dtype == OP_DT_FLOAT) std::memcpy(bytes.data() + 4 * i, &v, 4);
      else if (t.dtype == OP_DT_BF16) { BFloat16 b = to_bfloat16(v); std::memcpy(bytes.data() + 2 * i, &b, 2); }
      else { Half h = to_half(v); std::memcpy(bytes.data() + 2 * i, &h, 2); }
    }
  }
};

double cpu_now() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

int main(int argc, char** argv) {
  const int64_t S = argc > 1 ? std::atoll(argv[1]) : 256;
  const std::string dts = argc > 2 ? argv[2] : "float32";
  g_threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 5;
  const int64_t B = 1, H = argc > 5 ? std::atoll(argv[5]) : 4, N = S, M = S, K = S, D = argc > 6 ? std::atoll(argv[6]) : 64;
  const opDataType dt = dts == "bfloat16" ? OP_DT_BF16 : dts == "float16" ? OP_DT_FLOAT16 : OP_DT_FLOAT;
  opSetParallelBackend(g_threads > 1 ? &kBackend : nullptr);
  std::mt19937 rng(0);
  Buf q(dt, {B, H, N, M, D}), k1(dt, {B, H, N, K, D}), v1(dt, {B, H, N, K, D}), k2(dt, {B, H, K, M, D}),
      v2(dt, {B, H, K, M, D}), dy(dt, {B, H, N, M, D});
  for (Buf* b : {&q, &k1, &v1, &k2, &v2, &dy}) b->randomize(rng);
  Buf mask(OP_DT_BOOL, {B, 1, N, 1, K});
  for (auto& c : mask.bytes) c = (rng() % 10) == 0;
  Buf mx(OP_DT_FLOAT, {B, H, N, M, 8}), sm(OP_DT_FLOAT, {B, H, N, M, 8}), o(dt, {B, H, N, M, D});
  Buf dq(dt, {B, H, N, M, D}), dk1(dt, {B, H, N, K, D}), dv1(dt, {B, H, N, K, D}), dk2(dt, {B, H, K, M, D}),
      dv2(dt, {B, H, K, M, D});
  std::vector<double> tf, tb;
  uint64_t ws_f = 0, ws_b = 0;
  std::vector<double> cpu;
  for (int r = 0; r < reps; ++r) {
    opExecutor* ex = nullptr;
    const double c0 = cpu_now();
    double t0 = now();
    if (FusedFloydAttentionGetWorkspaceSize(&q.t, &k1.t, &v1.t, &k2.t, &v2.t, &mask.t, 0.125, &mx.t, &sm.t, &o.t,
                                            &ws_f, &ex) != OP_SUCCESS) { std::printf("%s\n", opGetLastErrorMessage()); return 1; }
    std::vector<unsigned char> w(ws_f);
    FusedFloydAttention(w.data(), ws_f, ex, nullptr);
    double t1 = now();
    if (FusedFloydAttentionGradGetWorkspaceSize(&dy.t, &q.t, &k1.t, &v1.t, &k2.t, &v2.t, &o.t, &mx.t, &sm.t, &mask.t,
                                                0.125, &dq.t, &dk1.t, &dv1.t, &dk2.t, &dv2.t, &ws_b, &ex) != OP_SUCCESS) {
      std::printf("%s\n", opGetLastErrorMessage()); return 1; }
    std::vector<unsigned char> w2(ws_b);
    FusedFloydAttentionGrad(w2.data(), ws_b, ex, nullptr);
    double t2 = now();
    tf.push_back(t1 - t0); tb.push_back(t2 - t1);
    cpu.push_back(cpu_now() - c0);
  }
  std::vector<double> tt(reps);
  for (int r = 0; r < reps; ++r) tt[r] = tf[r] + tb[r];
  auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
  const double flop_f = 4.0 * 2 * B * H * N * M * K * D, flop_b = 14.0 * 2 * B * H * N * M * K * D;
  std::printf("floyd %s N=M=K=%lld H=%lld D=%lld threads=%d isa=%s: fwd %.3f s (%.0f GFLOP/s)  bwd %.3f s (%.0f GFLOP/s)  "
              "fwd+bwd median %.3f s (cpu %.3f s)  workspace fwd %.1f MiB bwd %.1f MiB\n",
              dts.c_str(), (long long)S, (long long)H, (long long)D, g_threads, isa_name(active_isa()), med(tf),
              flop_f / med(tf) * 1e-9, med(tb), flop_b / med(tb) * 1e-9, med(tt), med(cpu), ws_f / 1048576.0, ws_b / 1048576.0);
  return 0;
}
