// Torch-free tests of FusedFloydAttention / FusedFloydAttentionGrad against a naive float64
// reference written from the index formulas of SPEC §3; every ISA build the CPU has; bitwise
// equality across thread counts; error statuses. Last line: "N passed, M failed".
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common/scalar_types.h"
#include "kernels/floyd_attention/floyd_attention.h"
#include "op_plugin/op_api.h"
#include "op_plugin/ops/fused_floyd_attention.h"
#include "op_plugin/ops/fused_floyd_attention_grad.h"

using namespace op_plugin;

namespace {

int g_passed = 0, g_failed = 0;
void check(bool ok, const std::string& what) {
  if (ok) { ++g_passed; return; }
  ++g_failed;
  std::printf("FAIL %s\n", what.c_str());
}

// ---- std::thread parallel backend: splits the range into max_threads contiguous chunks ----
int g_threads = 1;
thread_local int t_index = 0;
int bk_max_threads() { return g_threads; }
int bk_thread_num() { return t_index; }
void bk_parallel_for(int64_t begin, int64_t end, int64_t grain, void (*body)(void*, int64_t, int64_t), void* ctx) {
  const int64_t n = end - begin;
  int64_t chunks = g_threads;
  if (grain > 0 && (n + grain - 1) / grain < chunks) chunks = (n + grain - 1) / grain;
  if (chunks <= 1) { body(ctx, begin, end); return; }
  std::vector<std::thread> pool;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = begin + n * c / chunks, e = begin + n * (c + 1) / chunks;
    pool.emplace_back([=] { t_index = static_cast<int>(c); body(ctx, b, e); });
  }
  for (auto& t : pool) t.join();
}
const opParallelBackend kThreadBackend{bk_max_threads, bk_thread_num, bk_parallel_for};
void set_threads(int n) { g_threads = n; opSetParallelBackend(n > 1 ? &kThreadBackend : nullptr); }

// ---- Host tensors --------------------------------------------------------------------------
// Tensor bytes 64-byte aligned, as torch's allocator hands them out: the kernels take aligned-only
// paths (the AMX backward streams whole lines of dK / dV), which malloc's 16-byte alignment would
// leave untested.
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const Aligned64<U>&) const { return true; }
  template <class U>
  bool operator!=(const Aligned64<U>&) const { return false; }
};
using Bytes = std::vector<unsigned char, Aligned64<unsigned char>>;

struct HostTensor {
  opDataType dtype = OP_DT_FLOAT;
  std::vector<int64_t> shape;
  Bytes bytes;
  opTensor desc() {
    opTensor t{};
    t.data = bytes.empty() ? nullptr : bytes.data();
    t.dtype = dtype;
    t.ndim = static_cast<int32_t>(shape.size());
    int64_t st = 1;
    for (int i = t.ndim - 1; i >= 0; --i) { t.shape[i] = shape[i]; t.strides[i] = st; st *= shape[i]; }
    return t;
  }
  int64_t size() const { int64_t n = 1; for (auto s : shape) n *= s; return n; }
};

HostTensor make(opDataType dt, std::vector<int64_t> shape) {
  HostTensor h;
  h.dtype = dt;
  h.shape = shape;
  h.bytes.assign(static_cast<size_t>(h.size()) * dtype_size(dt), 0);
  return h;
}

double get(const HostTensor& h, int64_t i) {
  const unsigned char* p = h.bytes.data();
  switch (h.dtype) {
    case OP_DT_FLOAT: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case OP_DT_DOUBLE: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case OP_DT_FLOAT16: { Half v; std::memcpy(&v, p + 2 * i, 2); return to_float(v); }
    case OP_DT_BF16: { BFloat16 v; std::memcpy(&v, p + 2 * i, 2); return to_float(v); }
    case OP_DT_BOOL: case OP_DT_UINT8: return p[i];
    default: return 0;
  }
}
void put(HostTensor& h, int64_t i, double x) {
  unsigned char* p = h.bytes.data();
  switch (h.dtype) {
    case OP_DT_FLOAT: { float v = static_cast<float>(x); std::memcpy(p + 4 * i, &v, 4); break; }
    case OP_DT_DOUBLE: std::memcpy(p + 8 * i, &x, 8); break;
    case OP_DT_FLOAT16: { Half v = to_half(static_cast<float>(x)); std::memcpy(p + 2 * i, &v, 2); break; }
    case OP_DT_BF16: { BFloat16 v = to_bfloat16(static_cast<float>(x)); std::memcpy(p + 2 * i, &v, 2); break; }
    case OP_DT_BOOL: case OP_DT_UINT8: p[i] = x != 0; break;
    default: break;
  }
}
std::vector<double> values(const HostTensor& h) {
  std::vector<double> v(static_cast<size_t>(h.size()));
  for (int64_t i = 0; i < h.size(); ++i) v[i] = get(h, i);
  return v;
}

// ---- Reference (float64, explicit index formulas of SPEC §3) -----------------------------------
struct Problem {
  int64_t B, H, N, M, K, D;
  double scale;
  opDataType dt;
  int mask_kind;  // 0 none, 1 random, 2 random + fully masked rows
};

struct RefOut { std::vector<double> mx, sm, o, dq, dk1, dv1, dk2, dv2; };

// S for one (b,h,n,m) row over k.
void ref_logits(const Problem& p, const std::vector<double>& Q, const std::vector<double>& K1,
                const std::vector<double>& K2, const std::vector<double>* mask, int64_t b, int64_t h,
                int64_t n, int64_t m, std::vector<double>& s) {
  const int64_t H = p.H, N = p.N, M = p.M, K = p.K, D = p.D;
  const int64_t bh = b * H + h;
  for (int64_t k = 0; k < K; ++k) {
    double a = 0, c = 0;
    for (int64_t d = 0; d < D; ++d) {
      const double q = Q[((bh * N + n) * M + m) * D + d];
      a += q * K1[((bh * N + n) * K + k) * D + d];
      c += q * K2[((bh * K + k) * M + m) * D + d];
    }
    double v = p.scale * (a + c);
    // the golden adds -4e9 to a masked raw score before scaling; float32 rounds raw - 4e9 to -4e9
    if (mask != nullptr && (*mask)[(b * N + n) * K + k] != 0) v = p.scale * -4e9;
    s[k] = v;
  }
}

void reference(const Problem& p, const std::vector<double>& Q, const std::vector<double>& K1,
               const std::vector<double>& V1, const std::vector<double>& K2, const std::vector<double>& V2,
               const std::vector<double>* mask, const std::vector<double>& dY, const std::vector<double>& Oin,
               RefOut& r) {
  const int64_t B = p.B, H = p.H, N = p.N, M = p.M, K = p.K, D = p.D;
  r.mx.assign(B * H * N * M, 0); r.sm.assign(B * H * N * M, 0); r.o.assign(B * H * N * M * D, 0);
  r.dq.assign(B * H * N * M * D, 0); r.dk1.assign(B * H * N * K * D, 0); r.dv1.assign(B * H * N * K * D, 0);
  r.dk2.assign(B * H * K * M * D, 0); r.dv2.assign(B * H * K * M * D, 0);
  std::vector<double> s(K), P(K), dP(K);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bh = b * H + h;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) {
          const int64_t row = (bh * N + n) * M + m;
          ref_logits(p, Q, K1, K2, mask, b, h, n, m, s);
          double mx = -INFINITY;
          for (int64_t k = 0; k < K; ++k) mx = std::max(mx, s[k]);
          double sm = 0;
          for (int64_t k = 0; k < K; ++k) sm += std::exp(s[k] - mx);
          r.mx[row] = mx; r.sm[row] = sm;
          for (int64_t k = 0; k < K; ++k) P[k] = std::exp(s[k] - mx) / sm;
          double dr = 0;
          for (int64_t d = 0; d < D; ++d) dr += dY[row * D + d] * Oin[row * D + d];
          for (int64_t k = 0; k < K; ++k) {
            double acc = 0;
            for (int64_t d = 0; d < D; ++d) {
              const double v = V1[((bh * N + n) * K + k) * D + d] + V2[((bh * K + k) * M + m) * D + d];
              r.o[row * D + d] += P[k] * v;
              acc += dY[row * D + d] * v;
            }
            const double ds = p.scale * P[k] * (acc - dr);
            for (int64_t d = 0; d < D; ++d) {
              const int64_t i1 = ((bh * N + n) * K + k) * D + d, i2 = ((bh * K + k) * M + m) * D + d;
              r.dq[row * D + d] += ds * (K1[i1] + K2[i2]);
              r.dk1[i1] += ds * Q[row * D + d];
              r.dk2[i2] += ds * Q[row * D + d];
              r.dv1[i1] += P[k] * dY[row * D + d];
              r.dv2[i2] += P[k] * dY[row * D + d];
            }
          }
        }
    }
}

double tolerance(opDataType dt) {
  switch (dt) {
    case OP_DT_DOUBLE: return 1e-10;
    case OP_DT_FLOAT: return 2e-5;
    case OP_DT_FLOAT16: return 4e-3;
    default: return 2.5e-2;
  }
}

// max |got - want| / max(max |want|, 1e-3); infinite when a value is NaN (std::max would skip it)
double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double e = 0, scale = 1e-3;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(got[i] - want[i]);
    if (std::isnan(d)) return INFINITY;
    e = std::max(e, d);
    scale = std::max(scale, std::fabs(want[i]));
  }
  return e / scale;
}

struct Inputs {
  HostTensor q, k1, v1, k2, v2, mask, dy;
  bool has_mask;
};

Inputs make_inputs(const Problem& p, std::mt19937_64& rng) {
  const int64_t B = p.B, H = p.H, N = p.N, M = p.M, K = p.K, D = p.D;
  std::normal_distribution<double> nd(0.0, 1.0);
  Inputs in;
  in.q = make(p.dt, {B, H, N, M, D});
  in.k1 = make(p.dt, {B, H, N, K, D});
  in.v1 = make(p.dt, {B, H, N, K, D});
  in.k2 = make(p.dt, {B, H, K, M, D});
  in.v2 = make(p.dt, {B, H, K, M, D});
  in.dy = make(p.dt, {B, H, N, M, D});
  for (HostTensor* t : {&in.q, &in.k1, &in.v1, &in.k2, &in.v2, &in.dy})
    for (int64_t i = 0; i < t->size(); ++i) put(*t, i, nd(rng));
  in.has_mask = p.mask_kind != 0;
  in.mask = make((rng() & 1) ? OP_DT_BOOL : OP_DT_UINT8, {B, 1, N, 1, K});
  if (in.has_mask) {
    std::uniform_real_distribution<double> u(0, 1);
    for (int64_t i = 0; i < in.mask.size(); ++i) put(in.mask, i, u(rng) < 0.3);
    if (p.mask_kind == 2)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t n = 0; n < N; n += 3)
          for (int64_t k = 0; k < K; ++k) put(in.mask, (b * N + n) * K + k, 1);
  }
  return in;
}

struct Outputs { HostTensor mx, sm, o, dq, dk1, dv1, dk2, dv2; };

// Output tensors and workspaces start as all-ones bytes (NaN in every floating type, as
// torch.empty may hand out): an element the kernel leaves unwritten, or a workspace buffer it
// reads before writing, fails the comparison with the reference.
constexpr unsigned char kPoison = 0xFF;
HostTensor make_output(opDataType dt, std::vector<int64_t> shape) {
  HostTensor h = make(dt, std::move(shape));
  std::fill(h.bytes.begin(), h.bytes.end(), kPoison);
  return h;
}
void poison(Outputs& o) {
  for (HostTensor* t : {&o.mx, &o.sm, &o.o, &o.dq, &o.dk1, &o.dv1, &o.dk2, &o.dv2})
    std::fill(t->bytes.begin(), t->bytes.end(), kPoison);
}

opDataType stats_dt(opDataType dt) { return dt == OP_DT_DOUBLE ? OP_DT_DOUBLE : OP_DT_FLOAT; }

// Runs both stages through the public API (the ISA active_isa() picks).
bool run_api(const Problem& p, Inputs& in, Outputs& out) {
  const int64_t B = p.B, H = p.H, N = p.N, M = p.M, K = p.K, D = p.D;
  out.mx = make_output(stats_dt(p.dt), {B, H, N, M, 8});
  out.sm = make_output(stats_dt(p.dt), {B, H, N, M, 8});
  out.o = make_output(p.dt, {B, H, N, M, D});
  opTensor q = in.q.desc(), k1 = in.k1.desc(), v1 = in.v1.desc(), k2 = in.k2.desc(), v2 = in.v2.desc();
  opTensor mask = in.mask.desc(), mx = out.mx.desc(), sm = out.sm.desc(), o = out.o.desc();
  uint64_t ws = 0;
  opExecutor* ex = nullptr;
  if (FusedFloydAttentionGetWorkspaceSize(&q, &k1, &v1, &k2, &v2, in.has_mask ? &mask : nullptr, p.scale,
                                          &mx, &sm, &o, &ws, &ex) != OP_SUCCESS) {
    std::printf("  stage 1: %s\n", opGetLastErrorMessage());
    return false;
  }
  // The workspace starts 16 bytes past a cache line (as malloc memory may): stage 2 must align it
  // itself within the size stage 1 reported (its streaming stores fault on unaligned addresses).
  std::vector<unsigned char> work(ws + 64, kPoison);
  const auto misaligned = [](std::vector<unsigned char>& v) {
    return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(v.data()) + 63) / 64 * 64 + 16);
  };
  if (FusedFloydAttention(misaligned(work), ws, ex, nullptr) != OP_SUCCESS) return false;
  out.dq = make_output(p.dt, {B, H, N, M, D});
  out.dk1 = make_output(p.dt, {B, H, N, K, D});
  out.dv1 = make_output(p.dt, {B, H, N, K, D});
  out.dk2 = make_output(p.dt, {B, H, K, M, D});
  out.dv2 = make_output(p.dt, {B, H, K, M, D});
  opTensor dy = in.dy.desc(), dq = out.dq.desc(), dk1 = out.dk1.desc(), dv1 = out.dv1.desc();
  opTensor dk2 = out.dk2.desc(), dv2 = out.dv2.desc();
  if (FusedFloydAttentionGradGetWorkspaceSize(&dy, &q, &k1, &v1, &k2, &v2, &o, &mx, &sm,
                                              in.has_mask ? &mask : nullptr, p.scale, &dq, &dk1, &dv1,
                                              &dk2, &dv2, &ws, &ex) != OP_SUCCESS) {
    std::printf("  grad stage 1: %s\n", opGetLastErrorMessage());
    return false;
  }
  work.assign(ws + 64, kPoison);
  return FusedFloydAttentionGrad(misaligned(work), ws, ex, nullptr) == OP_SUCCESS;
}

// Runs one ISA build directly with a hand-made plan (the plan stage 1 would make; chunk_blocks > 0
// asks the backward for chunks of that many n blocks instead of its own choice).
void run_isa(int isa, const Problem& p, Inputs& in, Outputs& out, int64_t chunk_blocks = 0) {
  floyd::FwdPlan f{};
  f.dtype = p.dt; f.B = p.B; f.H = p.H; f.N = p.N; f.M = p.M; f.K = p.K; f.D = p.D; f.scale = p.scale;
  f.q = in.q.bytes.data(); f.k1 = in.k1.bytes.data(); f.v1 = in.v1.bytes.data();
  f.k2 = in.k2.bytes.data(); f.v2 = in.v2.bytes.data();
  f.mask = in.has_mask ? in.mask.bytes.data() : nullptr;
  f.softmax_max = out.mx.bytes.data(); f.softmax_sum = out.sm.bytes.data(); f.out = out.o.bytes.data();
  f.threads = g_threads;
  // The workspace of the build that runs (bf16 operands are pairs only in the AVX-512 build).
  const Isa level = isa == 0 ? Isa::kBaseline : isa == 1 ? Isa::kAvx2 : active_isa();
  const floyd::WorkspaceSizes fs = floyd::fwd_workspace(p.dt, p.N, p.M, p.K, p.D, level);
  f.scratch_bytes = fs.slot;
  f.shared_bytes = fs.shared;
  // 64-byte aligned base, as the workspace the API hands out.
  poison(out);
  std::vector<unsigned char> ws(f.shared_bytes + f.scratch_bytes * f.threads + 64, kPoison);
  auto aligned = [](std::vector<unsigned char>& v) {
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(v.data()) + 63) / 64 * 64);
  };
  void (*fwd)(const floyd::FwdPlan&, void*) = isa == 0 ? floyd::baseline::forward : isa == 1 ? floyd::avx2::forward : floyd::avx512::forward;
  void (*bwd)(const floyd::BwdPlan&, void*) = isa == 0 ? floyd::baseline::backward : isa == 1 ? floyd::avx2::backward : floyd::avx512::backward;
  fwd(f, aligned(ws));
  floyd::BwdPlan g{};
  g.dtype = p.dt; g.B = p.B; g.H = p.H; g.N = p.N; g.M = p.M; g.K = p.K; g.D = p.D; g.scale = p.scale;
  g.dy = in.dy.bytes.data(); g.q = f.q; g.k1 = f.k1; g.v1 = f.v1; g.k2 = f.k2; g.v2 = f.v2; g.o = f.out;
  g.softmax_max = f.softmax_max; g.softmax_sum = f.softmax_sum; g.mask = f.mask;
  g.dq = out.dq.bytes.data(); g.dk1 = out.dk1.bytes.data(); g.dv1 = out.dv1.bytes.data();
  g.dk2 = out.dk2.bytes.data(); g.dv2 = out.dv2.bytes.data();
  g.threads = g_threads;
  g.chunk_blocks = chunk_blocks > 0 ? chunk_blocks
                                    : floyd::fast::bwd_chunk_blocks(p.N, p.M, p.K, floyd::fast::operand_bytes(p.dt, level));
  const floyd::WorkspaceSizes bs = floyd::bwd_workspace(p.dt, p.N, p.M, p.K, p.D, g.chunk_blocks, level);
  g.scratch_bytes = bs.slot;
  g.shared_bytes = bs.shared;
  ws.assign(g.shared_bytes + g.scratch_bytes * g.threads + 64, kPoison);
  bwd(g, aligned(ws));
}

std::string describe(const Problem& p) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s B=%lld H=%lld N=%lld M=%lld K=%lld D=%lld scale=%.3g mask=%d",
                dtype_name(p.dt), (long long)p.B, (long long)p.H, (long long)p.N, (long long)p.M,
                (long long)p.K, (long long)p.D, p.scale, p.mask_kind);
  return buf;
}

std::vector<double> stat0(const HostTensor& h) {
  std::vector<double> v(static_cast<size_t>(h.size() / 8));
  for (size_t i = 0; i < v.size(); ++i) v[i] = get(h, static_cast<int64_t>(i) * 8);
  return v;
}

bool stats_replicated(const HostTensor& h) {
  for (int64_t i = 0; i < h.size(); ++i) if (get(h, i) != get(h, i - i % 8)) return false;
  return true;
}

// The float64 reference of one problem's inputs. Its backward takes the output under test (as the
// op's backward does), so it is recomputed only when that output's bytes change: runs that share a
// forward (the backward in chunks, the API at the level a direct call also runs) share it.
struct RefCache {
  Bytes o_bytes;
  RefOut r;
};

void compare(const Problem& p, Inputs& in, Outputs& out, const std::string& tag, RefCache& cache) {
  if (cache.o_bytes.empty() || cache.o_bytes != out.o.bytes) {
    const std::vector<double> maskv = values(in.mask);
    reference(p, values(in.q), values(in.k1), values(in.v1), values(in.k2), values(in.v2),
              in.has_mask ? &maskv : nullptr, values(in.dy), values(out.o), cache.r);
    cache.o_bytes = out.o.bytes;
  }
  const RefOut& r = cache.r;
  const double tol = tolerance(p.dt);
  const std::string d = tag + " " + describe(p);
  // The max is exact up to the logits' rounding; compare relative to the row scale.
  check(rel_err(stat0(out.mx), r.mx) <= tol, d + " softmax_max");
  check(rel_err(stat0(out.sm), r.sm) <= tol, d + " softmax_sum");
  check(stats_replicated(out.mx) && stats_replicated(out.sm), d + " stats replicated 8x");
  check(rel_err(values(out.o), r.o) <= tol, d + " attention_out err=" + std::to_string(rel_err(values(out.o), r.o)));
  const std::pair<const HostTensor*, const std::vector<double>*> grads[] = {
      {&out.dq, &r.dq}, {&out.dk1, &r.dk1}, {&out.dv1, &r.dv1}, {&out.dk2, &r.dk2}, {&out.dv2, &r.dv2}};
  const char* names[] = {"dq", "dk1", "dv1", "dk2", "dv2"};
  for (int i = 0; i < 5; ++i) {
    const double e = rel_err(values(*grads[i].first), *grads[i].second);
    check(e <= 2 * tol, d + " " + names[i] + " err=" + std::to_string(e));
  }
}

bool same_bytes(const Outputs& a, const Outputs& b) {
  return a.mx.bytes == b.mx.bytes && a.sm.bytes == b.sm.bytes && a.o.bytes == b.o.bytes && a.dq.bytes == b.dq.bytes &&
         a.dk1.bytes == b.dk1.bytes && a.dv1.bytes == b.dv1.bytes && a.dk2.bytes == b.dk2.bytes && a.dv2.bytes == b.dv2.bytes;
}

bool cpu_has(int isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == 0) return true;
  if (isa == 1) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  // The AVX-512 build: the level active_isa() reports (the AVX-512 model's in its test build).
  return static_cast<int>(active_isa()) >= static_cast<int>(Isa::kAvx512);
#else
  return isa == 0;
#endif
}

void correctness() {
  std::mt19937_64 rng(12345);
  std::vector<Problem> problems = {
      // Tile boundaries (fast::TN = TM = 16; key blocks in whole 16-key vectors): 15/16/17 rows,
      // 63/64/65 keys.
      {1, 1, 16, 16, 64, 16, 0.25, OP_DT_FLOAT, 0},
      {1, 2, 17, 15, 65, 8, 0.3, OP_DT_FLOAT, 2},
      {2, 1, 15, 17, 63, 5, 0.5, OP_DT_FLOAT, 1},
      {1, 1, 3, 33, 130, 64, 0.125, OP_DT_FLOAT, 2},
      {1, 1, 33, 2, 7, 24, 0.2, OP_DT_FLOAT, 0},
      {1, 1, 1, 1, 1, 1, 1.0, OP_DT_FLOAT, 0},
      {2, 2, 5, 6, 9, 3, 1.0, OP_DT_FLOAT, 2},
      // Decode sizes (at most 16 keys: the AVX-512 softmax by key; float slices this small are read
      // in place), and one too large to read in place.
      {1, 2, 16, 16, 16, 16, 0.25, OP_DT_FLOAT, 1},
      {1, 1, 16, 16, 16, 16, 0.25, OP_DT_BF16, 2},
      {1, 1, 40, 40, 16, 16, 0.25, OP_DT_FLOAT, 1},
      {1, 1, 18, 18, 66, 19, 0.2, OP_DT_BF16, 2},
      {1, 2, 7, 20, 70, 64, 0.125, OP_DT_BF16, 1},
      {1, 1, 18, 18, 66, 19, 0.2, OP_DT_FLOAT16, 2},
      {2, 1, 7, 5, 40, 32, 0.125, OP_DT_FLOAT16, 0},
      {1, 2, 17, 9, 65, 7, 0.4, OP_DT_DOUBLE, 2},
      {2, 1, 4, 18, 12, 16, 1.0, OP_DT_DOUBLE, 0},
      // Several n blocks (up to 5 of 16 rows, the last one ragged, odd row counts for the bf16
      // pairs), which the backward also runs in chunks of 1 and 2 blocks below: bf16
      // pairs; float with Q / dY read in place (slices of at most 32 KiB) and packed; float16.
      {1, 1, 71, 18, 66, 19, 0.2, OP_DT_BF16, 2},
      {1, 1, 37, 17, 33, 24, 0.3, OP_DT_BF16, 1},
      {1, 2, 65, 9, 65, 24, 0.25, OP_DT_FLOAT, 2},
      {1, 1, 71, 17, 130, 19, 0.3, OP_DT_FLOAT, 1},
      {1, 1, 50, 4, 8, 8, 0.5, OP_DT_FLOAT, 0},
      {1, 1, 49, 3, 40, 3, 0.5, OP_DT_FLOAT, 1},
      {1, 1, 71, 18, 66, 19, 0.2, OP_DT_FLOAT16, 0},
      // Long key rows in one block (200, 257 keys) over several m blocks, bf16 and float16.
      {1, 1, 20, 35, 200, 24, 0.2, OP_DT_BF16, 1},
      {1, 2, 17, 33, 257, 16, 0.15, OP_DT_FLOAT16, 2},
      // Several key blocks (more than fast::kMaxKeyBlock = 512 keys: equal blocks, the last one
      // ragged), so the online softmax rescales the output: 513 keys (272 + 241), 600, 1100 (3 x 368).
      {1, 1, 18, 17, 513, 24, 0.2, OP_DT_BF16, 1},
      {1, 1, 9, 20, 1100, 16, 0.15, OP_DT_FLOAT, 2},
      {1, 1, 17, 5, 600, 8, 0.3, OP_DT_DOUBLE, 1},
      {1, 1, 5, 18, 530, 19, 0.2, OP_DT_FLOAT16, 2},
      {1, 1, 16, 16, 1030, 64, 0.125, OP_DT_BF16, 0},
      // bf16 on AMX tiles (floyd_attention_amx.h) takes the max over the raw logits only for a
      // positive scale and rows without masked keys: a negative and a zero scale, with and without
      // masks, over two n blocks and two m blocks.
      {1, 1, 33, 20, 90, 32, -0.3, OP_DT_BF16, 0},
      {1, 1, 20, 33, 40, 32, -0.3, OP_DT_BF16, 1},
      {1, 1, 17, 18, 33, 16, 0.0, OP_DT_BF16, 2},
  };
  // Random small shapes.
  std::uniform_int_distribution<int> small(1, 20), keys(1, 70), dims(1, 20);
  const opDataType dts[] = {OP_DT_FLOAT, OP_DT_BF16, OP_DT_FLOAT16, OP_DT_DOUBLE};
  for (int i = 0; i < 8; ++i)
    problems.push_back({1 + (int)(rng() % 2), 1 + (int)(rng() % 2), small(rng), small(rng), keys(rng), dims(rng),
                        0.1 + 0.1 * (rng() % 5), dts[i % 4], (int)(rng() % 3)});

  for (const Problem& p : problems) {
    Inputs in = make_inputs(p, rng);
    RefCache ref;
    set_threads(1);
    Outputs api1;
    check(run_api(p, in, api1), "api runs " + describe(p));
    compare(p, in, api1, std::string("api[") + isa_name(active_isa()) + "]", ref);
    set_threads(2);
    Outputs api2;
    run_api(p, in, api2);
    check(same_bytes(api1, api2), "1 vs 2 threads bitwise " + describe(p));
    set_threads(3);
    Outputs api3;
    run_api(p, in, api3);
    check(same_bytes(api1, api3), "1 vs 3 threads bitwise " + describe(p));
    // Every ISA build this CPU can run (float64 always uses the baseline build).
    for (int isa = 0; isa < 3; ++isa) {
      if (!cpu_has(isa) || (p.dt == OP_DT_DOUBLE && isa != 0)) continue;
      const char* nm = isa == 0 ? "baseline" : isa == 1 ? "avx2" : "avx512";
      Outputs o1 = api1, o2 = api1;
      set_threads(1);
      run_isa(isa, p, in, o1);
      compare(p, in, o1, nm, ref);
      set_threads(2);
      run_isa(isa, p, in, o2);
      check(same_bytes(o1, o2), std::string(nm) + " 1 vs 2 threads bitwise " + describe(p));
      // dK2/dV2 summed over several chunks of n blocks (a chunk's P and dS must fit 256 MiB, so
      // only very large M*K chunk on their own).
      for (int64_t chunk = 1; chunk <= 2 && chunk < floyd::ceil_div(p.N, floyd::fast::TN); ++chunk) {
        const std::string tag = std::string(nm) + " chunks of " + std::to_string(chunk) + " n blocks";
        Outputs c1 = api1, c2 = api1;
        set_threads(1);
        run_isa(isa, p, in, c1, chunk);
        compare(p, in, c1, tag, ref);
        set_threads(3);
        run_isa(isa, p, in, c2, chunk);
        check(same_bytes(c1, c2), tag + ", 1 vs 3 threads bitwise " + describe(p));
      }
    }
  }
  set_threads(1);
}

// Fully masked rows give uniform weights: O = mean_k (V1 + V2), max = -4e9 * scale (the golden's), sum = K.
void fully_masked() {
  Problem p{1, 1, 2, 3, 5, 4, 0.5, OP_DT_FLOAT, 0};
  std::mt19937_64 rng(7);
  Inputs in = make_inputs(p, rng);
  in.has_mask = true;
  for (int64_t i = 0; i < in.mask.size(); ++i) put(in.mask, i, 1);
  Outputs out;
  check(run_api(p, in, out), "fully masked runs");
  check(get(out.mx, 0) == -2e9F, "fully masked: softmax_max = -4e9 * scale");
  check(get(out.sm, 0) == 5.0, "fully masked: softmax_sum = K");
  double e = 0;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t m = 0; m < 3; ++m)
      for (int64_t d = 0; d < 4; ++d) {
        double mean = 0;
        for (int64_t k = 0; k < 5; ++k) mean += (get(in.v1, (n * 5 + k) * 4 + d) + get(in.v2, (k * 3 + m) * 4 + d)) / 5;
        const double diff = std::fabs(mean - get(out.o, (n * 3 + m) * 4 + d));
        if (!(diff <= e)) e = std::isnan(diff) ? INFINITY : diff;
      }
  check(e < 1e-5, "fully masked: uniform weights");
}

void errors() {
  Problem p{1, 2, 3, 4, 5, 6, 1.0, OP_DT_FLOAT, 1};
  std::mt19937_64 rng(3);
  Inputs in = make_inputs(p, rng);
  Outputs out;
  run_api(p, in, out);
  opTensor q = in.q.desc(), k1 = in.k1.desc(), v1 = in.v1.desc(), k2 = in.k2.desc(), v2 = in.v2.desc();
  opTensor mask = in.mask.desc(), mx = out.mx.desc(), sm = out.sm.desc(), o = out.o.desc(), dy = in.dy.desc();
  opTensor dq = out.dq.desc(), dk1 = out.dk1.desc(), dv1 = out.dv1.desc(), dk2 = out.dk2.desc(), dv2 = out.dv2.desc();
  uint64_t ws = 0;
  opExecutor* ex = nullptr;
  auto fwd = [&](const opTensor* a, const opTensor* b, const opTensor* c, const opTensor* d, const opTensor* e,
                 const opTensor* m, opTensor* x, opTensor* y, opTensor* z) {
    ex = nullptr;
    const opStatus s = FusedFloydAttentionGetWorkspaceSize(a, b, c, d, e, m, 1.0, x, y, z, &ws, &ex);
    if (ex != nullptr) opDestroyExecutor(ex);
    return s;
  };
  auto expect = [&](opStatus got, opStatus want, const char* needle, const std::string& what) {
    const std::string msg = opGetLastErrorMessage();
    check(got == want && msg.find(needle) != std::string::npos, what + " -> " + std::to_string(got) + " '" + msg + "'");
  };
  expect(fwd(&q, &k1, &v1, &k2, &v2, &mask, &mx, &sm, &o), OP_SUCCESS, "", "valid call");
  expect(fwd(nullptr, &k1, &v1, &k2, &v2, &mask, &mx, &sm, &o), OP_ERR_PARAM_NULLPTR, "query_ik", "null query");
  expect(fwd(&q, &k1, &v1, &k2, nullptr, &mask, &mx, &sm, &o), OP_ERR_PARAM_NULLPTR, "value_jk", "null value_jk");
  expect(fwd(&q, &k1, &v1, &k2, &v2, &mask, &mx, &sm, nullptr), OP_ERR_PARAM_NULLPTR, "attention_out", "null out");
  check(FusedFloydAttentionGetWorkspaceSize(&q, &k1, &v1, &k2, &v2, &mask, 1.0, &mx, &sm, &o, nullptr, &ex) ==
            OP_ERR_PARAM_NULLPTR, "null workspace_size");
  {
    opTensor bad = q; bad.ndim = 4;
    expect(fwd(&bad, &k1, &v1, &k2, &v2, &mask, &mx, &sm, &o), OP_ERR_PARAM_INVALID, "query_ik must be 5D, but got 4D", "rank of query");
  }
  {
    opTensor bad = k2; bad.shape[3] = 7;  // M mismatch
    expect(fwd(&q, &k1, &v1, &bad, &v2, &mask, &mx, &sm, &o), OP_ERR_PARAM_INVALID, "key_jk must have shape", "key_jk M");
  }
  {
    opTensor bad = v1; bad.shape[3] = 4;  // K mismatch with key_ij
    expect(fwd(&q, &k1, &bad, &k2, &v2, &mask, &mx, &sm, &o), OP_ERR_PARAM_INVALID, "value_ij must have the shape of key_ij", "value_ij K");
  }
  {
    opTensor bad = k1; bad.shape[1] = 3;  // H mismatch
    expect(fwd(&q, &bad, &v1, &k2, &v2, &mask, &mx, &sm, &o), OP_ERR_PARAM_INVALID, "key_ij must have shape", "key_ij H");
  }
  {
    opTensor bad = k1; bad.dtype = OP_DT_BF16;
    expect(fwd(&q, &bad, &v1, &k2, &v2, &mask, &mx, &sm, &o), OP_ERR_PARAM_INVALID, "key_ij must have the dtype of query_ik (float32), but got bfloat16", "key_ij dtype");
  }
  {
    opTensor bad = q; bad.dtype = OP_DT_INT32;
    expect(fwd(&bad, &k1, &v1, &k2, &v2, &mask, &mx, &sm, &o), OP_ERR_PARAM_INVALID, "query_ik must have dtype float16, bfloat16, float32, float64, but got int32", "int query");
  }
  {
    opTensor bad = mask; bad.shape[1] = 2;
    expect(fwd(&q, &k1, &v1, &k2, &v2, &bad, &mx, &sm, &o), OP_ERR_PARAM_INVALID, "atten_mask must have shape", "mask shape");
    opTensor bad2 = mask; bad2.dtype = OP_DT_FLOAT;
    expect(fwd(&q, &k1, &v1, &k2, &v2, &bad2, &mx, &sm, &o), OP_ERR_PARAM_INVALID, "atten_mask", "mask dtype");
  }
  {
    opTensor bad = mx; bad.shape[4] = 1;
    expect(fwd(&q, &k1, &v1, &k2, &v2, &mask, &bad, &sm, &o), OP_ERR_PARAM_INVALID, "softmax_max must be a float32 tensor of shape", "max shape");
    opTensor bad2 = sm; bad2.dtype = OP_DT_BF16;
    expect(fwd(&q, &k1, &v1, &k2, &v2, &mask, &mx, &bad2, &o), OP_ERR_PARAM_INVALID, "softmax_sum must be a float32 tensor of shape", "sum dtype");
  }
  {
    opTensor bad = q; std::swap(bad.strides[3], bad.strides[4]); bad.strides[3] = 1; bad.strides[4] = 4;
    expect(fwd(&bad, &k1, &v1, &k2, &v2, &mask, &mx, &sm, &o), OP_ERR_PARAM_INVALID, "contiguous", "non-contiguous query");
  }
  // Grad.
  auto bwd = [&](const opTensor* g, const opTensor* oo, const opTensor* smax, opTensor* a, opTensor* b2) {
    ex = nullptr;
    const opStatus s = FusedFloydAttentionGradGetWorkspaceSize(g, &q, &k1, &v1, &k2, &v2, oo, smax, &sm, &mask, 1.0,
                                                               a, &dk1, &dv1, b2, &dv2, &ws, &ex);
    if (ex != nullptr) opDestroyExecutor(ex);
    return s;
  };
  expect(bwd(&dy, &o, &mx, &dq, &dk2), OP_SUCCESS, "", "grad valid call");
  expect(bwd(nullptr, &o, &mx, &dq, &dk2), OP_ERR_PARAM_NULLPTR, "grad_output", "grad null dy");
  expect(bwd(&dy, &o, &mx, nullptr, &dk2), OP_ERR_PARAM_NULLPTR, "dq", "grad null dq");
  {
    opTensor bad = dy; bad.shape[2] = 1;
    expect(bwd(&bad, &o, &mx, &dq, &dk2), OP_ERR_PARAM_INVALID, "grad_output must have the shape of query_ik", "grad dy shape");
    opTensor bad2 = o; bad2.dtype = OP_DT_DOUBLE;
    expect(bwd(&dy, &bad2, &mx, &dq, &dk2), OP_ERR_PARAM_INVALID, "attention_out must have the dtype of query_ik (float32)", "grad out dtype");
    opTensor bad3 = dk2; bad3.shape[2] = 9;
    expect(bwd(&dy, &o, &mx, &dq, &bad3), OP_ERR_PARAM_INVALID, "dk2 must be a float32 tensor of shape", "grad dk2 shape");
    opTensor bad4 = mx; bad4.dtype = OP_DT_FLOAT16;
    expect(bwd(&dy, &o, &bad4, &dq, &dk2), OP_ERR_PARAM_INVALID, "softmax_max must be float32, but got float16", "grad max dtype");
  }
  // Stage 2 misuse.
  {
    ex = nullptr;
    FusedFloydAttentionGetWorkspaceSize(&q, &k1, &v1, &k2, &v2, &mask, 1.0, &mx, &sm, &o, &ws, &ex);
    check(ws > 0 && FusedFloydAttention(nullptr, ws - 1, ex, nullptr) == OP_ERR_RUNTIME_ERROR, "too small workspace");
    check(FusedFloydAttention(nullptr, 0, nullptr, nullptr) == OP_ERR_PARAM_NULLPTR, "null executor");
  }
  {  // A backend that grew after stage 1 is refused instead of overrunning the workspace.
    set_threads(1);
    ex = nullptr;
    FusedFloydAttentionGetWorkspaceSize(&q, &k1, &v1, &k2, &v2, &mask, 1.0, &mx, &sm, &o, &ws, &ex);
    std::vector<unsigned char> w(ws);
    set_threads(2);
    check(FusedFloydAttention(w.data(), ws, ex, nullptr) == OP_ERR_RUNTIME_ERROR, "backend grew after stage 1");
    set_threads(1);
  }
}

void empty_shapes() {
  // K = 0: out = 0, stats (-inf, 0), all grads 0; N = 0: dK2 / dV2 = 0.
  Problem p{1, 1, 2, 3, 0, 4, 1.0, OP_DT_FLOAT, 0};
  std::mt19937_64 rng(5);
  Inputs in = make_inputs(p, rng);
  Outputs out;
  check(run_api(p, in, out), "K = 0 runs");
  bool zero = true;
  for (double v : values(out.o)) zero = zero && v == 0;
  for (double v : values(out.dq)) zero = zero && v == 0;
  check(zero, "K = 0: out and dq are 0");
  Problem p2{1, 1, 0, 3, 4, 4, 1.0, OP_DT_BF16, 0};
  Inputs in2 = make_inputs(p2, rng);
  Outputs out2;
  check(run_api(p2, in2, out2), "N = 0 runs");
  zero = true;
  for (double v : values(out2.dk2)) zero = zero && v == 0;
  check(zero, "N = 0: dk2 = 0");
  // M = 0: dK1 / dV1 are sums over no m rows (the kernels write them; outputs start as NaN).
  Problem p3{1, 1, 3, 0, 5, 4, 1.0, OP_DT_FLOAT, 0};
  for (opDataType dt : {OP_DT_FLOAT, OP_DT_BF16, OP_DT_DOUBLE}) {
    p3.dt = dt;
    Inputs in3 = make_inputs(p3, rng);
    Outputs out3;
    check(run_api(p3, in3, out3), "M = 0 runs");
    zero = true;
    for (double v : values(out3.dk1)) zero = zero && v == 0;
    for (double v : values(out3.dv1)) zero = zero && v == 0;
    check(zero, "M = 0: dk1 = dv1 = 0 " + describe(p3));
  }
}

}  // namespace

int main() {
  std::printf("active ISA: %s\n", isa_name(active_isa()));
  correctness();
  fully_masked();
  errors();
  empty_shapes();
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
