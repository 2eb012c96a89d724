// Shared by the profile_<family>.cpp programs (built by profile.sh with -DOP_PLUGIN_PROFILE on the
// kernel sources): tensors, the tile peak of this core, and the timing loop that attributes the
// best run's cycles to the phases of kernels/common/profile.h.
#pragma once
#include <sys/mman.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/common/profile.h"
#include "op_plugin/isa.h"
#include "op_plugin/scalar_types.h"
#include "op_plugin/status.h"
#include "op_plugin/tensor.h"

namespace profile_bench {
using namespace op_plugin;

inline std::atomic<uint64_t> g_cycles[profile::kPhases];

inline opDataType parse_dtype(const char* s) {
  const std::string n = s ? s : "bfloat16";
  return n == "float32" ? OP_DT_FLOAT : n == "float16" ? OP_DT_FLOAT16 : OP_DT_BF16;
}
inline const char* dtype_name(opDataType dt) {
  return dt == OP_DT_FLOAT ? "float32" : dt == OP_DT_FLOAT16 ? "float16" : "bfloat16";
}

// Zeroed memory as the benchmarks get it from torch: aligned (torch aligns tensors to 64 bytes;
// kernels may read aligned inputs in place) and backed by transparent huge pages
// (THP_MEM_ALLOC_ENABLE=1 in benchmarks/run.py): on this machine's "madvise" THP setting plain
// malloc'd memory gets 4 KB pages, whose TLB misses would inflate the packing phases.
struct Bytes {
  unsigned char* p = nullptr;
  size_t n = 0;
  Bytes() = default;
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  ~Bytes() { release(); }
  void release() {
    if (p) munmap(p, n);
    p = nullptr;
    n = 0;
  }
  // Grows to at least `bytes` (contents not kept).
  void resize(size_t bytes) {
    if (bytes <= n) return;
    release();
    n = (bytes + (size_t(2) << 20) - 1) / (size_t(2) << 20) * (size_t(2) << 20);
    void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) std::abort();
    madvise(m, n, MADV_HUGEPAGE);
    p = static_cast<unsigned char*>(m);
  }
  unsigned char* data() { return p; }
  size_t size() const { return n; }
};

// A contiguous tensor owning its memory.
struct Buf {
  Bytes mem;
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
    for (int64_t i = 0; i < numel(t); ++i) set(i, nd(rng));
  }
  void set(int64_t i, float x) {
    if (t.dtype == OP_DT_FLOAT) static_cast<float*>(t.data)[i] = x;
    else if (t.dtype == OP_DT_FLOAT16) static_cast<Half*>(t.data)[i] = to_half(x);
    else if (t.dtype == OP_DT_BF16) static_cast<BFloat16*>(t.data)[i] = to_bfloat16(x);
    else static_cast<uint8_t*>(t.data)[i] = x != 0;
  }
  double get(int64_t i) const {
    if (t.dtype == OP_DT_FLOAT) return static_cast<const float*>(t.data)[i];
    if (t.dtype == OP_DT_FLOAT16) return to_float(static_cast<const Half*>(t.data)[i]);
    return to_float(static_cast<const BFloat16*>(t.data)[i]);
  }
};

// The tile peak of this core right now: a register-only TDPBF16PS loop on non-zero tiles (zero
// tiles run about twice as fast, so a peak measured on them is not one real data reaches).
__attribute__((target("amx-tile,amx-bf16"))) inline double tile_peak_gflops() {
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

// Runs `run` for two seconds (the first second or two of AMX use on this host runs at about half
// speed: docs/decisions.md), then OP_PROFILE_REPS times (default 7; more where the host's speed
// drifts, as a shared host's does), and prints the best run's time, its useful GFLOP/s (`flop` per
// run) against the tile peak measured between runs, and its cycles per phase.
template <class Run>
void profile_run(const char* title, double flop, Run&& run) {
  for (const auto w0 = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - w0 < std::chrono::seconds(2);)
    run();
  const char* reps_env = std::getenv("OP_PROFILE_REPS");
  const int reps = reps_env != nullptr && std::atoi(reps_env) > 0 ? std::atoi(reps_env) : 7;
  double peak = 0, best_s = 0;
  uint64_t best_total = ~0ull, best[profile::kPhases] = {};
  for (int rep = 0; rep < reps; ++rep) {
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
  const char* names[profile::kPhases] = {"pack/convert", "tile GEMM", "softmax", "reductions", "other",
                                         "GEMM+softmax"};
  const double gf = flop / best_s / 1e9;
  if (best_s < 1e-3)  // decode sizes: microseconds
    std::printf("%s: %.2f us, %.0f useful GFLOP/s (best of %d)", title, best_s * 1e6, gf, reps);
  else
    std::printf("%s: %.2f ms, %.0f useful GFLOP/s (best of %d)", title, best_s * 1e3, gf, reps);
  if (peak > 0) std::printf(" = %.0f%% of the tile peak %.0f", 100.0 * gf / peak, peak);
  std::printf("\n");
  uint64_t counted = 0;
  for (int i = 0; i < profile::kPhases; ++i) counted += best[i];
  for (int i = 0; i < profile::kPhases; ++i) {
    if (!best[i]) continue;
    std::printf("  %-14s %5.1f%%", names[i], 100.0 * best[i] / best_total);
    // Useful GEMM FLOPs over the GEMM phases' time: the tile GEMM phase alone, or, where some
    // GEMMs run interleaved with the softmax (kOverlap), over both phases together.
    const bool overlap = best[profile::kOverlap] != 0;
    if (i == (overlap ? profile::kOverlap : profile::kGemm)) {
      const uint64_t cycles = best[profile::kGemm] + (overlap ? best[profile::kOverlap] : 0);
      const double g = flop / (best_s * cycles / best_total) / 1e9;
      std::printf("   (%s%.0f GFLOP/s", overlap ? "with tile GEMM: " : "", g);
      if (peak > 0) std::printf(" = %.0f%% of the tile peak", 100.0 * g / peak);
      std::printf(")");
    }
    std::printf("\n");
  }
  std::printf("  %-14s %5.1f%%\n", "(uncounted)", 100.0 * (best_total - std::min(counted, best_total)) / best_total);
}

inline void check(opStatus s) {
  if (s != OP_SUCCESS) {
    std::printf("error: %s\n", opGetLastErrorMessage());
    std::exit(1);
  }
}

}  // namespace profile_bench

extern "C" void op_plugin_profile_add(int phase, uint64_t cycles) { profile_bench::g_cycles[phase] += cycles; }
