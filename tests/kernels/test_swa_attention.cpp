// Torch-free tests of swa_forward / swa_backward (stage 1 + stage 2) against a naive float64
// reference that materialises S. Covers BSH/SBH/BSND/BNSD/TND, sparse_mode 0 (top-left pre/next
// band + full masks BNSS/B1SS/11SS/SS) and 4 (bottom-right band, template mask), negative and
// unbounded pre/next, no mask (whole matrix), pse (full and broadcast, dpse), sink (dsink), TND
// with empty and trailing-dropped sequences and the T > 16384 override, GQA, Dv < D, tile-boundary
// lengths, every dtype, dropout (same mask in forward and backward, statistics, seeds), 1 vs 2
// threads bitwise, query/key/value as views with padded rows bitwise the contiguous results,
// stage-1 errors, and random valid calls (RandomDraw). Prints "N passed, M failed"
// last; non-zero exit on failure.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common/counter_rng.h"
#include "op_plugin/ops/swa_backward.h"
#include "op_plugin/ops/swa_forward.h"

#include "attention_test_util.h"

using namespace op_plugin;

// ---- cases --------------------------------------------------------------------------------
constexpr int64_t kInf = 2147483647;
enum MaskKind { kNoMask, kBNSS, kB1SS, k11SS, kSS, kTemplate };

struct Case {
  std::string layout = "BSND";
  int64_t B = 1, N1 = 2, N2 = 2, D = 32, Dv = 32;
  int64_t S1 = 17, S2 = 17;      // non-TND
  std::vector<int64_t> lq, lkv;  // TND per-batch lengths
  int trailing_zeros = 0;        // TND: batches dropped with zeros in actual_seq_*
  int64_t mode = 0, pre = kInf, next = kInf;
  MaskKind mask = kNoMask;
  bool pse = false, pse_b1 = false, pse_n1 = false, pse_i1 = false;  // broadcast dims of pse
  bool sink = false;
  double sink_bias = 0.0;        // added to the random sink logits
  double scale = 0.2, keep_prob = 1.0;
  uint64_t seed = 0, offset = 0;
};

static std::string describe(const Case& c, opDataType dt) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s B=%ld N=%ld/%ld D=%ld Dv=%ld S=%ld/%ld nseq=%zu mode=%ld pre=%ld next=%ld mask=%d pse=%d%d%d%d "
                "sink=%d kp=%g %s",
                c.layout.c_str(), (long)c.B, (long)c.N1, (long)c.N2, (long)c.D, (long)c.Dv, (long)c.S1, (long)c.S2,
                c.lq.size(), (long)c.mode, (long)c.pre, (long)c.next, (int)c.mask, (int)c.pse, (int)c.pse_b1,
                (int)c.pse_n1, (int)c.pse_i1, (int)c.sink, c.keep_prob, dtype_name(dt));
  return buf;
}

// Index order of a layout, resolved once per case: the reference's loops index every element,
// and comparing the layout string there took 70% of this test's time.
enum class Order { kTnd, kBsnd, kSbh, kBnsd };  // BSH has BSND's order, BNSD the last
static Order order_of(const std::string& L) {
  if (L == "TND") return Order::kTnd;
  if (L == "BSND" || L == "BSH") return Order::kBsnd;
  if (L == "SBH") return Order::kSbh;
  return Order::kBnsd;
}

struct Geometry {
  bool tnd;
  Order order;
  int64_t B, T1, T2, maxq, maxkv;
  std::vector<int64_t> cq, ckv, sq, skv, estart;
  int64_t numels;
};
static Geometry geometry(const Case& c) {
  Geometry g;
  g.order = order_of(c.layout);
  g.tnd = g.order == Order::kTnd;
  g.B = g.tnd ? static_cast<int64_t>(c.lq.size()) : c.B;
  g.cq.assign(g.B + 1, 0);
  g.ckv.assign(g.B + 1, 0);
  g.maxq = g.maxkv = 0;
  g.numels = 0;
  for (int64_t b = 0; b < g.B; ++b) {
    g.sq.push_back(g.tnd ? c.lq[b] : c.S1);
    g.skv.push_back(g.tnd ? c.lkv[b] : c.S2);
    g.cq[b + 1] = g.cq[b] + g.sq[b];
    g.ckv[b + 1] = g.ckv[b] + g.skv[b];
    g.maxq = std::max(g.maxq, g.sq[b]);
    g.maxkv = std::max(g.maxkv, g.skv[b]);
    g.estart.push_back(g.numels);
    g.numels += c.N1 * g.sq[b] * g.skv[b];
  }
  g.T1 = g.cq[g.B];
  g.T2 = g.ckv[g.B];
  return g;
}
// Flat index of (b, s, n, d) in a tensor of the layout with S rows per batch, N heads, dim Dd.
static int64_t idx(const Geometry& g, bool kv, int64_t b, int64_t s, int64_t n, int64_t d, int64_t S, int64_t N,
                   int64_t Dd) {
  switch (g.order) {
    case Order::kTnd: return ((kv ? g.ckv[b] : g.cq[b]) + s) * N * Dd + n * Dd + d;
    case Order::kBsnd: return ((b * S + s) * N + n) * Dd + d;
    case Order::kSbh: return ((s * g.B + b) * N + n) * Dd + d;
    case Order::kBnsd: break;
  }
  return ((b * N + n) * S + s) * Dd + d;
}
static std::vector<int64_t> shape_of(const std::string& L, const Geometry& g, bool kv, int64_t S, int64_t N, int64_t Dd) {
  if (L == "TND") return {kv ? g.T2 : g.T1, N, Dd};
  if (L == "BSND") return {g.B, S, N, Dd};
  if (L == "BSH") return {g.B, S, N * Dd};
  if (L == "SBH") return {S, g.B, N * Dd};
  return {g.B, N, S, Dd};
}

struct Inputs {
  Geometry g;
  Buf q, k, v, dy, mask, pse, sink;
  std::vector<int64_t> aq, akv;  // actual_seq_qlen / kvlen
  opIntArray aq_arr{}, akv_arr{};
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
  in.dy = make_buf(dt, shape_of(c.layout, g, false, c.S1, c.N1, c.Dv));
  for (Buf* b : {&in.q, &in.k, &in.v, &in.dy})
    for (int64_t i = 0; i < numel(b->t); ++i) set(*b, i, nd(rng) * (b == &in.q ? 2.0 : 1.0));
  if (g.tnd) {
    for (int64_t b = 1; b <= g.B; ++b) { in.aq.push_back(g.cq[b]); in.akv.push_back(g.ckv[b]); }
    for (int z = 0; z < c.trailing_zeros; ++z) { in.aq.push_back(0); in.akv.push_back(0); }
    in.aq_arr = {in.aq.data(), static_cast<int64_t>(in.aq.size())};
    in.akv_arr = {in.akv.data(), static_cast<int64_t>(in.akv.size())};
  }
  const int64_t sq = g.tnd ? g.maxq : c.S1, skv = g.tnd ? g.maxkv : c.S2;
  std::uniform_int_distribution<int> coin(0, 3);
  switch (c.mask) {
    case kBNSS: in.mask = make_buf(OP_DT_BOOL, {g.B, c.N1, sq, skv}); break;
    case kB1SS: in.mask = make_buf(OP_DT_UINT8, {g.B, 1, sq, skv}); break;
    case k11SS: in.mask = make_buf(OP_DT_BOOL, {1, 1, sq, skv}); break;
    case kSS: in.mask = make_buf(OP_DT_BOOL, {sq, skv}); break;
    case kTemplate: in.mask = make_buf(OP_DT_BOOL, {2048, 2048}); break;
    default: break;
  }
  if (c.mask != kNoMask) {
    // about a quarter masked; the template gets triu(1) (its contents must be ignored)
    for (int64_t i = 0; i < numel(in.mask.t); ++i)
      set(in.mask, i, c.mask == kTemplate ? ((i % 2048) > (i / 2048)) : (coin(rng) == 0));
  }
  if (c.pse) {
    in.pse = make_buf(dt, {c.pse_b1 ? 1 : g.B, c.pse_n1 ? 1 : c.N1, c.pse_i1 ? 1 : sq, skv});
    for (int64_t i = 0; i < numel(in.pse.t); ++i) set(in.pse, i, nd(rng));
  }
  if (c.sink) {
    in.sink = make_buf(OP_DT_FLOAT, {c.N1});
    for (int64_t n = 0; n < c.N1; ++n) set(in.sink, n, nd(rng) + c.sink_bias);
  }
  return in;
}

// ---- float64 reference --------------------------------------------------------------------
static int64_t effective_mode(const Case& c, const Geometry& g) { return g.tnd && g.T1 > 16384 ? 4 : c.mode; }

static bool masked(const Case& c, const Inputs& in, int64_t b, int64_t n, int64_t i, int64_t j) {
  const Geometry& g = in.g;
  if (c.mask == kNoMask) return false;  // whole matrix
  const int64_t sq = g.sq[b], skv = g.skv[b];
  if (effective_mode(c, g) == 4) {
    const int64_t o = skv - sq;
    return j > i + o + c.next || j < i + o - c.pre;
  }
  if (j > i + c.next || j < i - c.pre) return true;
  const opTensor& t = in.mask.t;
  int64_t mi;
  if (t.ndim == 2) {
    mi = i * t.strides[0] + j;
  } else {
    mi = (t.shape[0] == 1 ? 0 : b) * t.strides[0] + (t.shape[1] == 1 ? 0 : n) * t.strides[1] + i * t.strides[2] + j;
  }
  return get(in.mask, mi) != 0;
}
static double pse_at(const Case& c, const Inputs& in, int64_t b, int64_t n, int64_t i, int64_t j) {
  if (!c.pse) return 0.0;
  const opTensor& t = in.pse.t;
  return get(in.pse, (c.pse_b1 ? 0 : b) * t.strides[0] + (c.pse_n1 ? 0 : n) * t.strides[1] +
                         (c.pse_i1 ? 0 : i) * t.strides[2] + j);
}
// Dropout multiplier of element (b, n, i, j): the kernel's generator, called directly.
static double zmul(const Case& c, const Geometry& g, int64_t b, int64_t n, int64_t i, int64_t j) {
  if (c.keep_prob >= 1.0) return 1.0;
  const auto key = isa_base::dropout_key(c.seed, c.offset, c.keep_prob);
  const uint64_t e = static_cast<uint64_t>(g.estart[b] + (n * g.sq[b] + i) * g.skv[b] + j);
  return isa_base::dropout_keep(e, key) ? 1.0 / c.keep_prob : 0.0;
}

struct Ref {
  std::vector<double> out, mx, sm, dq, dk, dv, dpse, dsink;
};
// Forward reference; with `out_in` / stats given, also the backward fed with them.
static Ref reference(const Case& c, const Inputs& in, const Buf* out_in, const Buf* max_in, const Buf* sum_in) {
  const Geometry& g = in.g;
  Ref r;
  r.out.assign(numel(in.dy.t), 0.0);
  const int64_t rows = g.tnd ? g.T1 : g.B * c.S1;
  r.mx.assign(rows * c.N1, -FLT_MAX);
  r.sm.assign(rows * c.N1, FLT_MAX);
  r.dq.assign(numel(in.q.t), 0.0);
  r.dk.assign(numel(in.k.t), 0.0);
  r.dv.assign(numel(in.v.t), 0.0);
  r.dpse.assign(c.pse ? numel(in.pse.t) : 0, 0.0);
  r.dsink.assign(c.N1, 0.0);
  // The inputs as doubles, read through row pointers (the head dim is innermost in every layout).
  const std::vector<double> qd = as_double(in.q), kd = as_double(in.k), vd = as_double(in.v), dyd = as_double(in.dy);
  const std::vector<double> od = out_in ? as_double(*out_in) : std::vector<double>();
  const int64_t grp = c.N1 / c.N2;
  for (int64_t b = 0; b < g.B; ++b) {
    const int64_t sq = g.sq[b], skv = g.skv[b];
    for (int64_t n = 0; n < c.N1; ++n) {
      const int64_t h = n / grp;
      auto koff = [&](int64_t j) { return idx(g, true, b, j, h, 0, c.S2, c.N2, c.D); };
      auto voff = [&](int64_t j) { return idx(g, true, b, j, h, 0, c.S2, c.N2, c.Dv); };
      for (int64_t i = 0; i < sq; ++i) {
        // stats row: [B, N, Sq] or TND [T, N]
        const int64_t si = g.tnd ? (g.cq[b] + i) * c.N1 + n : (b * c.N1 + n) * c.S1 + i;
        const int64_t qo = idx(g, false, b, i, n, 0, c.S1, c.N1, c.D), oo = idx(g, false, b, i, n, 0, c.S1, c.N1, c.Dv);
        const double* qi = qd.data() + qo;
        const double* dyi = dyd.data() + oo;
        std::vector<double> s(skv, -INFINITY);
        bool any = false;
        double m = -INFINITY;
        for (int64_t j = 0; j < skv; ++j) {
          if (masked(c, in, b, n, i, j)) continue;
          const double* kj = kd.data() + koff(j);
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d) dot += qi[d] * kj[d];
          s[j] = c.scale * (dot + pse_at(c, in, b, n, i, j));
          m = std::max(m, s[j]);
          any = true;
        }
        if (!any) continue;  // out 0, max -FLT_MAX, sum FLT_MAX
        const double sink = c.sink ? get(in.sink, n) : -INFINITY;
        m = std::max(m, sink);
        double l = c.sink ? std::exp(sink - m) : 0.0;
        for (int64_t j = 0; j < skv; ++j) if (s[j] > -INFINITY) l += std::exp(s[j] - m);
        r.mx[si] = m;
        r.sm[si] = l;
        std::vector<double> acc(c.Dv, 0.0);  // each element sums over the keys in order
        for (int64_t j = 0; j < skv; ++j) {
          if (!(s[j] > -INFINITY)) continue;
          const double w = std::exp(s[j] - m) / l * zmul(c, g, b, n, i, j);
          const double* vj = vd.data() + voff(j);
          for (int64_t e = 0; e < c.Dv; ++e) acc[e] += w * vj[e];
        }
        for (int64_t e = 0; e < c.Dv; ++e) r.out[oo + e] = acc[e];
        if (!out_in) continue;
        // backward, from the given statistics (element 0 of the 8) and attention_in
        const double gm = get(*max_in, si * 8), gs = get(*sum_in, si * 8);
        if (!(gm > -FLT_MAX)) continue;
        const double lse = gm + std::log(gs);
        double Di = 0;
        for (int64_t e = 0; e < c.Dv; ++e) Di += dyi[e] * od[oo + e];
        if (c.sink) r.dsink[n] -= std::exp(sink - lse) * Di;
        for (int64_t j = 0; j < skv; ++j) {
          if (!(s[j] > -INFINITY)) continue;
          const double p = std::exp(s[j] - lse), z = zmul(c, g, b, n, i, j);
          const int64_t ko = koff(j), vo = voff(j);
          const double* kj = kd.data() + ko;
          const double* vj = vd.data() + vo;
          double dp = 0;
          for (int64_t e = 0; e < c.Dv; ++e) dp += dyi[e] * vj[e];
          const double ds = p * (dp * z - Di);
          for (int64_t e = 0; e < c.Dv; ++e) r.dv[vo + e] += p * z * dyi[e];
          for (int64_t d = 0; d < c.D; ++d) {
            r.dq[qo + d] += c.scale * ds * kj[d];
            r.dk[ko + d] += c.scale * ds * qi[d];
          }
          if (c.pse) {
            const opTensor& t = in.pse.t;
            r.dpse[(c.pse_b1 ? 0 : b) * t.strides[0] + (c.pse_n1 ? 0 : n) * t.strides[1] + (c.pse_i1 ? 0 : i) * t.strides[2] + j] +=
                c.scale * ds;
          }
        }
      }
    }
  }
  return r;
}

// ---- running the ops ----------------------------------------------------------------------
static const opTensor* opt(const Buf& b) { return b.t.data ? &b.t : nullptr; }

struct FwdResult {
  opStatus status = OP_SUCCESS;
  Buf out, mx, sm, sout;
  int64_t seed = -1, offset = -1, numels = -1;
};
static FwdResult run_fwd(const Case& c, const Inputs& in, opDataType dt, const opTensor* pad = nullptr) {
  FwdResult r;
  const Geometry& g = in.g;
  r.out = make_buf(dt, shape_of(c.layout, g, false, c.S1, c.N1, c.Dv));
  const opDataType sdt = dt == OP_DT_DOUBLE ? OP_DT_DOUBLE : OP_DT_FLOAT;
  const std::vector<int64_t> ss = g.tnd ? std::vector<int64_t>{g.T1, c.N1, 8} : std::vector<int64_t>{g.B, c.N1, c.S1, 8};
  r.mx = make_buf(sdt, ss);
  r.sm = make_buf(sdt, ss);
  r.sout = make_buf(dt, {0});
  std::memset(r.out.bytes.data(), 0x7f, r.out.bytes.size() - 64);  // every element must be written
  uint64_t ws_size = 0;
  opExecutor* ex = nullptr;
  const int64_t heads = c.N1;
  r.status = SwaForwardGetWorkspaceSize(&in.q.t, &in.k.t, &in.v.t, heads, c.layout.c_str(), opt(in.pse), pad,
                                        opt(in.mask), c.scale, c.keep_prob, c.pre, c.next, 0, nullptr,
                                        g.tnd ? &in.aq_arr : nullptr, g.tnd ? &in.akv_arr : nullptr, c.mode, true,
                                        false, "", opt(in.sink), c.seed, c.offset, &r.out.t, &r.mx.t, &r.sm.t,
                                        &r.sout.t, &r.seed, &r.offset, &r.numels, &ws_size, &ex);
  if (r.status != OP_SUCCESS) return r;
  std::vector<unsigned char> ws(ws_size + 64, 0xff);  // NaN bytes: the kernel may not rely on a zeroed workspace
  r.status = SwaForward(ws.data(), ws_size, ex, nullptr);
  return r;
}

struct BwdResult {
  opStatus status = OP_SUCCESS;
  Buf dq, dk, dv, dpse, dsink;
};
static BwdResult run_bwd(const Case& c, const Inputs& in, opDataType dt, const FwdResult& f) {
  BwdResult r;
  auto like = [](const Buf& b) { return std::vector<int64_t>(b.t.shape, b.t.shape + b.t.ndim); };
  r.dq = make_buf(dt, like(in.q));
  r.dk = make_buf(dt, like(in.k));
  r.dv = make_buf(dt, like(in.v));
  r.dpse = c.pse ? make_buf(in.pse.t.dtype, like(in.pse)) : make_buf(dt, {0});
  r.dsink = make_buf(dt == OP_DT_DOUBLE ? OP_DT_DOUBLE : OP_DT_FLOAT, {c.sink ? c.N1 : 0});
  for (Buf* b : {&r.dq, &r.dk, &r.dv, &r.dpse, &r.dsink})  // poison: the kernel must write every element
    std::memset(b->bytes.data(), 0x7f, b->bytes.size() - 64);
  uint64_t ws_size = 0;
  opExecutor* ex = nullptr;
  const Geometry& g = in.g;
  r.status = SwaBackwardGetWorkspaceSize(
      &in.q.t, &in.k.t, &in.v.t, &in.dy.t, c.N1, c.layout.c_str(), opt(in.pse), nullptr, opt(in.mask), &f.mx.t,
      &f.sm.t, nullptr, &f.out.t, c.scale, c.keep_prob, c.pre, c.next, 0, f.seed, f.offset, f.numels, nullptr,
      g.tnd ? &in.aq_arr : nullptr, g.tnd ? &in.akv_arr : nullptr, c.mode, true, false, "", opt(in.sink), &r.dq.t,
      &r.dk.t, &r.dv.t, &r.dpse.t, &r.dsink.t, &ws_size, &ex);
  if (r.status != OP_SUCCESS) return r;
  std::vector<unsigned char> ws(ws_size + 64, 0xff);  // NaN bytes: the kernel may not rely on a zeroed workspace
  r.status = SwaBackward(ws.data(), ws_size, ex, nullptr);
  return r;
}

// max |a - ref| / max(max |ref|, 0.1); the empty-row sentinels (+-FLT_MAX) must match exactly.
// `rep` > 1: got holds each reference value `rep` times (the statistics' last axis).
static bool compare(const char* what, const Buf& got, const std::vector<double>& ref, double tol, const std::string& desc,
                    int rep = 1) {
  double ref_max = 0;
  for (double x : ref) if (std::fabs(x) < FLT_MAX) ref_max = std::max(ref_max, std::fabs(x));
  double worst = 0;
  int64_t worst_i = -1;
  for (size_t i = 0; i < ref.size() * rep; ++i) {
    const double want = ref[i / rep], gv = get(got, static_cast<int64_t>(i));
    if (std::fabs(want) >= FLT_MAX) {
      if (gv != want) { worst = INFINITY; worst_i = static_cast<int64_t>(i); break; }
      continue;
    }
    const double e = std::fabs(gv - want);
    if (!(e <= worst)) { worst = std::isnan(e) ? INFINITY : e; worst_i = static_cast<int64_t>(i); }
  }
  const double rel = worst / std::max(ref_max, 0.1);
  const bool ok = rel <= tol;
  EXPECT(ok, "%s: %s rel err %.3g (tol %.3g) at %ld (got %g want %g)", desc.c_str(), what, rel, tol, (long)worst_i,
         worst_i >= 0 ? get(got, worst_i) : 0.0, worst_i >= 0 ? ref[worst_i / rep] : 0.0);
  return ok;
}

static bool same_bytes(const Buf& a, const Buf& b) { return a.bytes == b.bytes; }

static void run_case(const Case& c, opDataType dt, bool check_threads, uint32_t seed) {
  const std::string desc = describe(c, dt);
  Inputs in = make_inputs(c, dt, seed);
  g_threads = 1;
  FwdResult f = run_fwd(c, in, dt);
  EXPECT(f.status == OP_SUCCESS, "%s: forward status %d: %s", desc.c_str(), f.status, opGetLastErrorMessage());
  if (f.status != OP_SUCCESS) return;
  EXPECT(f.numels == in.g.numels, "%s: numels %ld, want %ld", desc.c_str(), (long)f.numels, (long)in.g.numels);
  const bool drop = c.keep_prob < 1.0;
  EXPECT(f.seed == (drop ? static_cast<int64_t>(c.seed) : 0) && f.offset == (drop ? static_cast<int64_t>(c.offset) : 0),
         "%s: seed/offset %ld/%ld", desc.c_str(), (long)f.seed, (long)f.offset);
  Ref ref = reference(c, in, nullptr, nullptr, nullptr);
  const double tol = tol_of(dt);
  compare("attention_out", f.out, ref.out, tol, desc);
  const double stol = dt == OP_DT_DOUBLE ? 1e-9 : 2e-5;
  compare("softmax_max", f.mx, ref.mx, stol, desc, 8);
  // sum: relative to its own size (it is >= 1 for rows with keys)
  compare("softmax_sum", f.sm, ref.sm, stol * 4, desc, 8);

  BwdResult bw = run_bwd(c, in, dt, f);
  EXPECT(bw.status == OP_SUCCESS, "%s: backward status %d: %s", desc.c_str(), bw.status, opGetLastErrorMessage());
  if (bw.status != OP_SUCCESS) return;
  Ref rb = reference(c, in, &f.out, &f.mx, &f.sm);
  const double gt = dt == OP_DT_FLOAT ? 1e-4 : tol * 1.5;
  compare("dq", bw.dq, rb.dq, gt, desc);
  compare("dk", bw.dk, rb.dk, gt, desc);
  compare("dv", bw.dv, rb.dv, gt, desc);
  if (c.pse) compare("dpse", bw.dpse, rb.dpse, gt, desc);
  if (c.sink) compare("dsink", bw.dsink, rb.dsink, dt == OP_DT_DOUBLE ? 1e-9 : 1e-4, desc);

  if (check_threads) {
    g_threads = 2;
    FwdResult f2 = run_fwd(c, in, dt);
    BwdResult b2 = run_bwd(c, in, dt, f);
    g_threads = 1;
    EXPECT(f2.status == OP_SUCCESS && b2.status == OP_SUCCESS, "%s: 2-thread status", desc.c_str());
    const bool same = same_bytes(f2.out, f.out) && same_bytes(f2.mx, f.mx) && same_bytes(f2.sm, f.sm) &&
                      same_bytes(b2.dq, bw.dq) && same_bytes(b2.dk, bw.dk) && same_bytes(b2.dv, bw.dv) &&
                      same_bytes(b2.dpse, bw.dpse) && same_bytes(b2.dsink, bw.dsink);
    EXPECT(same, "%s: 1 vs 2 threads not bitwise identical", desc.c_str());
    // query, key, value as views with padded rows (strided: inputs, read in place): bitwise the
    // same results
    Inputs views = in;
    views.q = padded_rows(in.q, 16);
    views.k = padded_rows(in.k, 3);
    views.v = padded_rows(in.v, 32);
    FwdResult fs = run_fwd(c, views, dt);
    BwdResult bs = run_bwd(c, views, dt, f);
    EXPECT(fs.status == OP_SUCCESS && bs.status == OP_SUCCESS, "%s: strided status %s", desc.c_str(),
           opGetLastErrorMessage());
    const bool same_strided = same_bytes(fs.out, f.out) && same_bytes(fs.mx, f.mx) && same_bytes(fs.sm, f.sm) &&
                              same_bytes(bs.dq, bw.dq) && same_bytes(bs.dk, bw.dk) && same_bytes(bs.dv, bw.dv) &&
                              same_bytes(bs.dpse, bw.dpse) && same_bytes(bs.dsink, bw.dsink);
    EXPECT(same_strided, "%s: strided query, key, value not bitwise the contiguous results", desc.c_str());
  }
}

// ---- dropout ------------------------------------------------------------------------------
static void test_dropout_stats() {
  // The generator alone: kept fraction, same key same bits, different seed / offset different.
  for (double kp : {0.9, 0.5, 0.1}) {
    const auto k = isa_base::dropout_key(42, 7, kp);
    const int64_t n = 1 << 20;
    int64_t kept = 0;
    for (int64_t e = 0; e < n; ++e) kept += isa_base::dropout_keep(static_cast<uint64_t>(e), k);
    const double frac = static_cast<double>(kept) / n, sd = std::sqrt(kp * (1 - kp) / n);
    EXPECT(std::fabs(frac - kp) < 5 * sd, "kept fraction %g for keep_prob %g", frac, kp);
  }
  const auto a = isa_base::dropout_key(1, 0, 0.5), b = isa_base::dropout_key(2, 0, 0.5), o = isa_base::dropout_key(1, 1, 0.5);
  int64_t diff_seed = 0, diff_off = 0, n = 4096;
  for (int64_t e = 0; e < n; ++e) {
    diff_seed += isa_base::dropout_keep(e, a) != isa_base::dropout_keep(e, b);
    diff_off += isa_base::dropout_keep(e, a) != isa_base::dropout_keep(e, o);
  }
  EXPECT(diff_seed > n / 3 && diff_off > n / 3, "different seed/offset change the mask (%ld, %ld of %ld differ)",
         (long)diff_seed, (long)diff_off, (long)n);

  // Through the ops: same (seed, offset) -> same bits; another seed -> another output.
  Case c;
  c.layout = "BNSD";
  c.S1 = 70;
  c.S2 = 100;
  c.keep_prob = 0.8;
  c.seed = 1234;
  c.offset = 16;
  Inputs in = make_inputs(c, OP_DT_FLOAT, 5);
  FwdResult f1 = run_fwd(c, in, OP_DT_FLOAT), f2 = run_fwd(c, in, OP_DT_FLOAT);
  EXPECT(f1.status == OP_SUCCESS && same_bytes(f1.out, f2.out), "dropout: same seed gives the same output");
  Case c2 = c;
  c2.seed = 1235;
  FwdResult f3 = run_fwd(c2, in, OP_DT_FLOAT);
  EXPECT(f3.status == OP_SUCCESS && !same_bytes(f1.out, f3.out), "dropout: another seed gives another output");
  EXPECT(same_bytes(f1.mx, f3.mx) && same_bytes(f1.sm, f3.sm), "dropout does not change the statistics");
  // keep_prob = 1 vs the undropped reference is covered by the case list; here the mean of the
  // dropped output over many seeds approaches the undropped one (unbiased: Z / keep_prob).
  Case c1 = c;
  c1.keep_prob = 1.0;
  FwdResult fu = run_fwd(c1, in, OP_DT_FLOAT);
  std::vector<double> mean(numel(fu.out.t), 0.0);
  const int reps = 64;
  for (int r = 0; r < reps; ++r) {
    Case cr = c;
    cr.seed = 1000 + r;
    FwdResult fr = run_fwd(cr, in, OP_DT_FLOAT);
    for (size_t i = 0; i < mean.size(); ++i) mean[i] += get(fr.out, i) / reps;
  }
  double err = 0, mag = 0;
  for (size_t i = 0; i < mean.size(); ++i) {
    err += std::fabs(mean[i] - get(fu.out, i));
    mag += std::fabs(get(fu.out, i));
  }
  EXPECT(err / mag < 0.1, "dropout mean over 64 seeds vs no dropout: relative L1 %g", err / mag);
}

// ---- errors -------------------------------------------------------------------------------
static void expect_error(const char* what, opStatus st, const char* text) {
  EXPECT(st == OP_ERR_PARAM_INVALID && std::strstr(opGetLastErrorMessage(), text) != nullptr,
         "%s: status %d, message '%s' (want '%s')", what, st, opGetLastErrorMessage(), text);
}

static void test_errors() {
  auto fwd_status = [](Case c, const std::function<void(Inputs&)>& edit, const opTensor* pad = nullptr) {
    Inputs in = make_inputs(c, OP_DT_FLOAT, 3);
    edit(in);
    return run_fwd(c, in, OP_DT_FLOAT, pad).status;
  };
  auto none = [](Inputs&) {};
  Case c;
  {
    Case m = c;
    for (int64_t mode : {1, 2, 3, 5, 6, 7, 8, -1}) {
      m.mode = mode;
      char want[96];
      std::snprintf(want, sizeof want, "The sparse_mode value should be 0 or 4, but got %ld", (long)mode);
      expect_error("sparse_mode", fwd_status(m, none), want);
    }
  }
  { Case m = c; m.layout = "BSNDX"; expect_error("layout", fwd_status(m, none), "The input_layout should be BSH/SBH/BNSD/BSND/TND"); }
  { Case m = c; m.keep_prob = 0.0; expect_error("keep_prob 0", fwd_status(m, none), "The keep_prob value must be in range of (0, 1]"); }
  { Case m = c; m.keep_prob = 1.5; expect_error("keep_prob 1.5", fwd_status(m, none), "keep_prob"); }
  {
    Inputs in = make_inputs(c, OP_DT_FLOAT, 3);
    Buf pad = make_buf(OP_DT_BOOL, {1, 2, 17, 17});
    expect_error("padding_mask", run_fwd(c, in, OP_DT_FLOAT, &pad.t).status, "padding_mask is not supported");
  }
  { Case m = c; m.mask = kBNSS; m.pre = -3; m.next = 2; expect_error("empty band", fwd_status(m, none), "pre_tockens (-3) + next_tockens (2) must be >= 0"); }
  { Case m = c; m.mask = kSS; m.mode = 4; expect_error("mode 4 template", fwd_status(m, none), "[2048, 2048] template"); }
  {
    Case m = c;
    m.mask = kSS;
    expect_error("mask shape", fwd_status(m, [](Inputs& in) { in.mask = make_buf(OP_DT_BOOL, {17, 16}); }), "atten_mask must be the [2048, 2048] template when sparse_mode is 4, else");
  }
  { Case m = c; m.mask = kSS; expect_error("mask dtype", fwd_status(m, [](Inputs& in) { in.mask = make_buf(OP_DT_FLOAT, {17, 17}); }), "atten_mask must have dtype bool, uint8, but got float32"); }
  { Case m = c; m.pse = true; expect_error("pse shape", fwd_status(m, [](Inputs& in) { in.pse.t.shape[3] = 5; }), "pse must have shape [B or 1, N or 1, Sq or 1, Skv] = [1, 2, 17, 17], but got [1, 2, 17, 5]"); }
  { Case m = c; m.sink = true; expect_error("sink shape", fwd_status(m, [](Inputs& in) { in.sink.t.shape[0] = 3; }), "sink must be 1D of length N = 2, but got [3]"); }
  { Case m = c; m.N1 = 3; m.N2 = 2; expect_error("GQA", fwd_status(m, none), "the N of query (3) must be a multiple of the N of key (2)"); }
  { Case m = c; m.D = 16; m.Dv = 32; expect_error("Dv > D", fwd_status(m, none), "the D of value (32) must not exceed the D of query and key (16)"); }
  { Case m = c; expect_error("head_num", fwd_status(m, [](Inputs& in) { in.q.t.shape[2] = 3; in.q.t.strides[1] = 96; in.q.t.strides[0] = 17 * 96; }), "head_num (2) must equal the N dim of query"); }
  { Case m = c; m.layout = "BSH"; expect_error("BSH hidden", fwd_status(m, [](Inputs& in) { in.q = make_buf(OP_DT_FLOAT, {1, 17, 63}); }), "must be a positive multiple of head_num (2)"); }
  { Case m = c; expect_error("k dtype", fwd_status(m, [](Inputs& in) { in.k.t.dtype = OP_DT_DOUBLE; }), "dtype of key must be the same as query (float32), but got float64"); }
  {
    Case t;
    t.layout = "TND";
    t.lq = {5, 7};
    t.lkv = {6, 4};
    expect_error("TND lengths", fwd_status(t, [](Inputs& in) { in.aq[0] = 13; }), "actual_seq_qlen must be cumulative");
    expect_error("TND end", fwd_status(t, [](Inputs& in) { in.akv[1] = 9; }), "actual_seq_kvlen must end at the token count 10");
    expect_error("TND sizes", fwd_status(t, [](Inputs& in) { in.akv_arr.size = 1; }), "must be the same and cannot be empty");
    expect_error("TND missing", fwd_status(t, [](Inputs& in) { in.aq_arr.data = nullptr; in.aq_arr.size = 0; }), "must be the same and cannot be empty");
    Case m = t;
    m.mask = kBNSS;  // TND takes only [maxSq, maxSkv]
    expect_error("TND mask", fwd_status(m, [](Inputs& in) { in.mask.t.ndim = 4; }), "atten_mask must be the [2048, 2048] template when sparse_mode is 4, else");
  }
  {
    Inputs in = make_inputs(c, OP_DT_FLOAT, 3);
    FwdResult f = run_fwd(c, in, OP_DT_FLOAT);
    Buf bad = make_buf(OP_DT_FLOAT, {1, 2, 17, 7});
    FwdResult g = f;
    g.mx = bad;
    expect_error("softmax_max shape", run_bwd(c, in, OP_DT_FLOAT, g).status, "softmax_max must have shape [1, 2, 17, 8], but got [1, 2, 17, 7]");
    Case m = c;
    m.keep_prob = 0.5;
    FwdResult h = f;
    h.numels = 5;
    expect_error("numels", run_bwd(m, in, OP_DT_FLOAT, h).status, "numels (5) must be");
    m.keep_prob = 1.0;
    m.mode = 3;
    expect_error("bwd sparse_mode", run_bwd(m, in, OP_DT_FLOAT, f).status, "The sparse_mode value should be 0 or 4, but got 3");
  }
  {
    // null pointers: a status, never a crash
    Inputs in = make_inputs(c, OP_DT_FLOAT, 3);
    FwdResult f = run_fwd(c, in, OP_DT_FLOAT);
    uint64_t ws = 0;
    opExecutor* ex = nullptr;
    int64_t s0, s1, s2;
    opStatus st = SwaForwardGetWorkspaceSize(nullptr, &in.k.t, &in.v.t, 2, "BSND", nullptr, nullptr, nullptr, 1.0, 1.0,
                                             kInf, kInf, 0, nullptr, nullptr, nullptr, 0, true, false, "", nullptr, 0, 0,
                                             &f.out.t, &f.mx.t, &f.sm.t, &f.sout.t, &s0, &s1, &s2, &ws, &ex);
    EXPECT(st == OP_ERR_PARAM_NULLPTR, "null query gives %d", st);
    BwdResult b = run_bwd(c, in, OP_DT_FLOAT, f);
    st = SwaBackwardGetWorkspaceSize(&in.q.t, &in.k.t, &in.v.t, &in.dy.t, 2, "BSND", nullptr, nullptr, nullptr, nullptr,
                                     &f.sm.t, nullptr, &f.out.t, 1.0, 1.0, kInf, kInf, 0, 0, 0, 0, nullptr, nullptr,
                                     nullptr, 0, true, false, "", nullptr, &b.dq.t, &b.dk.t, &b.dv.t, &b.dpse.t,
                                     &b.dsink.t, &ws, &ex);
    EXPECT(st != OP_SUCCESS && std::strstr(opGetLastErrorMessage(), "softmax_max"), "missing softmax_max gives %d: %s",
           st, opGetLastErrorMessage());
    st = SwaForwardGetWorkspaceSize(&in.q.t, &in.k.t, &in.v.t, 2, "BSND", nullptr, nullptr, nullptr, 1.0, 1.0, kInf,
                                    kInf, 0, nullptr, nullptr, nullptr, 0, true, false, "TND", nullptr, 0, 0, &f.out.t,
                                    &f.mx.t, &f.sm.t, &f.sout.t, &s0, &s1, &s2, &ws, &ex);
    expect_error("softmax_layout", st, "softmax_layout=TND only supported when input_layout_str=TND");
  }
}

// ---- the case list ------------------------------------------------------------------------
static std::vector<Case> cases() {
  std::vector<Case> cs;
  auto add = [&](Case c) { cs.push_back(c); };
  // no mask: whole matrix, whatever sparse_mode / pre / next say
  for (int64_t S : {1, 63, 64, 65, 95, 96, 97}) { Case c; c.S1 = S; c.S2 = S; c.mode = S % 2 ? 4 : 0; c.pre = 3; c.next = 0; add(c); }
  // sparse_mode 4: bottom-right band, template mask
  { Case c; c.S1 = 150; c.S2 = 150; c.mode = 4; c.mask = kTemplate; c.pre = 20; c.next = 5; add(c); }
  { Case c; c.S1 = 130; c.S2 = 200; c.mode = 4; c.mask = kTemplate; c.pre = kInf; c.next = 0; add(c); }     // causal, Sq < Skv
  { Case c; c.S1 = 200; c.S2 = 70; c.mode = 4; c.mask = kTemplate; c.pre = kInf; c.next = 0; add(c); }      // empty top rows
  { Case c; c.S1 = 97; c.S2 = 150; c.mode = 4; c.mask = kTemplate; c.pre = 30; c.next = -4; add(c); }       // negative next
  { Case c; c.S1 = 96; c.S2 = 96; c.mode = 4; c.mask = kTemplate; c.pre = -5; c.next = 12; add(c); }        // negative pre
  { Case c; c.S1 = 65; c.S2 = 95; c.mode = 4; c.mask = kTemplate; c.pre = 0; c.next = 0; c.sink = true; add(c); }
  // sparse_mode 0: full masks (top-left pre/next)
  { Case c; c.B = 2; c.N1 = 4; c.N2 = 2; c.S1 = 63; c.S2 = 97; c.mask = kBNSS; add(c); }
  { Case c; c.B = 2; c.S1 = 64; c.S2 = 96; c.mask = kB1SS; c.pre = 40; c.next = 3; add(c); }
  { Case c; c.S1 = 65; c.S2 = 95; c.mask = k11SS; c.pre = 10; c.next = -2; add(c); }
  { Case c; c.S1 = 120; c.S2 = 100; c.mask = kSS; c.pre = -3; c.next = kInf; add(c); }
  { Case c; c.S1 = 100; c.S2 = 130; c.mask = kSS; c.pre = 0; c.next = 0; c.sink = true; add(c); }           // many empty rows
  // a sink 40 above every logit: rows with keys keep m = sink, l = 1 in float, as rows whose keys
  // are all masked do, yet only the latter are empty (max -FLT_MAX, sum FLT_MAX)
  { Case c; c.B = 2; c.S1 = 33; c.S2 = 3; c.mask = kB1SS; c.pre = kInf; c.next = kInf; c.sink = true; c.sink_bias = 40; add(c); }
  // layouts, GQA, Dv < D
  { Case c; c.layout = "BSH"; c.B = 2; c.N1 = 4; c.N2 = 1; c.D = 24; c.Dv = 16; c.S1 = 70; c.S2 = 90; c.mode = 4; c.mask = kTemplate; c.pre = 25; c.next = 2; add(c); }
  { Case c; c.layout = "SBH"; c.B = 3; c.N1 = 2; c.N2 = 2; c.D = 20; c.Dv = 12; c.S1 = 33; c.S2 = 40; c.mask = kBNSS; c.pre = 8; c.next = 8; add(c); }
  { Case c; c.layout = "BNSD"; c.B = 2; c.N1 = 6; c.N2 = 3; c.D = 40; c.Dv = 40; c.S1 = 96; c.S2 = 97; c.sink = true; add(c); }
  { Case c; c.layout = "SBH"; c.B = 2; c.N1 = 2; c.N2 = 1; c.D = 7; c.Dv = 5; c.S1 = 20; c.S2 = 30; c.mode = 4; c.mask = kTemplate; c.pre = 4; c.next = 4; add(c); }
  // pse: full and broadcast (dpse summed over the broadcast dims)
  { Case c; c.B = 2; c.S1 = 65; c.S2 = 97; c.pse = true; add(c); }
  { Case c; c.layout = "BNSD"; c.B = 2; c.N1 = 4; c.N2 = 2; c.S1 = 40; c.S2 = 70; c.pse = true; c.pse_b1 = true; c.mask = kB1SS; add(c); }
  { Case c; c.layout = "BSH"; c.B = 2; c.S1 = 64; c.S2 = 64; c.pse = true; c.pse_b1 = true; c.pse_n1 = true; c.mode = 4; c.mask = kTemplate; c.pre = 10; c.next = 1; c.sink = true; add(c); }
  { Case c; c.B = 2; c.S1 = 50; c.S2 = 96; c.pse = true; c.pse_n1 = true; c.pse_i1 = true; add(c); }
  // TND: empty sequences, trailing dropped batches, windows, pse, sink
  { Case c; c.layout = "TND"; c.lq = {5, 0, 64, 97, 1}; c.lkv = {7, 3, 64, 120, 0}; c.N1 = 4; c.N2 = 2; c.mode = 4; c.mask = kTemplate; c.pre = kInf; c.next = 0; add(c); }
  { Case c; c.layout = "TND"; c.lq = {30, 65, 12}; c.lkv = {30, 65, 20}; c.trailing_zeros = 2; c.mask = kSS; c.pre = 9; c.next = 4; c.sink = true; add(c); }
  { Case c; c.layout = "TND"; c.lq = {40, 50}; c.lkv = {60, 20}; c.D = 48; c.Dv = 16; c.pse = true; c.pse_b1 = true; c.mode = 4; c.mask = kTemplate; c.pre = 15; c.next = -3; add(c); }
  { Case c; c.layout = "TND"; c.lq = {96, 33}; c.lkv = {95, 70}; c.pse = true; c.trailing_zeros = 1; add(c); }
  // few query rows (decode): the row kernels, with a full mask, pse, sink, dropout, TND
  { Case c; c.B = 2; c.N1 = 4; c.N2 = 2; c.S1 = 1; c.S2 = 60; c.mask = kBNSS; c.pse = true; add(c); }
  { Case c; c.S1 = 3; c.S2 = 90; c.mode = 4; c.mask = kTemplate; c.pre = 20; c.next = 0; c.sink = true; c.keep_prob = 0.8; c.seed = 3; add(c); }
  { Case c; c.layout = "TND"; c.lq = {1, 4, 0}; c.lkv = {40, 30, 9}; c.mask = kSS; c.pre = 6; c.next = 1; c.pse = true; c.pse_b1 = true; add(c); }
  // 5 rows of 6 query heads on 2 (15 pairs a kv head) with every per-row feature, and 8 heads on
  // one (40 pairs: the backward's passes of 16) with disjoint one-key windows
  { Case c; c.layout = "BNSD"; c.N1 = 6; c.N2 = 2; c.S1 = 5; c.S2 = 77; c.mask = kBNSS; c.pse = true; c.sink = true; c.keep_prob = 0.75; c.seed = 9; add(c); }
  { Case c; c.N1 = 8; c.N2 = 1; c.S1 = 5; c.S2 = 40; c.mode = 4; c.mask = kTemplate; c.pre = 0; c.next = 0; c.pse = true; add(c); }
  // 8 rows of 4 heads on one: the backward's key chunks (kSmallBwdMinTasks), each writing its
  // keys' dpse and its dQ partial, with a per-head mask, sink and dropout
  { Case c; c.N1 = 4; c.N2 = 1; c.S1 = 8; c.S2 = 400; c.mask = kBNSS; c.pse = true; c.sink = true; c.keep_prob = 0.8; c.seed = 21; add(c); }
  // 2 rows of 2 heads on one against 2,300 keys: the forward's key splits (kSmallFwdSplitKeys),
  // each writing its rows' max, sum and O, merged with the sink, a per-head mask, pse and dropout
  { Case c; c.N1 = 2; c.N2 = 1; c.S1 = 2; c.S2 = 2300; c.mask = kBNSS; c.pse = true; c.sink = true; c.keep_prob = 0.8; c.seed = 23; add(c); }
  // dropout (forward and backward against the reference fed the regenerated mask)
  { Case c; c.layout = "BNSD"; c.B = 2; c.S1 = 70; c.S2 = 100; c.keep_prob = 0.7; c.seed = 11; c.offset = 3; add(c); }
  { Case c; c.S1 = 97; c.S2 = 97; c.mode = 4; c.mask = kTemplate; c.pre = 30; c.next = 0; c.keep_prob = 0.9; c.seed = 5; c.sink = true; add(c); }
  { Case c; c.layout = "TND"; c.lq = {20, 0, 70}; c.lkv = {30, 5, 65}; c.mask = kSS; c.pre = 20; c.next = 20; c.pse = true; c.keep_prob = 0.6; c.seed = 99; c.offset = 1ull << 33; add(c); }
  { Case c; c.layout = "SBH"; c.B = 2; c.N1 = 4; c.N2 = 2; c.S1 = 64; c.S2 = 96; c.keep_prob = 0.5; c.seed = 1ull << 40; add(c); }
  // GQA with every per-head feature (pse, dropout, a per-head full mask) where an AMX backward
  // task runs 4 query heads of its kv head and writes a dK | dV partial (B * N2 = 2: 2 subgroups)
  { Case c; c.layout = "BNSD"; c.N1 = 8; c.N2 = 2; c.S1 = 80; c.S2 = 96; c.mask = kBNSS; c.pse = true; c.keep_prob = 0.75; c.seed = 7; add(c); }
  // sweep: every layout x sparse_mode 0 (full masks in turn) / 4 x pre/next unbounded, negative
  // next, negative pre; GQA, Dv < D and tile-boundary lengths (63/64/65 x 95/96/97)
  {
    const char* layouts[] = {"BSH", "SBH", "BSND", "BNSD", "TND"};
    const int64_t prenext[3][2] = {{kInf, kInf}, {40, -3}, {-6, 25}};
    const MaskKind masks[] = {kBNSS, kB1SS, k11SS, kSS};
    int k = 0;
    for (const char* L : layouts)
      for (int64_t mode : {0, 4})
        for (const auto& pn : prenext) {
          Case c;
          c.layout = L;
          c.B = 2;
          c.N1 = 4;
          c.N2 = k % 2 ? 2 : 4;
          c.D = 24;
          c.Dv = k % 3 ? 24 : 16;
          c.S1 = 63 + k % 3;
          c.S2 = 95 + (k / 3) % 3;
          if (c.layout == "TND") { c.lq = {c.S1, 0, 64}; c.lkv = {c.S2, 17, 97}; c.trailing_zeros = k % 2; }
          c.mode = mode;
          c.mask = mode == 4 ? kTemplate : c.layout == "TND" ? kSS : masks[k % 4];
          c.pre = pn[0];
          c.next = pn[1];
          add(c);
          ++k;
        }
  }
  // production head dims
  { Case c; c.layout = "BNSD"; c.N1 = 2; c.N2 = 1; c.D = 64; c.Dv = 64; c.S1 = 130; c.S2 = 130; c.mode = 4; c.mask = kTemplate; c.pre = 47; c.next = 0; add(c); }
  { Case c; c.N1 = 2; c.N2 = 2; c.D = 128; c.Dv = 128; c.S1 = 70; c.S2 = 100; c.mask = kBNSS; c.pre = 60; c.next = 10; c.keep_prob = 0.8; c.seed = 3; add(c); }
  return cs;
}

// TND with T > 16384 forces sparse_mode 4: a full mode-0 mask becomes a bottom-right band.
static void test_forced_mode4() {
  Case c;
  c.layout = "TND";
  c.N1 = 1;
  c.N2 = 1;
  c.D = 8;
  c.Dv = 8;
  for (int b = 0; b < 129; ++b) { c.lq.push_back(b == 0 ? 129 : 127); c.lkv.push_back(b % 3 == 0 ? 100 : 127); }
  c.mask = kSS;
  c.pre = 20;
  c.next = 3;
  run_case(c, OP_DT_FLOAT, false, 77);
}

// Valid calls drawn across the feature space (RandomDraw): every layout, GQA, Dv <= D, lengths at
// the tile edges and decode sizes, sparse_mode 0 with each full-mask shape or none and 4 with the
// template or none, pre/next unbounded, positive or negative, pse with random broadcast dims,
// sinks, dropout, TND with empty and dropped sequences.
static std::vector<Case> random_cases(RandomDraw& r) {
  static const char* layouts[] = {"BSH", "SBH", "BSND", "BNSD", "TND"};
  static const MaskKind full_masks[] = {kNoMask, kBNSS, kB1SS, k11SS, kSS};
  std::vector<Case> cs;
  for (int i = 0; i < r.count; ++i) {
    Case c;
    c.layout = layouts[r.pick(0, 4)];
    const bool tnd = c.layout == "TND";
    c.D = r.head_dim();
    c.Dv = r.value_dim(c.D);
    c.N2 = r.pick(1, 3);
    c.N1 = c.N2 * r.pick(1, 3);
    if (tnd) {
      const int64_t B = r.pick(1, 4);
      c.lq = r.tnd_lengths(B, false);
      c.lkv = r.tnd_lengths(B, true);
      c.trailing_zeros = static_cast<int>(r.pick(0, B - 1));
    } else {
      c.B = r.pick(1, 3);
      c.S1 = r.length();
      c.S2 = r.one_in(3) && c.S1 > 1 ? c.S1 : r.key_length();
    }
    c.mode = r.one_in(2) ? 0 : 4;
    if (c.mode == 4) c.mask = r.one_in(4) ? kNoMask : kTemplate;
    else c.mask = tnd ? (r.one_in(2) ? kNoMask : kSS) : full_masks[r.pick(0, 4)];
    auto bound = [&]() { return r.one_in(3) ? kInf : r.pick(-10, 50); };
    do {  // a band of negative width masks every key: rejected (pre + next >= 0)
      c.pre = bound();
      c.next = bound();
    } while (c.pre + c.next < 0);
    c.pse = r.one_in(3);
    if (c.pse) {
      c.pse_b1 = r.one_in(2);
      c.pse_n1 = r.one_in(2);
      c.pse_i1 = r.one_in(3);
    }
    c.sink = r.one_in(4);
    if (r.one_in(4)) {
      c.keep_prob = 0.5 + 0.1 * static_cast<double>(r.pick(0, 4));
      c.seed = static_cast<uint64_t>(r.pick(0, 1000));
      c.offset = static_cast<uint64_t>(r.pick(0, 1)) << 33;
    }
    c.scale = 0.05 + 0.05 * static_cast<double>(r.pick(0, 8));
    cs.push_back(c);
  }
  return cs;
}

static int run_all_here() {
  opSetParallelBackend(&g_backend);
  std::printf("ISA %s\n", isa_name(active_isa()));
  test_errors();
  test_dropout_stats();
  test_forced_mode4();
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

int main() { return run_all_here(); }
