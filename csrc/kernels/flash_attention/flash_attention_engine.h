// The flash attention engine: forward and backward tile loops (torch-free).
//
// Included once by each ISA translation unit (flash_attention_kernels{,.avx2,.avx512}.cpp),
// whose compiler flags pick the namespace (see kernels/common/simd.h) and the Ops structs.
//
// Layout choices (see flash_attention_params.h for the tile sizes):
//   * Scores are computed transposed, S^T[j][i] = K[j,:] . Q[i,:], as a GEMM whose broadcast
//     operand is the key row read in place from the user tensor and whose vector operand is the
//     query block packed once per task as Qt[d][i]. Vectors therefore run over query rows, and
//     every online-softmax statistic (running max m_i, sum l_i, rescale alpha_i, lse_i, D_i)
//     is a lane-wise vector, with no horizontal reduction anywhere.
//   * Forward O[i][:] = alpha_i O[i][:] + sum_j P^T[j][i] V[j][:]: P^T is the broadcast operand
//     (fp32: in place; bf16: written in pair-interleaved form), V the vector operand (fp32: rows
//     in place, or a head-major copy when strided; bf16: staged once as key-row pairs).
//   * Backward, one task per (b, query head): for each key tile (outer) and each query tile
//     that can see it (inner): S^T, dP^T = V dO^T (vector operand dO packed once as dOt),
//     P^T = exp(S^T - lse), dS^T = P^T (dP^T - D); dV += P^T dO, dK += dS^T Q (dO / Q rows as
//     vector operands), dQ += dS K (dS as broadcast operand). dQ lives in a per-task fp32 buffer
//     for the whole head, dK/dV in per-key-tile buffers: five GEMMs per tile, no recomputation
//     pass, no atomics. dK/dV of query heads sharing a kv head (GQA) go to a partial buffer and
//     are summed in a fixed order afterwards.
//   * Masks and windows: the key range of a query block (forward) or the query range of a key
//     tile (backward) comes from the window bounds, so tiles outside the window are never
//     visited (a window costs O(S*W)); only tiles cut by the window boundary apply a lane mask.
//   * swa extras are compile-time features of the same loops (kFeat), so flash_attn's
//     instantiation is unchanged: kFeatBias adds an additive tile (c2 * pse, -inf where the full
//     mask is set) to the logits; kFeatDropout multiplies P by the counter-based keep mask
//     (counter_rng.h) where it feeds P V (forward) or dV and dP (backward), never the sums.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/counter_rng.h"
#include "kernels/common/gemm_ukernel.h"
#include "kernels/common/simd.h"
#include "kernels/flash_attention/flash_attention_plan.h"
#include "op_plugin/parallel.h"

namespace op_plugin {
namespace OP_ISA_NS {
namespace fa {

using flash::FlashAttnBwdParams;
using flash::FlashAttnFwdParams;
using flash::kBlockKV;
using flash::kBlockQ;
using flash::pad16;
using flash::Plan;
using flash::RowWindow;
using flash::Task;

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

// Output element kinds.
enum Out : int { kOutF32 = 0, kOutF64 = 1, kOutBf16 = 2, kOutF16 = 3 };

template <class S, bool kNativeBf16>
inline void store_row(int out_kind, const S* src, void* dst, int64_t n, S scale, float* tmp) {
  if (out_kind == kOutF64) {
    double* d = static_cast<double*>(dst);
    for (int64_t c = 0; c < n; ++c) d[c] = static_cast<double>(src[c]) * static_cast<double>(scale);
    return;
  }
  if (out_kind == kOutF32) {
    float* d = static_cast<float*>(dst);
    for (int64_t c = 0; c < n; ++c) d[c] = static_cast<float>(src[c] * scale);
    return;
  }
  for (int64_t c = 0; c < n; ++c) tmp[c] = static_cast<float>(src[c] * scale);
  if (out_kind == kOutBf16)
    cvt_f32_to_bf16<kNativeBf16>(tmp, static_cast<uint16_t*>(dst), n);
  else
    cvt_f32_to_f16(tmp, static_cast<uint16_t*>(dst), n);
}

inline void zero_row(int out_kind, void* dst, int64_t n) {
  const int64_t bytes = out_kind == kOutF64 ? 8 : out_kind == kOutF32 ? 4 : 2;
  std::memset(dst, 0, static_cast<size_t>(n * bytes));
}

inline int64_t out_elem_bytes(int out_kind) { return out_kind == kOutF64 ? 8 : out_kind == kOutF32 ? 4 : 2; }

// lse element access (float or double tensor).
struct LseRef {
  void* base;
  bool f64;
  double get(int64_t idx) const {
    return f64 ? static_cast<const double*>(base)[idx] : static_cast<double>(static_cast<const float*>(base)[idx]);
  }
  void set(int64_t idx, double v) const {
    if (f64)
      static_cast<double*>(base)[idx] = v;
    else
      static_cast<float*>(base)[idx] = static_cast<float>(v);
  }
};

// Packs rows [0, rows) x cols [0, n) of a row-major operand (row stride ld) transposed into
// dst[(c / KP) * ldd + r * KP + c % KP] (fp32: dst[c][r]; bf16: 32-bit pairs of c), zero for
// rows >= rows up to `rows_pad` and for the odd pair tail.
template <class T, int KP>
inline void pack_transposed(const T* src, int64_t ld, int64_t rows, int64_t rows_pad, int64_t n, T* dst,
                            int64_t ldd) {
  const int64_t npairs = (n + KP - 1) / KP;
  if (KP == 1) {
    // fp32 / fp64: blocks of 8 rows keep the source rows in cache while columns are written.
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
      const int64_t r1 = imin(rows, r0 + 8);
      for (int64_t c = 0; c < n; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * ld + c];
    }
    for (int64_t c = 0; c < n; ++c)
      for (int64_t r = rows; r < rows_pad; ++r) dst[c * ldd + r] = T(0);
  } else {
    // bf16 pairs: a 32-bit transpose of the [rows][n/2] view.
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
      const int64_t r1 = imin(rows, r0 + 8);
      for (int64_t cp = 0; cp < npairs; ++cp)
        for (int64_t r = r0; r < r1; ++r) {
          const T* s = src + r * ld + cp * 2;
          T* d = dst + cp * ldd + r * 2;
          d[0] = s[0];
          d[1] = (cp * 2 + 1 < n) ? s[1] : T(0);
        }
    }
    for (int64_t cp = 0; cp < npairs; ++cp)
      for (int64_t r = rows; r < rows_pad; ++r) {
        dst[cp * ldd + r * 2] = T(0);
        dst[cp * ldd + r * 2 + 1] = T(0);
      }
  }
}

// Packs rows [0, rows) of a row-major bf16 operand into row pairs: dst[(r/2) * 2*ldd + 2c + r%2],
// c < n; a missing odd last row is zero; pair rows up to rows_pad/2 are zero.
inline void pack_row_pairs(const uint16_t* src, int64_t ld, int64_t rows, int64_t rows_pad, int64_t n,
                           uint16_t* dst, int64_t ldd) {
  int64_t r = 0;
  for (; r + 1 < rows; r += 2) interleave_u16(src + r * ld, src + (r + 1) * ld, dst + (r / 2) * 2 * ldd, n);
  if (r < rows) {
    interleave_u16(src + r * ld, nullptr, dst + (r / 2) * 2 * ldd, n);
    r += 2;
  }
  for (; r < rows_pad; r += 2) std::memset(dst + (r / 2) * 2 * ldd, 0, static_cast<size_t>(2 * n) * 2);
}

// Bump allocator over one slot of the workspace.
struct Carve {
  char* p;
  template <class X>
  X* take(int64_t count) {
    X* r = reinterpret_cast<X*>(p);
    p += (static_cast<int64_t>(sizeof(X)) * count + 63) / 64 * 64;
    return r;
  }
};

// ---- swa extras --------------------------------------------------------------------------
enum Feat : int { kFeatBias = 1, kFeatDropout = 2 };
template <int V>
struct IntConst {
  static constexpr int value = V;
};

inline int features_of(const FlashAttnFwdParams& p) {
  return (p.full_mask || p.pse ? kFeatBias : 0) | (p.keep_prob < 1.0 ? kFeatDropout : 0);
}

inline float load_float(const void* base, opDataType dt, int64_t idx) {
  switch (dt) {
    case OP_DT_DOUBLE: return static_cast<float>(static_cast<const double*>(base)[idx]);
    case OP_DT_BF16: return bf16_to_float(static_cast<const uint16_t*>(base)[idx]);
    case OP_DT_FLOAT16: return half_bits_to_float(static_cast<const uint16_t*>(base)[idx]);
    default: return static_cast<const float*>(base)[idx];
  }
}

// Additive tile bias[j * Br + i] (log2 units) for query rows i0 + [0, rows) and keys j0 + [0, nc)
// of head n, batch b: c2 * pse, or -inf where the full mask is set; lanes past `rows` get 0.
// The mask rows are transposed as bytes first (mt: Bc x Br scratch), so the masking is a
// contiguous select the compiler vectorises.
template <class S>
inline void build_bias(const FlashAttnFwdParams& p, int64_t b, int64_t n, int64_t i0, int64_t rows, int64_t j0,
                       int64_t nc, S c2, S* bias, uint8_t* mt) {
  const int64_t Br = kBlockQ;
  for (int64_t x = 0; x < nc * Br; ++x) bias[x] = S(0);
  if (p.pse) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t base = b * p.pse_batch_stride + n * p.pse_head_stride + (i0 + i) * p.pse_row_stride + j0;
      S* col = bias + i;
      if (p.pse_dtype == OP_DT_DOUBLE) {
        const double* x = static_cast<const double*>(p.pse) + base;
        for (int64_t j = 0; j < nc; ++j) col[j * Br] = c2 * static_cast<S>(x[j]);
      } else {
        for (int64_t j = 0; j < nc; ++j) col[j * Br] = c2 * static_cast<S>(load_float(p.pse, p.pse_dtype, base + j));
      }
    }
  }
  if (p.full_mask) {
    const uint8_t* m = p.full_mask + b * p.full_mask_batch_stride + n * p.full_mask_head_stride +
                       i0 * p.full_mask_row_stride + j0;
    transpose_bytes(m, p.full_mask_row_stride, rows, nc, mt, Br);
    for (int64_t j = 0; j < nc; ++j) {
      S* bj = bias + j * Br;
      const uint8_t* tj = mt + j * Br;
      for (int64_t i = 0; i < rows; ++i) bj[i] = tj[i] ? static_cast<S>(-INFINITY) : bj[i];
    }
  }
}

// First dropout element index of row i of head n, batch b (key 0).
inline uint64_t dropout_row0(const FlashAttnFwdParams& p, int64_t b, int64_t n, int64_t i) {
  const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b];
  return static_cast<uint64_t>(p.elem_start[b] + (n * sq + i) * skv);
}

// Runs body(task, slot_base) over the plan's tasks, longest first, from a shared counter: the
// schedule varies with the thread count, the arithmetic of a task does not.
template <class Body>
inline void run_tasks(const Plan& plan, void* workspace, const Body& body) {
  int64_t next = 0;
  int64_t* counter = &next;
  const int64_t slots = plan.slots;
  op_plugin::parallel_for(0, slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      char* base = static_cast<char*>(workspace) + plan.slot_offset + static_cast<uint64_t>(s) * plan.slot_bytes;
      for (;;) {
        const int64_t t = __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
        if (t >= plan.num_tasks) break;
        body(plan.tasks[t], base);
      }
    }
  });
}

// ============================================================================================
// Forward
// ============================================================================================
template <class Ops>
struct Forward {
  using T = typename Ops::T;
  using S = typename Ops::S;
  using V = typename Ops::V;
  static constexpr int W = Ops::W;
  static constexpr int KP = Ops::KP;
  static constexpr int64_t Br = kBlockQ;
  static constexpr int64_t Bc = kBlockKV;
  static constexpr int NVQ = static_cast<int>(Br / W);  // vectors per score row

  template <int kFeat>
  static void task(const FlashAttnFwdParams& p, const Plan& plan, void* ws, int out_kind, const Task& t, char* slot) {
    const int64_t b = t.b, n = t.n, i0 = t.i0;
    const int64_t h = n / p.group;
    const int64_t D = p.head_dim, Dv = p.head_dim_v;
    const int64_t D2 = (D + 1) / 2 * 2;
    const int64_t Dvp = pad16(Dv);
    const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b];
    const int64_t rows = imin(Br, sq - i0);
    const RowWindow w = flash::row_window(p, sq, skv);

    Carve c{slot};
    T* qt = c.take<T>(D2 * Br);
    S* sc = c.take<S>(Bc * Br);
    T* pp = c.take<T>(Bc * Br);
    S* acc = c.take<S>(Br * Dvp);
    S* m = c.take<S>(Br);
    S* l = c.take<S>(Br);
    S* alpha = c.take<S>(Br);
    float* tmp = c.take<float>(Dvp + Br);  // conversion scratch (bf16 P rows, output rows)
    S* bias = (kFeat & kFeatBias) ? c.take<S>(Bc * Br) : nullptr;
    uint8_t* mt = (kFeat & kFeatBias) ? c.take<uint8_t>(Bc * Br) : nullptr;
    DropoutKey dkey;
    DropoutLanes lanes;
    uint64_t e_row0 = 0;  // dropout element of (row i0, key 0); row i0 + r adds r * skv
    if constexpr ((kFeat & kFeatDropout) != 0) {
      dkey = dropout_key(p.dropout_seed, p.dropout_offset, p.keep_prob);
      lanes.set(skv);
      e_row0 = dropout_row0(p, b, n, i0);
    }

    const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + (p.q_start[b] + i0) * p.q_row_stride +
                 n * p.q_head_stride;
    const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + p.kv_start[b] * p.k_row_stride +
                 h * p.k_head_stride;
    const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + p.kv_start[b] * p.v_row_stride +
                 h * p.v_head_stride;

    pack_transposed<T, KP>(q, p.q_row_stride, rows, Br, D, qt, Br * KP);

    const S c2 = static_cast<S>(p.scale * kLog2e);  // logits in log2 units
    const bool sink = p.sinks != nullptr;
    const S m0 = sink ? static_cast<S>(static_cast<double>(p.sinks[n]) * kLog2e) : static_cast<S>(-INFINITY);
    for (int64_t i = 0; i < Br; ++i) {
      m[i] = m0;
      l[i] = sink ? S(1) : S(0);
    }
    for (int64_t i = 0; i < Br * Dvp; ++i) acc[i] = S(0);

    // bf16: key tiles start at even keys so that they line up with the staged key-row pairs
    // (an extra key in front is masked: no row of the block can see it).
    const int64_t jlo = KP == 2 ? (w.lo(i0) & ~int64_t(1)) : w.lo(i0), jhi = w.hi(i0 + rows - 1);
    const T* vpairs = nullptr;
    if (KP == 2)
      vpairs = reinterpret_cast<const T*>(static_cast<const char*>(ws) + plan.vpair_offset) +
               (h * plan.vpair_rows + plan.vpair_row0[b]) * 2 * Dvp;
    bool first = true;
    for (int64_t j0 = jlo; j0 <= jhi; j0 += Bc) {
      const int64_t nc = imin(Bc, jhi + 1 - j0);
      const bool full = w.lo(i0 + rows - 1) <= j0 && w.hi(i0) >= j0 + nc - 1;
      // Keys [j0, j0 + ncv[iv]) are the ones lane group iv (rows base .. base + W - 1) can see:
      // on a tile cut by the diagonal (causal) or the right window edge, the later keys are
      // invisible to the earlier rows (P = 0), so neither S^T nor P V computes them there.
      // Non-decreasing in iv; all nc away from the right edge. bf16: whole key pairs.
      int64_t ncv[NVQ];
      for (int iv = 0; iv < NVQ; ++iv) {
        const int64_t last = i0 + imin(rows, static_cast<int64_t>(iv + 1) * W) - 1;
        int64_t x = imax(0, imin(nc, w.hi(last) + 1 - j0));
        if (KP == 2) x = imin(nc, (x + 1) & ~int64_t(1));
        ncv[iv] = x;
      }
      // S^T[j][i] = K[j0 + j, :] . Q[i0 + i, :]: keys [ncv[iv-1], ncv[iv]) for lanes iv*W.. only
      for (int iv = 0, done = 0; iv < NVQ; ++iv) {
        if (ncv[iv] <= done) continue;
        gemm<Ops>(ncv[iv] - done, Br - iv * W, (D + KP - 1) / KP, k + (j0 + done) * p.k_row_stride, p.k_row_stride,
                  KP, qt + iv * W * KP, Br * KP, sc + done * Br + iv * W, Br, nullptr, kOverwrite);
        done = static_cast<int>(ncv[iv]);
      }
      if constexpr ((kFeat & kFeatBias) != 0) build_bias<S>(p, b, n, i0, rows, j0, nc, c2, bias, mt);
      // Online softmax, lane-wise over query rows.
      for (int iv = 0; iv < NVQ; ++iv) {
        const int64_t base = i0 + iv * W;
        V mx = Ops::set1(static_cast<S>(-INFINITY));
        S* col = sc + iv * W;
        // dropout element of (row base, key j0); lane l adds l * skv, key j adds j
        const uint64_t e_vec = e_row0 + static_cast<uint64_t>(iv * W * skv + j0);
        for (int64_t j = 0; j < ncv[iv]; ++j) {
          V x = Ops::mul(Ops::loadc(col + j * Br), Ops::set1(c2));
          if constexpr ((kFeat & kFeatBias) != 0) x = Ops::add(x, Ops::loadc(bias + j * Br + iv * W));
          if (!full) x = Ops::mask_range(x, base, w.first_row(j0 + j), w.last_row(j0 + j));
          Ops::storec(col + j * Br, x);
          mx = Ops::max(mx, x);
        }
        const V mold = Ops::loadc(m + iv * W);
        const V mnew = Ops::max(mold, mx);
        const V muse = Ops::select_neginf(mnew, Ops::zero(), mnew);  // rows with no key yet
        const V a = Ops::exp2(Ops::sub(mold, muse));
        Ops::storec(alpha + iv * W, a);
        Ops::storec(m + iv * W, mnew);
        V sum = Ops::zero();
        if constexpr (KP == 2) {
          // bf16: P^T rows j, j+1 go straight to the pair-interleaved operand of O += P V.
          uint16_t* pp16 = reinterpret_cast<uint16_t*>(pp) + 2 * iv * W;
          for (int64_t j = 0; j < ncv[iv]; j += 2) {
            V e0 = Ops::exp2(Ops::sub(Ops::loadc(col + j * Br), muse));
            V e1 = j + 1 < ncv[iv] ? Ops::exp2(Ops::sub(Ops::loadc(col + (j + 1) * Br), muse)) : Ops::zero();
            sum = Ops::add(Ops::add(sum, e0), e1);
            if constexpr ((kFeat & kFeatDropout) != 0) {  // the sum keeps every term, P V the kept ones
              e0 = dropout_apply<Ops>(e0, e_vec + j, lanes, dkey);
              e1 = dropout_apply<Ops>(e1, e_vec + j + 1, lanes, dkey);
            }
            Ops::store_bf16_pair(pp16 + j * Br, e0, e1);
          }
        } else {
          for (int64_t j = 0; j < ncv[iv]; ++j) {
            V e = Ops::exp2(Ops::sub(Ops::loadc(col + j * Br), muse));
            sum = Ops::add(sum, e);
            if constexpr ((kFeat & kFeatDropout) != 0) e = dropout_apply<Ops>(e, e_vec + j, lanes, dkey);
            Ops::storec(col + j * Br, e);
          }
        }
        Ops::storec(l + iv * W, Ops::add(Ops::mul(Ops::loadc(l + iv * W), a), sum));
      }
      // O = alpha O + P V over the rows of lane groups that see the same keys (one call away
      // from the right edge).
      for (int iv = 0; iv < NVQ;) {
        int ive = iv + 1;
        while (ive < NVQ && ncv[ive] == ncv[iv]) ++ive;
        const int64_t r0 = iv * W, r1 = imin(rows, static_cast<int64_t>(ive) * W);
        if (r0 >= rows) break;
        const int64_t kc = ncv[iv];
        S* arows = acc + r0 * Dvp;
        const S* rs = first ? nullptr : alpha + r0;
        const int mode = first ? kAccumulate : kScaleAccumulate;
        if (KP == 1) {
          // P^T in place as broadcast operand, V rows in place
          gemm<Ops>(r1 - r0, Dv, kc, reinterpret_cast<const T*>(sc) + r0, 1, Br, v + j0 * p.v_row_stride,
                    p.v_row_stride, arows, Dvp, rs, mode);
        } else {
          // bf16: P in pairs (written above); V read from the staged key-row pairs.
          gemm<Ops>(r1 - r0, Dv, (kc + 1) / 2, pp + 2 * r0, 2, 2 * Br, vpairs + j0 * Dvp, 2 * Dvp, arows, Dvp, rs,
                    mode);
        }
        iv = ive;
      }
      first = false;
    }

    // Finalise: out = O / l, lse = (m + log2 l) ln 2; rows without keys: out 0, lse +inf.
    // swa statistics: max = m ln 2, sum = l (8 copies); rows with no key (a sink alone leaves
    // m = sink, l = 1): out 0, max -FLT_MAX, sum FLT_MAX (SPEC §2.3).
    const int64_t ob = out_elem_bytes(out_kind);
    char* out = static_cast<char*>(p.out) +
                (b * p.o_batch_stride + (p.q_start[b] + i0) * p.o_row_stride + n * p.o_head_stride) * ob;
    LseRef lse{p.lse, p.lse_dtype == OP_DT_DOUBLE};
    LseRef ssum{p.softmax_sum, p.lse_dtype == OP_DT_DOUBLE};
    const bool stats = p.softmax_sum != nullptr;
    const int64_t lse_base = b * p.lse_batch_stride + n * p.lse_head_stride + (p.q_start[b] + i0) * p.lse_row_stride;
    for (int64_t i = 0; i < rows; ++i) {
      void* orow = out + i * p.o_row_stride * ob;
      const bool empty = w.lo(i0 + i) > w.hi(i0 + i) || l[i] == S(0) || (stats && sink && m[i] == m0 && l[i] == S(1));  // NaN is not empty: it propagates
      const int64_t li = lse_base + i * p.lse_row_stride;
      if (stats) {
        const double mx = empty ? -FLT_MAX : static_cast<double>(m[i]) * kLn2;
        const double sm = empty ? FLT_MAX : static_cast<double>(l[i]);
        for (int r = 0; r < 8; ++r) {
          lse.set(li + r, mx);
          ssum.set(li + r, sm);
        }
      }
      if (empty) {
        zero_row(out_kind, orow, Dv);
        if (p.lse && !stats) lse.set(li, INFINITY);
        continue;
      }
      store_row<S, Ops::kNativeBf16>(out_kind, acc + i * Dvp, orow, Dv, S(1) / l[i], tmp);
      if (p.lse && !stats)
        lse.set(li, (static_cast<double>(m[i]) + std::log2(static_cast<double>(l[i]))) * kLn2);
    }
  }
};

// ============================================================================================
// Backward
// ============================================================================================
template <class Ops>
struct Backward {
  using T = typename Ops::T;
  using S = typename Ops::S;
  using V = typename Ops::V;
  static constexpr int W = Ops::W;
  static constexpr int KP = Ops::KP;
  static constexpr int64_t Br = kBlockQ;
  static constexpr int64_t Bc = kBlockKV;
  static constexpr int NVQ = static_cast<int>(Br / W);

  template <int kFeat>
  static void task(const FlashAttnBwdParams& p, const Plan& plan, int out_kind, void* workspace, const Task& t,
                   char* slot) {
    const int64_t b = t.b, n = t.n;
    const int64_t h = n / p.group;
    const int64_t D = p.head_dim, Dv = p.head_dim_v;
    const int64_t D2 = (D + 1) / 2 * 2, Dv2 = (Dv + 1) / 2 * 2;
    // key tiles [t0, t1) of this chunk
    const int64_t C = plan.bwd_chunks, chunk = t.i0;
    const int64_t tiles = (p.seqlen_kv[b] + Bc - 1) / Bc;
    const int64_t jbeg = chunk * tiles / C * Bc, jend = imin(p.seqlen_kv[b], (chunk + 1) * tiles / C * Bc);
    S* dqpart = C > 1 ? reinterpret_cast<S*>(static_cast<char*>(workspace) + plan.dqpart_offset) +
                            ((chunk * plan.dq_rows + b * plan.q_batch_rows + p.q_start[b]) * p.heads_q + n) * pad16(D)
                      : nullptr;
    const int64_t dqpart_ld = p.heads_q * pad16(D);
    // dK/dV rows past seqused_kv are zero (written by the last chunk when not reduced later).
    auto zero_kv_padding = [&]() {
      if (p.group != 1 || chunk != C - 1) return;
      const int64_t ob = out_elem_bytes(out_kind);
      char* dk = static_cast<char*>(p.dk) + (b * p.dk_batch_stride + p.kv_start[b] * p.dk_row_stride + h * p.dk_head_stride) * ob;
      char* dv = static_cast<char*>(p.dv) + (b * p.dv_batch_stride + p.kv_start[b] * p.dv_row_stride + h * p.dv_head_stride) * ob;
      for (int64_t j = p.seqlen_kv[b]; j < p.rows_kv[b]; ++j) {
        zero_row(out_kind, dk + j * p.dk_row_stride * ob, D);
        zero_row(out_kind, dv + j * p.dv_row_stride * ob, Dv);
      }
    };
    if (C > 1 && jbeg >= jend) {  // empty chunk: its dQ partial is zero
      for (int64_t i = 0; i < p.seqlen_q[b]; ++i) std::memset(dqpart + i * dqpart_ld, 0, sizeof(S) * static_cast<size_t>(D));
      zero_kv_padding();
      return;
    }
    const int64_t Dp = pad16(D), Dvp = pad16(Dv);
    const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b];
    const int64_t S1p = pad16(p.max_seqlen_q) + Br;
    const RowWindow w = flash::row_window(p, sq, skv);
    const bool pairs = KP == 2;

    Carve c{slot};
    T* qt = c.take<T>(D2 * S1p);
    T* dot = c.take<T>(Dv2 * S1p);
    T* qpair = nullptr;
    T* dopair = nullptr;
    T* kpair = nullptr;
    if (pairs) {
      qpair = c.take<T>(S1p * Dp);
      dopair = c.take<T>(S1p * Dvp);
      kpair = c.take<T>(Bc * Dp);
    }
    S* lse2 = c.take<S>(2 * S1p);
    S* delta = lse2 + S1p;
    S* dqacc = c.take<S>(S1p * Dp);
    S* sc = c.take<S>(2 * Bc * Br);
    S* dp = sc + Bc * Br;
    T* pt = c.take<T>(3 * Bc * Br);
    T* dst = pt + Bc * Br;
    T* dsi = dst + Bc * Br;
    S* dkacc = c.take<S>(Bc * (Dp + Dvp));
    S* dvacc = dkacc + Bc * Dp;
    float* tmp = c.take<float>(Dp + Dvp);  // output conversion scratch
    S* bias = (kFeat & kFeatBias) ? c.take<S>(Bc * Br) : nullptr;
    uint8_t* mt = (kFeat & kFeatBias) ? c.take<uint8_t>(Bc * Br) : nullptr;
    DropoutKey dkey;
    DropoutLanes lanes;
    uint64_t e_head = 0;  // dropout element of (row 0, key 0) of this head
    if constexpr ((kFeat & kFeatDropout) != 0) {
      dkey = dropout_key(p.dropout_seed, p.dropout_offset, p.keep_prob);
      lanes.set(skv);
      e_head = dropout_row0(p, b, n, 0);
    }
    S* dpse = p.want_dpse ? reinterpret_cast<S*>(static_cast<char*>(workspace) + plan.dpse_offset) +
                                (b * p.heads_q + n) * plan.dpse_rows * plan.dpse_cols
                          : nullptr;

    const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + p.q_start[b] * p.q_row_stride +
                 n * p.q_head_stride;
    const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + p.kv_start[b] * p.k_row_stride +
                 h * p.k_head_stride;
    const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + p.kv_start[b] * p.v_row_stride +
                 h * p.v_head_stride;
    const T* o = static_cast<const T*>(p.out) + b * p.o_batch_stride + p.q_start[b] * p.o_row_stride +
                 n * p.o_head_stride;
    const T* dO = static_cast<const T*>(p.dout) + b * p.o_batch_stride + p.q_start[b] * p.o_row_stride +
                  n * p.o_head_stride;

    // ---- per-head preparation ------------------------------------------------------------
    pack_transposed<T, KP>(q, p.q_row_stride, sq, S1p, D, qt, S1p * KP);
    pack_transposed<T, KP>(dO, p.o_row_stride, sq, S1p, Dv, dot, S1p * KP);
    if (pairs) {
      pack_row_pairs(reinterpret_cast<const uint16_t*>(q), p.q_row_stride, sq, S1p, D,
                     reinterpret_cast<uint16_t*>(qpair), Dp);
      pack_row_pairs(reinterpret_cast<const uint16_t*>(dO), p.o_row_stride, sq, S1p, Dv,
                     reinterpret_cast<uint16_t*>(dopair), Dvp);
    }
    LseRef lse{p.lse, p.lse_dtype == OP_DT_DOUBLE};
    LseRef ssum{p.softmax_sum, p.lse_dtype == OP_DT_DOUBLE};
    const int64_t lse_base = b * p.lse_batch_stride + n * p.lse_head_stride + p.q_start[b] * p.lse_row_stride;
    for (int64_t i = 0; i < S1p; ++i) {
      if (i < sq) {
        const int64_t li = lse_base + i * p.lse_row_stride;
        lse2[i] = static_cast<S>((p.softmax_sum ? lse_of_stats(lse.get(li), ssum.get(li)) : lse.get(li)) * kLog2e);
        S d = S(0);
        const T* orow = o + i * p.o_row_stride;
        const T* drow = dO + i * p.o_row_stride;
        for (int64_t cc = 0; cc < Dv; ++cc) d += to_s(orow[cc]) * to_s(drow[cc]);
        delta[i] = d;
      } else {
        lse2[i] = static_cast<S>(INFINITY);
        delta[i] = S(0);
      }
    }
    for (int64_t i = 0; i < sq * Dp; ++i) dqacc[i] = S(0);

    const S c2 = static_cast<S>(p.scale * kLog2e);
    const S sc_out = static_cast<S>(p.scale);
    const bool direct = p.group == 1;
    S* partial = direct ? nullptr
                        : reinterpret_cast<S*>(static_cast<char*>(workspace) + plan.partial_offset);
    const int64_t prow0 = b * plan.kv_batch_rows + p.kv_start[b];

    // ---- key tiles -------------------------------------------------------------------------
    for (int64_t j0 = jbeg; j0 < jend; j0 += Bc) {
      const int64_t nc = imin(Bc, skv - j0);
      const int64_t ilo = imax(0, w.first_row(j0));
      const int64_t ihi = imin(sq - 1, w.last_row(j0 + nc - 1));
      for (int64_t i = 0; i < nc * Dp; ++i) dkacc[i] = S(0);
      for (int64_t i = 0; i < nc * Dvp; ++i) dvacc[i] = S(0);
      if (ilo <= ihi) {
        const T* kt = k + j0 * p.k_row_stride;
        const T* vt = v + j0 * p.v_row_stride;
        if (pairs)
          pack_row_pairs(reinterpret_cast<const uint16_t*>(kt), p.k_row_stride, nc, nc, D,
                         reinterpret_cast<uint16_t*>(kpair), Dp);
        // Query tiles start at the first row that sees the key tile (even, for bf16 row pairs),
        // so a window of W keys costs ceil((W + Bc) / Br) tiles per key tile.
        for (int64_t i0 = ilo & ~int64_t(1); i0 <= ihi; i0 += Br) {
          const int64_t nr = imin(Br, ihi + 1 - i0);
          // Keys of the tile that some row of this query tile can see: the rest (the far side of
          // the diagonal for the first query tile under causal) has P = dS = 0 and is skipped in
          // all five GEMMs. bf16: whole key pairs.
          int64_t ncq = imin(nc, w.hi(i0 + nr - 1) + 1 - j0);
          if (pairs) ncq = imin(nc, (ncq + 1) & ~int64_t(1));
          const bool full = nr == Br && w.lo(i0 + nr - 1) <= j0 && w.hi(i0) >= j0 + ncq - 1 && i0 >= ilo;
          const int64_t row_hi = i0 + nr - 1;  // lanes past it are zeroed
          gemm<Ops>(ncq, Br, (D + KP - 1) / KP, kt, p.k_row_stride, KP, qt + i0 * KP, S1p * KP, sc, Br, nullptr,
                    kOverwrite);
          gemm<Ops>(ncq, Br, (Dv + KP - 1) / KP, vt, p.v_row_stride, KP, dot + i0 * KP, S1p * KP, dp, Br, nullptr,
                    kOverwrite);
          if constexpr ((kFeat & kFeatBias) != 0) build_bias<S>(p, b, n, i0, nr, j0, ncq, c2, bias, mt);
          // P^T = 2^(S^T c2 - lse2), dS^T = P^T (dP^T - D)
          if constexpr (KP == 2) {
            // bf16: P^T and dS^T rows as bf16 (pairs along i) and dS^T rows j, j+1 interleaved
            // (pairs along j), written straight from registers.
            uint16_t* p16 = reinterpret_cast<uint16_t*>(pt);
            uint16_t* d16 = reinterpret_cast<uint16_t*>(dst);
            uint16_t* di16 = reinterpret_cast<uint16_t*>(dsi);
            for (int64_t j = 0; j < ncq; j += 2) {
              const bool has1 = j + 1 < ncq;
              const int64_t flo0 = w.first_row(j0 + j), fhi0 = imin(w.last_row(j0 + j), row_hi);
              const int64_t flo1 = w.first_row(j0 + j + 1), fhi1 = imin(w.last_row(j0 + j + 1), row_hi);
              for (int iv = 0; iv < NVQ; ++iv) {
                const int64_t base = i0 + iv * W;
                const V l2 = Ops::loadc(lse2 + base);
                const V dl = Ops::loadc(delta + base);
                const uint64_t e_vec = e_head + static_cast<uint64_t>(base * skv + j0 + j);
                V x0 = Ops::mul(Ops::loadc(sc + j * Br + iv * W), Ops::set1(c2));
                if constexpr ((kFeat & kFeatBias) != 0) x0 = Ops::add(x0, Ops::loadc(bias + j * Br + iv * W));
                if (!full) x0 = Ops::mask_range(x0, base, flo0, fhi0);
                const V p0 = Ops::exp2(Ops::sub(x0, l2));
                V pd0 = p0, dp0 = Ops::loadc(dp + j * Br + iv * W);
                if constexpr ((kFeat & kFeatDropout) != 0) dropout_pair(p0, &pd0, &dp0, e_vec, lanes, dkey);
                const V ds0 = Ops::mul(p0, Ops::sub(dp0, dl));
                if constexpr ((kFeat & kFeatBias) != 0) Ops::storec(dp + j * Br + iv * W, ds0);  // for dpse
                Ops::store_bf16(p16 + j * Br + iv * W, pd0);
                Ops::store_bf16(d16 + j * Br + iv * W, ds0);
                V ds1 = Ops::zero();
                if (has1) {
                  V x1 = Ops::mul(Ops::loadc(sc + (j + 1) * Br + iv * W), Ops::set1(c2));
                  if constexpr ((kFeat & kFeatBias) != 0) x1 = Ops::add(x1, Ops::loadc(bias + (j + 1) * Br + iv * W));
                  if (!full) x1 = Ops::mask_range(x1, base, flo1, fhi1);
                  const V p1 = Ops::exp2(Ops::sub(x1, l2));
                  V pd1 = p1, dp1 = Ops::loadc(dp + (j + 1) * Br + iv * W);
                  if constexpr ((kFeat & kFeatDropout) != 0) dropout_pair(p1, &pd1, &dp1, e_vec + 1, lanes, dkey);
                  ds1 = Ops::mul(p1, Ops::sub(dp1, dl));
                  if constexpr ((kFeat & kFeatBias) != 0) Ops::storec(dp + (j + 1) * Br + iv * W, ds1);
                  Ops::store_bf16(p16 + (j + 1) * Br + iv * W, pd1);
                  Ops::store_bf16(d16 + (j + 1) * Br + iv * W, ds1);
                }
                Ops::store_bf16_pair(di16 + j * Br + 2 * iv * W, ds0, ds1);
              }
            }
          } else {
          for (int64_t j = 0; j < ncq; ++j) {
            const int64_t flo = w.first_row(j0 + j);
            const int64_t fhi = imin(w.last_row(j0 + j), row_hi);
            for (int iv = 0; iv < NVQ; ++iv) {
              const int64_t base = i0 + iv * W;
              V x = Ops::mul(Ops::loadc(sc + j * Br + iv * W), Ops::set1(c2));
              if constexpr ((kFeat & kFeatBias) != 0) x = Ops::add(x, Ops::loadc(bias + j * Br + iv * W));
              if (!full) x = Ops::mask_range(x, base, flo, fhi);
              const V pv = Ops::exp2(Ops::sub(x, Ops::loadc(lse2 + base)));
              V pd = pv, dpv = Ops::loadc(dp + j * Br + iv * W);
              if constexpr ((kFeat & kFeatDropout) != 0)
                dropout_pair(pv, &pd, &dpv, e_head + static_cast<uint64_t>(base * skv + j0 + j), lanes, dkey);
              const V ds = Ops::mul(pv, Ops::sub(dpv, Ops::loadc(delta + base)));
              Ops::storec(sc + j * Br + iv * W, pd);
              Ops::storec(dp + j * Br + iv * W, ds);
            }
          }
          }
          if (dpse) {  // scale * dS of the rows of this tile, transposed into [i][j]
            for (int64_t i = 0; i < imin(Br, sq - i0); ++i)
              for (int64_t j = 0; j < ncq; ++j)
                dpse[(i0 + i) * plan.dpse_cols + j0 + j] = dp[j * Br + i] * sc_out;
          }
          if (!pairs) {
            const T* pa = reinterpret_cast<const T*>(sc);
            const T* da = reinterpret_cast<const T*>(dp);
            // dV[j] += sum_i P^T[j][i] dO[i];  dK[j] += sum_i dS^T[j][i] Q[i]
            gemm<Ops>(ncq, Dv, nr, pa, Br, 1, dO + i0 * p.o_row_stride, p.o_row_stride, dvacc, Dvp, nullptr,
                      kAccumulate);
            gemm<Ops>(ncq, D, nr, da, Br, 1, q + i0 * p.q_row_stride, p.q_row_stride, dkacc, Dp, nullptr,
                      kAccumulate);
            // dQ[i] += sum_j dS^T[j][i] K[j]
            gemm<Ops>(nr, D, ncq, da, 1, Br, kt, p.k_row_stride, dqacc + i0 * Dp, Dp, nullptr, kAccumulate);
          } else {
            const int64_t kr = (nr + 1) / 2;
            gemm<Ops>(ncq, Dv, kr, pt, Br, 2, dopair + i0 * Dvp, 2 * Dvp, dvacc, Dvp, nullptr, kAccumulate);
            gemm<Ops>(ncq, D, kr, dst, Br, 2, qpair + i0 * Dp, 2 * Dp, dkacc, Dp, nullptr, kAccumulate);
            gemm<Ops>(nr, D, (ncq + 1) / 2, dsi, 2, 2 * Br, kpair, 2 * Dp, dqacc + i0 * Dp, Dp, nullptr,
                      kAccumulate);
          }
        }
      }
      // ---- write dK (scaled), dV of this key tile ----------------------------------------
      if (direct) {
        const int64_t ob = out_elem_bytes(out_kind);
        char* dk = static_cast<char*>(p.dk) +
                   (b * p.dk_batch_stride + (p.kv_start[b] + j0) * p.dk_row_stride + h * p.dk_head_stride) * ob;
        char* dv = static_cast<char*>(p.dv) +
                   (b * p.dv_batch_stride + (p.kv_start[b] + j0) * p.dv_row_stride + h * p.dv_head_stride) * ob;
        for (int64_t j = 0; j < nc; ++j) {
          store_row<S, Ops::kNativeBf16>(out_kind, dkacc + j * Dp, dk + j * p.dk_row_stride * ob, D, sc_out, tmp);
          store_row<S, Ops::kNativeBf16>(out_kind, dvacc + j * Dvp, dv + j * p.dv_row_stride * ob, Dv, S(1), tmp);
        }
      } else {
        for (int64_t j = 0; j < nc; ++j) {
          S* dst_row = partial + ((prow0 + j0 + j) * p.heads_q + n) * (Dp + Dvp);
          std::memcpy(dst_row, dkacc + j * Dp, static_cast<size_t>(D) * sizeof(S));
          std::memcpy(dst_row + Dp, dvacc + j * Dvp, static_cast<size_t>(Dv) * sizeof(S));
        }
      }
    }

    // ---- write dQ (scaled) and zero the padding rows of this head ---------------------------
    const int64_t ob = out_elem_bytes(out_kind);
    if (C > 1) {
      for (int64_t i = 0; i < sq; ++i) std::memcpy(dqpart + i * dqpart_ld, dqacc + i * Dp, sizeof(S) * static_cast<size_t>(D));
      zero_kv_padding();
      return;
    }
    char* dq = static_cast<char*>(p.dq) + (b * p.dq_batch_stride + p.q_start[b] * p.dq_row_stride + n * p.dq_head_stride) * ob;
    for (int64_t i = 0; i < sq; ++i) store_row<S, Ops::kNativeBf16>(out_kind, dqacc + i * Dp, dq + i * p.dq_row_stride * ob, D, sc_out, tmp);
    for (int64_t i = sq; i < p.rows_q[b]; ++i) zero_row(out_kind, dq + i * p.dq_row_stride * ob, D);
    if (direct) {
      char* dk = static_cast<char*>(p.dk) + (b * p.dk_batch_stride + p.kv_start[b] * p.dk_row_stride + h * p.dk_head_stride) * ob;
      char* dv = static_cast<char*>(p.dv) + (b * p.dv_batch_stride + p.kv_start[b] * p.dv_row_stride + h * p.dv_head_stride) * ob;
      for (int64_t j = skv; j < p.rows_kv[b]; ++j) {
        zero_row(out_kind, dk + j * p.dk_row_stride * ob, D);
        zero_row(out_kind, dv + j * p.dv_row_stride * ob, Dv);
      }
    }
  }

  // Dropout of one P^T vector: pd = P Z / keep_prob feeds dV, dP Z / keep_prob feeds dS.
  static void dropout_pair(V pv, V* pd, V* dpv, uint64_t e0, const DropoutLanes& lanes, const DropoutKey& k) {
    const V z = dropout_apply<Ops>(Ops::set1(S(1)), e0, lanes, k);
    *pd = Ops::mul(pv, z);
    *dpv = Ops::mul(*dpv, z);
  }

  // swa: lse from softmax_max / softmax_sum; an empty row (max -FLT_MAX or sum not positive) is
  // +inf, so its P and every gradient it feeds are 0.
  static double lse_of_stats(double mx, double sm) {
    if (std::isnan(mx) || std::isnan(sm)) return NAN;  // a NaN row stays NaN
    if (!(mx > -FLT_MAX) || !(sm > 0.0) || !std::isfinite(sm)) return INFINITY;
    return mx + std::log(sm);
  }

  static S to_s(T x) {
    if constexpr (KP == 2)
      return bf16_to_float(x);
    else
      return static_cast<S>(x);
  }

  // Key chunks: dQ[b, i, n] = scale * sum_c dqpart[c][row][n] in chunk order; padding rows 0.
  static void reduce_dq(const FlashAttnBwdParams& p, const Plan& plan, int out_kind, void* workspace) {
    const int64_t D = p.head_dim, Dp = pad16(D);
    const S* part = reinterpret_cast<const S*>(static_cast<char*>(workspace) + plan.dqpart_offset);
    const int64_t ob = out_elem_bytes(out_kind);
    const S sc_out = static_cast<S>(p.scale);
    const int64_t C = plan.bwd_chunks;
    const int64_t chunk_stride = plan.dq_rows * p.heads_q * Dp;
    op_plugin::parallel_for(0, p.batch * p.heads_q, 1, [&](int64_t i0, int64_t i1) {
      S row[512 + 16];
      float tmp[512 + 16];
      for (int64_t it = i0; it < i1; ++it) {
        const int64_t b = it / p.heads_q, n = it % p.heads_q;
        char* dq = static_cast<char*>(p.dq) + (b * p.dq_batch_stride + p.q_start[b] * p.dq_row_stride + n * p.dq_head_stride) * ob;
        const S* base = part + ((b * plan.q_batch_rows + p.q_start[b]) * p.heads_q + n) * Dp;
        const int64_t sq = (p.seqlen_kv[b] > 0) ? p.seqlen_q[b] : 0;  // no keys: no task wrote partials
        for (int64_t i = 0; i < p.rows_q[b]; ++i) {
          if (i >= sq) {
            zero_row(out_kind, dq + i * p.dq_row_stride * ob, D);
            continue;
          }
          for (int64_t c0 = 0; c0 < D; c0 += 512) {
            const int64_t cn = imin(512, D - c0);
            const S* src = base + i * p.heads_q * Dp + c0;
            for (int64_t cc = 0; cc < cn; ++cc) row[cc] = src[cc];
            for (int64_t c = 1; c < C; ++c)
              for (int64_t cc = 0; cc < cn; ++cc) row[cc] += src[c * chunk_stride + cc];
            store_row<S, Ops::kNativeBf16>(out_kind, row, dq + (i * p.dq_row_stride + c0) * ob, cn, sc_out, tmp);
          }
        }
      }
    });
  }

  // GQA: dK[b, j, h] = scale * sum_{n in group h} partial[j][n][:D], dV likewise (fixed order).
  static void reduce_group(const FlashAttnBwdParams& p, const Plan& plan, int out_kind, void* workspace) {
    const int64_t D = p.head_dim, Dv = p.head_dim_v;
    const int64_t Dp = pad16(D), Dvp = pad16(Dv);
    const S* partial = reinterpret_cast<const S*>(static_cast<char*>(workspace) + plan.partial_offset);
    const int64_t ob = out_elem_bytes(out_kind);
    const S sc_out = static_cast<S>(p.scale);
    const int64_t items = p.batch * p.heads_kv;
    op_plugin::parallel_for(0, items, 1, [&](int64_t i0, int64_t i1) {
      S rowk[512 + 16];
      float tmp[512 + 16];
      for (int64_t it = i0; it < i1; ++it) {
        const int64_t b = it / p.heads_kv, h = it % p.heads_kv;
        const int64_t prow0 = b * plan.kv_batch_rows + p.kv_start[b];
        char* dk = static_cast<char*>(p.dk) + (b * p.dk_batch_stride + p.kv_start[b] * p.dk_row_stride + h * p.dk_head_stride) * ob;
        char* dv = static_cast<char*>(p.dv) + (b * p.dv_batch_stride + p.kv_start[b] * p.dv_row_stride + h * p.dv_head_stride) * ob;
        const int64_t skv = p.seqlen_kv[b];
        for (int64_t j = 0; j < p.rows_kv[b]; ++j) {
          if (j >= skv) {
            zero_row(out_kind, dk + j * p.dk_row_stride * ob, D);
            zero_row(out_kind, dv + j * p.dv_row_stride * ob, Dv);
            continue;
          }
          const S* base = partial + ((prow0 + j) * p.heads_q + h * p.group) * (Dp + Dvp);
          for (int part = 0; part < 2; ++part) {
            const int64_t off = part == 0 ? 0 : Dp;
            const int64_t len = part == 0 ? D : Dv;
            for (int64_t c0 = 0; c0 < len; c0 += 512) {
              const int64_t cn = imin(512, len - c0);
              for (int64_t cc = 0; cc < cn; ++cc) rowk[cc] = base[off + c0 + cc];
              for (int64_t g = 1; g < p.group; ++g) {
                const S* src = base + g * (Dp + Dvp) + off + c0;
                for (int64_t cc = 0; cc < cn; ++cc) rowk[cc] += src[cc];
              }
              char* dst = part == 0 ? dk + (j * p.dk_row_stride + c0) * ob : dv + (j * p.dv_row_stride + c0) * ob;
              store_row<S, Ops::kNativeBf16>(out_kind, rowk, dst, cn, part == 0 ? sc_out : S(1), tmp);
            }
          }
        }
      }
    });
  }
};

// ============================================================================================
// Entry points of one ISA level
// ============================================================================================

// Copies (and converts) one q/k/v-like tensor into a head-major buffer dst[b][n][r][:dim]
// (TND: one "batch" of T rows). Returns the new strides through the pointers.
template <class Dst>
inline void stage_tensor(const void* src, opDataType sdt, int64_t bs, int64_t rs, int64_t hs, int64_t nb, int64_t rows,
                         int64_t heads, int64_t dim, Dst* dst, int64_t* nbs, int64_t* nrs, int64_t* nhs) {
  constexpr int64_t kRowChunk = 256;
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  const int64_t es = static_cast<int64_t>(sdt == OP_DT_DOUBLE ? 8 : sdt == OP_DT_FLOAT ? 4 : 2);
  op_plugin::parallel_for(0, nb * heads * chunks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t c = it % chunks, n = (it / chunks) % heads, b = it / chunks / heads;
      for (int64_t r = c * kRowChunk; r < imin(rows, (c + 1) * kRowChunk); ++r) {
        const char* s = static_cast<const char*>(src) + (b * bs + r * rs + n * hs) * es;
        Dst* d = dst + ((b * heads + n) * rows + r) * dim;
        if (sizeof(Dst) == static_cast<size_t>(es)) {
          std::memcpy(d, s, static_cast<size_t>(dim * es));
        } else if (sdt == OP_DT_BF16) {
          cvt_bf16_to_f32(reinterpret_cast<const uint16_t*>(s), reinterpret_cast<float*>(d), dim);
        } else {
          cvt_f16_to_f32(reinterpret_cast<const uint16_t*>(s), reinterpret_cast<float*>(d), dim);
        }
      }
    }
  });
  *nbs = nb > 1 || bs != 0 ? heads * rows * dim : 0;
  *nrs = dim;
  *nhs = rows * dim;
}

// bf16 forward: v of every (batch, kv head) as key-row pairs [pair row][Dvp][2] (odd tail and
// padding columns zero), the vector operand of O += P V.
inline void stage_vpairs(const FlashAttnFwdParams& p, const Plan& plan, void* ws) {
  const int64_t Dv = p.head_dim_v, Dvp = pad16(Dv);
  uint16_t* base = reinterpret_cast<uint16_t*>(static_cast<char*>(ws) + plan.vpair_offset);
  op_plugin::parallel_for(0, p.batch * p.heads_kv, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t b = it / p.heads_kv, h = it % p.heads_kv;
      const int64_t rows = p.rows_kv[b];
      const uint16_t* src = static_cast<const uint16_t*>(p.v) + b * p.v_batch_stride + p.kv_start[b] * p.v_row_stride +
                            h * p.v_head_stride;
      uint16_t* dst = base + (h * plan.vpair_rows + plan.vpair_row0[b]) * 2 * Dvp;
      pack_row_pairs(src, p.v_row_stride, rows, rows, Dv, dst, Dvp);
      if (Dvp > Dv)
        for (int64_t r = 0; r < (rows + 1) / 2; ++r)
          std::memset(dst + r * 2 * Dvp + 2 * Dv, 0, static_cast<size_t>(2 * (Dvp - Dv)) * 2);
    }
  });
}

// Applies the plan's staging to the params (p0 -> p): tensors 0..4 = q, k, v, out, dout.
template <class Dst>
inline void stage_inputs(const FlashAttnFwdParams& p0, const void* out0, const void* dout0, const Plan& plan, void* ws,
                         FlashAttnFwdParams* p, const void** out_staged, const void** dout_staged) {
  struct Item {
    const void* src;
    int64_t* strides[3];
    int64_t heads, dim;
    bool kv;
  };
  Item items[5] = {
      {p0.q, {&p->q_batch_stride, &p->q_row_stride, &p->q_head_stride}, p0.heads_q, p0.head_dim, false},
      {p0.k, {&p->k_batch_stride, &p->k_row_stride, &p->k_head_stride}, p0.heads_kv, p0.head_dim, true},
      {p0.v, {&p->v_batch_stride, &p->v_row_stride, &p->v_head_stride}, p0.heads_kv, p0.head_dim_v, true},
      {out0, {&p->o_batch_stride, &p->o_row_stride, &p->o_head_stride}, p0.heads_q, p0.head_dim_v, false},
      {dout0, {&p->o_batch_stride, &p->o_row_stride, &p->o_head_stride}, p0.heads_q, p0.head_dim_v, false},
  };
  const int64_t saved_o[3] = {p0.o_batch_stride, p0.o_row_stride, p0.o_head_stride};
  for (int t = 0; t < 5; ++t) {
    if (!((plan.stage_mask >> t) & 1)) continue;
    const Item& it = items[t];
    const int64_t batch_rows = it.kv ? plan.kv_batch_rows : plan.q_batch_rows;
    const bool tnd = batch_rows == 0;
    const int64_t nb = tnd ? 1 : p0.batch;
    const int64_t rows = tnd ? plan.stage_numel[t] / (it.heads * it.dim) : batch_rows;
    const int64_t bs = t == 4 ? saved_o[0] : *it.strides[0];
    const int64_t rs = t == 4 ? saved_o[1] : *it.strides[1];
    const int64_t hs = t == 4 ? saved_o[2] : *it.strides[2];
    Dst* dst = reinterpret_cast<Dst*>(static_cast<char*>(ws) + plan.stage_offset[t]);
    stage_tensor<Dst>(it.src, p0.dtype, t == 3 ? saved_o[0] : bs, t == 3 ? saved_o[1] : rs, t == 3 ? saved_o[2] : hs,
                      nb, rows, it.heads, it.dim, dst, it.strides[0], it.strides[1], it.strides[2]);
    if (tnd) *it.strides[0] = 0;
    switch (t) {
      case 0: p->q = dst; break;
      case 1: p->k = dst; break;
      case 2: p->v = dst; break;
      case 3: *out_staged = dst; break;
      default: *dout_staged = dst; break;
    }
  }
}

inline int out_kind_of(opDataType dt) {
  switch (dt) {
    case OP_DT_DOUBLE: return kOutF64;
    case OP_DT_BF16: return kOutBf16;
    case OP_DT_FLOAT16: return kOutF16;
    default: return kOutF32;
  }
}

// Calls go(IntConst<kFeat>{}) with the feature set of the params as a compile-time constant
// (flash_attn: 0).
template <class Go>
inline void with_features(const FlashAttnFwdParams& p, const Go& go) {
  switch (features_of(p)) {
    case 0: go(IntConst<0>{}); break;
    case kFeatBias: go(IntConst<kFeatBias>{}); break;
    case kFeatDropout: go(IntConst<kFeatDropout>{}); break;
    default: go(IntConst<kFeatBias | kFeatDropout>{}); break;
  }
}

template <class Ops>
void run_forward(const FlashAttnFwdParams& p, const Plan& plan, void* ws, int out_kind) {
  with_features(p, [&](auto feat) {
    run_tasks(plan, ws, [&](const Task& t, char* slot) {
      Forward<Ops>::template task<decltype(feat)::value>(p, plan, ws, out_kind, t, slot);
    });
  });
}

template <class Ops>
void run_backward(const FlashAttnBwdParams& p, const Plan& plan, int out_kind, void* ws) {
  with_features(p, [&](auto feat) {
    run_tasks(plan, ws, [&](const Task& t, char* slot) {
      Backward<Ops>::template task<decltype(feat)::value>(p, plan, out_kind, ws, t, slot);
    });
  });
  if (p.group > 1) Backward<Ops>::reduce_group(p, plan, out_kind, ws);
  if (plan.bwd_chunks > 1) Backward<Ops>::reduce_dq(p, plan, out_kind, ws);
}

template <class OpsF32, class OpsBf16, class OpsF64>
void forward_entry(const FlashAttnFwdParams& p0, const Plan& plan, void* ws) {
  FlashAttnFwdParams p = p0;
  const int out_kind = out_kind_of(p0.dtype);
  if (plan.stage_mask) {
    const void* unused = nullptr;
    if (plan.stage_convert || plan.compute == flash::Compute::kF32)
      stage_inputs<float>(p0, nullptr, nullptr, plan, ws, &p, &unused, &unused);
    else if (plan.compute == flash::Compute::kF64)
      stage_inputs<double>(p0, nullptr, nullptr, plan, ws, &p, &unused, &unused);
    else
      stage_inputs<uint16_t>(p0, nullptr, nullptr, plan, ws, &p, &unused, &unused);
  }
  if (plan.compute == flash::Compute::kBf16Pairs) stage_vpairs(p, plan, ws);
  p.out = p0.out;
  p.o_batch_stride = p0.o_batch_stride;
  p.o_row_stride = p0.o_row_stride;
  p.o_head_stride = p0.o_head_stride;
  if (plan.compute == flash::Compute::kF64)
    run_forward<OpsF64>(p, plan, ws, out_kind);
  else if (plan.compute == flash::Compute::kBf16Pairs)
    run_forward<OpsBf16>(p, plan, ws, out_kind);
  else
    run_forward<OpsF32>(p, plan, ws, out_kind);
  // Padding rows (past seqused_q): out 0, lse +inf.
  const int64_t ob = out_elem_bytes(out_kind);
  LseRef lse{p.lse, p.lse_dtype == OP_DT_DOUBLE};
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t n = 0; n < p.heads_q; ++n) {
      for (int64_t i = p.seqlen_q[b]; i < p.rows_q[b]; ++i) {
        char* orow = static_cast<char*>(p.out) +
                     (b * p.o_batch_stride + (p.q_start[b] + i) * p.o_row_stride + n * p.o_head_stride) * ob;
        zero_row(out_kind, orow, p.head_dim_v);
        if (p.lse && !p.softmax_sum)
          lse.set(b * p.lse_batch_stride + n * p.lse_head_stride + (p.q_start[b] + i) * p.lse_row_stride, INFINITY);
      }
    }
  }
}

template <class OpsF32, class OpsBf16, class OpsF64>
void backward_entry(const FlashAttnBwdParams& p0, const Plan& plan, void* ws) {
  FlashAttnBwdParams p = p0;
  const int out_kind = out_kind_of(p0.dtype);
  if (plan.stage_mask) {
    const void* out_s = p0.out;
    const void* dout_s = p0.dout;
    if (plan.stage_convert || plan.compute == flash::Compute::kF32)
      stage_inputs<float>(p0, p0.out, p0.dout, plan, ws, &p, &out_s, &dout_s);
    else if (plan.compute == flash::Compute::kF64)
      stage_inputs<double>(p0, p0.out, p0.dout, plan, ws, &p, &out_s, &dout_s);
    else
      stage_inputs<uint16_t>(p0, p0.out, p0.dout, plan, ws, &p, &out_s, &dout_s);
    p.out = const_cast<void*>(out_s);
    p.dout = dout_s;
  }
  // dq/dk/dv keep the caller's layout: the kernels write them with the strides of p0.
  if (p.want_dpse) {  // tiles outside the window never write their dS: zero the buffer first
    const int64_t rows = p.batch * p.heads_q * plan.dpse_rows;
    const size_t row_bytes = static_cast<size_t>(plan.dpse_cols) * (plan.compute == flash::Compute::kF64 ? 8 : 4);
    char* base = static_cast<char*>(ws) + plan.dpse_offset;
    op_plugin::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
      std::memset(base + r0 * row_bytes, 0, static_cast<size_t>(r1 - r0) * row_bytes);
    });
  }
  if (plan.compute == flash::Compute::kF64)
    run_backward<OpsF64>(p, plan, out_kind, ws);
  else if (plan.compute == flash::Compute::kBf16Pairs)
    run_backward<OpsBf16>(p, plan, out_kind, ws);
  else
    run_backward<OpsF32>(p, plan, out_kind, ws);
  // Batches with no query rows produced no task: zero their dq rows (dk/dv rows are covered by
  // the task of any head with keys, or by reduce_group).
  const int64_t ob = out_elem_bytes(out_kind);
  for (int64_t b = 0; b < p.batch; ++b) {
    if (p.seqlen_q[b] > 0 || p.seqlen_kv[b] > 0) continue;
    for (int64_t n = 0; n < p.heads_q; ++n)
      for (int64_t i = 0; i < p.rows_q[b]; ++i)
        zero_row(out_kind, static_cast<char*>(p.dq) + (b * p.dq_batch_stride + (p.q_start[b] + i) * p.dq_row_stride + n * p.dq_head_stride) * ob, p.head_dim);
    if (p.group == 1)
      for (int64_t h = 0; h < p.heads_kv; ++h)
        for (int64_t j = 0; j < p.rows_kv[b]; ++j) {
          zero_row(out_kind, static_cast<char*>(p.dk) + (b * p.dk_batch_stride + (p.kv_start[b] + j) * p.dk_row_stride + h * p.dk_head_stride) * ob, p.head_dim);
          zero_row(out_kind, static_cast<char*>(p.dv) + (b * p.dv_batch_stride + (p.kv_start[b] + j) * p.dv_row_stride + h * p.dv_head_stride) * ob, p.head_dim_v);
        }
  }
}

}  // namespace fa
}  // namespace OP_ISA_NS
}  // namespace op_plugin
