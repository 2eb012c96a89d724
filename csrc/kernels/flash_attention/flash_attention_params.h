// Parameters and plan of the flash attention engine (torch-free, ISA-neutral).
//
// One engine serves flash_attn / flash_attn_grad and swa_forward / swa_backward: every feature
// is a field of the params struct, filled once by the op entry point (flash_attn.cpp,
// flash_attn_grad.cpp, swa_forward.cpp, swa_backward.cpp), never re-derived inside the kernels.
//
// Index conventions (SPEC §0): b batch, n query head (0..N1), h = n / group kv head, i query
// row and j key within ONE sequence; Sq, Skv are that sequence's actual lengths.
// Row i of head n of batch b lives at
//   q + b*q_batch_stride + q_start[b]*q_row_stride + n*q_head_stride + i*q_row_stride
// (TND: batch stride 0 and q_start = cu_seqlens_q; BSND/BNSD: q_start = 0). The same holds for
// k, v, out, dout, dq, dk, dv with their own strides. All strides are in elements, not bytes.
#pragma once
#include <cstdint>

#include "op_plugin/tensor.h"

namespace op_plugin {
namespace flash {

// Where the key window of query row i is anchored (SPEC §0 and §2.4).
enum class MaskAlign : int32_t {
  kBottomRight = 0,  // query i lines up with key i + (Skv - Sq): flash_attn, swa sparse_mode 4
  kTopLeft = 1,      // query i lines up with key i: swa sparse_mode 0
};

// A window side that is not limited. Large enough that i + o +- kUnbounded never clips a real
// sequence, small enough that the arithmetic never overflows, so RowWindow needs no branches.
constexpr int64_t kUnbounded = int64_t(1) << 40;

struct FlashAttnFwdParams {
  // ---- tensors (raw pointers; dtype of q/k/v/out is `dtype`) -------------------------------
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  void* lse = nullptr;           // softmax_lse, float (double for double inputs); nullptr: not returned
  opDataType dtype = OP_DT_FLOAT;
  opDataType lse_dtype = OP_DT_FLOAT;

  // ---- sizes ----------------------------------------------------------------------------
  int64_t batch = 0;
  int64_t heads_q = 0;           // N1
  int64_t heads_kv = 0;          // N2; N1 % N2 == 0
  int64_t group = 1;             // N1 / N2: query head n reads kv head n / group
  int64_t head_dim = 0;          // D of q and k
  int64_t head_dim_v = 0;        // Dv of v and out
  int64_t max_seqlen_q = 0;      // max over batches of the actual Sq (sizes the workspace)
  int64_t max_seqlen_kv = 0;

  // ---- strides, in elements --------------------------------------------------------------
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  // lse element (b, n, i) at lse + b*lse_batch_stride + n*lse_head_stride + (q_start[b] + i)*lse_row_stride
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_row_stride = 0;

  // ---- per-batch sequences (arrays of `batch` values, owned by the executor) ---------------
  const int64_t* q_start = nullptr;   // first row of sequence b (TND: cu_seqlens_q[b]; else 0)
  const int64_t* kv_start = nullptr;
  const int64_t* seqlen_q = nullptr;  // actual Sq of b: min(layout length, seqused_q[b])
  const int64_t* seqlen_kv = nullptr;
  const int64_t* rows_q = nullptr;    // rows of sequence b present in the tensor (padding rows
  const int64_t* rows_kv = nullptr;   // rows_q[b] - seqlen_q[b] get out 0 / lse +inf / grads 0)

  // ---- softmax and mask ------------------------------------------------------------------
  double scale = 1.0;            // multiplies q.k (the logits); already resolved (grad 0.0 -> 1/sqrt(D))
  // Key window of row i: [i + o - win_left, i + o + win_right] ∩ [0, Skv), inclusive, where
  // o = Skv - Sq (kBottomRight) or 0 (kTopLeft); kUnbounded = no limit on that side; negative
  // sides are legal (swa: next = -2 starts the window two keys left of the diagonal). Dense is
  // (kUnbounded, kUnbounded), causal (mask_mode 3) is (kUnbounded, 0). Tiles wholly outside the
  // window are skipped.
  int64_t win_left = kUnbounded;
  int64_t win_right = kUnbounded;
  MaskAlign align = MaskAlign::kBottomRight;
  const double* sinks = nullptr;  // (N1,) per-head logit joining the denominator, unscaled; nullptr = none
                                 // (double, so float64 inputs keep a float64 sink exactly)

  // ---- a paged KV cache read in place (flash_attn, layout_kv PA_*; the row kernels only: for the
  // other dataflows stage 2 gathers it into a packed copy, flash_attention_paged.h) -----------
  // Key j of sequence b (kv_start[b] = 0) is row j % kv_block_size of block
  // kv_table[b * kv_table_width + j / kv_block_size]: its kv head h at k + block * k_block_stride
  // + (j % kv_block_size) * k_row_stride + h * k_head_stride, v alike. nullptr: not paged.
  const int64_t* kv_table = nullptr;
  int64_t kv_table_width = 0, kv_block_size = 0, k_block_stride = 0, v_block_stride = 0;

  // ---- swa_forward / swa_backward extras (zero / null for flash_attn) ----------------------
  // The full boolean mask (1 = masked) and the pse bias are read per (query block, key tile)
  // into one additive tile (c2 * pse, or -inf where masked) before the softmax pass. Element
  // (b, n, i, j) (i, j local to the sequence) is at base + b*batch + n*head + i*row + j; a
  // broadcast dimension has stride 0.
  const uint8_t* full_mask = nullptr;
  int64_t full_mask_batch_stride = 0, full_mask_head_stride = 0, full_mask_row_stride = 0;
  const void* pse = nullptr;
  opDataType pse_dtype = OP_DT_FLOAT;
  int64_t pse_batch_stride = 0, pse_head_stride = 0, pse_row_stride = 0;
  // Dropout (keep_prob < 1): counter-based keep mask of kernels/common/counter_rng.h keyed by
  // (seed, offset) and the element index elem_start[b] + (n*Sq + i)*Skv + j.
  double keep_prob = 1.0;
  uint64_t dropout_seed = 0, dropout_offset = 0;
  const int64_t* elem_start = nullptr;
  // swa statistics instead of the lse: `lse` points to softmax_max and this to softmax_sum
  // (both with the lse_* strides, the value repeated 8 times along the last axis). The forward
  // writes max (natural units) and sum; the backward uses lse = max + log(sum), and an empty row
  // (max = -FLT_MAX, sum = FLT_MAX) gives P = 0.
  void* softmax_sum = nullptr;
};

struct FlashAttnBwdParams : FlashAttnFwdParams {
  // q/k/v/out/lse above are inputs here: out is attn_out, lse the forward's softmax_lse.
  const void* dout = nullptr;    // strides: o_* (same layout as out)
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  // Strides of dq/dk/dv (the layout of q/k/v as the caller gave them; the input strides above
  // may be rewritten when inputs are staged into head-major copies).
  int64_t dq_batch_stride = 0, dq_row_stride = 0, dq_head_stride = 0;
  int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
  int64_t dv_batch_stride = 0, dv_row_stride = 0, dv_head_stride = 0;
  // swa_backward with pse: every scale * dS element goes to a [B][N][Sq max][Skv max] buffer of
  // the workspace (plan.dpse_offset), reduced to pse's broadcast shape by the op afterwards.
  bool want_dpse = false;
};

// ---- tiles --------------------------------------------------------------------------------
// kBlockQ: query rows per tile. 64 = 4 AVX-512 vectors: the score tile is stored transposed
//   (keys x queries), so the online-softmax statistics are lane-wise vector operations with no
//   horizontal reductions, and one 6x4 micro-kernel strip covers a whole tile row.
// kBlockKV: keys per tile. 96 = 16 micro-kernel rows of 6 (no ragged strip in the score GEMM);
//   the 96x64 fp32 score tile (24 KiB) stays in L1 next to the micro-kernel's B strip, and the
//   per-tile online-softmax rescale of the output accumulator is amortised over 96 keys.
constexpr int64_t kBlockQ = 64;
constexpr int64_t kBlockKV = 96;
static_assert(kBlockQ % 16 == 0, "kBlockQ must be a multiple of the widest vector (16 lanes)");
static_assert(kBlockKV % 2 == 0, "kBlockKV must be even (bf16 key pairs)");

// Padded leading dimension for a row of n values held in fp32/fp64 scratch (multiple of 16).
constexpr int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }

// ---- key range of a query row ---------------------------------------------------------------
struct RowWindow {
  int64_t offset;  // o
  int64_t left;    // win_left (kUnbounded: no limit; may be negative)
  int64_t right;   // win_right
  int64_t skv;
  // First and last allowed key of row i (lo > hi: nothing to attend to).
  int64_t lo(int64_t i) const {
    const int64_t x = i + offset - left;
    return x < 0 ? 0 : x;
  }
  int64_t hi(int64_t i) const {
    const int64_t x = i + offset + right;
    return x > skv - 1 ? skv - 1 : x;
  }
  // Rows that can see key j: [first_row(j), last_row(j)] (unclamped to [0, Sq)).
  int64_t first_row(int64_t j) const { return j - offset - right; }
  int64_t last_row(int64_t j) const { return j - offset + left; }
};

inline RowWindow row_window(const FlashAttnFwdParams& p, int64_t sq, int64_t skv) {
  RowWindow w;
  w.offset = p.align == MaskAlign::kBottomRight ? skv - sq : 0;
  w.left = p.win_left;
  w.right = p.win_right;
  w.skv = skv;
  return w;
}

}  // namespace flash
}  // namespace op_plugin
