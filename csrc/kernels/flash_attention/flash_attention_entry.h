// Shared stage-1 helpers of flash_attn and flash_attn_grad: layout parsing, sequence tables,
// content validation of cu_seqlens / seqused, params filling. The arguments' rules are the
// registry's, checked before these run (<Kernel>CheckArguments, generated). Baseline TUs only.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/flash_attention/flash_attention_params.h"
#include "kernels/flash_attention/flash_attention_plan.h"
#include "op_plugin/op_api.h"
#include "op_plugin/parallel.h"

namespace op_plugin {
namespace flash {

enum class Layout { kBSND, kBNSD, kTND };

inline bool parse_layout(const char* s, Layout* out) {
  if (s == nullptr) return false;
  if (std::strcmp(s, "BSND") == 0) { *out = Layout::kBSND; return true; }
  if (std::strcmp(s, "BNSD") == 0) { *out = Layout::kBNSD; return true; }
  if (std::strcmp(s, "TND") == 0) { *out = Layout::kTND; return true; }
  return false;
}
inline const char* layout_name(Layout l) {
  return l == Layout::kBSND ? "BSND" : l == Layout::kBNSD ? "BNSD" : "TND";
}
inline int layout_rank(Layout l) { return l == Layout::kTND ? 3 : 4; }

// Sizes of one q/k/v-like tensor in a layout: batch (0 for TND), rows (S or T), heads, dim.
struct Dims {
  int64_t batch, rows, heads, dim;
  int64_t batch_stride, row_stride, head_stride;
};
inline Dims dims_of(const opTensor& t, Layout l) {
  Dims d{};
  if (l == Layout::kBSND) {
    d = {t.shape[0], t.shape[1], t.shape[2], t.shape[3], t.strides[0], t.strides[1], t.strides[2]};
  } else if (l == Layout::kBNSD) {
    d = {t.shape[0], t.shape[2], t.shape[1], t.shape[3], t.strides[0], t.strides[2], t.strides[1]};
  } else {
    d = {0, t.shape[0], t.shape[1], t.shape[2], 0, t.strides[0], t.strides[1]};
  }
  return d;
}

// The values of a 1-D int32/int64 tensor (the registry checked its dtype and length).
inline std::vector<int64_t> read_ints(const opTensor* t) {
  std::vector<int64_t> out(static_cast<size_t>(t->shape[0]));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = t->dtype == OP_DT_INT32 ? static_cast<const int32_t*>(t->data)[i] : static_cast<const int64_t*>(t->data)[i];
  return out;
}

// Per-batch sequence tables held by the executor (the params struct points into them).
struct Sequences {
  std::vector<int64_t> q_start, kv_start, seqlen_q, seqlen_kv, rows_q, rows_kv;
  int64_t max_q = 0, max_kv = 0;
};

// The one sequence-table builder of flash_attn, flash_attn_grad and swa: B sequences at the
// cumulative offsets cum_q / cum_kv (B + 1 values from 0: TND), or B batches of rows_q / rows_kv
// rows each (cum_* null: BSND, BNSD, ...; a TND q may have batches of kv rows: a paged cache).
// Actual lengths start as the rows; `shorten` (seqused) may lower them before finish_sequences
// takes the maxima.
inline void start_sequences(int64_t B, const int64_t* cum_q, const int64_t* cum_kv, int64_t rows_q, int64_t rows_kv,
                            Sequences* s) {
  s->q_start.assign(B, 0);
  s->kv_start.assign(B, 0);
  s->rows_q.assign(B, rows_q);
  s->rows_kv.assign(B, rows_kv);
  for (int64_t b = 0; cum_q != nullptr && b < B; ++b) {
    s->q_start[b] = cum_q[b];
    s->rows_q[b] = cum_q[b + 1] - cum_q[b];
  }
  for (int64_t b = 0; cum_kv != nullptr && b < B; ++b) {
    s->kv_start[b] = cum_kv[b];
    s->rows_kv[b] = cum_kv[b + 1] - cum_kv[b];
  }
  s->seqlen_q = s->rows_q;
  s->seqlen_kv = s->rows_kv;
}

inline void finish_sequences(Sequences* s) {
  for (size_t b = 0; b < s->seqlen_q.size(); ++b) {
    s->max_q = std::max(s->max_q, s->seqlen_q[b]);
    s->max_kv = std::max(s->max_kv, s->seqlen_kv[b]);
  }
}

// Validates the contents of cu_seqlens / seqused (the registry checked their presence and
// shapes) and fills the tables. q_dims/kv_dims: layout sizes of q and k. For TND, batch comes
// from cu_seqlens_q; a TND q without cu_kv (a paged cache) has kd.rows kv rows per batch.
inline opStatus build_sequences(Layout layout, const Dims& qd, const Dims& kd, const opTensor* cu_q,
                                const opTensor* cu_kv, const opTensor* used_q, const opTensor* used_kv,
                                Sequences* s, int64_t* batch_out) {
  const bool tnd = layout == Layout::kTND;
  const bool tnd_kv = tnd && cu_kv != nullptr;
  int64_t B = qd.batch;
  std::vector<int64_t> cq, ckv;
  if (tnd) {
    cq = read_ints(cu_q);
    if (tnd_kv) ckv = read_ints(cu_kv);
    B = static_cast<int64_t>(cq.size()) - 1;
    const struct { const std::vector<int64_t>* v; const char* name; int64_t total; } cus[2] = {
        {&cq, "cu_seqlens_q", qd.rows}, {&ckv, "cu_seqlens_kv", kd.rows}};
    for (const auto& cu : cus) {
      const std::vector<int64_t>& v = *cu.v;
      if (v.empty()) continue;  // no cu_seqlens_kv: a paged cache
      if (v[0] != 0) return fail(OP_ERR_PARAM_INVALID, cu.name, " must start at 0, but cu[0] = ", v[0]);
      for (int64_t b = 0; b < B; ++b)
        if (v[b + 1] < v[b])
          return fail(OP_ERR_PARAM_INVALID, cu.name, " must be non-decreasing, but cu[", b + 1, "] = ", v[b + 1],
                      " < cu[", b, "] = ", v[b]);
      if (v[B] != cu.total)
        return fail(OP_ERR_PARAM_INVALID, cu.name, " must end at the token count ", cu.total, ", but cu[", B,
                    "] = ", v[B]);
    }
  }
  start_sequences(B, tnd ? cq.data() : nullptr, tnd_kv ? ckv.data() : nullptr, qd.rows, kd.rows, s);
  const struct { const opTensor* t; const char* name; std::vector<int64_t>* len; int64_t limit; } used[2] = {
      {used_q, "seqused_q", &s->seqlen_q, qd.rows}, {used_kv, "seqused_kv", &s->seqlen_kv, kd.rows}};
  for (const auto& u : used) {
    if (u.t == nullptr) continue;
    const std::vector<int64_t> vals = read_ints(u.t);
    for (int64_t b = 0; b < B; ++b) {
      if (vals[b] < 0 || vals[b] > u.limit)
        return fail(OP_ERR_PARAM_INVALID, u.name, "[", b, "] = ", vals[b], " must be within [0, ", u.limit, "]");
      if (vals[b] < (*u.len)[b]) (*u.len)[b] = vals[b];  // with cu_seqlens, the shorter wins
    }
  }
  finish_sequences(s);
  *batch_out = B;
  return OP_SUCCESS;
}

// The engine's key window (left, right) for mask_mode 0 / 3 / 4 (SPEC §1.4); -1 (unbounded)
// becomes kUnbounded. The registry checked the mode, the window values and attn_mask.
inline void window_of(int64_t mask_mode, int64_t win_left, int64_t win_right, int64_t* left, int64_t* right) {
  if (mask_mode == 0) {
    *left = *right = kUnbounded;
  } else if (mask_mode == 3) {
    *left = kUnbounded;
    *right = 0;
  } else {  // mode 4: -1 = unbounded on that side (Decision 4)
    *left = win_left == -1 ? kUnbounded : win_left;
    *right = win_right == -1 ? kUnbounded : win_right;
  }
}

// Fills the tensor fields of params for one operand.
inline void set_strides(const Dims& d, int64_t* batch, int64_t* row, int64_t* head) {
  *batch = d.batch_stride;
  *row = d.row_stride;
  *head = d.head_stride;
}

// The params fill every front door shares (flash_attn, flash_attn_grad, swa_forward,
// swa_backward): q, k, v (pointers, dtype, sizes, strides) and the sequence tables, which the
// executor owns (the params point into them).
inline void fill_operands(const opTensor& q, const opTensor& k, const opTensor& v, const Dims& qd, const Dims& kd,
                          const Dims& vd, int64_t batch, const Sequences& seq, FlashAttnFwdParams* p) {
  p->q = q.data;
  p->k = k.data;
  p->v = v.data;
  p->dtype = q.dtype;
  p->batch = batch;
  p->heads_q = qd.heads;
  p->heads_kv = kd.heads;
  p->group = qd.heads / kd.heads;
  p->head_dim = qd.dim;
  p->head_dim_v = vd.dim;
  p->max_seqlen_q = seq.max_q;
  p->max_seqlen_kv = seq.max_kv;
  set_strides(qd, &p->q_batch_stride, &p->q_row_stride, &p->q_head_stride);
  set_strides(kd, &p->k_batch_stride, &p->k_row_stride, &p->k_head_stride);
  set_strides(vd, &p->v_batch_stride, &p->v_row_stride, &p->v_head_stride);
  p->q_start = seq.q_start.data();
  p->kv_start = seq.kv_start.data();
  p->seqlen_q = seq.seqlen_q.data();
  p->seqlen_kv = seq.seqlen_kv.data();
  p->rows_q = seq.rows_q.data();
  p->rows_kv = seq.rows_kv.data();
}

// softmax_lse (b, n, i): [B, N, S], or [N, T] for TND (batch stride 0, rows at q_start).
inline void set_lse(const opTensor& lse, Layout layout, FlashAttnFwdParams* p) {
  p->lse = lse.data;
  p->lse_dtype = lse.dtype;
  const bool tnd = layout == Layout::kTND;
  p->lse_batch_stride = tnd ? 0 : lse.strides[0];
  p->lse_head_stride = tnd ? lse.strides[0] : lse.strides[1];
  p->lse_row_stride = tnd ? lse.strides[1] : lse.strides[2];
}

// Chooses the compute path for the dtype and head dims on the active ISA.
inline void choose_compute(opDataType dt, int64_t D, int64_t Dv, Plan* plan) {
  plan->convert_in_tasks = false;
  if (dt == OP_DT_DOUBLE) {
    plan->compute = Compute::kF64;
  } else if (dt == OP_DT_FLOAT) {
    plan->compute = Compute::kF32;
  } else if (dt == OP_DT_BF16 && (kernels().amx || bf16_dot_full_rate()) && kernels().bf16_pairs && D % 2 == 0 &&
             Dv % 2 == 0) {
    // make_plan turns this into the AMX dataflow when the query side fills a tile.
    plan->compute = Compute::kBf16Pairs;
  } else {
    // fp16 always (bf16 pairs would lose 3 mantissa bits of every input: ~4-8x the error of a
    // same-dtype PyTorch computation), bf16 with odd head dims, and bf16 without AMX where
    // vdpbf16ps runs at half the fp32 FMA rate (Intel): converting to float32 measured as fast
    // (dense forward) to 1.9x faster (causal backward) than the pairs there (docs/decisions.md).
    plan->compute = Compute::kF32;
    plan->convert_in_tasks = true;
  }
}

// Stage 1's last step for every op on the engine: the compute path, the batch rows of the padded
// layouts (none for TND) and the engine's plan; numel: elements of q, k, v, attention_out, dy.
inline bool plan_engine(opDataType dt, bool tnd, int64_t q_rows, int64_t kv_rows, const FlashAttnFwdParams& p,
                        bool bwd, const int64_t numel[5], PlanStorage* storage, Plan* plan) {
  choose_compute(dt, p.head_dim, p.head_dim_v, plan);
  plan->kv_batch_rows = tnd ? 0 : kv_rows;
  plan->q_batch_rows = tnd ? 0 : q_rows;
  return make_plan(p, bwd, numel, op_plugin::max_threads(), storage, plan);
}

inline void sinks_to_doubles(const opTensor* sinks, std::vector<double>* out) {
  const int64_t n = sinks->shape[0];
  out->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t idx = i * sinks->strides[0];
    double v = 0.0;
    switch (sinks->dtype) {
      case OP_DT_FLOAT: v = static_cast<const float*>(sinks->data)[idx]; break;
      case OP_DT_DOUBLE: v = static_cast<const double*>(sinks->data)[idx]; break;
      case OP_DT_BF16: {
        const uint32_t u = static_cast<uint32_t>(static_cast<const uint16_t*>(sinks->data)[idx]) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        v = f;
        break;
      }
      case OP_DT_FLOAT16: {
        // exact binary16 -> float
        const uint16_t h = static_cast<const uint16_t*>(sinks->data)[idx];
        const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                          : e == 31 ? (m ? NAN : INFINITY)
                                    : std::ldexp(static_cast<float>(m | 0x400), e - 25);
        v = (h & 0x8000) ? -mag : mag;
        break;
      }
      default: break;
    }
    (*out)[i] = v;
  }
}

}  // namespace flash
}  // namespace op_plugin
