// Forward tile loop of the flash attention engine, vector (FMA / vdpbf16ps) dataflow.
//
//   * Scores are computed transposed, S^T[j][i] = K[j,:] . Q[i,:], as a GEMM whose broadcast
//     operand is the key row read in place from the user tensor and whose vector operand is the
//     query block packed once per task as Qt[d][i]. Vectors therefore run over query rows, and
//     every online-softmax statistic (running max m_i, sum l_i, rescale alpha_i, lse_i) is a
//     lane-wise vector, with no horizontal reduction anywhere.
//   * O[i][:] = alpha_i O[i][:] + sum_j P^T[j][i] V[j][:]: P^T is the broadcast operand
//     (fp32: in place; bf16: written in pair-interleaved form), V the vector operand (fp32: rows
//     in place, or a head-major copy when strided; bf16: staged once as key-row pairs).
//   * The key range of a query block comes from the window bounds, so tiles outside the window
//     are never visited (a window costs O(S*W)); only tiles cut by its boundary apply a lane mask.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/common/gemm_ukernel.h"
#include "kernels/common/profile.h"
#include "kernels/flash_attention/flash_attention_common.h"
#include "kernels/flash_attention/flash_attention_staging.h"
#include "kernels/flash_attention/flash_attention_swa_features.h"

namespace op_plugin {
namespace OP_ISA_NS {
namespace fa {

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
    // Lane groups holding the block's rows: a block of fewer than Br rows (the last of a sequence,
    // a short call) computes and normalises only these score columns, not Br.
    const int nvq = static_cast<int>((rows + W - 1) / W);
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

    // Element offsets of the block's first query row and of the head's key 0. 16-bit inputs
    // computed in float (plan.convert_in_tasks) are converted into the slot here, the block's q
    // rows once and k / v per key tile (flash_attention_staging.h); other inputs are read in
    // place or from a staged copy.
    const int64_t q_off = b * p.q_batch_stride + (p.q_start[b] + i0) * p.q_row_stride + n * p.q_head_stride;
    const int64_t k_off = b * p.k_batch_stride + p.kv_start[b] * p.k_row_stride + h * p.k_head_stride;
    const int64_t v_off = b * p.v_batch_stride + p.kv_start[b] * p.v_row_stride + h * p.v_head_stride;
    const bool convert = plan.convert_in_tasks;
    float* qrows = convert ? c.take<float>(Br * pad16(D)) : nullptr;
    float* krows = convert ? c.take<float>(Bc * pad16(D)) : nullptr;
    float* vrows = convert ? c.take<float>(Bc * Dvp) : nullptr;
    {
      OP_PROFILE_SCOPE(kPack);
      int64_t q_ld = 0;
      const T* q = task_rows<T>(convert, p.q, p.dtype, q_off, p.q_row_stride, rows, D, qrows, &q_ld);
      pack_transposed<T, KP>(q, q_ld, rows, Br, D, qt, Br * KP);
    }

    const S c2 = static_cast<S>(p.scale * kLog2e);  // logits in log2 units
    const bool sink = p.sinks != nullptr;
    const S m0 = sink ? static_cast<S>(static_cast<double>(p.sinks[n]) * kLog2e) : static_cast<S>(-INFINITY);
    for (int64_t i = 0; i < Br; ++i) {
      m[i] = m0;
      l[i] = sink ? S(1) : S(0);
    }
    for (int64_t i = 0; i < rows * Dvp; ++i) acc[i] = S(0);

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
      for (int iv = 0; iv < nvq; ++iv) {
        const int64_t last = i0 + imin(rows, static_cast<int64_t>(iv + 1) * W) - 1;
        int64_t x = imax(0, imin(nc, w.hi(last) + 1 - j0));
        if (KP == 2) x = imin(nc, (x + 1) & ~int64_t(1));
        ncv[iv] = x;
      }
      int64_t k_ld = 0, v_ld = 0;
      const T* kt;
      const T* vt;
      {
        OP_PROFILE_SCOPE(kPack);
        kt = task_rows<T>(convert, p.k, p.dtype, k_off + j0 * p.k_row_stride, p.k_row_stride, nc, D, krows, &k_ld);
        vt = task_rows<T>(convert, p.v, p.dtype, v_off + j0 * p.v_row_stride, p.v_row_stride, nc, Dv, vrows, &v_ld);
      }
      // S^T[j][i] = K[j0 + j, :] . Q[i0 + i, :]: keys [ncv[iv-1], ncv[iv]) for lanes iv*W.. only
      for (int iv = 0, done = 0; iv < nvq; ++iv) {
        if (ncv[iv] <= done) continue;
        OP_PROFILE_SCOPE(kGemm);
        gemm_dots<Ops>(ncv[iv] - done, (nvq - iv) * W, (D + KP - 1) / KP, kt + done * k_ld, k_ld, KP,
                       qt + iv * W * KP, Br * KP, sc + done * Br + iv * W, Br);
        done = static_cast<int>(ncv[iv]);
      }
      if constexpr ((kFeat & kFeatBias) != 0) build_bias<S>(p, b, n, i0, rows, j0, nc, c2, bias, mt);
      // Online softmax, lane-wise over query rows.
      for (int iv = 0; iv < nvq; ++iv) {
        OP_PROFILE_SCOPE(kSoftmax);
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
      for (int iv = 0; iv < nvq;) {
        int ive = iv + 1;
        while (ive < nvq && ncv[ive] == ncv[iv]) ++ive;
        const int64_t r0 = iv * W, r1 = imin(rows, static_cast<int64_t>(ive) * W);
        if (r0 >= rows) break;
        const int64_t kc = ncv[iv];
        OP_PROFILE_SCOPE(kGemm);
        S* arows = acc + r0 * Dvp;
        const S* rs = first ? nullptr : alpha + r0;
        const int mode = first ? kAccumulate : kScaleAccumulate;
        if (KP == 1) {
          // P^T in place as broadcast operand, V rows in place
          gemm<Ops>(r1 - r0, Dv, kc, reinterpret_cast<const T*>(sc) + r0, 1, Br, vt, v_ld, arows, Dvp, rs, mode);
        } else {
          // bf16: P in pairs (written above); V read from the staged key-row pairs.
          gemm<Ops>(r1 - r0, Dv, (kc + 1) / 2, pp + 2 * r0, 2, 2 * Br, vpairs + j0 * Dvp, 2 * Dvp, arows, Dvp, rs,
                    mode);
        }
        iv = ive;
      }
      first = false;
    }

    OP_PROFILE_SCOPE(kOther);
    finalize_rows<S, Ops::kNativeBf16>(p, out_kind, b, n, i0, rows, w, sink, m0, m, l, acc, Dvp, tmp);
  }
};

}  // namespace fa
}  // namespace OP_ISA_NS
}  // namespace op_plugin
