// Shared stage-1 helpers of flash_attn and flash_attn_grad: layout parsing, sequence tables,
// content validation of cu_seqlens / seqused, params filling. Baseline TUs only.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/flash_attention/flash_attention_params.h"
#include "kernels/flash_attention/flash_attention_plan.h"
#include "op_plugin/op_api.h"

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

inline bool is_float_dtype(opDataType dt) {
  return dt == OP_DT_FLOAT || dt == OP_DT_FLOAT16 || dt == OP_DT_BF16 || dt == OP_DT_DOUBLE;
}

inline opStatus check_tensor(const opTensor* t, const char* name, opDataType dtype, int rank) {
  if (t->dtype != dtype)
    return fail(OP_ERR_PARAM_INVALID, "dtype of ", name, " must be the same as q (", dtype_name(dtype), "), but got ",
                dtype_name(t->dtype));
  if (t->ndim != rank) return fail(OP_ERR_PARAM_INVALID, name, " must be ", rank, "D, but got ", t->ndim, "D");
  for (int d = 0; d < rank; ++d)
    if (t->shape[d] <= 0) return fail(OP_ERR_PARAM_INVALID, name, " must not be empty (dim ", d, " is ", t->shape[d], ")");
  if (!is_contiguous(*t)) return fail(OP_ERR_PARAM_INVALID, name, " must be contiguous");
  if (t->data == nullptr) return fail(OP_ERR_PARAM_NULLPTR, name, " data must not be a null pointer");
  return OP_SUCCESS;
}

inline opStatus check_shape(const opTensor* t, const char* name, std::initializer_list<int64_t> want) {
  bool ok = t->ndim == static_cast<int>(want.size());
  int d = 0;
  for (int64_t w : want) {
    if (ok && t->shape[d] != w) ok = false;
    ++d;
  }
  if (ok) return OP_SUCCESS;
  std::string got = "[", exp = "[";
  for (int i = 0; i < t->ndim; ++i) got += (i ? ", " : "") + std::to_string(t->shape[i]);
  d = 0;
  for (int64_t w : want) exp += (d++ ? ", " : "") + std::to_string(w);
  return fail(OP_ERR_PARAM_INVALID, name, " must have shape ", exp, "], but got ", got, "]");
}

// Reads a 1-D int32/int64 tensor into `out`.
inline opStatus read_ints(const opTensor* t, const char* name, int64_t expected_len, std::vector<int64_t>* out) {
  if (t->dtype != OP_DT_INT32 && t->dtype != OP_DT_INT64)
    return fail(OP_ERR_PARAM_INVALID, name, " must be int32 or int64, but got ", dtype_name(t->dtype));
  if (t->ndim != 1) return fail(OP_ERR_PARAM_INVALID, name, " must be 1D, but got ", t->ndim, "D");
  if (t->shape[0] != expected_len)
    return fail(OP_ERR_PARAM_INVALID, name, " must have ", expected_len, " elements, but got ", t->shape[0]);
  if (expected_len > 0 && t->data == nullptr) return fail(OP_ERR_PARAM_NULLPTR, name, " data must not be a null pointer");
  out->resize(static_cast<size_t>(expected_len));
  for (int64_t i = 0; i < expected_len; ++i) {
    const int64_t idx = i * t->strides[0];
    (*out)[i] = t->dtype == OP_DT_INT32 ? static_cast<const int32_t*>(t->data)[idx]
                                        : static_cast<const int64_t*>(t->data)[idx];
  }
  return OP_SUCCESS;
}

// Per-batch sequence tables held by the executor (the params struct points into them).
struct Sequences {
  std::vector<int64_t> q_start, kv_start, seqlen_q, seqlen_kv, rows_q, rows_kv;
  int64_t max_q = 0, max_kv = 0;
};

// Validates cu_seqlens / seqused (presence and contents) and fills the tables.
// q_dims/kv_dims: layout sizes of q and k. For TND, batch comes from cu_seqlens_q.
inline opStatus build_sequences(Layout layout, const Dims& qd, const Dims& kd, const opTensor* cu_q,
                                const opTensor* cu_kv, const opTensor* used_q, const opTensor* used_kv,
                                Sequences* s, int64_t* batch_out) {
  const bool tnd = layout == Layout::kTND;
  if (tnd) {
    if (cu_q == nullptr) return fail(OP_ERR_PARAM_INVALID, "cu_seqlens_q must be provided when layout is TND.");
    if (cu_kv == nullptr) return fail(OP_ERR_PARAM_INVALID, "cu_seqlens_kv must be provided when layout is TND.");
  } else {
    if (cu_q != nullptr) return fail(OP_ERR_PARAM_INVALID, "cu_seqlens_q must not be provided when layout is not TND.");
    if (cu_kv != nullptr) return fail(OP_ERR_PARAM_INVALID, "cu_seqlens_kv must not be provided when layout is not TND.");
  }
  int64_t B = qd.batch;
  std::vector<int64_t> cq, ckv;
  if (tnd) {
    if (cu_q->ndim != 1) return fail(OP_ERR_PARAM_INVALID, "cu_seqlens_q must be 1D, but got ", cu_q->ndim, "D");
    if (cu_kv->ndim != 1) return fail(OP_ERR_PARAM_INVALID, "cu_seqlens_kv must be 1D, but got ", cu_kv->ndim, "D");
    B = cu_q->shape[0] - 1;
    if (B < 1) return fail(OP_ERR_PARAM_INVALID, "cu_seqlens_q must have at least 2 elements (B + 1), but got ", cu_q->shape[0]);
    opStatus st = read_ints(cu_q, "cu_seqlens_q", B + 1, &cq);
    if (st != OP_SUCCESS) return st;
    st = read_ints(cu_kv, "cu_seqlens_kv", B + 1, &ckv);
    if (st != OP_SUCCESS) return st;
    const struct { const std::vector<int64_t>* v; const char* name; int64_t total; } cus[2] = {
        {&cq, "cu_seqlens_q", qd.rows}, {&ckv, "cu_seqlens_kv", kd.rows}};
    for (const auto& cu : cus) {
      const std::vector<int64_t>& v = *cu.v;
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
  s->q_start.assign(B, 0);
  s->kv_start.assign(B, 0);
  s->rows_q.assign(B, qd.rows);
  s->rows_kv.assign(B, kd.rows);
  if (tnd) {
    for (int64_t b = 0; b < B; ++b) {
      s->q_start[b] = cq[b];
      s->kv_start[b] = ckv[b];
      s->rows_q[b] = cq[b + 1] - cq[b];
      s->rows_kv[b] = ckv[b + 1] - ckv[b];
    }
  }
  s->seqlen_q = s->rows_q;
  s->seqlen_kv = s->rows_kv;
  const struct { const opTensor* t; const char* name; std::vector<int64_t>* len; int64_t limit; } used[2] = {
      {used_q, "seqused_q", &s->seqlen_q, qd.rows}, {used_kv, "seqused_kv", &s->seqlen_kv, kd.rows}};
  for (const auto& u : used) {
    if (u.t == nullptr) continue;
    std::vector<int64_t> vals;
    opStatus st = read_ints(u.t, u.name, B, &vals);
    if (st != OP_SUCCESS) return st;
    for (int64_t b = 0; b < B; ++b) {
      if (vals[b] < 0 || vals[b] > u.limit)
        return fail(OP_ERR_PARAM_INVALID, u.name, "[", b, "] = ", vals[b], " must be within [0, ", u.limit, "]");
      if (vals[b] < (*u.len)[b]) (*u.len)[b] = vals[b];  // with cu_seqlens, the shorter wins
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    s->max_q = std::max(s->max_q, s->seqlen_q[b]);
    s->max_kv = std::max(s->max_kv, s->seqlen_kv[b]);
  }
  *batch_out = B;
  return OP_SUCCESS;
}

// Mask mode / window / attn_mask rules of SPEC §1.6; resolves the window to the engine's
// (left, right), where -1 (unbounded) becomes kUnbounded.
inline opStatus resolve_mask(int64_t mask_mode, int64_t win_left, int64_t win_right, const opTensor* attn_mask,
                             int64_t* left, int64_t* right) {
  if (mask_mode != 0 && mask_mode != 3 && mask_mode != 4)
    return fail(OP_ERR_PARAM_INVALID, "mask_mode only supports 0, 3, 4, but got ", mask_mode, ".");
  if (win_left < -1) return fail(OP_ERR_PARAM_INVALID, "win_left must be -1 or >= 0, but got ", win_left, ".");
  if (win_right < -1) return fail(OP_ERR_PARAM_INVALID, "win_right must be -1 or >= 0, but got ", win_right, ".");
  if (mask_mode == 0) {
    if (attn_mask != nullptr) return fail(OP_ERR_PARAM_INVALID, "attn_mask must not be provided when mask_mode is 0.");
    if (win_left != -1) return fail(OP_ERR_PARAM_INVALID, "win_left must be -1 when mask_mode is 0, but got ", win_left, ".");
    if (win_right != -1) return fail(OP_ERR_PARAM_INVALID, "win_right must be -1 when mask_mode is 0, but got ", win_right, ".");
    *left = kUnbounded;
    *right = kUnbounded;
    return OP_SUCCESS;
  }
  if (attn_mask == nullptr)
    return fail(OP_ERR_PARAM_INVALID, "attn_mask must be provided when mask_mode is ", mask_mode, ".");
  if (attn_mask->ndim != 2) return fail(OP_ERR_PARAM_INVALID, "attn_mask must be 2D, but got ", attn_mask->ndim, "D.");
  if (attn_mask->shape[0] != 2048 || attn_mask->shape[1] != 2048)
    return fail(OP_ERR_PARAM_INVALID, "attn_mask shape must be [2048, 2048], but got [", attn_mask->shape[0], ", ",
                attn_mask->shape[1], "].");
  if (mask_mode == 3) {
    if (win_left != -1) return fail(OP_ERR_PARAM_INVALID, "win_left must be -1 when mask_mode is 3, but got ", win_left, ".");
    if (win_right != -1) return fail(OP_ERR_PARAM_INVALID, "win_right must be -1 when mask_mode is 3, but got ", win_right, ".");
    *left = kUnbounded;
    *right = 0;
    return OP_SUCCESS;
  }
  *left = win_left == -1 ? kUnbounded : win_left;  // mode 4: -1 = unbounded on that side (Decision 4)
  *right = win_right == -1 ? kUnbounded : win_right;
  return OP_SUCCESS;
}

inline opStatus check_max_seqlen(int64_t v, const char* name) {
  if (v < -1) return fail(OP_ERR_PARAM_INVALID, name, " must be -1 or >= 0, but got ", v, ".");
  return OP_SUCCESS;
}

// Fills the tensor fields of params for one operand.
inline void set_strides(const Dims& d, int64_t* batch, int64_t* row, int64_t* head) {
  *batch = d.batch_stride;
  *row = d.row_stride;
  *head = d.head_stride;
}

// Chooses the compute path for the dtype and head dims on the active ISA.
inline void choose_compute(opDataType dt, int64_t D, int64_t Dv, Plan* plan) {
  plan->stage_convert = false;
  if (dt == OP_DT_DOUBLE) {
    plan->compute = Compute::kF64;
  } else if (dt == OP_DT_FLOAT) {
    plan->compute = Compute::kF32;
  } else if (dt == OP_DT_BF16 && kernels().bf16_pairs && D % 2 == 0 && Dv % 2 == 0) {
    plan->compute = Compute::kBf16Pairs;
  } else {
    // fp16 always (bf16 pairs would lose 3 mantissa bits of every input: ~4-8x the error of a
    // same-dtype PyTorch computation), bf16 without AVX512_BF16 or with odd head dims.
    plan->compute = Compute::kF32;
    plan->stage_convert = true;
  }
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

inline opStatus check_sinks(const opTensor* sinks, int64_t n1) {
  if (sinks == nullptr) return OP_SUCCESS;
  if (!is_float_dtype(sinks->dtype))
    return fail(OP_ERR_PARAM_INVALID, "sinks must be a floating tensor, but got ", dtype_name(sinks->dtype));
  if (sinks->ndim != 1 || sinks->shape[0] != n1)
    return fail(OP_ERR_PARAM_INVALID, "sinks must have shape [", n1, "] (N1), but got a ", sinks->ndim, "D tensor");
  if (sinks->data == nullptr) return fail(OP_ERR_PARAM_NULLPTR, "sinks data must not be a null pointer");
  return OP_SUCCESS;
}

}  // namespace flash
}  // namespace op_plugin
