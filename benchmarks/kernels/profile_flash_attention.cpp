// Where the flash attention kernels' time goes, one thread: cycles per phase (packing, tile
// GEMMs, softmax, reductions, the rest) from the counters of kernels/common/profile.h, for the
// dense forward and backward at B=1 N=8 S=2048 D=128 and the causal ones (bf16 by default), or,
// given W, the sliding window of mask_mode 4 (win_left = W - 1, win_right = 0) instead; N2 kv
// heads (GQA) instead of 8.
// Built and run by `bash benchmarks/kernels/profile.sh flash_attention [dtype] [S] [D] [W] [N2]`.
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
  const int64_t W = argc > 4 ? std::atoll(argv[4]) : 0;  // 0: dense and causal
  const int64_t N2 = argc > 5 ? std::atoll(argv[5]) : N;  // kv heads
  std::printf("ISA %s, one thread, %s B=1 N=%lld N2=%lld S=%lld D=%lld, BNSD\n", isa_name(active_isa()),
              profile_bench::dtype_name(dt), (long long)N, (long long)N2, (long long)S, (long long)D);
  Buf q(dt, {1, N, S, D}), k(dt, {1, N2, S, D}), v(dt, {1, N2, S, D}), dout(dt, {1, N, S, D});
  Buf out(dt, {1, N, S, D}), lse(OP_DT_FLOAT, {1, N, S}), dq(dt, {1, N, S, D}), dk(dt, {1, N2, S, D}),
      dv(dt, {1, N2, S, D}), mask(OP_DT_INT8, {2048, 2048});
  q.randn(1), k.randn(2), v.randn(3), dout.randn(4);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  profile_bench::Bytes ws;  // the workspace, as the binding's torch allocation gets it
  const std::vector<int> modes = W > 0 ? std::vector<int>{4} : std::vector<int>{0, 3};
  const int64_t win_left = W > 0 ? W - 1 : -1, win_right = W > 0 ? 0 : -1;
  for (int mode : modes) {
    const opTensor* m = mode ? &mask.t : nullptr;
    auto forward = [&] {
      uint64_t n = 0;
      opExecutor* ex = nullptr;
      profile_bench::check(FlashAttnGetWorkspaceSize(&q.t, &k.t, &v.t, nullptr, nullptr, nullptr, nullptr, nullptr,
                                                     nullptr, m, nullptr, scale, mode, win_left, win_right, -1, -1, "BNSD",
                                                     "BNSD", "BNSD", true, &out.t, &lse.t, &n, &ex));
      if (ws.size() < n) ws.resize(n);
      FlashAttn(ws.data(), n, ex, nullptr);
    };
    auto backward = [&] {
      uint64_t n = 0;
      opExecutor* ex = nullptr;
      profile_bench::check(FlashAttnGradGetWorkspaceSize(&q.t, &k.t, &v.t, &dout.t, &out.t, &lse.t, nullptr, nullptr,
                                                         nullptr, nullptr, nullptr, m, nullptr, scale, mode, win_left,
                                                         win_right, -1, -1, "BNSD", "BNSD", "BNSD", &dq.t, &dk.t, &dv.t, &n,
                                                         &ex));
      if (ws.size() < n) ws.resize(n);
      FlashAttnGrad(ws.data(), n, ex, nullptr);
    };
    // visible (query, key) pairs: all, the lower triangle, or the band of W keys ending at the diagonal
    const double pairs = mode == 4   ? static_cast<double>(S) * W - W * (W - 1) / 2.0
                         : mode == 3 ? S * (S + 1) / 2.0
                                     : static_cast<double>(S) * S;
    const double flop = 4.0 * N * pairs * D;
    const char* name = mode == 4 ? "window" : mode == 3 ? "causal" : "dense";
    profile_bench::profile_run((std::string(name) + " forward").c_str(), flop, forward);
    // Spot check: a few output rows against a float64 computation.
    double worst = 0;
    for (int64_t nh : {int64_t(0), N - 1})
      for (int64_t i : {int64_t(0), S / 3, S - 1}) {
        std::vector<double> sc(S), acc(D, 0.0);
        double mx = -1e300, sum = 0;
        const int64_t last = mode >= 3 ? i : S - 1, first = mode == 4 ? std::max<int64_t>(0, i - W + 1) : 0;
        for (int64_t j = first; j <= last; ++j) {
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += q.get((nh * S + i) * D + c) * k.get((nh / (N / N2) * S + j) * D + c);
          sc[j] = d * scale;
          mx = std::max(mx, sc[j]);
        }
        for (int64_t j = first; j <= last; ++j) {
          const double e = std::exp(sc[j] - mx);
          sum += e;
          for (int64_t c = 0; c < D; ++c) acc[c] += e * v.get((nh / (N / N2) * S + j) * D + c);
        }
        for (int64_t c = 0; c < D; ++c) worst = std::max(worst, std::fabs(acc[c] / sum - out.get((nh * S + i) * D + c)));
      }
    std::printf("  (spot check: max abs error %.2e over 6 rows)\n", worst);
    profile_bench::profile_run((std::string(name) + " backward").c_str(), 2.5 * flop, backward);
  }
  return 0;
}
