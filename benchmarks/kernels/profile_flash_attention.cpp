// Where the flash attention kernels' time goes, one thread: cycles per phase (packing, tile
// GEMMs, softmax, reductions, the rest) from the counters of kernels/common/profile.h, for the
// dense forward and backward at B=1 N=8 S=2048 D=128 and the causal ones (bf16 by default).
// Built and run by `bash benchmarks/kernels/profile.sh flash_attention [dtype] [S] [D]`.
#include <cmath>
#include <string>

#include "op_plugin/ops/flash_attn.h"
#include "op_plugin/ops/flash_attn_grad.h"
#include "profile_common.h"

using namespace op_plugin;
using profile_bench::Buf;

int main(int argc, char** argv) {
  const opDataType dt = profile_bench::parse_dtype(argc > 1 ? argv[1] : nullptr);
  const int64_t S = argc > 2 ? std::atoll(argv[2]) : 2048, D = argc > 3 ? std::atoll(argv[3]) : 128, N = 8;
  std::printf("ISA %s, one thread, %s B=1 N=%lld S=%lld D=%lld, BNSD\n", isa_name(active_isa()),
              profile_bench::dtype_name(dt), (long long)N, (long long)S, (long long)D);
  Buf q(dt, {1, N, S, D}), k(dt, {1, N, S, D}), v(dt, {1, N, S, D}), dout(dt, {1, N, S, D});
  Buf out(dt, {1, N, S, D}), lse(OP_DT_FLOAT, {1, N, S}), dq(dt, {1, N, S, D}), dk(dt, {1, N, S, D}),
      dv(dt, {1, N, S, D}), mask(OP_DT_INT8, {2048, 2048});
  q.randn(1), k.randn(2), v.randn(3), dout.randn(4);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<unsigned char> ws;
  for (int mode : {0, 3}) {
    const opTensor* m = mode ? &mask.t : nullptr;
    auto forward = [&] {
      uint64_t n = 0;
      opExecutor* ex = nullptr;
      profile_bench::check(FlashAttnGetWorkspaceSize(&q.t, &k.t, &v.t, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                     nullptr, m, nullptr, scale, mode, -1, -1, -1, -1, "BNSD", "BNSD",
                                                     "BNSD", true, &out.t, &lse.t, &n, &ex));
      if (ws.size() < n) ws.resize(n);
      FlashAttn(ws.data(), n, ex, nullptr);
    };
    auto backward = [&] {
      uint64_t n = 0;
      opExecutor* ex = nullptr;
      profile_bench::check(FlashAttnGradGetWorkspaceSize(&q.t, &k.t, &v.t, &dout.t, &out.t, &lse.t, nullptr, nullptr,
                                                         nullptr, nullptr, nullptr, m, nullptr, scale, mode, -1, -1,
                                                         -1, -1, "BNSD", "BNSD", "BNSD", &dq.t, &dk.t, &dv.t, &n,
                                                         &ex));
      if (ws.size() < n) ws.resize(n);
      FlashAttnGrad(ws.data(), n, ex, nullptr);
    };
    const double pairs = mode == 3 ? S * (S + 1) / 2.0 : static_cast<double>(S) * S;
    const double flop = 4.0 * N * pairs * D;
    profile_bench::profile_run(mode ? "causal forward" : "dense forward", flop, forward);
    // Spot check: a few output rows against a float64 computation.
    double worst = 0;
    for (int64_t nh : {int64_t(0), N - 1})
      for (int64_t i : {int64_t(0), S / 3, S - 1}) {
        std::vector<double> sc(S), acc(D, 0.0);
        double mx = -1e300, sum = 0;
        const int64_t last = mode == 3 ? i : S - 1;
        for (int64_t j = 0; j <= last; ++j) {
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += q.get((nh * S + i) * D + c) * k.get((nh * S + j) * D + c);
          sc[j] = d * scale;
          mx = std::max(mx, sc[j]);
        }
        for (int64_t j = 0; j <= last; ++j) {
          const double e = std::exp(sc[j] - mx);
          sum += e;
          for (int64_t c = 0; c < D; ++c) acc[c] += e * v.get((nh * S + j) * D + c);
        }
        for (int64_t c = 0; c < D; ++c) worst = std::max(worst, std::fabs(acc[c] / sum - out.get((nh * S + i) * D + c)));
      }
    std::printf("  (spot check: max abs error %.2e over 6 rows)\n", worst);
    profile_bench::profile_run(mode ? "causal backward" : "dense backward", 2.5 * flop, backward);
  }
  return 0;
}
