// Torch-free tests of flash_attn / flash_attn_grad (stage 1 + stage 2) against a naive
// float64 reference. Covers BSND/BNSD/TND, MHA/GQA/MQA, Dv != D, mask modes 0/3/4 with several
// windows, Sq != Skv, seqused, TND with empty sequences, sinks, tile-1/tile/tile+1 lengths, every
// dtype, every ISA level this CPU has (the binary re-runs itself with OP_PLUGIN_ISA set), 1 vs 2
// threads bitwise, q/k/v as views with padded rows bitwise the contiguous results, content
// errors, and random valid calls (RandomDraw). Prints "N passed, M failed"
// last; exits non-zero on failure.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "op_plugin/ops/flash_attn.h"
#include "op_plugin/ops/flash_attn_grad.h"

#include "attention_test_util.h"

using namespace op_plugin;

// ---- cases --------------------------------------------------------------------------------
struct Case {
  std::string layout = "BSND";
  int64_t B = 1, N1 = 2, N2 = 2, D = 32, Dv = 32;
  int64_t S1 = 17, S2 = 17;           // BSND/BNSD
  std::vector<int64_t> lq, lkv;       // TND per-batch lengths
  std::vector<int64_t> used_q, used_kv;
  int64_t mode = 0, wl = -1, wr = -1;
  bool sinks = false;
  double scale = 0.2;
  std::string out_layout;             // "" = same as layout
  double late_k = 1.0;                // K rows from key 512 on scaled by this: a row's max jumps
};

static std::string describe(const Case& c, opDataType dt) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s B=%ld N=%ld/%ld D=%ld Dv=%ld S=%ld/%ld mode=%ld w=(%ld,%ld) sinks=%d used=%d %s",
                c.layout.c_str(), (long)c.B, (long)c.N1, (long)c.N2, (long)c.D, (long)c.Dv, (long)c.S1, (long)c.S2,
                (long)c.mode, (long)c.wl, (long)c.wr, (int)c.sinks, (int)(!c.used_q.empty() || !c.used_kv.empty()),
                dtype_name(dt));
  std::string d = buf;
  auto list = [](const std::vector<int64_t>& v) {
    std::string t;
    for (int64_t x : v) t += (t.empty() ? "" : ",") + std::to_string(x);
    return "[" + t + "]";
  };
  if (c.layout == "TND") d += " lq=" + list(c.lq) + " lkv=" + list(c.lkv);
  if (!c.used_q.empty()) d += " used_q=" + list(c.used_q) + " used_kv=" + list(c.used_kv);
  if (!c.out_layout.empty()) d += " out=" + c.out_layout;
  if (c.late_k != 1.0) d += " late_k=" + std::to_string(c.late_k);
  return d + " scale=" + std::to_string(c.scale);
}

struct Geometry {
  bool tnd;
  int64_t B, T1, T2;
  std::vector<int64_t> cq, ckv, sq, skv, rq, rkv;
};
static Geometry geometry(const Case& c) {
  Geometry g;
  g.tnd = c.layout == "TND";
  g.B = g.tnd ? static_cast<int64_t>(c.lq.size()) : c.B;
  g.cq.assign(g.B + 1, 0);
  g.ckv.assign(g.B + 1, 0);
  for (int64_t b = 0; b < g.B; ++b) {
    g.rq.push_back(g.tnd ? c.lq[b] : c.S1);
    g.rkv.push_back(g.tnd ? c.lkv[b] : c.S2);
    g.cq[b + 1] = g.cq[b] + g.rq[b];
    g.ckv[b + 1] = g.ckv[b] + g.rkv[b];
    g.sq.push_back(c.used_q.empty() ? g.rq[b] : std::min(g.rq[b], c.used_q[b]));
    g.skv.push_back(c.used_kv.empty() ? g.rkv[b] : std::min(g.rkv[b], c.used_kv[b]));
  }
  g.T1 = g.cq[g.B];
  g.T2 = g.ckv[g.B];
  return g;
}
// Index order of a layout, resolved once per case: the reference's loops index every element,
// and comparing the layout string there took half of this test's time.
enum class Order { kTnd, kBsnd, kBnsd };
static Order order_of(const std::string& layout) {
  return layout == "TND" ? Order::kTnd : layout == "BSND" ? Order::kBsnd : Order::kBnsd;
}
// Flat index of (b, s, n, d) in a tensor of the layout with S rows per batch, N heads, dim Dd.
static int64_t idx(Order order, const Geometry& g, bool kv, int64_t b, int64_t s, int64_t n, int64_t d, int64_t S,
                   int64_t N, int64_t Dd) {
  switch (order) {
    case Order::kTnd: return ((kv ? g.ckv[b] : g.cq[b]) + s) * N * Dd + n * Dd + d;
    case Order::kBsnd: return ((b * S + s) * N + n) * Dd + d;
    case Order::kBnsd: break;
  }
  return ((b * N + n) * S + s) * Dd + d;
}
static std::vector<int64_t> shape_of(const std::string& layout, const Geometry& g, bool kv, int64_t S, int64_t N,
                                     int64_t Dd) {
  if (layout == "TND") return {kv ? g.T2 : g.T1, N, Dd};
  if (layout == "BSND") return {g.B, S, N, Dd};
  return {g.B, N, S, Dd};
}

struct Inputs {
  Geometry g;
  Buf q, k, v, dout, cu_q, cu_kv, used_q, used_kv, sinks, mask;
};

static Inputs make_inputs(const Case& c, opDataType dt, uint32_t seed) {
  Inputs in;
  in.g = geometry(c);
  const Geometry& g = in.g;
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  in.q = make_buf(dt, shape_of(c.layout, g, false, c.S1, c.N1, c.D));
  in.k = make_buf(dt, shape_of(c.layout, g, true, c.S2, c.N2, c.D));
  in.v = make_buf(dt, shape_of(c.layout, g, true, c.S2, c.N2, c.Dv));
  in.dout = make_buf(dt, shape_of(c.layout, g, false, c.S1, c.N1, c.Dv));
  for (Buf* b : {&in.q, &in.k, &in.v, &in.dout})
    for (int64_t i = 0; i < numel(b->t); ++i) set(*b, i, nd(rng) * (b == &in.q ? 2.0 : 1.0));
  if (c.late_k != 1.0) {
    const Order order = order_of(c.layout);
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t s = 512; s < g.rkv[b]; ++s)
        for (int64_t n = 0; n < c.N2; ++n)
          for (int64_t d = 0; d < c.D; ++d) {
            const int64_t i = idx(order, g, true, b, s, n, d, c.S2, c.N2, c.D);
            set(in.k, i, get(in.k, i) * c.late_k);
          }
  }
  if (g.tnd) {
    in.cu_q = make_buf(OP_DT_INT32, {g.B + 1});
    in.cu_kv = make_buf(OP_DT_INT32, {g.B + 1});
    for (int64_t b = 0; b <= g.B; ++b) { set(in.cu_q, b, g.cq[b]); set(in.cu_kv, b, g.ckv[b]); }
  }
  if (!c.used_q.empty()) { in.used_q = make_buf(OP_DT_INT32, {g.B}); for (int64_t b = 0; b < g.B; ++b) set(in.used_q, b, c.used_q[b]); }
  if (!c.used_kv.empty()) { in.used_kv = make_buf(OP_DT_INT32, {g.B}); for (int64_t b = 0; b < g.B; ++b) set(in.used_kv, b, c.used_kv[b]); }
  if (c.sinks) { in.sinks = make_buf(OP_DT_FLOAT, {c.N1}); for (int64_t n = 0; n < c.N1; ++n) set(in.sinks, n, nd(rng)); }
  if (c.mode != 0) in.mask = make_buf(OP_DT_INT8, {2048, 2048});
  return in;
}

// ---- float64 reference --------------------------------------------------------------------
struct Ref {
  std::vector<double> out, lse, dq, dk, dv;
};
static bool allowed(const Case& c, int64_t i, int64_t j, int64_t sq, int64_t skv) {
  const int64_t o = skv - sq;
  int64_t l = c.wl, r = c.wr;
  if (c.mode == 0) { l = -1; r = -1; }
  if (c.mode == 3) { l = -1; r = 0; }
  if (l >= 0 && j < i + o - l) return false;
  if (r >= 0 && j > i + o + r) return false;
  return j >= 0 && j < skv;
}
// out/lse use the layout of q; `lse_in`/`out_in` (if given) replace the reference's own for the grad.
static Ref reference(const Case& c, const Inputs& in, const Buf* out_in, const Buf* lse_in, double scale_bwd) {
  const Geometry& g = in.g;
  const Order L = order_of(c.layout);
  Ref r;
  r.out.assign(numel(in.dout.t), 0.0);
  r.lse.assign(static_cast<size_t>(c.N1 * (g.tnd ? g.T1 : g.B * c.S1)), INFINITY);
  r.dq.assign(numel(in.q.t), 0.0);
  r.dk.assign(numel(in.k.t), 0.0);
  r.dv.assign(numel(in.v.t), 0.0);
  // The inputs as doubles, read through row pointers (the head dim is innermost in every layout).
  const std::vector<double> qd = as_double(in.q), kd = as_double(in.k), vd = as_double(in.v), dod = as_double(in.dout);
  const std::vector<double> od = out_in ? as_double(*out_in) : std::vector<double>();
  const int64_t grp = c.N1 / c.N2;
  for (int64_t b = 0; b < g.B; ++b) {
    const int64_t sq = g.sq[b], skv = g.skv[b];
    for (int64_t n = 0; n < c.N1; ++n) {
      const int64_t h = n / grp;
      auto koff = [&](int64_t j) { return idx(L, g, true, b, j, h, 0, c.S2, c.N2, c.D); };
      auto voff = [&](int64_t j) { return idx(L, g, true, b, j, h, 0, c.S2, c.N2, c.Dv); };
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t li = g.tnd ? n * g.T1 + g.cq[b] + i : (b * c.N1 + n) * c.S1 + i;
        const int64_t qo = idx(L, g, false, b, i, n, 0, c.S1, c.N1, c.D);
        const int64_t oo = idx(L, g, false, b, i, n, 0, c.S1, c.N1, c.Dv);
        const double* qi = qd.data() + qo;
        const double* doi = dod.data() + oo;
        std::vector<double> s(skv, -INFINITY);
        double m = c.sinks ? get(in.sinks, n) : -INFINITY;
        bool any = false;
        for (int64_t j = 0; j < skv; ++j) {
          if (!allowed(c, i, j, sq, skv)) continue;
          const double* kj = kd.data() + koff(j);
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d) dot += qi[d] * kj[d];
          s[j] = dot * c.scale;
          m = std::max(m, s[j]);
          any = true;
        }
        if (!any) continue;  // out 0, lse +inf
        double l = c.sinks ? std::exp(get(in.sinks, n) - m) : 0.0;
        for (int64_t j = 0; j < skv; ++j) if (s[j] > -INFINITY) l += std::exp(s[j] - m);
        r.lse[li] = m + std::log(l);
        std::vector<double> acc(c.Dv, 0.0);  // each element sums over the keys in order
        for (int64_t j = 0; j < skv; ++j) {
          if (!(s[j] > -INFINITY)) continue;
          const double w = std::exp(s[j] - m) / l;
          const double* vj = vd.data() + voff(j);
          for (int64_t e = 0; e < c.Dv; ++e) acc[e] += w * vj[e];
        }
        for (int64_t e = 0; e < c.Dv; ++e) r.out[oo + e] = acc[e];
        if (!out_in) continue;
        // backward with the given attn_out / lse
        const double lse = get(*lse_in, li);
        double Di = 0;
        for (int64_t e = 0; e < c.Dv; ++e) Di += doi[e] * od[oo + e];
        for (int64_t j = 0; j < skv; ++j) {
          if (!allowed(c, i, j, sq, skv)) continue;
          const int64_t ko = koff(j), vo = voff(j);
          const double* kj = kd.data() + ko;
          const double* vj = vd.data() + vo;
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d) dot += qi[d] * kj[d];
          const double p = std::exp(dot * scale_bwd - lse);
          double dp = 0;
          for (int64_t e = 0; e < c.Dv; ++e) dp += doi[e] * vj[e];
          const double ds = p * (dp - Di);
          for (int64_t e = 0; e < c.Dv; ++e) r.dv[vo + e] += p * doi[e];
          for (int64_t d = 0; d < c.D; ++d) {
            r.dq[qo + d] += scale_bwd * ds * kj[d];
            r.dk[ko + d] += scale_bwd * ds * qi[d];
          }
        }
      }
    }
  }
  return r;
}

// ---- running the ops ----------------------------------------------------------------------
struct FwdResult {
  opStatus status = OP_SUCCESS;
  Buf out, lse;
  uint64_t workspace = 0;
};
static const opTensor* opt(const Buf& b) { return b.t.data ? &b.t : nullptr; }

static FwdResult run_fwd(const Case& c, const Inputs& in, opDataType dt) {
  FwdResult r;
  const Geometry& g = in.g;
  const std::string ol = c.out_layout.empty() ? c.layout : c.out_layout;
  r.out = make_buf(dt, shape_of(ol, g, false, c.S1, c.N1, c.Dv));
  r.lse = make_buf(dt == OP_DT_DOUBLE ? OP_DT_DOUBLE : OP_DT_FLOAT,
                   g.tnd ? std::vector<int64_t>{c.N1, g.T1} : std::vector<int64_t>{g.B, c.N1, c.S1});
  uint64_t ws_size = 0;
  opExecutor* ex = nullptr;
  r.status = FlashAttnGetWorkspaceSize(&in.q.t, &in.k.t, &in.v.t, nullptr, opt(in.cu_q), opt(in.cu_kv), opt(in.used_q),
                                       opt(in.used_kv), opt(in.sinks), opt(in.mask), nullptr, c.scale, c.mode, c.wl, c.wr,
                                       -1, -1, c.layout.c_str(), c.layout.c_str(), ol.c_str(), true, &r.out.t, &r.lse.t,
                                       &ws_size, &ex);
  if (r.status != OP_SUCCESS) return r;
  r.workspace = ws_size;
  std::vector<unsigned char> ws(ws_size + 64, 0xff);  // NaN bytes: the kernel may not rely on a zeroed workspace
  r.status = FlashAttn(ws.data(), ws_size, ex, nullptr);
  return r;
}

struct BwdResult {
  opStatus status = OP_SUCCESS;
  Buf dq, dk, dv;
  uint64_t workspace = 0;
};
static BwdResult run_bwd(const Case& c, const Inputs& in, opDataType dt, const Buf& out, const Buf& lse, double scale) {
  BwdResult r;
  r.dq = make_buf(dt, std::vector<int64_t>(in.q.t.shape, in.q.t.shape + in.q.t.ndim));
  r.dk = make_buf(dt, std::vector<int64_t>(in.k.t.shape, in.k.t.shape + in.k.t.ndim));
  r.dv = make_buf(dt, std::vector<int64_t>(in.v.t.shape, in.v.t.shape + in.v.t.ndim));
  // poison outputs: the kernel must write every element
  std::memset(r.dq.bytes.data(), 0x7f, r.dq.bytes.size() - 64);
  std::memset(r.dk.bytes.data(), 0x7f, r.dk.bytes.size() - 64);
  std::memset(r.dv.bytes.data(), 0x7f, r.dv.bytes.size() - 64);
  uint64_t ws_size = 0;
  opExecutor* ex = nullptr;
  const char* L = c.layout.c_str();
  r.status = FlashAttnGradGetWorkspaceSize(&in.q.t, &in.k.t, &in.v.t, &in.dout.t, &out.t, &lse.t, opt(in.cu_q),
                                           opt(in.cu_kv), opt(in.used_q), opt(in.used_kv), opt(in.sinks), opt(in.mask),
                                           nullptr, scale, c.mode, c.wl, c.wr, -1, -1, L, L, L, &r.dq.t, &r.dk.t,
                                           &r.dv.t, &ws_size, &ex);
  if (r.status != OP_SUCCESS) return r;
  r.workspace = ws_size;
  std::vector<unsigned char> ws(ws_size + 64, 0xff);  // NaN bytes: the kernel may not rely on a zeroed workspace
  r.status = FlashAttnGrad(ws.data(), ws_size, ex, nullptr);
  return r;
}

// max |a - ref| / max(max |ref|, 0.1), with +inf required to match exactly.
static bool compare(const char* what, const Buf& got, const std::vector<double>& ref, double tol, const std::string& desc,
                    const std::vector<int64_t>* remap = nullptr) {
  double ref_max = 0;
  for (double x : ref) if (std::isfinite(x)) ref_max = std::max(ref_max, std::fabs(x));
  double worst = 0;
  int64_t worst_i = -1;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double gv = get(got, remap ? (*remap)[i] : static_cast<int64_t>(i));
    if (std::isinf(ref[i])) {
      if (!(std::isinf(gv) && gv > 0)) { worst = INFINITY; worst_i = static_cast<int64_t>(i); break; }
      continue;
    }
    const double e = std::fabs(gv - ref[i]);
    if (!(e <= worst)) { worst = std::isnan(e) ? INFINITY : e; worst_i = static_cast<int64_t>(i); }
  }
  const double rel = worst / std::max(ref_max, 0.1);  // data are O(1): floor the scale
  const bool ok = rel <= tol;
  EXPECT(ok, "%s: %s rel err %.3g (tol %.3g) at %ld (got %g want %g)", desc.c_str(), what, rel, tol, (long)worst_i,
         worst_i >= 0 ? get(got, remap ? (*remap)[worst_i] : worst_i) : 0.0, worst_i >= 0 ? ref[worst_i] : 0.0);
  return ok;
}

static void run_case(const Case& c, opDataType dt, bool check_threads, uint32_t seed) {
  const std::string desc = describe(c, dt);
  Inputs in = make_inputs(c, dt, seed);
  g_threads = 1;
  FwdResult f = run_fwd(c, in, dt);
  EXPECT(f.status == OP_SUCCESS, "%s: forward status %d: %s", desc.c_str(), f.status, opGetLastErrorMessage());
  if (f.status != OP_SUCCESS) return;
  Ref ref = reference(c, in, nullptr, nullptr, 0);
  // float32 logits of size |S| carry about |S| 2^-24 of rounding, which the exp turns into relative
  // error of P: late_k = 30 makes them about 200 (a few elsewhere), so its out gets 5x the tolerance
  const double tol = tol_of(dt) * (dt == OP_DT_FLOAT ? std::max(1.0, c.late_k / 6.0) : 1.0);
  // out may be in another layout (BNSD in -> BSND out): remap reference indices.
  std::vector<int64_t> remap;
  const std::vector<int64_t>* rm = nullptr;
  if (!c.out_layout.empty() && c.out_layout != c.layout) {
    remap.resize(ref.out.size());
    const Order from = order_of(c.layout), to = order_of(c.out_layout);
    for (int64_t b = 0; b < in.g.B; ++b)
      for (int64_t n = 0; n < c.N1; ++n)
        for (int64_t s = 0; s < c.S1; ++s)
          for (int64_t e = 0; e < c.Dv; ++e)
            remap[idx(from, in.g, false, b, s, n, e, c.S1, c.N1, c.Dv)] = idx(to, in.g, false, b, s, n, e, c.S1, c.N1, c.Dv);
    rm = &remap;
  }
  compare("out", f.out, ref.out, tol, desc, rm);
  std::vector<double> lse_ref = ref.lse;
  compare("lse", f.lse, lse_ref, dt == OP_DT_DOUBLE ? 1e-9 : 2e-5, desc);
  if (rm) return;  // grad needs equal layouts

  // backward, fed with the kernel's own out / lse
  const double scale_bwd = c.scale;
  BwdResult bw = run_bwd(c, in, dt, f.out, f.lse, scale_bwd);
  EXPECT(bw.status == OP_SUCCESS, "%s: backward status %d: %s", desc.c_str(), bw.status, opGetLastErrorMessage());
  if (bw.status != OP_SUCCESS) return;
  Ref rb = reference(c, in, &f.out, &f.lse, scale_bwd);
  const double gt = dt == OP_DT_FLOAT ? 1e-4 : tol * 1.5;
  compare("dq", bw.dq, rb.dq, gt, desc);
  compare("dk", bw.dk, rb.dk, gt, desc);
  compare("dv", bw.dv, rb.dv, gt, desc);

  if (check_threads) {
    g_threads = 2;
    FwdResult f2 = run_fwd(c, in, dt);
    BwdResult b2 = run_bwd(c, in, dt, f.out, f.lse, scale_bwd);
    g_threads = 1;
    EXPECT(f2.status == OP_SUCCESS && b2.status == OP_SUCCESS, "%s: 2-thread status", desc.c_str());
    const bool same = f2.out.bytes == f.out.bytes && f2.lse.bytes == f.lse.bytes && b2.dq.bytes == bw.dq.bytes &&
                      b2.dk.bytes == bw.dk.bytes && b2.dv.bytes == bw.dv.bytes;
    EXPECT(same, "%s: 1 vs 2 threads not bitwise identical", desc.c_str());
    // q, k, v as views with padded rows (strided: inputs, read in place): bitwise the same results
    Inputs views = in;
    views.q = padded_rows(in.q, 16);
    views.k = padded_rows(in.k, 3);
    views.v = padded_rows(in.v, 32);
    FwdResult fs = run_fwd(c, views, dt);
    BwdResult bs = run_bwd(c, views, dt, f.out, f.lse, scale_bwd);
    EXPECT(fs.status == OP_SUCCESS && bs.status == OP_SUCCESS, "%s: strided status %s", desc.c_str(),
           opGetLastErrorMessage());
    const bool same_strided = fs.out.bytes == f.out.bytes && fs.lse.bytes == f.lse.bytes &&
                              bs.dq.bytes == bw.dq.bytes && bs.dk.bytes == bw.dk.bytes && bs.dv.bytes == bw.dv.bytes;
    EXPECT(same_strided, "%s: strided q, k, v not bitwise the contiguous results", desc.c_str());
  }
}

// return_softmax_lse = false: the 1-element lse is left alone and out is unchanged.
static void test_no_lse() {
  Case c;
  c.S1 = 40;
  c.S2 = 50;
  c.mode = 3;
  Inputs in = make_inputs(c, OP_DT_FLOAT, 3);
  FwdResult ref = run_fwd(c, in, OP_DT_FLOAT);
  Buf out = make_buf(OP_DT_FLOAT, {1, 40, 2, 32});
  Buf lse = make_buf(OP_DT_FLOAT, {1});
  uint64_t ws_size = 0;
  opExecutor* ex = nullptr;
  opStatus st = FlashAttnGetWorkspaceSize(&in.q.t, &in.k.t, &in.v.t, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                          &in.mask.t, nullptr, c.scale, 3, -1, -1, -1, -1, "BSND", "BSND", "BSND", false,
                                          &out.t, &lse.t, &ws_size, &ex);
  std::vector<unsigned char> ws(ws_size + 64, 0xff);  // NaN bytes: the kernel may not rely on a zeroed workspace
  if (st == OP_SUCCESS) st = FlashAttn(ws.data(), ws_size, ex, nullptr);
  EXPECT(st == OP_SUCCESS && out.bytes == ref.out.bytes && get(lse, 0) == 0.0,
         "return_softmax_lse=false: status %d, out equal %d, lse %g", st, (int)(out.bytes == ref.out.bytes), get(lse, 0));
}

// fp16 (computed in float at every level): each task converts the rows it reads into its slot,
// and no whole float32 copy of an input is staged (that took twice the inputs' own size).
static void test_converted_workspace() {
  Case c;
  c.layout = "BNSD";
  c.N1 = c.N2 = 16;
  c.S1 = c.S2 = 256;
  c.D = c.Dv = 64;
  g_threads = 1;
  const uint64_t copy = static_cast<uint64_t>(c.N1 * c.S1 * c.D) * 4;  // one input as float32
  Inputs in32 = make_inputs(c, OP_DT_FLOAT, 5), in16 = make_inputs(c, OP_DT_FLOAT16, 5);
  FwdResult f32 = run_fwd(c, in32, OP_DT_FLOAT), f16 = run_fwd(c, in16, OP_DT_FLOAT16);
  BwdResult b32 = run_bwd(c, in32, OP_DT_FLOAT, f32.out, f32.lse, c.scale);
  BwdResult b16 = run_bwd(c, in16, OP_DT_FLOAT16, f16.out, f16.lse, c.scale);
  EXPECT(f32.status == OP_SUCCESS && f16.status == OP_SUCCESS && b32.status == OP_SUCCESS && b16.status == OP_SUCCESS,
         "converted workspace: status %d %d %d %d", f32.status, f16.status, b32.status, b16.status);
  EXPECT(f16.workspace < f32.workspace + copy / 2,
         "fp16 forward workspace %llu against float32 %llu: a whole input staged (one copy %llu)",
         (unsigned long long)f16.workspace, (unsigned long long)f32.workspace, (unsigned long long)copy);
  EXPECT(b16.workspace < b32.workspace + copy / 2,
         "fp16 backward workspace %llu against float32 %llu: a whole input staged (one copy %llu)",
         (unsigned long long)b16.workspace, (unsigned long long)b32.workspace, (unsigned long long)copy);
}

static void test_errors() {
  Case c;
  c.layout = "TND";
  c.lq = {5, 7};
  c.lkv = {6, 4};
  Inputs in = make_inputs(c, OP_DT_FLOAT, 1);
  // bad cu_seqlens contents
  const struct { int64_t i; int v; const char* what; } bad[] = {{0, 1, "start"}, {1, 20, "decreasing"}, {2, 11, "end"}};
  for (const auto& bc : bad) {
    Inputs b2 = make_inputs(c, OP_DT_FLOAT, 1);
    set(b2.cu_q, bc.i, bc.v);
    FwdResult f = run_fwd(c, b2, OP_DT_FLOAT);
    EXPECT(f.status == OP_ERR_PARAM_INVALID && std::strstr(opGetLastErrorMessage(), "cu_seqlens_q"),
           "bad cu_seqlens_q (%s) gives %d: %s", bc.what, f.status, opGetLastErrorMessage());
    Buf out = make_buf(OP_DT_FLOAT, {12, 2, 32}), lse = make_buf(OP_DT_FLOAT, {2, 12});
    BwdResult bw = run_bwd(c, b2, OP_DT_FLOAT, out, lse, 0.0);
    EXPECT(bw.status == OP_ERR_PARAM_INVALID && std::strstr(opGetLastErrorMessage(), "cu_seqlens_q"),
           "grad: bad cu_seqlens_q (%s) gives %d: %s", bc.what, bw.status, opGetLastErrorMessage());
  }
  {
    Inputs b2 = make_inputs(c, OP_DT_FLOAT, 1);
    set(b2.cu_kv, 1, 11);
    FwdResult f = run_fwd(c, b2, OP_DT_FLOAT);
    EXPECT(f.status == OP_ERR_PARAM_INVALID && std::strstr(opGetLastErrorMessage(), "cu_seqlens_kv"),
           "bad cu_seqlens_kv gives %d: %s", f.status, opGetLastErrorMessage());
  }
  {
    Case s;
    s.used_q = {18};
    Inputs b2 = make_inputs(s, OP_DT_FLOAT, 1);
    FwdResult f = run_fwd(s, b2, OP_DT_FLOAT);
    EXPECT(f.status == OP_ERR_PARAM_INVALID && std::strstr(opGetLastErrorMessage(), "seqused_q"),
           "seqused_q out of range gives %d: %s", f.status, opGetLastErrorMessage());
    s.used_q.clear();
    s.used_kv = {-1};
    Inputs b3 = make_inputs(s, OP_DT_FLOAT, 1);
    f = run_fwd(s, b3, OP_DT_FLOAT);
    EXPECT(f.status == OP_ERR_PARAM_INVALID && std::strstr(opGetLastErrorMessage(), "seqused_kv"),
           "seqused_kv negative gives %d: %s", f.status, opGetLastErrorMessage());
  }
  {
    Case m;
    m.mode = 5;
    Inputs b2 = make_inputs(m, OP_DT_FLOAT, 1);
    FwdResult f = run_fwd(m, b2, OP_DT_FLOAT);
    EXPECT(f.status == OP_ERR_PARAM_INVALID && std::strstr(opGetLastErrorMessage(), "mask_mode only supports 0, 3, 4, but got 5."),
           "mask_mode 5 gives %d: %s", f.status, opGetLastErrorMessage());
  }
  {
    uint64_t ws = 0;
    opExecutor* ex = nullptr;
    Buf out = make_buf(OP_DT_FLOAT, {1, 17, 2, 32}), lse = make_buf(OP_DT_FLOAT, {1, 2, 17});
    Case d;
    Inputs b2 = make_inputs(d, OP_DT_FLOAT, 1);
    opStatus st = FlashAttnGetWorkspaceSize(nullptr, &b2.k.t, &b2.v.t, nullptr, nullptr, nullptr, nullptr, nullptr,
                                            nullptr, nullptr, nullptr, 1.0, 0, -1, -1, -1, -1, "BSND", "BSND", "BSND",
                                            true, &out.t, &lse.t, &ws, &ex);
    EXPECT(st == OP_ERR_PARAM_NULLPTR, "null q gives %d", st);
    Buf k16 = make_buf(OP_DT_FLOAT16, {1, 17, 2, 32});
    st = FlashAttnGetWorkspaceSize(&b2.q.t, &k16.t, &b2.v.t, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                   nullptr, nullptr, 1.0, 0, -1, -1, -1, -1, "BSND", "BSND", "BSND", true, &out.t,
                                   &lse.t, &ws, &ex);
    EXPECT(st == OP_ERR_PARAM_INVALID && std::strcmp(opGetLastErrorMessage(), "dtype of k must be the same as q (float32), but got float16.") == 0,
           "k dtype mismatch gives %d: %s", st, opGetLastErrorMessage());
  }
}

static std::vector<Case> cases() {
  std::vector<Case> cs;
  auto add = [&](Case c) { cs.push_back(c); };
  // dense / causal / window, BSND, tile boundaries (kBlockQ 64, kBlockKV 96)
  for (int64_t S : {1, 63, 64, 65, 95, 96, 97}) {
    Case c; c.S1 = S; c.S2 = S; c.mode = (S % 2) ? 3 : 0; add(c);
  }
  { Case c; c.S1 = 130; c.S2 = 200; c.mode = 3; add(c); }        // Sq < Skv causal
  { Case c; c.S1 = 200; c.S2 = 70; c.mode = 3; add(c); }         // Sq > Skv causal: empty top rows
  { Case c; c.S1 = 150; c.S2 = 150; c.mode = 4; c.wl = 20; c.wr = 5; add(c); }
  { Case c; c.S1 = 150; c.S2 = 190; c.mode = 4; c.wl = -1; c.wr = 3; add(c); }
  { Case c; c.S1 = 150; c.S2 = 120; c.mode = 4; c.wl = 7; c.wr = -1; add(c); }
  { Case c; c.S1 = 100; c.S2 = 100; c.mode = 4; c.wl = 0; c.wr = 0; add(c); }
  { Case c; c.S1 = 100; c.S2 = 100; c.mode = 4; c.wl = -1; c.wr = -1; add(c); }
  // layouts, GQA / MQA, Dv != D, odd dims
  { Case c; c.layout = "BNSD"; c.B = 2; c.N1 = 4; c.N2 = 2; c.S1 = 70; c.S2 = 110; c.mode = 3; add(c); }
  { Case c; c.layout = "BNSD"; c.out_layout = "BSND"; c.B = 2; c.N1 = 2; c.N2 = 1; c.S1 = 33; c.S2 = 40; add(c); }
  { Case c; c.B = 2; c.N1 = 6; c.N2 = 1; c.D = 40; c.Dv = 24; c.S1 = 66; c.S2 = 97; c.mode = 4; c.wl = 30; c.wr = 2; add(c); }
  { Case c; c.N1 = 3; c.N2 = 3; c.D = 20; c.Dv = 12; c.S1 = 45; c.S2 = 45; c.mode = 3; add(c); }
  { Case c; c.N1 = 2; c.N2 = 1; c.D = 7; c.Dv = 5; c.S1 = 20; c.S2 = 30; add(c); }  // odd dims
  // GQA in the AMX backward: a task runs 2 query heads of its kv head and writes a dK | dV partial
  // (B * N2 = 1: 4 subgroups of 2), runs the whole group (B * N2 = 4: no partial), or 6 of 12 heads
  // (TND, 3 sequences of which one is empty)
  { Case c; c.N1 = 8; c.N2 = 1; c.D = 64; c.Dv = 64; c.S1 = 300; c.S2 = 300; c.mode = 3; add(c); }
  { Case c; c.layout = "BNSD"; c.N1 = 8; c.N2 = 4; c.D = 64; c.Dv = 48; c.S1 = 260; c.S2 = 260; c.mode = 4; c.wl = 100; c.wr = 0; add(c); }
  { Case c; c.layout = "TND"; c.lq = {100, 0, 70}; c.lkv = {90, 0, 140}; c.N1 = 12; c.N2 = 1; c.D = 32; c.Dv = 32; c.mode = 3; add(c); }
  // seqused and sinks
  { Case c; c.B = 3; c.S1 = 80; c.S2 = 100; c.used_q = {80, 0, 33}; c.used_kv = {50, 100, 0}; c.mode = 3; add(c); }
  { Case c; c.B = 2; c.S1 = 70; c.S2 = 70; c.sinks = true; c.mode = 4; c.wl = 10; c.wr = 0; add(c); }
  { Case c; c.N1 = 4; c.N2 = 2; c.S1 = 40; c.S2 = 100; c.sinks = true; add(c); }
  // TND with empty sequences, GQA, windows, seqused
  { Case c; c.layout = "TND"; c.lq = {5, 0, 64, 97, 1}; c.lkv = {7, 3, 64, 120, 0}; c.N1 = 4; c.N2 = 2; c.mode = 3; add(c); }
  { Case c; c.layout = "TND"; c.lq = {30, 65, 0}; c.lkv = {30, 65, 10}; c.mode = 4; c.wl = 9; c.wr = 4; c.sinks = true; add(c); }
  { Case c; c.layout = "TND"; c.lq = {40, 50}; c.lkv = {60, 20}; c.used_q = {30, 60}; c.used_kv = {60, 5}; c.D = 48; c.Dv = 16; add(c); }
  { Case c; c.layout = "TND"; c.lq = {150}; c.lkv = {150}; c.N1 = 2; c.N2 = 1; c.D = 64; c.Dv = 64; c.mode = 3; add(c); }
  // bottom-right causal with Sq > Skv and sinks: the first 80 query rows see no key (whole 32-row strips
  // of the AMX forward that no key block reaches) and output 0, the sink taking all the weight
  { Case c; c.S1 = 100; c.S2 = 20; c.mode = 3; c.sinks = true; c.D = 64; c.Dv = 64; add(c); }
  // few query rows (decode): the row kernels of flash_attention_small.h, every feature
  { Case c; c.S1 = 1; c.S2 = 37; c.N1 = 4; c.N2 = 2; add(c); }
  { Case c; c.S1 = 2; c.S2 = 200; c.mode = 4; c.wl = 30; c.wr = 0; c.D = 64; c.Dv = 48; add(c); }
  { Case c; c.S1 = 4; c.S2 = 4; c.mode = 3; c.sinks = true; add(c); }
  { Case c; c.B = 3; c.S1 = 3; c.S2 = 50; c.used_q = {3, 0, 1}; c.used_kv = {50, 20, 0}; c.mode = 3; add(c); }
  { Case c; c.layout = "TND"; c.lq = {1, 0, 4, 2}; c.lkv = {7, 3, 64, 0}; c.N1 = 4; c.N2 = 1; c.mode = 4; c.wl = 5; c.wr = 2; add(c); }
  { Case c; c.layout = "BNSD"; c.S1 = 1; c.S2 = 130; c.N1 = 2; c.N2 = 2; c.D = 128; c.Dv = 128; c.sinks = true; add(c); }
  // head dims past the registers' chunks (dots_pieces: AVX2 8 at a time, 25 and 17 of them; AVX-512
  // 12 and a tail)
  { Case c; c.S1 = 3; c.S2 = 70; c.N1 = 4; c.N2 = 2; c.D = 200; c.Dv = 136; c.mode = 3; add(c); }
  // a kv head's rows together: 5 rows of 8 query heads on one (40 pairs: the backward's passes of
  // 16) under disjoint one-key windows; 6 heads on 2 with causal windows of 5 distinct ends, sinks
  { Case c; c.S1 = 5; c.S2 = 90; c.N1 = 8; c.N2 = 1; c.mode = 4; c.wl = 0; c.wr = 0; add(c); }
  { Case c; c.layout = "TND"; c.lq = {5, 2, 5}; c.lkv = {300, 0, 17}; c.N1 = 6; c.N2 = 2; c.D = 128; c.Dv = 64; c.mode = 3; c.sinks = true; add(c); }
  // 6-11 rows (the row kernels at avx2 and baseline, kSmallRowsQAvx2; at the AVX-512 levels the
  // forward's up to 8 rows and the backward's up to 6, the tiles above) with fewer kv heads than
  // kSmallBwdMinTasks: the backward splits the keys into chunks and sums their dQ partials. A window
  // that leaves the first chunks without keys for every row; TND where one sequence has fewer keys
  // than chunks, sinks; seqused_kv (zero dK / dV rows from the last chunk) with D and Dv off the
  // vector width
  { Case c; c.S1 = 8; c.S2 = 520; c.N1 = 8; c.N2 = 1; c.D = 64; c.Dv = 64; c.mode = 4; c.wl = 100; c.wr = 0; add(c); }
  { Case c; c.layout = "TND"; c.lq = {11, 3}; c.lkv = {700, 2}; c.N1 = 4; c.N2 = 1; c.mode = 3; c.sinks = true; add(c); }
  { Case c; c.S1 = 6; c.S2 = 300; c.used_q = {6}; c.used_kv = {200}; c.N1 = 3; c.N2 = 1; c.D = 40; c.Dv = 24; add(c); }
  // one to three rows against 2,100-4,200 keys: the forward's key splits (kSmallFwdSplitKeys),
  // merged with sinks; TND with 3, 1 and 2 splits and a window leaving the first splits without
  // keys, and a batch without keys (seqused_kv 0)
  { Case c; c.S1 = 1; c.S2 = 4200; c.N1 = 2; c.N2 = 1; c.sinks = true; add(c); }
  { Case c; c.layout = "TND"; c.lq = {2, 3, 1}; c.lkv = {4200, 50, 2100}; c.N1 = 2; c.N2 = 1; c.mode = 4; c.wl = 1500; c.wr = 0; c.sinks = true; add(c); }
  { Case c; c.B = 2; c.S1 = 3; c.S2 = 2500; c.used_q = {3, 3}; c.used_kv = {2500, 0}; c.N1 = 2; c.N2 = 1; add(c); }
  // 12-24 rows of a few kv heads (more than 11: the vector tiles at every level): blocks of fewer
  // rows than a tile, and a backward that splits keys rather than the GQA group
  // (its dQ partials are the smaller): a window leaving the first chunks without rows, TND with
  // one sequence of fewer keys than chunks
  { Case c; c.S1 = 24; c.S2 = 600; c.N1 = 4; c.N2 = 1; c.mode = 4; c.wl = 50; c.wr = 0; c.D = 64; c.Dv = 48; add(c); }
  { Case c; c.layout = "TND"; c.lq = {12, 20}; c.lkv = {400, 3}; c.N1 = 8; c.N2 = 2; c.mode = 3; c.sinks = true; add(c); }
  // 2-4 rows against enough keys that a bf16 forward on AMX takes one tile (kSmallWorkBf16AmxFwd)
  // and its backward the row kernels: TND with empty sequences, a window, sinks, GQA
  { Case c; c.layout = "TND"; c.lq = {3, 0, 4, 1}; c.lkv = {200, 5, 130, 0}; c.N1 = 4; c.N2 = 2; c.mode = 4; c.wl = 90; c.wr = 2; c.sinks = true; add(c); }
  // long rows: several key blocks of every path (the AMX forward's are 512 keys), so the online
  // softmax rescales across blocks, and a window whose edges fall inside blocks; the first with
  // D and keys multiples of 32 and K / V rows strided by N2 * D (the AMX backward reads them in place)
  { Case c; c.N1 = 4; c.N2 = 2; c.D = 32; c.Dv = 32; c.S1 = 1030; c.S2 = 1088; c.mode = 3; add(c); }
  { Case c; c.N1 = 1; c.N2 = 1; c.D = 64; c.Dv = 48; c.S1 = 700; c.S2 = 1300; c.mode = 4; c.wl = 600; c.wr = 33; add(c); }
  // (a window a task sees through in at most 1024 keys takes one key block of that size in the
  // AMX forward, as the one above; this one is wider: several 512-key blocks with edges inside)
  { Case c; c.N1 = 1; c.N2 = 1; c.D = 64; c.Dv = 64; c.S1 = 300; c.S2 = 1400; c.mode = 4; c.wl = 1100; c.wr = 0; add(c); }
  // logits hundreds of log2 units larger from key 512 on: the online softmax must move its max
  // (and rescale O) between key blocks, however lazily it keeps it otherwise
  { Case c; c.N1 = 2; c.N2 = 1; c.S1 = 70; c.S2 = 1100; c.late_k = 30.0; add(c); }
  { Case c; c.N1 = 2; c.N2 = 2; c.S1 = 600; c.S2 = 600; c.mode = 3; c.late_k = 30.0; add(c); }
  // production head dims
  { Case c; c.N1 = 2; c.N2 = 2; c.D = 128; c.Dv = 128; c.S1 = 70; c.S2 = 100; c.mode = 3; add(c); }
  { Case c; c.N1 = 2; c.N2 = 1; c.D = 256; c.Dv = 256; c.S1 = 33; c.S2 = 40; c.mode = 4; c.wl = 12; c.wr = 3; add(c); }
  return cs;
}

// Valid calls drawn across the feature space (RandomDraw): layout (BNSD may give BSND out),
// GQA/MQA, Dv <= D, lengths at the tile edges and decode sizes, every mask mode with random
// windows, sinks, seqused, TND with empty sequences.
static std::vector<Case> random_cases(RandomDraw& r) {
  std::vector<Case> cs;
  for (int i = 0; i < r.count; ++i) {
    Case c;
    const int64_t layout = r.pick(0, 2);
    c.layout = layout == 0 ? "BSND" : layout == 1 ? "BNSD" : "TND";
    if (layout == 1 && r.one_in(3)) c.out_layout = "BSND";
    c.D = r.head_dim();
    c.Dv = r.value_dim(c.D);
    c.N2 = r.pick(1, 3);
    c.N1 = c.N2 * r.pick(1, 3);
    if (layout == 2) {
      const int64_t B = r.pick(1, 4);
      c.lq = r.tnd_lengths(B, false);
      c.lkv = r.tnd_lengths(B, true);
    } else {
      c.B = r.pick(1, 3);
      c.S1 = r.length();
      c.S2 = r.one_in(3) && c.S1 > 1 ? c.S1 : r.key_length();
    }
    const int64_t B = layout == 2 ? static_cast<int64_t>(c.lq.size()) : c.B;
    if (r.one_in(5))
      for (int64_t b = 0; b < B; ++b) {
        c.used_q.push_back(r.used(layout == 2 ? c.lq[b] : c.S1, false));
        c.used_kv.push_back(r.used(layout == 2 ? c.lkv[b] : c.S2, true));
      }
    c.mode = std::vector<int64_t>{0, 3, 4}[r.pick(0, 2)];
    if (c.mode == 4) {
      c.wl = r.pick(-1, 40);
      c.wr = r.pick(-1, 40);
    }
    c.sinks = r.one_in(4);
    c.scale = 0.05 + 0.05 * static_cast<double>(r.pick(0, 8));
    cs.push_back(c);
  }
  return cs;
}

static int run_all_here() {
  opSetParallelBackend(&g_backend);
  std::printf("ISA %s\n", isa_name(active_isa()));
  test_errors();
  test_no_lse();
  test_converted_workspace();
  const opDataType dts[] = {OP_DT_FLOAT, OP_DT_BF16, OP_DT_FLOAT16, OP_DT_DOUBLE};
  const std::vector<Case> cs = cases();
  uint32_t seed = 7;
  for (size_t i = 0; i < cs.size(); ++i) {
    for (opDataType dt : dts) {
      // every case in float and bf16; float16 / float64 on every other case to stay fast
      if ((dt == OP_DT_FLOAT16 || dt == OP_DT_DOUBLE) && (i % 2) != 0) continue;
      run_case(cs[i], dt, dt == OP_DT_FLOAT || (i % 3) == 0, seed++);
    }
  }
  RandomDraw draw;
  run_random_cases(random_cases(draw), [&](const Case& c, opDataType dt, bool check_threads) {
    run_case(c, dt, check_threads, seed++);
  });
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  // Default: the level chosen by active_isa() (tests/kernels/build_and_run.sh runs every level
  // via OP_PLUGIN_ISA). `--all-isa`: re-run this binary once per level available here.
  if (argc < 2 || std::strcmp(argv[1], "--all-isa") != 0) return run_all_here();
  const Isa best = active_isa();
  int passed = 0, failed = 0;
  for (Isa level : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    if (static_cast<int>(level) > static_cast<int>(best)) continue;
    const std::string cmd = std::string("OP_PLUGIN_ISA=") + isa_name(level) + " '" + argv[0] + "' 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) { ++failed; continue; }
    char line[1024];
    int p = 0, f = -1;
    while (std::fgets(line, sizeof line, pipe)) {
      if (std::sscanf(line, "%d passed, %d failed", &p, &f) == 2) continue;
      std::fputs(line, stdout);
    }
    const int rc = pclose(pipe);
    if (f < 0 || rc != 0) {
      std::printf("ISA %s: child failed (rc %d)\n", isa_name(level), rc);
      if (f <= 0) f = 1;
    }
    std::printf("ISA %s: %d passed, %d failed\n", isa_name(level), p, f);
    passed += p;
    failed += f;
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
