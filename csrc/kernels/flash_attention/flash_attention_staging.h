// Input staging of the flash attention engine (torch-free): head-major copies of strided
// operands, the bf16 forward's value rows as key-row pairs, and the rows a task converts from
// 16-bit inputs computed in float.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/simd.h"
#include "kernels/flash_attention/flash_attention_common.h"
#include "kernels/flash_attention/flash_attention_swa_features.h"  // load_float

namespace op_plugin {
namespace OP_ISA_NS {
namespace fa {

// Copies one q/k/v-like tensor (elements of type T) into a head-major buffer dst[b][n][r][:dim]
// (TND: one "batch" holding every token's row). Returns the new strides through the pointers.
template <class T>
inline void stage_tensor(const void* src, int64_t bs, int64_t rs, int64_t hs, int64_t nb, int64_t rows, int64_t heads,
                         int64_t dim, T* dst, int64_t* nbs, int64_t* nrs, int64_t* nhs) {
  constexpr int64_t kRowChunk = 256;
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  op_plugin::parallel_for(0, nb * heads * chunks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t c = it % chunks, n = (it / chunks) % heads, b = it / chunks / heads;
      for (int64_t r = c * kRowChunk; r < imin(rows, (c + 1) * kRowChunk); ++r)
        std::memcpy(dst + ((b * heads + n) * rows + r) * dim, static_cast<const T*>(src) + b * bs + r * rs + n * hs,
                    static_cast<size_t>(dim) * sizeof(T));
    }
  });
  *nbs = nb > 1 || bs != 0 ? heads * rows * dim : 0;
  *nrs = dim;
  *nhs = rows * dim;
}

// One row of n values of dtype dt into dst (S = float or double).
template <class S>
inline void load_row(const void* src, opDataType dt, int64_t n, S* dst) {
  if (dt == OP_DT_DOUBLE) {
    for (int64_t c = 0; c < n; ++c) dst[c] = static_cast<S>(static_cast<const double*>(src)[c]);
  } else if (dt == OP_DT_FLOAT) {
    for (int64_t c = 0; c < n; ++c) dst[c] = static_cast<S>(static_cast<const float*>(src)[c]);
  } else if (sizeof(S) == 8) {
    for (int64_t c = 0; c < n; ++c) dst[c] = static_cast<S>(load_float(src, dt, c));
  } else if (dt == OP_DT_BF16) {
    cvt_bf16_to_f32(static_cast<const uint16_t*>(src), reinterpret_cast<float*>(dst), n);
  } else {
    cvt_f16_to_f32(static_cast<const uint16_t*>(src), reinterpret_cast<float*>(dst), n);
  }
}

// 16-bit inputs computed in float (Plan::convert_in_tasks): rows [0, rows) of a bf16 / fp16
// tensor starting at element `offset` (row stride ld elements), converted into dst (row stride
// ldd floats). Each task converts the rows it reads (a block's q, a head's q and dout, a key
// tile's k and v) into its slot; float32 copies of whole inputs took twice their own size of
// workspace, and converting per task measured as fast.
inline void convert_rows(const void* base, opDataType dt, int64_t offset, int64_t ld, int64_t rows, int64_t dim,
                         float* dst, int64_t ldd) {
  const uint16_t* src = static_cast<const uint16_t*>(base) + offset;
  for (int64_t r = 0; r < rows; ++r) load_row<float>(src + r * ld, dt, dim, dst + r * ldd);
}

// Rows [0, rows) of an input as a task reads them (element `offset`, row stride ld): in place, or,
// converting (T = float), through convert_rows into scratch (row stride pad16(dim)). The row
// stride read from goes to *ld_out unless it is null (a single row).
template <class T>
inline const T* task_rows(bool convert, const void* base, opDataType dt, int64_t offset, int64_t ld, int64_t rows,
                          int64_t dim, float* scratch, int64_t* ld_out) {
  if constexpr (std::is_same<T, float>::value) {
    if (convert) {
      convert_rows(base, dt, offset, ld, rows, dim, scratch, pad16(dim));
      if (ld_out) *ld_out = pad16(dim);
      return scratch;
    }
  }
  if (ld_out) *ld_out = ld;
  return static_cast<const T*>(base) + offset;
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
template <class T>
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
    T* dst = reinterpret_cast<T*>(static_cast<char*>(ws) + plan.stage_offset[t]);
    stage_tensor<T>(it.src, t == 3 ? saved_o[0] : bs, t == 3 ? saved_o[1] : rs, t == 3 ? saved_o[2] : hs, nb, rows,
                    it.heads, it.dim, dst, it.strides[0], it.strides[1], it.strides[2]);
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

}  // namespace fa
}  // namespace OP_ISA_NS
}  // namespace op_plugin
