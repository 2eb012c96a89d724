// Where the flash attention kernels' time goes, one thread: cycles per phase (packing, tile
// GEMMs, softmax, reductions, the rest) from the counters of kernels/common/profile.h, for the
// dense forward and backward at B=1 N=8 S=2048 D=128 and the causal ones (bf16 by default).
// Built by profile_flash_attention.sh with -DOP_PLUGIN_PROFILE on the kernel sources.
// Usage: profile_flash_attention [bfloat16|float32] [S] [D]
#include <x86intrin.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/profile.h"
#include "kernels/common/scalar_types.h"
#include "op_plugin/isa.h"
#include "op_plugin/ops/flash_attn.h"
#include "op_plugin/ops/flash_attn_grad.h"

using namespace op_plugin;

static std::atomic<uint64_t> g_cycles[profile::kPhases];
extern "C" void op_plugin_profile_add(int phase, uint64_t cycles) { g_cycles[phase] += cycles; }

struct Buf {
  std::vector<unsigned char> mem;
  opTensor t{};
  Buf(opDataType dt, std::vector<int64_t> shape) {
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
    for (int64_t i = 0; i < numel(t); ++i) {
      const float x = nd(rng);
      if (t.dtype == OP_DT_FLOAT) static_cast<float*>(t.data)[i] = x;
      else static_cast<BFloat16*>(t.data)[i] = to_bfloat16(x);
    }
  }
};

// The tile peak of this core right now: a register-only TDPBF16PS loop on non-zero tiles (zero
// tiles run about twice as fast, so a peak measured on them is not one real data reaches).
__attribute__((target("amx-tile,amx-bf16"))) static double tile_peak_gflops() {
  alignas(64) static uint16_t data[4 * 512];
  for (int i = 0; i < 4 * 512; ++i) data[i] = to_bfloat16(0.5f + 0.001f * static_cast<float>(i % 97)).bits;
  alignas(64) unsigned char cfg[64] = {1};
  for (int t = 0; t < 8; ++t) {
    cfg[16 + 2 * t] = 64;
    cfg[48 + t] = 16;
  }
  _tile_loadconfig(cfg);
  _tile_loadd(4, data, 64);
  _tile_loadd(5, data + 512, 64);
  _tile_loadd(6, data + 1024, 64);
  _tile_loadd(7, data + 1536, 64);
  const int64_t iters = 20000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  _tile_release();
  return 4.0 * iters * 16 * 16 * 32 * 2 / secs / 1e9;
}

int main(int argc, char** argv) {
  const opDataType dt = argc > 1 && std::string(argv[1]) == "float32" ? OP_DT_FLOAT : OP_DT_BF16;
  const int64_t S = argc > 2 ? std::atoll(argv[2]) : 2048, D = argc > 3 ? std::atoll(argv[3]) : 128, N = 8;
  std::printf("ISA %s, one thread, %s B=1 N=%lld S=%lld D=%lld, BNSD\n", isa_name(active_isa()),
              dt == OP_DT_BF16 ? "bfloat16" : "float32", (long long)N, (long long)S, (long long)D);
  Buf q(dt, {1, N, S, D}), k(dt, {1, N, S, D}), v(dt, {1, N, S, D}), dout(dt, {1, N, S, D});
  Buf out(dt, {1, N, S, D}), lse(OP_DT_FLOAT, {1, N, S}), dq(dt, {1, N, S, D}), dk(dt, {1, N, S, D}),
      dv(dt, {1, N, S, D}), mask(OP_DT_INT8, {2048, 2048});
  q.randn(1), k.randn(2), v.randn(3), dout.randn(4);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<unsigned char> ws;
  const char* names[profile::kPhases] = {"pack/convert", "tile GEMM", "softmax", "reductions", "other"};
  for (int mode : {0, 3}) {
    for (int bwd = 0; bwd < 2; ++bwd) {
      auto run = [&] {
        uint64_t n = 0;
        opExecutor* ex = nullptr;
        const opTensor* m = mode ? &mask.t : nullptr;
        if (!bwd) {
          if (FlashAttnGetWorkspaceSize(&q.t, &k.t, &v.t, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, m,
                                        nullptr, scale, mode, -1, -1, -1, -1, "BNSD", "BNSD", "BNSD", true, &out.t,
                                        &lse.t, &n, &ex) != OP_SUCCESS) {
            std::printf("error: %s\n", opGetLastErrorMessage());
            std::exit(1);
          }
          if (ws.size() < n) ws.resize(n);
          FlashAttn(ws.data(), n, ex, nullptr);
        } else {
          if (FlashAttnGradGetWorkspaceSize(&q.t, &k.t, &v.t, &dout.t, &out.t, &lse.t, nullptr, nullptr, nullptr,
                                            nullptr, nullptr, m, nullptr, scale, mode, -1, -1, -1, -1, "BNSD", "BNSD",
                                            "BNSD", &dq.t, &dk.t, &dv.t, &n, &ex) != OP_SUCCESS) {
            std::printf("error: %s\n", opGetLastErrorMessage());
            std::exit(1);
          }
          if (ws.size() < n) ws.resize(n);
          FlashAttnGrad(ws.data(), n, ex, nullptr);
        }
      };
      // Warm up: the first second or two of AMX use on this host runs at about half speed (the
      // tile unit wakes up; docs/benchmarks.md), and the forward's lse feeds the backward.
      for (const auto w0 = std::chrono::steady_clock::now();
           std::chrono::steady_clock::now() - w0 < std::chrono::seconds(2);)
        run();
      double peak = 0;
      uint64_t best_total = ~0ull;
      uint64_t best[profile::kPhases] = {};
      double best_s = 0;
      for (int rep = 0; rep < 7; ++rep) {
        if (active_isa() == Isa::kAvx512Amx) peak = std::max(peak, tile_peak_gflops());
        for (auto& c : g_cycles) c = 0;
        const auto t0 = std::chrono::steady_clock::now();
        const uint64_t c0 = __rdtsc();
        run();
        const uint64_t total = __rdtsc() - c0;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (total < best_total) {
          best_total = total;
          best_s = secs;
          for (int i = 0; i < profile::kPhases; ++i) best[i] = g_cycles[i];
        }
      }
      if (!bwd) {  // spot check: a few output rows against a float64 computation
        double worst = 0;
        auto val = [&](const Buf& x, int64_t i) {
          return dt == OP_DT_FLOAT ? static_cast<const float*>(x.t.data)[i]
                                   : to_float(static_cast<const BFloat16*>(x.t.data)[i]);
        };
        for (int64_t nh : {int64_t(0), N - 1})
          for (int64_t i : {int64_t(0), S / 3, S - 1}) {
            std::vector<double> sc(S), acc(D, 0.0);
            double mx = -1e300, sum = 0;
            const int64_t last = mode == 3 ? i : S - 1;
            for (int64_t j = 0; j <= last; ++j) {
              double d = 0;
              for (int64_t c = 0; c < D; ++c) d += val(q, (nh * S + i) * D + c) * val(k, (nh * S + j) * D + c);
              sc[j] = d * scale;
              mx = std::max(mx, sc[j]);
            }
            for (int64_t j = 0; j <= last; ++j) {
              const double e = std::exp(sc[j] - mx);
              sum += e;
              for (int64_t c = 0; c < D; ++c) acc[c] += e * val(v, (nh * S + j) * D + c);
            }
            for (int64_t c = 0; c < D; ++c) worst = std::max(worst, std::fabs(acc[c] / sum - val(out, (nh * S + i) * D + c)));
          }
        std::printf("  (spot check: max abs error %.2e over 6 rows)\n", worst);
      }
      const double pairs = mode == 3 ? S * (S + 1) / 2.0 : static_cast<double>(S) * S;
      const double flop = 4.0 * N * pairs * D * (bwd ? 2.5 : 1.0);
      std::printf("%s %s: %.1f ms, %.0f useful GFLOP/s (best of 7) = %.0f%% of the tile peak %.0f\n",
                  mode ? "causal" : "dense", bwd ? "backward" : "forward", best_s * 1e3, flop / best_s / 1e9,
                  peak > 0 ? 100.0 * flop / best_s / 1e9 / peak : 0.0, peak);
      uint64_t counted = 0;
      for (int i = 0; i < profile::kPhases; ++i) counted += best[i];
      for (int i = 0; i < profile::kPhases; ++i) {
        if (!best[i]) continue;
        std::printf("  %-14s %5.1f%%", names[i], 100.0 * best[i] / best_total);
        if (i == profile::kGemm && peak > 0)  // useful GEMM FLOPs over the GEMM phase's time
          std::printf("   (%.0f GFLOP/s = %.0f%% of the tile peak)", flop / (best_s * best[i] / best_total) / 1e9,
                      100.0 * flop / (best_s * best[i] / best_total) / 1e9 / peak);
        std::printf("\n");
      }
      std::printf("  %-14s %5.1f%%\n", "(uncounted)", 100.0 * (best_total - std::min(counted, best_total)) / best_total);
    }
  }
  return 0;
}
