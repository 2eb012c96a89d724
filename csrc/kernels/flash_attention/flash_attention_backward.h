// Backward tile loop of the flash attention engine, vector (FMA / vdpbf16ps) dataflow.
//
// One task per (b, query heads n .. n + plan.bwd_task_heads - 1 of one kv head, key chunk), its
// heads one after the other: for each key tile (outer) and each query tile that can see it
// (inner): S^T, dP^T = V dO^T (vector operand dO packed once as dOt),
// P^T = exp(S^T - lse), dS^T = P^T (dP^T - D); dV += P^T dO, dK += dS^T Q (dO / Q rows as
// vector operands), dQ += dS K (dS as broadcast operand). dQ lives in a per-task fp32 buffer for
// the whole head, dK/dV in per-key-tile buffers (for several heads: buffers for every key of the
// chunk, which the heads' products meet in): five GEMMs per tile, no recomputation pass, no
// atomics. GQA: a task with part of its kv head's group writes a dK/dV partial, summed in a fixed
// order afterwards (reduce_group); dQ partials of key chunks likewise (reduce_dq).
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/gemm_ukernel.h"
#include "kernels/common/profile.h"
#include "kernels/flash_attention/flash_attention_common.h"
#include "kernels/flash_attention/flash_attention_staging.h"
#include "kernels/flash_attention/flash_attention_swa_features.h"

namespace op_plugin {
namespace OP_ISA_NS {
namespace fa {

// Element offset, in the GQA partial buffer (Plan::partial_offset), of kv row r's dK | dV partial
// written by the task whose first query head is n (one partial per task, Plan::bwd_task_heads).
inline int64_t gqa_partial_offset(const FlashAttnBwdParams& p, const Plan& plan, int64_t r, int64_t n) {
  const int64_t heads = plan.bwd_task_heads;
  return (r * (p.heads_q / heads) + n / heads) * (pad16(p.head_dim) + pad16(p.head_dim_v));
}

template <class Ops>
struct Backward {
  using T = typename Ops::T;
  using S = typename Ops::S;
  using V = typename Ops::V;
  static constexpr int W = Ops::W;
  static constexpr int KP = Ops::KP;
  static constexpr int64_t Br = kBlockQ;
  static constexpr int64_t Bc = kBlockKV;

  template <int kFeat>
  static void task(const FlashAttnBwdParams& p, const Plan& plan, int out_kind, void* workspace, const Task& t,
                   char* slot) {
    for (int64_t g = 0; g < plan.bwd_task_heads; ++g)
      head<kFeat>(p, plan, out_kind, workspace, t, slot, t.n + g, g == 0, g == plan.bwd_task_heads - 1);
  }

  // Query head n of task t; its dK / dV products accumulate into the first head's (first) and are
  // written by the last head's (last).
  template <int kFeat>
  static void head(const FlashAttnBwdParams& p, const Plan& plan, int out_kind, void* workspace, const Task& t,
                   char* slot, int64_t n, bool first, bool last) {
    const int64_t b = t.b, heads = plan.bwd_task_heads;
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
      if (p.group != heads || chunk != C - 1 || !last) return;
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
    const int64_t acc_rows = plan.bwd_acc_rows;
    S* dkacc_rows = c.take<S>(acc_rows * (Dp + Dvp));  // kept across the task's heads
    S* dvacc_rows = dkacc_rows + acc_rows * Dp;
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

    // Element offsets of this head's row 0. 16-bit inputs computed in float (plan.convert_in_tasks)
    // are converted into the slot here, the head's q and dout rows once and k / v per key tile
    // (flash_attention_staging.h); other inputs are read in place or from a staged copy.
    const int64_t q_off = b * p.q_batch_stride + p.q_start[b] * p.q_row_stride + n * p.q_head_stride;
    const int64_t k_off = b * p.k_batch_stride + p.kv_start[b] * p.k_row_stride + h * p.k_head_stride;
    const int64_t v_off = b * p.v_batch_stride + p.kv_start[b] * p.v_row_stride + h * p.v_head_stride;
    const int64_t o_off = b * p.o_batch_stride + p.q_start[b] * p.o_row_stride + n * p.o_head_stride;
    const bool convert = plan.convert_in_tasks;
    float* qrows = convert ? c.take<float>(sq * Dp) : nullptr;
    float* dorows = convert ? c.take<float>(sq * Dvp) : nullptr;
    float* krows = convert ? c.take<float>(Bc * Dp) : nullptr;
    float* vrows = convert ? c.take<float>(Bc * Dvp) : nullptr;
    int64_t q_ld = 0, do_ld = 0, k_ld = 0, v_ld = 0;
    const T* q = nullptr;
    const T* dO = nullptr;

    // ---- per-head preparation ------------------------------------------------------------
    {
      OP_PROFILE_SCOPE(kPack);
      q = task_rows<T>(convert, p.q, p.dtype, q_off, p.q_row_stride, sq, D, qrows, &q_ld);
      dO = task_rows<T>(convert, p.dout, p.dtype, o_off, p.o_row_stride, sq, Dv, dorows, &do_ld);
      pack_transposed<T, KP>(q, q_ld, sq, S1p, D, qt, S1p * KP);
      pack_transposed<T, KP>(dO, do_ld, sq, S1p, Dv, dot, S1p * KP);
    }
    if (pairs) {
      OP_PROFILE_SCOPE(kPack);
      pack_row_pairs(reinterpret_cast<const uint16_t*>(q), q_ld, sq, S1p, D,
                     reinterpret_cast<uint16_t*>(qpair), Dp);
      pack_row_pairs(reinterpret_cast<const uint16_t*>(dO), do_ld, sq, S1p, Dv,
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
        // attn_out is read once, here: converting, one row at a time into tmp
        const T* orow = task_rows<T>(convert, p.out, p.dtype, o_off + i * p.o_row_stride, 0, 1, Dv, tmp, nullptr);
        const T* drow = dO + i * do_ld;
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
    const bool direct = p.group == heads;  // the task has the whole group: no dK/dV partial
    S* partial = direct ? nullptr
                        : reinterpret_cast<S*>(static_cast<char*>(workspace) + plan.partial_offset);
    const int64_t prow0 = b * plan.kv_batch_rows + p.kv_start[b];

    // ---- key tiles -------------------------------------------------------------------------
    for (int64_t j0 = jbeg; j0 < jend; j0 += Bc) {
      const int64_t nc = imin(Bc, skv - j0);
      const int64_t ilo = imax(0, w.first_row(j0));
      const int64_t ihi = imin(sq - 1, w.last_row(j0 + nc - 1));
      // this key tile's accumulator rows: the slot's only tile, or its place in the chunk's keys
      const int64_t acc0 = heads > 1 ? j0 - jbeg : 0;
      S* dkacc = dkacc_rows + acc0 * Dp;
      S* dvacc = dvacc_rows + acc0 * Dvp;
      if (first) {
        for (int64_t i = 0; i < nc * Dp; ++i) dkacc[i] = S(0);
        for (int64_t i = 0; i < nc * Dvp; ++i) dvacc[i] = S(0);
      }
      if (ilo <= ihi) {
        const T* kt;
        const T* vt;
        {
          OP_PROFILE_SCOPE(kPack);
          kt = task_rows<T>(convert, p.k, p.dtype, k_off + j0 * p.k_row_stride, p.k_row_stride, nc, D, krows, &k_ld);
          vt = task_rows<T>(convert, p.v, p.dtype, v_off + j0 * p.v_row_stride, p.v_row_stride, nc, Dv, vrows, &v_ld);
        }
        if (pairs) {
          OP_PROFILE_SCOPE(kPack);
          pack_row_pairs(reinterpret_cast<const uint16_t*>(kt), k_ld, nc, nc, D,
                         reinterpret_cast<uint16_t*>(kpair), Dp);
        }
        // Query tiles start at the first row that sees the key tile (even, for bf16 row pairs),
        // so a window of W keys costs ceil((W + Bc) / Br) tiles per key tile.
        for (int64_t i0 = ilo & ~int64_t(1); i0 <= ihi; i0 += Br) {
          const int64_t nr = imin(Br, ihi + 1 - i0);
          // Lane groups holding the tile's rows: a tile of fewer than Br rows computes only these
          // score columns (the lanes past nr in the last one are masked).
          const int nvq = static_cast<int>((nr + W - 1) / W);
          // Keys of the tile that some row of this query tile can see: the rest (the far side of
          // the diagonal for the first query tile under causal) has P = dS = 0 and is skipped in
          // all five GEMMs. bf16: whole key pairs.
          int64_t ncq = imin(nc, w.hi(i0 + nr - 1) + 1 - j0);
          if (pairs) ncq = imin(nc, (ncq + 1) & ~int64_t(1));
          const bool full = nr == Br && w.lo(i0 + nr - 1) <= j0 && w.hi(i0) >= j0 + ncq - 1 && i0 >= ilo;
          const int64_t row_hi = i0 + nr - 1;  // lanes past it are zeroed
          {
            OP_PROFILE_SCOPE(kGemm);
            gemm_dots<Ops>(ncq, nvq * W, (D + KP - 1) / KP, kt, k_ld, KP, qt + i0 * KP, S1p * KP, sc, Br);
            gemm_dots<Ops>(ncq, nvq * W, (Dv + KP - 1) / KP, vt, v_ld, KP, dot + i0 * KP, S1p * KP, dp, Br);
          }
          if constexpr ((kFeat & kFeatBias) != 0) build_bias<S>(p, b, n, i0, nr, j0, ncq, c2, bias, mt);
          // P^T = 2^(S^T c2 - lse2), dS^T = P^T (dP^T - D)
          if constexpr (KP == 2) {
            OP_PROFILE_SCOPE(kSoftmax);
            // bf16: P^T and dS^T rows as bf16 (pairs along i) and dS^T rows j, j+1 interleaved
            // (pairs along j), written straight from registers.
            uint16_t* p16 = reinterpret_cast<uint16_t*>(pt);
            uint16_t* d16 = reinterpret_cast<uint16_t*>(dst);
            uint16_t* di16 = reinterpret_cast<uint16_t*>(dsi);
            for (int64_t j = 0; j < ncq; j += 2) {
              const bool has1 = j + 1 < ncq;
              const int64_t flo0 = w.first_row(j0 + j), fhi0 = imin(w.last_row(j0 + j), row_hi);
              const int64_t flo1 = w.first_row(j0 + j + 1), fhi1 = imin(w.last_row(j0 + j + 1), row_hi);
              for (int iv = 0; iv < nvq; ++iv) {
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
          OP_PROFILE_SCOPE(kSoftmax);
          for (int64_t j = 0; j < ncq; ++j) {
            const int64_t flo = w.first_row(j0 + j);
            const int64_t fhi = imin(w.last_row(j0 + j), row_hi);
            for (int iv = 0; iv < nvq; ++iv) {
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
          if (dpse) {  // scale * dS of the rows of this tile, transposed into [i][j]; 0 past nr
            for (int64_t i = 0; i < imin(Br, sq - i0); ++i)
              for (int64_t j = 0; j < ncq; ++j)
                dpse[(i0 + i) * plan.dpse_cols + j0 + j] = i < nr ? dp[j * Br + i] * sc_out : S(0);
          }
          if (!pairs) {
            OP_PROFILE_SCOPE(kGemm);
            const T* pa = reinterpret_cast<const T*>(sc);
            const T* da = reinterpret_cast<const T*>(dp);
            // dV[j] += sum_i P^T[j][i] dO[i];  dK[j] += sum_i dS^T[j][i] Q[i]
            gemm<Ops>(ncq, Dv, nr, pa, Br, 1, dO + i0 * do_ld, do_ld, dvacc, Dvp, nullptr,
                      kAccumulate);
            gemm<Ops>(ncq, D, nr, da, Br, 1, q + i0 * q_ld, q_ld, dkacc, Dp, nullptr,
                      kAccumulate);
            // dQ[i] += sum_j dS^T[j][i] K[j]
            gemm<Ops>(nr, D, ncq, da, 1, Br, kt, k_ld, dqacc + i0 * Dp, Dp, nullptr, kAccumulate);
          } else {
            OP_PROFILE_SCOPE(kGemm);
            const int64_t kr = (nr + 1) / 2;
            gemm<Ops>(ncq, Dv, kr, pt, Br, 2, dopair + i0 * Dvp, 2 * Dvp, dvacc, Dvp, nullptr, kAccumulate);
            gemm<Ops>(ncq, D, kr, dst, Br, 2, qpair + i0 * Dp, 2 * Dp, dkacc, Dp, nullptr, kAccumulate);
            gemm<Ops>(nr, D, (ncq + 1) / 2, dsi, 2, 2 * Br, kpair, 2 * Dp, dqacc + i0 * Dp, Dp, nullptr,
                      kAccumulate);
          }
        }
      }
      // ---- write dK (scaled), dV of this key tile ----------------------------------------
      OP_PROFILE_SCOPE(kReduce);
      if (!last) {
        // the task's next head accumulates into them
      } else if (direct) {
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
          S* dst_row = partial + gqa_partial_offset(p, plan, prow0 + j0 + j, t.n);
          std::memcpy(dst_row, dkacc + j * Dp, static_cast<size_t>(D) * sizeof(S));
          std::memcpy(dst_row + Dp, dvacc + j * Dvp, static_cast<size_t>(Dv) * sizeof(S));
        }
      }
    }

    // ---- write dQ (scaled) and zero the padding rows of this head ---------------------------
    OP_PROFILE_SCOPE(kReduce);
    const int64_t ob = out_elem_bytes(out_kind);
    if (C > 1) {
      for (int64_t i = 0; i < sq; ++i) std::memcpy(dqpart + i * dqpart_ld, dqacc + i * Dp, sizeof(S) * static_cast<size_t>(D));
      zero_kv_padding();
      return;
    }
    char* dq = static_cast<char*>(p.dq) + (b * p.dq_batch_stride + p.q_start[b] * p.dq_row_stride + n * p.dq_head_stride) * ob;
    for (int64_t i = 0; i < sq; ++i) store_row<S, Ops::kNativeBf16>(out_kind, dqacc + i * Dp, dq + i * p.dq_row_stride * ob, D, sc_out, tmp);
    for (int64_t i = sq; i < p.rows_q[b]; ++i) zero_row(out_kind, dq + i * p.dq_row_stride * ob, D);
    zero_kv_padding();
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

  // GQA: dK[b, j, h] = scale * the sum of kv head h's partials (one per task of its group) at row
  // j, [:D]; dV likewise (fixed order).
  static void reduce_group(const FlashAttnBwdParams& p, const Plan& plan, int out_kind, void* workspace) {
    const int64_t D = p.head_dim, Dv = p.head_dim_v;
    const int64_t Dp = pad16(D), Dvp = pad16(Dv);
    const S* partial = reinterpret_cast<const S*>(static_cast<char*>(workspace) + plan.partial_offset);
    const int64_t ob = out_elem_bytes(out_kind);
    const S sc_out = static_cast<S>(p.scale);
    const int64_t items = p.batch * p.heads_kv;
    // a partial per task of a kv head's group
    const int64_t parts = p.group / plan.bwd_task_heads;
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
          const S* base = partial + gqa_partial_offset(p, plan, prow0 + j, h * p.group);
          for (int part = 0; part < 2; ++part) {
            const int64_t off = part == 0 ? 0 : Dp;
            const int64_t len = part == 0 ? D : Dv;
            for (int64_t c0 = 0; c0 < len; c0 += 512) {
              const int64_t cn = imin(512, len - c0);
              for (int64_t cc = 0; cc < cn; ++cc) rowk[cc] = base[off + c0 + cc];
              for (int64_t g = 1; g < parts; ++g) {
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

}  // namespace fa
}  // namespace OP_ISA_NS
}  // namespace op_plugin
