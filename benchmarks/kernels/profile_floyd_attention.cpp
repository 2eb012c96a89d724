// Where the fused Floyd attention kernels' time goes, one thread: cycles per phase (packing,
// GEMMs, softmax, reductions, the rest) from the counters of kernels/common/profile.h, forward
// and backward at B=1 H=4 N=M=K=256 D=64 (bf16 by default). Useful FLOPs: the forward's 4
// GEMM-sized terms (Q K1^T, Q K2^T, P V1, P V2) and the backward's 10, 2 N M K D each.
// Built and run by `bash benchmarks/kernels/profile.sh floyd_attention [dtype] [N] [D]`.
#include <cmath>
#include <string>

#include "op_plugin/ops/fused_floyd_attention.h"
#include "op_plugin/ops/fused_floyd_attention_grad.h"
#include "profile_common.h"

using namespace op_plugin;
using profile_bench::Buf;

int main(int argc, char** argv) {
  const opDataType dt = profile_bench::parse_dtype(argc > 1 ? argv[1] : nullptr);
  const int64_t L = argc > 2 ? std::atoll(argv[2]) : 256, D = argc > 3 ? std::atoll(argv[3]) : 64, H = 4;
  const int64_t N = L, M = L, K = L;
  std::printf("ISA %s, one thread, %s B=1 H=%lld N=M=K=%lld D=%lld\n", isa_name(active_isa()),
              profile_bench::dtype_name(dt), (long long)H, (long long)L, (long long)D);
  Buf q(dt, {1, H, N, M, D}), k1(dt, {1, H, N, K, D}), v1(dt, {1, H, N, K, D}), k2(dt, {1, H, K, M, D}),
      v2(dt, {1, H, K, M, D}), dy(dt, {1, H, N, M, D});
  Buf out(dt, {1, H, N, M, D}), smax(OP_DT_FLOAT, {1, H, N, M, 8}), ssum(OP_DT_FLOAT, {1, H, N, M, 8});
  Buf dq(dt, {1, H, N, M, D}), dk1(dt, {1, H, N, K, D}), dv1(dt, {1, H, N, K, D}), dk2(dt, {1, H, K, M, D}),
      dv2(dt, {1, H, K, M, D});
  q.randn(1), k1.randn(2), v1.randn(3), k2.randn(4), v2.randn(5), dy.randn(6);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  profile_bench::Bytes ws;  // the workspace, as the binding's torch allocation gets it
  auto forward = [&] {
    uint64_t n = 0;
    opExecutor* ex = nullptr;
    profile_bench::check(FusedFloydAttentionGetWorkspaceSize(&q.t, &k1.t, &v1.t, &k2.t, &v2.t, nullptr, scale, &smax.t,
                                                             &ssum.t, &out.t, &n, &ex));
    if (ws.size() < n) ws.resize(n);
    FusedFloydAttention(ws.data(), n, ex, nullptr);
  };
  auto backward = [&] {
    uint64_t n = 0;
    opExecutor* ex = nullptr;
    profile_bench::check(FusedFloydAttentionGradGetWorkspaceSize(&dy.t, &q.t, &k1.t, &v1.t, &k2.t, &v2.t, &out.t,
                                                                 &smax.t, &ssum.t, nullptr, scale, &dq.t, &dk1.t,
                                                                 &dv1.t, &dk2.t, &dv2.t, &n, &ex));
    if (ws.size() < n) ws.resize(n);
    FusedFloydAttentionGrad(ws.data(), n, ex, nullptr);
  };
  const double term = 2.0 * H * N * M * K * D;
  profile_bench::profile_run("forward", 4 * term, forward);
  // Spot check: a few output rows against a float64 computation.
  double worst = 0;
  for (int64_t h : {int64_t(0), H - 1})
    for (int64_t i : {int64_t(0), N / 3, N - 1})
      for (int64_t j : {int64_t(0), M - 1}) {
        std::vector<double> sc(K), acc(D, 0.0);
        double mx = -1e300, sum = 0;
        for (int64_t kk = 0; kk < K; ++kk) {
          double d = 0;
          for (int64_t c = 0; c < D; ++c)
            d += q.get(((h * N + i) * M + j) * D + c) *
                 (k1.get(((h * N + i) * K + kk) * D + c) + k2.get(((h * K + kk) * M + j) * D + c));
          sc[kk] = d * scale;
          mx = std::max(mx, sc[kk]);
        }
        for (int64_t kk = 0; kk < K; ++kk) {
          const double e = std::exp(sc[kk] - mx);
          sum += e;
          for (int64_t c = 0; c < D; ++c)
            acc[c] += e * (v1.get(((h * N + i) * K + kk) * D + c) + v2.get(((h * K + kk) * M + j) * D + c));
        }
        for (int64_t c = 0; c < D; ++c)
          worst = std::max(worst, std::fabs(acc[c] / sum - out.get(((h * N + i) * M + j) * D + c)));
      }
  std::printf("  (spot check: max abs error %.2e over 12 rows)\n", worst);
  profile_bench::profile_run("backward", 10 * term, backward);
  return 0;
}
