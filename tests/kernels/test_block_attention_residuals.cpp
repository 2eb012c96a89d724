// Torch-free test of BlockAttentionResiduals / BlockAttentionResidualsGrad (SPEC section 4).
//
// Checks, for every dtype and a set of shapes (T = 0, H = 0, N = 0, N = 1, odd H 1/7/33/4097,
// several chunks), the two-stage API against a naive double-precision reference; that 1, 2 and 3
// threads (a std::thread backend installed with opSetParallelBackend) give bitwise identical
// results; the plan heuristic; the error statuses of stage 1 and stage 2.
//
// ISA levels: the full API runs at op_plugin::active_isa(), which OP_PLUGIN_ISA caps
// (tests/kernels/build_and_run.sh runs this binary once per level). In addition, every run checks
// the row kernels of every level the CPU supports directly against the scalar table, including
// the non-temporal-store paths, which the plan only enables for outputs above 64 MiB.
//
// Last line of output: "<n> passed, <m> failed"; exit status 1 if anything failed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../../csrc/kernels/block_attention_residuals/bar_plan.h"
#include "../../csrc/kernels/block_attention_residuals/bar_rows.h"
#include "../../csrc/kernels/common/scalar_types.h"
#include "op_plugin/ops/block_attention_residuals.h"
#include "op_plugin/ops/block_attention_residuals_grad.h"

using namespace op_plugin;

// ---------------------------------------------------------------------------------------------
// Test bookkeeping
namespace {

int g_passed = 0;
int g_failed = 0;

void check(bool ok, const std::string& what) {  // (build `what` after computing `ok`)
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::printf("FAIL: %s\n", what.c_str());
  }
}

// ---------------------------------------------------------------------------------------------
// A std::thread parallel backend: splits [begin, end) into up to g_threads pieces of >= grain.
int g_threads = 1;
thread_local int t_thread_index = 0;

int backend_max_threads() { return g_threads; }
int backend_thread_num() { return t_thread_index; }
void backend_parallel_for(int64_t begin, int64_t end, int64_t grain,
                          void (*body)(void*, int64_t, int64_t), void* ctx) {
  const int64_t n = end - begin;
  int64_t parts = g_threads;
  if (grain > 0) parts = std::min<int64_t>(parts, std::max<int64_t>(1, n / grain));
  const int64_t step = (n + parts - 1) / parts;
  std::vector<std::thread> pool;
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t b = begin + p * step, e = std::min(end, b + step);
    if (b >= e) break;
    pool.emplace_back([=] {
      t_thread_index = static_cast<int>(p);
      body(ctx, b, e);
    });
  }
  body(ctx, begin, std::min(end, begin + step));
  for (std::thread& t : pool) t.join();
}
const opParallelBackend kThreadBackend{backend_max_threads, backend_thread_num,
                                       backend_parallel_for};

void use_threads(int n) {
  g_threads = n;
  opSetParallelBackend(n > 1 ? &kThreadBackend : nullptr);
}

// ---------------------------------------------------------------------------------------------
// Types, tensors, data
template <class T> struct DType;
template <> struct DType<float> { static constexpr opDataType kValue = OP_DT_FLOAT; };
template <> struct DType<double> { static constexpr opDataType kValue = OP_DT_DOUBLE; };
template <> struct DType<Half> { static constexpr opDataType kValue = OP_DT_FLOAT16; };
template <> struct DType<BFloat16> { static constexpr opDataType kValue = OP_DT_BF16; };

// Normwise tolerance of an output of storage type T (fp32 accumulation; double for double).
// Sums over H lose about sqrt(H) ulps, and the gradients subtract such sums (g - sum_j p_j g_j),
// so the budget grows with sqrt(H) beyond H = 64.
template <class T> double base_tolerance() { return 5e-5; }
template <> double base_tolerance<double>() { return 1e-11; }
template <> double base_tolerance<Half>() { return 4e-3; }
template <> double base_tolerance<BFloat16>() { return 2e-2; }
template <class T> double tolerance(int64_t H = 64) {
  return base_tolerance<T>() * std::max(1.0, std::sqrt(static_cast<double>(H) / 64.0));
}

template <class T> double to_d(T x) { return static_cast<double>(to_float(x)); }

opTensor desc(const void* data, opDataType dtype, std::vector<int64_t> shape) {
  opTensor t{};
  t.data = const_cast<void*>(data);
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

uint64_t g_seed = 0x9e3779b97f4a7c15ull;
double uniform(double lo, double hi) {
  g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * static_cast<double>(g_seed >> 11) / 9007199254740992.0;
}
template <class T> std::vector<T> random_vec(int64_t n, double lo, double hi) {
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = from_double<T>(uniform(lo, hi));
  return v;
}
template <class T> std::vector<double> as_double(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (size_t k = 0; k < v.size(); ++k) out[k] = to_d(v[k]);
  return out;
}

// max |got - want| <= tol * max(1e-3, max |want|); NaN must match NaN.
template <class T>
bool close(const std::vector<T>& got, const std::vector<double>& want, double tol, double* err) {
  if (got.size() != want.size()) return false;
  double scale = 1e-3, worst = 0;
  for (double w : want) if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
  for (size_t k = 0; k < got.size(); ++k) {
    const double g = to_d(got[k]), w = want[k];
    if (std::isnan(w) || std::isnan(g)) {
      if (std::isnan(w) != std::isnan(g)) { *err = INFINITY; return false; }
      continue;
    }
    worst = std::max(worst, std::fabs(g - w));
  }
  *err = worst / scale;
  return worst <= tol * scale;
}

template <class T>
void expect_close(const std::vector<T>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  double err = 0;
  const bool ok = close(got, want, tol, &err);
  check(ok, what + " normwise err " + std::to_string(err) + " > tol " + std::to_string(tol));
}

// max |got - want| <= tol * max(1e-30, max magnitude); NaN must match NaN.
template <class T>
void expect_close_mag(const std::vector<T>& got, const std::vector<double>& want,
                      const std::vector<double>& mag, double tol, const std::string& what) {
  double scale = 1e-30, worst = 0;
  bool ok = got.size() == want.size();
  for (double m : mag) scale = std::max(scale, m);
  for (size_t k = 0; ok && k < got.size(); ++k) {
    const double g = to_d(got[k]), w = want[k];
    if (std::isnan(w) || std::isnan(g)) {
      ok = std::isnan(w) == std::isnan(g);
      continue;
    }
    worst = std::max(worst, std::fabs(g - w));
  }
  ok = ok && worst <= tol * scale;
  check(ok, what + " err " + std::to_string(worst / scale) + " (of the summands' magnitude) > tol " +
                std::to_string(tol));
}

template <class T> bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// ---------------------------------------------------------------------------------------------
// Naive double reference of SPEC section 4.
struct Problem {
  int64_t T, N, H;
  bool proj_2d;
  std::vector<double> pb, br, pw, nw, gh;  // inputs as stored (after rounding to the dtype)
  double eps;
};
double v_at(const Problem& p, int64_t t, int64_t i, int64_t h) {
  return i < p.N ? p.br[(t * p.N + i) * p.H + h] : p.pb[t * p.H + h];
}

void reference_forward(const Problem& p, std::vector<double>* inv, std::vector<double>* probs,
                       std::vector<double>* hidden) {
  const int64_t R = p.N + 1;
  inv->assign(p.T * R, 0);
  probs->assign(p.T * R, 0);
  hidden->assign(p.T * p.H, 0);
  for (int64_t t = 0; t < p.T; ++t) {
    std::vector<double> s(R);
    for (int64_t i = 0; i < R; ++i) {
      double ss = 0, dot = 0;
      for (int64_t h = 0; h < p.H; ++h) {
        const double v = v_at(p, t, i, h);
        ss += v * v;
        dot += v * p.nw[h] * p.pw[h];
      }
      (*inv)[t * R + i] = 1.0 / std::sqrt(ss / static_cast<double>(p.H) + p.eps);
      s[i] = p.H > 0 ? dot * (*inv)[t * R + i] : 0.0;
    }
    const double m = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - m));
    for (int64_t i = 0; i < R; ++i) (*probs)[t * R + i] = s[i] / sum;
    for (int64_t h = 0; h < p.H; ++h) {
      double acc = 0;
      for (int64_t i = 0; i < R; ++i) acc += (*probs)[t * R + i] * v_at(p, t, i, h);
      (*hidden)[t * p.H + h] = acc;
    }
  }
}

// The gradients are differences of sums (g - sum_j p_j g_j), so their error is bounded relative
// to the magnitude of the summands, not of the result: each output also gets that magnitude
// (the same formula with absolute values), and the check is  max |err| <= tol * max magnitude.
struct BwdRef {
  std::vector<double> gpb, gbr, gpw, gnw;          // values
  std::vector<double> gpb_m, gbr_m, gpw_m, gnw_m;  // magnitudes
};

void reference_backward(const Problem& p, const std::vector<double>& inv,
                        const std::vector<double>& probs, BwdRef* r) {
  const int64_t R = p.N + 1, H = p.H;
  r->gpb.assign(p.T * H, 0);
  r->gbr.assign(p.T * p.N * H, 0);
  r->gpb_m = r->gpb;
  r->gbr_m = r->gbr;
  std::vector<double> gsw(H, 0.0), gsw_m(H, 0.0);
  for (int64_t t = 0; t < p.T; ++t) {
    std::vector<double> g(R, 0.0), g_m(R, 0.0), dsw(R, 0.0), dsw_m(R, 0.0);
    for (int64_t i = 0; i < R; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const double v = v_at(p, t, i, h), sw = p.nw[h] * p.pw[h];
        g[i] += p.gh[t * H + h] * v;
        g_m[i] += std::fabs(p.gh[t * H + h] * v);
        dsw[i] += sw * v;
        dsw_m[i] += std::fabs(sw * v);
      }
    double pg = 0, pg_m = 0;
    for (int64_t j = 0; j < R; ++j) {
      pg += probs[t * R + j] * g[j];
      pg_m += probs[t * R + j] * g_m[j];
    }
    for (int64_t i = 0; i < R; ++i) {
      const double pr = probs[t * R + i], iv = inv[t * R + i];
      const double gs = pr * (g[i] - pg), gs_m = pr * (g_m[i] + pg_m);
      const double ginv = gs * dsw[i], ginv_m = gs_m * dsw_m[i];
      for (int64_t h = 0; h < H; ++h) {
        const double v = v_at(p, t, i, h), sw = p.nw[h] * p.pw[h];
        const double gv = p.gh[t * H + h] * pr + gs * sw * iv - ginv * iv * iv * iv / H * v;
        const double gv_m = std::fabs(p.gh[t * H + h] * pr) + gs_m * std::fabs(sw) * iv +
                            ginv_m * iv * iv * iv / H * std::fabs(v);
        const int64_t k = i < p.N ? (t * p.N + i) * H + h : t * H + h;
        (i < p.N ? r->gbr : r->gpb)[k] = gv;
        (i < p.N ? r->gbr_m : r->gpb_m)[k] = gv_m;
        gsw[h] += gs * iv * v;
        gsw_m[h] += gs_m * iv * std::fabs(v);
      }
    }
  }
  r->gpw.assign(H, 0);
  r->gnw.assign(H, 0);
  r->gpw_m = r->gpw;
  r->gnw_m = r->gnw;
  for (int64_t h = 0; h < H; ++h) {
    r->gnw[h] = gsw[h] * p.pw[h];
    r->gpw[h] = gsw[h] * p.nw[h];
    r->gnw_m[h] = gsw_m[h] * std::fabs(p.pw[h]);
    r->gpw_m[h] = gsw_m[h] * std::fabs(p.nw[h]);
  }
}

// ---------------------------------------------------------------------------------------------
// Running the two-stage API
template <class T> struct FwdOut {
  std::vector<T> hidden;
  std::vector<acc_t<T>> inv, probs;
};

template <class T>
opStatus run_forward(const Problem& p, const std::vector<T>& pb, const std::vector<T>& br,
                     const std::vector<T>& pw, const std::vector<T>& nw, FwdOut<T>* out) {
  const opDataType dt = DType<T>::kValue, st = bar::stats_dtype(dt);
  const int64_t R = p.N + 1;
  out->hidden.assign(p.T * p.H, from_double<T>(-7.0));  // garbage: outputs come uninitialised
  out->inv.assign(p.T * R, acc_t<T>(-7));
  out->probs.assign(p.T * R, acc_t<T>(-7));
  const opTensor t_pb = desc(pb.data(), dt, {p.T, p.H});
  const opTensor t_br = desc(br.data(), dt, {p.T, p.N, p.H});
  const opTensor t_pw = p.proj_2d ? desc(pw.data(), dt, {1, p.H}) : desc(pw.data(), dt, {p.H});
  const opTensor t_nw = desc(nw.data(), dt, {p.H});
  opTensor t_hidden = desc(out->hidden.data(), dt, {p.T, p.H});
  opTensor t_inv = desc(out->inv.data(), st, {p.T, R});
  opTensor t_probs = desc(out->probs.data(), st, {p.T, R});
  uint64_t ws_size = 0;
  opExecutor* executor = nullptr;
  opStatus s = BlockAttentionResidualsGetWorkspaceSize(&t_pb, &t_br, &t_pw, &t_nw, -1, p.eps,
                                                       &t_hidden, &t_inv, &t_probs, &ws_size,
                                                       &executor);
  if (s != OP_SUCCESS) return s;
  std::vector<unsigned char> ws(ws_size + 64, 0xff);  // NaN bytes: the kernel may not rely on a zeroed workspace
  void* base = ws_size ? ws.data() + (64 - reinterpret_cast<uintptr_t>(ws.data()) % 64) % 64 : nullptr;
  return BlockAttentionResiduals(base, ws_size, executor, nullptr);
}

template <class T> struct BwdOut {
  std::vector<T> gpb, gbr, gpw, gnw;
};

template <class T>
opStatus run_backward(const Problem& p, const std::vector<T>& pb, const std::vector<T>& br,
                      const std::vector<T>& pw, const std::vector<T>& nw, const std::vector<T>& gh,
                      const std::vector<acc_t<T>>& inv, const std::vector<acc_t<T>>& probs,
                      BwdOut<T>* out) {
  const opDataType dt = DType<T>::kValue, st = bar::stats_dtype(dt);
  const int64_t R = p.N + 1;
  const T junk = from_double<T>(-7.0);
  out->gpb.assign(p.T * p.H, junk);
  out->gbr.assign(p.T * p.N * p.H, junk);
  out->gpw.assign(p.H, junk);
  out->gnw.assign(p.H, junk);
  const opTensor t_pb = desc(pb.data(), dt, {p.T, p.H});
  const opTensor t_br = desc(br.data(), dt, {p.T, p.N, p.H});
  const opTensor t_pw = p.proj_2d ? desc(pw.data(), dt, {1, p.H}) : desc(pw.data(), dt, {p.H});
  const opTensor t_nw = desc(nw.data(), dt, {p.H});
  const opTensor t_gh = desc(gh.data(), dt, {p.T, p.H});
  const opTensor t_inv = desc(inv.data(), st, {p.T, R});
  const opTensor t_probs = desc(probs.data(), st, {p.T, R});
  opTensor t_gpb = desc(out->gpb.data(), dt, {p.T, p.H});
  opTensor t_gbr = desc(out->gbr.data(), dt, {p.T, p.N, p.H});
  opTensor t_gpw = p.proj_2d ? desc(out->gpw.data(), dt, {1, p.H}) : desc(out->gpw.data(), dt, {p.H});
  opTensor t_gnw = desc(out->gnw.data(), dt, {p.H});
  uint64_t ws_size = 0;
  opExecutor* executor = nullptr;
  opStatus s = BlockAttentionResidualsGradGetWorkspaceSize(
      &t_pb, &t_br, &t_pw, &t_nw, &t_gh, &t_inv, &t_probs, -1, &t_gpb, &t_gbr, &t_gpw, &t_gnw,
      &ws_size, &executor);
  if (s != OP_SUCCESS) return s;
  std::vector<unsigned char> ws(ws_size + 64, 0xff);  // NaN bytes: the kernel may not rely on a zeroed workspace
  void* base = ws_size ? ws.data() + (64 - reinterpret_cast<uintptr_t>(ws.data()) % 64) % 64 : nullptr;
  return BlockAttentionResidualsGrad(base, ws_size, executor, nullptr);
}

struct ShapeCase {
  int64_t T, N, H;
  bool proj_2d;
};

template <class T>
void test_case(const ShapeCase& sc, const char* dtype_name_) {
  using A = acc_t<T>;
  char label[160];
  std::snprintf(label, sizeof label, "%s T=%lld N=%lld H=%lld%s", dtype_name_,
                static_cast<long long>(sc.T), static_cast<long long>(sc.N),
                static_cast<long long>(sc.H), sc.proj_2d ? " proj[1,H]" : "");
  const std::string L(label);
  g_seed = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(sc.T * 1000003 + sc.N * 1009 + sc.H);
  Problem p{sc.T, sc.N, sc.H, sc.proj_2d, {}, {}, {}, {}, {}, 1e-6};
  // Blocks of different scales so the softmax is not uniform and inv_norm varies.
  std::vector<T> pb = random_vec<T>(p.T * p.H, -2, 2);
  std::vector<T> br = random_vec<T>(p.T * p.N * p.H, -1, 1);
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t i = 0; i < p.N; ++i)
      for (int64_t h = 0; h < p.H; ++h) {
        T& x = br[(t * p.N + i) * p.H + h];
        x = from_double<T>(to_d(x) * (0.25 + 0.5 * static_cast<double>(i % 4)));
      }
  std::vector<T> pw = random_vec<T>(p.H, -1, 1), nw = random_vec<T>(p.H, 0.5, 1.5);
  std::vector<T> gh = random_vec<T>(p.T * p.H, -1, 1);
  p.pb = as_double(pb);
  p.br = as_double(br);
  p.pw = as_double(pw);
  p.nw = as_double(nw);
  p.gh = as_double(gh);
  const double tol = tolerance<T>(p.H), stats_tol = tolerance<A>(p.H);

  // Forward
  std::vector<double> r_inv, r_probs, r_hidden;
  reference_forward(p, &r_inv, &r_probs, &r_hidden);
  use_threads(1);
  FwdOut<T> f1;
  opStatus s = run_forward(p, pb, br, pw, nw, &f1);
  check(s == OP_SUCCESS, L + " forward status " + std::to_string(s) + " " + opGetLastErrorMessage());
  if (s == OP_SUCCESS) {
    expect_close(f1.hidden, r_hidden, tol, L + " forward hidden_states");
    expect_close(f1.inv, r_inv, stats_tol, L + " forward inv_norm");
    expect_close(f1.probs, r_probs, stats_tol, L + " forward probs");
    for (int threads : {2, 3}) {
      use_threads(threads);
      FwdOut<T> fn;
      s = run_forward(p, pb, br, pw, nw, &fn);
      check(s == OP_SUCCESS && bitwise_equal(f1.hidden, fn.hidden) && bitwise_equal(f1.inv, fn.inv) &&
                bitwise_equal(f1.probs, fn.probs),
            L + " forward bitwise 1 vs " + std::to_string(threads) + " threads");
    }
  }

  // Backward, fed with the reference's statistics rounded to the stats dtype.
  std::vector<A> inv(r_inv.size()), probs(r_probs.size());
  for (size_t k = 0; k < inv.size(); ++k) {
    inv[k] = static_cast<A>(r_inv[k]);
    probs[k] = static_cast<A>(r_probs[k]);
  }
  std::vector<double> d_inv(inv.begin(), inv.end()), d_probs(probs.begin(), probs.end());
  BwdRef r;
  reference_backward(p, d_inv, d_probs, &r);
  use_threads(1);
  BwdOut<T> b1;
  s = run_backward(p, pb, br, pw, nw, gh, inv, probs, &b1);
  check(s == OP_SUCCESS, L + " backward status " + std::to_string(s) + " " + opGetLastErrorMessage());
  if (s == OP_SUCCESS) {
    expect_close_mag(b1.gpb, r.gpb, r.gpb_m, tol, L + " backward grad_partial_block");
    expect_close_mag(b1.gbr, r.gbr, r.gbr_m, tol, L + " backward grad_block_res");
    expect_close_mag(b1.gpw, r.gpw, r.gpw_m, tol, L + " backward grad_proj_weight");
    expect_close_mag(b1.gnw, r.gnw, r.gnw_m, tol, L + " backward grad_norm_weight");
    for (int threads : {2, 3}) {
      use_threads(threads);
      BwdOut<T> bn;
      s = run_backward(p, pb, br, pw, nw, gh, inv, probs, &bn);
      check(s == OP_SUCCESS && bitwise_equal(b1.gpb, bn.gpb) && bitwise_equal(b1.gbr, bn.gbr) &&
                bitwise_equal(b1.gpw, bn.gpw) && bitwise_equal(b1.gnw, bn.gnw),
            L + " backward bitwise 1 vs " + std::to_string(threads) + " threads");
    }
  }
  use_threads(1);
}

const ShapeCase kShapes[] = {
    {0, 3, 8, false},    // T = 0: empty outputs, zero weight grads
    {4, 2, 0, false},    // H = 0: empty hidden and grads; inv_norm NaN, probs uniform (as torch)
    {0, 0, 0, false},
    {5, 0, 17, false},   // N = 0: only the partial row
    {3, 1, 1, true},     // N = 1, H = 1
    {4, 1, 7, false},
    {7, 3, 33, true},
    {3, 2, 4097, false},  // odd H across vector body and tail
    {2, 8, 64, false},
    {6, 5, 80, true},     // H = 80: tile + one vector + no tail
    {300, 3, 130, false}, // several chunks (the gsw reduction across chunks)
    {700, 1, 50, true},
};

template <class T>
void test_dtype(const char* name) {
  for (const ShapeCase& sc : kShapes) test_case<T>(sc, name);
}

// ---------------------------------------------------------------------------------------------
// Row kernels of every supported ISA level against the scalar table (and streaming vs not).
template <class T>
void test_row_kernels(Isa isa, const char* name) {
  using A = acc_t<T>;
  const bar::RowKernels<T>& ref = bar::scalar::table<T>();
  const bar::RowKernels<T>& k = bar::row_kernels<T>(isa);
  const std::string L = std::string("row kernels ") + isa_name(isa) + " " + name;
  for (int64_t H : {1, 7, 15, 16, 17, 63, 64, 65, 128, 200, 4097}) {
    for (int64_t n : {0, 1, 3}) {
      const int64_t R = n + 1;
      // 64-byte aligned rows (row length padded) so the streaming paths are taken.
      const int64_t Hp = (H + 31) / 32 * 32;
      std::vector<T> store(static_cast<size_t>((R + 1) * Hp + 64));
      T* base = store.data();
      while (reinterpret_cast<uintptr_t>(base) % 64) ++base;
      for (int64_t e = 0; e < (R + 1) * Hp; ++e) base[e] = from_double<T>(uniform(-1, 1));
      std::vector<A> sw(H), p(R), b(R), c(R);
      for (A& x : sw) x = static_cast<A>(uniform(-1, 1));
      for (int64_t i = 0; i < R; ++i) {
        p[i] = static_cast<A>(uniform(0, 1));
        b[i] = static_cast<A>(uniform(-1, 1));
        c[i] = static_cast<A>(uniform(-1, 1));
      }
      // Rows: blocks at base (stride Hp is not what RowSet assumes, so use a packed copy).
      std::vector<T> blocks(n * H), partial(H), gh(H);
      for (int64_t e = 0; e < n * H; ++e) blocks[e] = base[e];
      for (int64_t h = 0; h < H; ++h) {
        partial[h] = base[n * Hp + h];
        gh[h] = base[(n + 1) * Hp + h];
      }
      const bar::RowSet<T> rows{blocks.data(), partial.data(), n, H};
      const double tol = tolerance<T>(H);
      // A dot product of H terms in acc_t: error <~ tol * sum_h |x y| (double reference).
      auto dot_ok = [&](double got, const T* x, const T* y, const A* ya, bool square) {
        double want = 0, mag = 0;
        for (int64_t h = 0; h < H; ++h) {
          const double xv = to_d(x[h]);
          const double yv = square ? xv : (y ? to_d(y[h]) : static_cast<double>(ya[h]));
          want += xv * yv;
          mag += std::fabs(xv * yv);
        }
        return std::fabs(got - want) <= tolerance<A>(H) * std::max(1e-30, mag);
      };
      const std::string LH = L + " H=" + std::to_string(H) + " n=" + std::to_string(n);
      // to_acc, then the dots with the converted gH row.
      std::vector<A> gh_acc(H), gh_ref(H);
      k.to_acc(gh.data(), H, gh_acc.data());
      ref.to_acc(gh.data(), H, gh_ref.data());
      check(std::memcmp(gh_acc.data(), gh_ref.data(), H * sizeof(A)) == 0, LH + " to_acc exact");
      for (int64_t i = 0; i < R; ++i) {
        const T* x = rows.row(i);
        A s1, d1, g1;
        k.norm_dot(x, sw.data(), H, &s1, &d1);
        check(dot_ok(s1, x, nullptr, nullptr, true) && dot_ok(d1, x, nullptr, sw.data(), false),
              LH + " norm_dot");
        k.grad_dots(x, gh_acc.data(), sw.data(), H, &g1, &d1);
        check(dot_ok(g1, x, gh.data(), nullptr, false) && dot_ok(d1, x, nullptr, sw.data(), false),
              LH + " grad_dots");
      }
      // mix: reference, plain, and streaming into an aligned output (base is free after the
      // copies above).
      std::vector<T> out_ref(H), out_plain(H);
      T* out_stream = base;
      ref.mix(bar::MixArgs<T>{rows, p.data(), out_ref.data(), false});
      k.mix(bar::MixArgs<T>{rows, p.data(), out_plain.data(), false});
      k.mix(bar::MixArgs<T>{rows, p.data(), out_stream, true});
      expect_close(out_plain, as_double(out_ref), tol, LH + " mix");
      check(std::memcmp(out_plain.data(), out_stream, H * sizeof(T)) == 0, LH + " mix stream == plain");
      // grad_rows over all rows in groups of `group` rows (every group size): into packed
      // outputs, and into 64-byte aligned rows with prefetching; the two must agree bitwise.
      std::vector<T> gv_ref(R * H);
      std::vector<A> gsw_ref(H, A(0.5));
      for (int64_t i = 0; i < R; ++i) {  // reference: the scalar table, one row at a time
        bar::GradRowsArgs<T> args{};
        args.rows = 1;
        args.v[0] = rows.row(i);
        args.out[0] = gv_ref.data() + i * H;
        args.a[0] = p[i];
        args.b[0] = b[i];
        args.c[0] = c[i];
        args.gh = gh_ref.data();
        args.sw = sw.data();
        args.gsw = gsw_ref.data();
        args.H = H;
        ref.grad_rows(args);
      }
      std::vector<double> gsw_ref_d(gsw_ref.begin(), gsw_ref.end());
      for (int group = 1; group <= bar::kGradRowGroup; ++group) {
        const std::string LG = LH + " grad_rows group " + std::to_string(group);
        std::vector<T> gv(R * H);
        std::vector<A> gsw(H, A(0.5)), gsw_s(H, A(0.5));
        for (int pass = 0; pass < 2; ++pass) {
          const bool fancy = pass == 1;  // prefetch, aligned rows in `base`
          for (int64_t i0 = 0; i0 < R; i0 += group) {
            bar::GradRowsArgs<T> args{};
            args.rows = static_cast<int>(std::min<int64_t>(group, R - i0));
            for (int g = 0; g < args.rows; ++g) {
              const int64_t i = i0 + g;
              args.v[g] = rows.row(i);
              args.out[g] = fancy ? base + i * Hp : gv.data() + i * H;
              args.next[g] = fancy ? rows.row(R - 1 - i) : nullptr;
              args.a[g] = p[i];
              args.b[g] = b[i];
              args.c[g] = c[i];
            }
            args.gh = gh_acc.data();
            args.sw = sw.data();
            args.gsw = fancy ? gsw_s.data() : gsw.data();
            args.H = H;
            k.grad_rows(args);
          }
        }
        expect_close(gv, as_double(gv_ref), tol, LG + " gv");
        expect_close(gsw, gsw_ref_d, tolerance<A>(H), LG + " gsw");
        bool same = std::memcmp(gsw.data(), gsw_s.data(), H * sizeof(A)) == 0;
        for (int64_t i = 0; i < R; ++i)
          same = same && std::memcmp(gv.data() + i * H, base + i * Hp, H * sizeof(T)) == 0;
        check(same, LG + " prefetch + aligned == plain");
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The plan heuristic
void test_plan() {
  for (int64_t T : {0, 1, 5, 127, 128, 129, 1000, 8192, 100000})
    for (int64_t N : {0, 1, 8})
      for (int64_t H : {0, 1, 64, 4096}) {
        const bar::Plan plan = bar::make_plan(bar::Shape{T, N, H}, 0, Isa::kBaseline);
        const std::string L = "plan T=" + std::to_string(T) + " N=" + std::to_string(N) +
                              " H=" + std::to_string(H);
        if (T == 0) {
          check(plan.num_chunks == 0, L + " no chunks");
          continue;
        }
        check(plan.rows_per_chunk >= 1 && plan.num_chunks >= 1 &&
                  plan.num_chunks <= bar::kMaxChunks &&
                  plan.num_chunks * plan.rows_per_chunk >= T &&
                  (plan.num_chunks - 1) * plan.rows_per_chunk < T,
              L + " covers T in <= kMaxChunks chunks");
        check(plan.rows_per_chunk * (N + 1) * std::max<int64_t>(H, 1) >= bar::kMinChunkElements ||
                  plan.rows_per_chunk == T,
              L + " chunks hold >= kMinChunkElements");
      }
  const bar::Plan big = bar::make_plan(bar::Shape{8192, 8, 4096}, uint64_t(1) << 30, Isa::kAvx512);
  check(big.num_chunks == bar::kMaxChunks && big.rows_per_chunk == 64 && big.stream_stores,
        "plan at the target shape: 128 chunks of 64 rows, streaming stores");
  check(!bar::make_plan(bar::Shape{8, 8, 64}, 8 * 9 * 64 * 4, Isa::kAvx512).stream_stores,
        "plan: small outputs are not streamed");
}

// ---------------------------------------------------------------------------------------------
// Error statuses
bool message_has(const char* word) { return std::strstr(opGetLastErrorMessage(), word) != nullptr; }

void test_errors() {
  const int64_t T = 3, N = 2, H = 5, R = N + 1;
  std::vector<float> pb(T * H, 1.f), br(T * N * H, 1.f), w(H, 1.f), hidden(T * H), inv(T * R),
      probs(T * R), gh(T * H, 1.f), gpb(T * H), gbr(T * N * H), gpw(H), gnw(H);
  opTensor t_pb = desc(pb.data(), OP_DT_FLOAT, {T, H});
  opTensor t_br = desc(br.data(), OP_DT_FLOAT, {T, N, H});
  opTensor t_pw = desc(w.data(), OP_DT_FLOAT, {H});
  opTensor t_nw = desc(w.data(), OP_DT_FLOAT, {H});
  opTensor t_hidden = desc(hidden.data(), OP_DT_FLOAT, {T, H});
  opTensor t_inv = desc(inv.data(), OP_DT_FLOAT, {T, R});
  opTensor t_probs = desc(probs.data(), OP_DT_FLOAT, {T, R});
  opTensor t_gh = desc(gh.data(), OP_DT_FLOAT, {T, H});
  opTensor t_gpb = desc(gpb.data(), OP_DT_FLOAT, {T, H});
  opTensor t_gbr = desc(gbr.data(), OP_DT_FLOAT, {T, N, H});
  opTensor t_gpw = desc(gpw.data(), OP_DT_FLOAT, {H});
  opTensor t_gnw = desc(gnw.data(), OP_DT_FLOAT, {H});
  uint64_t ws = 0;
  opExecutor* ex = nullptr;

  auto fwd = [&](const opTensor* a, const opTensor* b, const opTensor* c, const opTensor* d,
                 double eps, opTensor* o1, opTensor* o2, opTensor* o3, uint64_t* wsp,
                 opExecutor** exp) {
    opStatus s = BlockAttentionResidualsGetWorkspaceSize(a, b, c, d, -1, eps, o1, o2, o3, wsp, exp);
    if (s == OP_SUCCESS) opDestroyExecutor(*exp);
    return s;
  };
  auto bwd = [&](const opTensor* gh_, const opTensor* inv_, const opTensor* probs_,
                 opTensor* gpw_) {
    opStatus s = BlockAttentionResidualsGradGetWorkspaceSize(
        &t_pb, &t_br, &t_pw, &t_nw, gh_, inv_, probs_, -1, &t_gpb, &t_gbr, gpw_, &t_gnw, &ws, &ex);
    if (s == OP_SUCCESS) opDestroyExecutor(ex);
    return s;
  };

  check(fwd(&t_pb, &t_br, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, &ex) == OP_SUCCESS,
        "errors: valid forward call succeeds");
  check(fwd(nullptr, &t_br, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, &ex) ==
                OP_ERR_PARAM_NULLPTR && message_has("partial_block"),
        "errors: null partial_block -> NULLPTR naming it");
  check(fwd(&t_pb, &t_br, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, nullptr, &ws, &ex) ==
                OP_ERR_PARAM_NULLPTR && message_has("probs"),
        "errors: null probs -> NULLPTR");
  check(fwd(&t_pb, &t_br, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, nullptr, &ex) ==
            OP_ERR_PARAM_NULLPTR,
        "errors: null workspace_size -> NULLPTR");
  check(fwd(&t_pb, &t_br, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, nullptr) ==
            OP_ERR_PARAM_NULLPTR,
        "errors: null executor -> NULLPTR");
  {
    opTensor bad = t_br;
    bad.data = nullptr;
    check(fwd(&t_pb, &bad, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, &ex) ==
              OP_ERR_PARAM_NULLPTR,
          "errors: block_res->data null -> NULLPTR");
  }
  {
    opTensor bad = desc(br.data(), OP_DT_FLOAT, {T, N * H});
    check(fwd(&t_pb, &bad, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, &ex) ==
                  OP_ERR_PARAM_INVALID && message_has("block_res") && message_has("3D"),
          "errors: block_res 2D -> INVALID naming the rank rule");
  }
  {
    opTensor bad = desc(br.data(), OP_DT_FLOAT, {T, N, H - 1});
    check(fwd(&t_pb, &bad, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, &ex) ==
                  OP_ERR_PARAM_INVALID && message_has("[T, N, H]"),
          "errors: block_res wrong H -> INVALID with the expected shape");
  }
  {
    opTensor bad = desc(br.data(), OP_DT_FLOAT, {T + 1, N, H});
    check(fwd(&t_pb, &bad, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, &ex) ==
              OP_ERR_PARAM_INVALID,
          "errors: block_res wrong T -> INVALID");
  }
  {
    opTensor bad = t_nw;
    bad.dtype = OP_DT_FLOAT16;
    check(fwd(&t_pb, &t_br, &t_pw, &bad, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, &ex) ==
                  OP_ERR_PARAM_INVALID && message_has("norm_weight") && message_has("dtype"),
          "errors: norm_weight dtype mismatch -> INVALID");
  }
  {
    opTensor bad = t_pb;
    bad.dtype = OP_DT_INT32;
    check(fwd(&bad, &t_br, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, &ex) ==
              OP_ERR_PARAM_INVALID,
          "errors: int32 partial_block -> INVALID");
  }
  {
    opTensor bad = desc(w.data(), OP_DT_FLOAT, {2, H});
    check(fwd(&t_pb, &t_br, &bad, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, &ex) ==
                  OP_ERR_PARAM_INVALID && message_has("proj_weight"),
          "errors: proj_weight [2, H] -> INVALID");
    opTensor ok2d = desc(w.data(), OP_DT_FLOAT, {1, H});
    check(fwd(&t_pb, &t_br, &ok2d, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, &ex) == OP_SUCCESS,
          "errors: proj_weight [1, H] accepted");
  }
  {
    opTensor bad = t_inv;
    bad.dtype = OP_DT_FLOAT16;
    check(fwd(&t_pb, &t_br, &t_pw, &t_nw, 1e-6, &t_hidden, &bad, &t_probs, &ws, &ex) ==
                  OP_ERR_PARAM_INVALID && message_has("inv_norm"),
          "errors: inv_norm float16 -> INVALID");
    opTensor bad_shape = desc(probs.data(), OP_DT_FLOAT, {T, N});
    check(fwd(&t_pb, &t_br, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, &bad_shape, &ws, &ex) ==
                  OP_ERR_PARAM_INVALID && message_has("probs must be a float32 tensor of shape"),
          "errors: probs [T, N] -> INVALID naming the output rule");
  }
  {
    opTensor bad = t_pb;
    bad.strides[0] = H + 1;  // padded rows: not contiguous
    check(fwd(&bad, &t_br, &t_pw, &t_nw, 1e-6, &t_hidden, &t_inv, &t_probs, &ws, &ex) ==
                  OP_ERR_PARAM_INVALID && message_has("contiguous"),
          "errors: non-contiguous partial_block -> INVALID");
  }
  for (double eps : {0.0, -1.0, static_cast<double>(NAN), static_cast<double>(INFINITY)})
    check(fwd(&t_pb, &t_br, &t_pw, &t_nw, eps, &t_hidden, &t_inv, &t_probs, &ws, &ex) ==
                  OP_ERR_PARAM_INVALID && message_has("norm_eps"),
          "errors: norm_eps " + std::to_string(eps) + " -> INVALID");

  // Backward
  check(bwd(&t_gh, &t_inv, &t_probs, &t_gpw) == OP_SUCCESS, "errors: valid backward call succeeds");
  check(bwd(nullptr, &t_inv, &t_probs, &t_gpw) == OP_ERR_PARAM_NULLPTR && message_has("grad_hidden_states"),
        "errors: null grad_hidden_states -> NULLPTR");
  check(bwd(&t_gh, &t_inv, &t_probs, nullptr) == OP_ERR_PARAM_NULLPTR, "errors: null grad_proj_weight -> NULLPTR");
  {
    opTensor bad = desc(probs.data(), OP_DT_FLOAT, {T, R + 1});
    check(bwd(&t_gh, &t_inv, &bad, &t_gpw) == OP_ERR_PARAM_INVALID && message_has("probs"),
          "errors: grad probs [T, N + 2] -> INVALID");
    opTensor bad_dt = t_inv;
    bad_dt.dtype = OP_DT_DOUBLE;
    check(bwd(&t_gh, &bad_dt, &t_probs, &t_gpw) == OP_ERR_PARAM_INVALID && message_has("inv_norm"),
          "errors: grad inv_norm float64 for float32 inputs -> INVALID");
    opTensor bad_gpw = desc(gpw.data(), OP_DT_FLOAT, {1, H});  // proj_weight is [H]
    check(bwd(&t_gh, &t_inv, &t_probs, &bad_gpw) == OP_ERR_PARAM_INVALID &&
              message_has("grad_proj_weight"),
          "errors: grad_proj_weight [1, H] for proj_weight [H] -> INVALID");
    opTensor bad_gh = desc(gh.data(), OP_DT_FLOAT, {T, H + 1});
    check(bwd(&bad_gh, &t_inv, &t_probs, &t_gpw) == OP_ERR_PARAM_INVALID,
          "errors: grad_hidden_states wrong shape -> INVALID");
  }

  // Stage 2
  check(BlockAttentionResiduals(nullptr, 0, nullptr, nullptr) == OP_ERR_PARAM_NULLPTR,
        "errors: stage 2 with a null executor -> NULLPTR");
  opStatus s = BlockAttentionResidualsGetWorkspaceSize(&t_pb, &t_br, &t_pw, &t_nw, -1, 1e-6,
                                                       &t_hidden, &t_inv, &t_probs, &ws, &ex);
  check(s == OP_SUCCESS && ws > 0, "errors: forward asks for a workspace");
  if (s == OP_SUCCESS) {
    std::vector<unsigned char> small(ws);
    check(BlockAttentionResiduals(small.data(), ws - 1, ex, nullptr) == OP_ERR_RUNTIME_ERROR,
          "errors: stage 2 with a too small workspace -> RUNTIME_ERROR");
  }
}

}  // namespace

int main() {
  const Isa active = active_isa();
  std::printf("test_block_attention_residuals: active ISA %s\n", isa_name(active));
  test_plan();
  test_errors();
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (static_cast<int>(isa) > static_cast<int>(active)) break;
    test_row_kernels<float>(isa, "float32");
    test_row_kernels<Half>(isa, "float16");
    test_row_kernels<BFloat16>(isa, "bfloat16");
  }
  test_row_kernels<double>(active, "float64");
  test_dtype<float>("float32");
  test_dtype<double>("float64");
  test_dtype<Half>("float16");
  test_dtype<BFloat16>("bfloat16");
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
