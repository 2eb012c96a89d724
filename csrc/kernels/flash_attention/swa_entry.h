// Shared stage-1 code of swa_forward and swa_backward (npu_fusion_attention(_grad) of op-plugin
// 7.3.0 renamed, sparse_mode 0 / 4 only; SPEC §2, Decision 8): layouts, actual_seq lengths,
// sparse mode / mask / window, pse, sink, and the params fields they fill. The arguments' rules
// are the registry's, checked before these run (<Kernel>CheckArguments, generated); what is left
// here is what only the kernel checks (the contents of actual_seq_qlen / actual_seq_kvlen). Both
// ops run on the flash attention engine; nothing here computes. Baseline TUs only.
#pragma once
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <vector>

#include "kernels/common/scalar_types.h"
#include "kernels/flash_attention/flash_attention_entry.h"

namespace op_plugin {
namespace flash {
namespace swa {

enum class SwaLayout { kBSH, kSBH, kBSND, kBNSD, kTND };

inline bool parse_swa_layout(const char* s, SwaLayout* out) {
  if (s == nullptr) return false;
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const struct { const char* name; SwaLayout l; } names[] = {{"BSH", SwaLayout::kBSH},
                                                            {"SBH", SwaLayout::kSBH},
                                                            {"BSND", SwaLayout::kBSND},
                                                            {"BNSD", SwaLayout::kBNSD},
                                                            {"TND", SwaLayout::kTND}};
  for (const auto& n : names)
    if (u == n.name) {
      *out = n.l;
      return true;
    }
  return false;
}

inline int swa_rank(SwaLayout l) { return l == SwaLayout::kBSND || l == SwaLayout::kBNSD ? 4 : 3; }

// Sizes and strides of a q/k/v/out-like tensor. BSH / SBH are BSND with the hidden axis split
// into (heads, dim): no copy, only strides; `heads` and `dim` come from the caller.
inline Dims swa_dims(const opTensor& t, SwaLayout l, int64_t heads, int64_t dim) {
  switch (l) {
    case SwaLayout::kBSH: return {t.shape[0], t.shape[1], heads, dim, t.strides[0], t.strides[1], dim * t.strides[2]};
    case SwaLayout::kSBH: return {t.shape[1], t.shape[0], heads, dim, t.strides[1], t.strides[0], dim * t.strides[2]};
    case SwaLayout::kBSND: return dims_of(t, Layout::kBSND);
    case SwaLayout::kBNSD: return dims_of(t, Layout::kBNSD);
    default: return dims_of(t, Layout::kTND);
  }
}

// The shape of a tensor of `l` with the given sizes (batch ignored for TND).
inline std::vector<int64_t> swa_shape(SwaLayout l, int64_t batch, int64_t rows, int64_t heads, int64_t dim) {
  switch (l) {
    case SwaLayout::kBSH: return {batch, rows, heads * dim};
    case SwaLayout::kSBH: return {rows, batch, heads * dim};
    case SwaLayout::kBSND: return {batch, rows, heads, dim};
    case SwaLayout::kBNSD: return {batch, heads, rows, dim};
    default: return {rows, heads, dim};
  }
}

// Everything stage 1 derives from query / key / value / head_num / input_layout / actual_seq_*.
struct Geometry {
  SwaLayout layout = SwaLayout::kBSND;
  bool tnd = false;
  opDataType dtype = OP_DT_FLOAT;
  Dims q{}, k{}, v{};
  int64_t batch = 0, heads = 0, heads_kv = 0, dim = 0, dim_v = 0;
  Sequences seq;
  std::vector<int64_t> elem_start;  // dropout element index of (b, 0, 0, 0)
  int64_t numels = 0;               // B*N*Sq*Skv; TND N * sum_b Sq_b * Skv_b (SPEC §2.5)
  opDataType stats_dtype() const { return dtype == OP_DT_DOUBLE ? OP_DT_DOUBLE : OP_DT_FLOAT; }
  std::vector<int64_t> out_shape() const { return swa_shape(layout, batch, q.rows, heads, dim_v); }
};

// TND lengths: cumulative without a leading 0 ([2,4,6] = 2,2,2); empty sequences allowed; a
// trailing run of zeros drops batches ([2,5,9,0,0] = 3 batches); the last kept value is T.
inline opStatus read_actual_seq(const opIntArray* a, const char* name, int64_t total, std::vector<int64_t>* cum) {
  int64_t nb = a->size;
  while (nb > 0 && a->data[nb - 1] == 0) --nb;
  if (nb == 0) return fail(OP_ERR_PARAM_INVALID, name, " must end at the token count ", total, ", but it is all zeros");
  cum->assign(1, 0);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t x = a->data[b];
    if (x < cum->back())
      return fail(OP_ERR_PARAM_INVALID, name, " must be cumulative (non-decreasing, no leading 0), but ", name, "[",
                  b, "] = ", x, " < ", cum->back());
    cum->push_back(x);
  }
  if (cum->back() != total)
    return fail(OP_ERR_PARAM_INVALID, name, " must end at the token count ", total, ", but its last non-zero value is ",
                cum->back());
  return OP_SUCCESS;
}

inline opStatus make_geometry(const opTensor* query, const opTensor* key, const opTensor* value, int64_t head_num,
                              const char* input_layout, const opIntArray* actual_seq_qlen,
                              const opIntArray* actual_seq_kvlen, Geometry* g) {
  parse_swa_layout(input_layout, &g->layout);
  g->tnd = g->layout == SwaLayout::kTND;
  g->dtype = query->dtype;
  int64_t D, Nkv, Dv;
  if (g->layout == SwaLayout::kBSH || g->layout == SwaLayout::kSBH) {
    D = query->shape[2] / head_num;
    Nkv = key->shape[2] / D;
    Dv = value->shape[2] / Nkv;
  } else {
    const Dims q0 = swa_dims(*query, g->layout, 0, 0), k0 = swa_dims(*key, g->layout, 0, 0);
    D = q0.dim;
    Nkv = k0.heads;
    Dv = swa_dims(*value, g->layout, 0, 0).dim;
  }
  g->heads = head_num;
  g->heads_kv = Nkv;
  g->dim = D;
  g->dim_v = Dv;
  g->q = swa_dims(*query, g->layout, head_num, D);
  g->k = swa_dims(*key, g->layout, Nkv, D);
  g->v = swa_dims(*value, g->layout, Nkv, Dv);

  Sequences& s = g->seq;
  int64_t B = g->q.batch;
  if (g->tnd) {
    OP_CHECK(actual_seq_qlen->data != nullptr && actual_seq_kvlen->data != nullptr,
             "actual_seq_qlen / actual_seq_kvlen data must not be a null pointer");
    std::vector<int64_t> cq, ckv;
    OP_TRY(read_actual_seq(actual_seq_qlen, "actual_seq_qlen", g->q.rows, &cq));
    OP_TRY(read_actual_seq(actual_seq_kvlen, "actual_seq_kvlen", g->k.rows, &ckv));
    OP_CHECK(cq.size() == ckv.size(), "actual_seq_qlen and actual_seq_kvlen must keep the same number of batches (",
             cq.size() - 1, " vs ", ckv.size() - 1, " before their trailing zeros)");
    B = static_cast<int64_t>(cq.size()) - 1;
    start_sequences(B, cq.data(), ckv.data(), 0, 0, &s);
  } else {
    start_sequences(B, nullptr, nullptr, g->q.rows, g->k.rows, &s);
  }
  finish_sequences(&s);
  g->batch = B;
  g->elem_start.assign(B, 0);
  int64_t e = 0;
  for (int64_t b = 0; b < B; ++b) {
    g->elem_start[b] = e;
    e += head_num * s.seqlen_q[b] * s.seqlen_kv[b];
  }
  g->numels = e;
  return OP_SUCCESS;
}

// sparse_mode / atten_mask / pre / next -> the engine's window and full mask (SPEC §2.4).
struct MaskPlan {
  int64_t sparse_mode = 0;  // after the TND > 16384 override
  int64_t left = kUnbounded, right = kUnbounded;
  MaskAlign align = MaskAlign::kTopLeft;
  const uint8_t* full = nullptr;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
};

inline int64_t clamp_tokens(int64_t t) { return std::max(-kUnbounded, std::min(kUnbounded, t)); }

// The registry checked sparse_mode (0 or 4, first of the sparse rules: Decision 8), the mask's
// dtype and shape and pre + next >= 0.
inline void resolve_sparse(const Geometry& g, const opTensor* atten_mask, int64_t sparse_mode, int64_t pre,
                           int64_t next, MaskPlan* m) {
  const bool forced = g.tnd && g.q.rows > 16 * 1024 && sparse_mode != 4;  // the high-precision kernel
  m->sparse_mode = forced ? 4 : sparse_mode;
  if (atten_mask == nullptr) return;  // no mask: sparse_mode and pre/next have no effect
  m->left = clamp_tokens(pre);
  m->right = clamp_tokens(next);
  if (m->sparse_mode == 4) {
    // bottom-right band; the mask is the device's compressed template, contents ignored. When
    // the TND override turned mode 0 into 4, the caller's full mask is dropped (SPEC §2.7, 3).
    m->align = MaskAlign::kBottomRight;
    return;
  }
  // mode 0: the full mask (1 = masked) plus the pre/next band, top-left origin.
  const opTensor* t = atten_mask;
  m->align = MaskAlign::kTopLeft;
  m->full = static_cast<const uint8_t*>(t->data);
  m->row_stride = t->strides[t->ndim - 2];
  if (t->ndim == 4) {
    m->batch_stride = t->shape[0] == 1 ? 0 : t->strides[0];
    m->head_stride = t->shape[1] == 1 ? 0 : t->strides[1];
  }
}

// TND: the batch count and the longest sequences come from the contents of actual_seq_qlen /
// actual_seq_kvlen, so only stage 1 can check the shapes that depend on them (the kernel reads
// pse and the full mask by them): pse [B|1, N|1, maxSq|1, maxSkv], mode 0's mask [maxSq, maxSkv].
inline opStatus check_tnd_shapes(const Geometry& g, const MaskPlan& m, const opTensor* pse, const opTensor* mask) {
  const int64_t sq = g.seq.max_q, skv = g.seq.max_kv;
  if (pse != nullptr && !((pse->shape[0] == 1 || pse->shape[0] == g.batch) && (pse->shape[2] == 1 || pse->shape[2] == sq) &&
                          pse->shape[3] == skv))
    return fail(OP_ERR_PARAM_INVALID, "pse must have shape [B or 1, N or 1, maxSq or 1, maxSkv] = [", g.batch, ", ",
                g.heads, ", ", sq, ", ", skv, "] for these actual_seq_qlen / actual_seq_kvlen, but got [", pse->shape[0],
                ", ", pse->shape[1], ", ", pse->shape[2], ", ", pse->shape[3], "]");
  if (m.full != nullptr && !(mask->shape[0] == sq && mask->shape[1] == skv))
    return fail(OP_ERR_PARAM_INVALID, "atten_mask must have shape [maxSq, maxSkv] = [", sq, ", ", skv,
                "] for these actual_seq_qlen / actual_seq_kvlen when sparse_mode is 0, but got [", mask->shape[0], ", ",
                mask->shape[1], "]");
  return OP_SUCCESS;
}

// What stage 1 derives from the shared arguments, once the registry's rules hold: layout,
// sizes and sequences (checking the contents of actual_seq_qlen / actual_seq_kvlen), then the
// sparse mode and mask.
inline opStatus make_call(const opTensor* query, const opTensor* key, const opTensor* value, int64_t head_num,
                          const char* input_layout, const opTensor* pse, const opTensor* atten_mask, int64_t pre,
                          int64_t next, const opIntArray* actual_seq_qlen, const opIntArray* actual_seq_kvlen,
                          int64_t sparse_mode, Geometry* g, MaskPlan* m) {
  OP_TRY(make_geometry(query, key, value, head_num, input_layout, actual_seq_qlen, actual_seq_kvlen, g));
  resolve_sparse(*g, atten_mask, sparse_mode, pre, next, m);
  if (g->tnd) OP_TRY(check_tnd_shapes(*g, *m, pse, atten_mask));
  return OP_SUCCESS;
}

// The engine's plan for the filled params (plan_engine); numel: elements of q, k, v, attention_in, dy.
inline bool make_swa_plan(const Geometry& g, const FlashAttnFwdParams& p, bool bwd, const int64_t numel[5],
                          PlanStorage* storage, Plan* plan) {
  return plan_engine(g.dtype, g.tnd, g.q.rows, g.k.rows, p, bwd, numel, storage, plan);
}

// Fills the params fields both ops share. The executor owns g, m and the sink values.
inline void fill_params(const Geometry& g, const MaskPlan& m, const opTensor* query, const opTensor* key,
                        const opTensor* value, const opTensor* pse, const std::vector<double>* sink, double scale,
                        double keep_prob, uint64_t seed, uint64_t offset, const opTensor* stats_max,
                        const opTensor* stats_sum, FlashAttnFwdParams* p) {
  fill_operands(*query, *key, *value, g.q, g.k, g.v, g.batch, g.seq, p);
  p->scale = scale;
  p->win_left = m.left;
  p->win_right = m.right;
  p->align = m.align;
  p->sinks = sink && !sink->empty() ? sink->data() : nullptr;
  p->full_mask = m.full;
  p->full_mask_batch_stride = m.batch_stride;
  p->full_mask_head_stride = m.head_stride;
  p->full_mask_row_stride = m.row_stride;
  if (pse != nullptr) {
    p->pse = pse->data;
    p->pse_dtype = pse->dtype;
    p->pse_batch_stride = pse->shape[0] == 1 ? 0 : pse->strides[0];
    p->pse_head_stride = pse->shape[1] == 1 ? 0 : pse->strides[1];
    p->pse_row_stride = pse->shape[2] == 1 ? 0 : pse->strides[2];
  }
  p->keep_prob = keep_prob;
  p->dropout_seed = keep_prob < 1.0 ? seed : 0;
  p->dropout_offset = keep_prob < 1.0 ? offset : 0;
  p->elem_start = g.elem_start.data();
  // statistics: (b, n, i) of [B, N, Sq, 8] or [T, N, 8]
  p->lse = stats_max->data;
  p->softmax_sum = stats_sum->data;
  p->lse_dtype = stats_max->dtype;
  if (g.tnd) {
    p->lse_batch_stride = 0;
    p->lse_head_stride = stats_max->strides[1];
    p->lse_row_stride = stats_max->strides[0];
  } else {
    p->lse_batch_stride = stats_max->strides[0];
    p->lse_head_stride = stats_max->strides[1];
    p->lse_row_stride = stats_max->strides[2];
  }
}

// Reads element idx of a floating tensor as double.
inline double load_value(const void* base, opDataType dt, int64_t idx) {
  switch (dt) {
    case OP_DT_DOUBLE: return static_cast<const double*>(base)[idx];
    case OP_DT_BF16: return to_float(static_cast<const BFloat16*>(base)[idx]);
    case OP_DT_FLOAT16: return to_float(static_cast<const Half*>(base)[idx]);
    default: return static_cast<const float*>(base)[idx];
  }
}

inline void store_value(void* base, opDataType dt, int64_t idx, double v) {
  switch (dt) {
    case OP_DT_DOUBLE: static_cast<double*>(base)[idx] = v; break;
    case OP_DT_BF16: static_cast<BFloat16*>(base)[idx] = to_bfloat16(static_cast<float>(v)); break;
    case OP_DT_FLOAT16: static_cast<Half*>(base)[idx] = to_half(static_cast<float>(v)); break;
    default: static_cast<float*>(base)[idx] = static_cast<float>(v); break;
  }
}

}  // namespace swa
}  // namespace flash
}  // namespace op_plugin
