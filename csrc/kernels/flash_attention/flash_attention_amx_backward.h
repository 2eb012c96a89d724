// Backward tile loop of the flash attention engine, AMX-BF16 dataflow (bf16 inputs on a CPU with
// AMX tiles; AVX-512 translation unit only). float32 (float16) inputs run the same loop with every
// operand in three (two) bf16 parts (kParts 3, 2: amx::kSplitPairs), at their dtype's accuracy.
//
// One task per (b, query heads n .. n + plan.bwd_task_heads - 1 of one kv head, key chunk): for
// each key block of plan.amx_block_kv keys (outer), each of the task's heads and each strip of
// plan.amx_block_q query rows that can see the block (inner), five tile GEMMs with every operand
// already in the layout tiles load:
//   S^T  = K Q^T     A = K rows of the block            B = Q^T panels (16 queries each)
//   dP^T = V dO^T    A = V rows                          B = dO^T panels
//   P^T = 2^(c2 S^T - lse2), dS^T = P^T (dP^T - Delta)  vectors over 16 queries, so lse2 and
//                    Delta are vector loads; P^T and dS^T written as bf16 rows (A layout) and
//                    dS^T also as key-pair panels (B layout of dQ^T)
//   dV  += P^T dO    A = P^T rows                        B = dO panels over query pairs
//   dK  += dS^T Q    A = dS^T rows                       B = Q panels over query pairs
//   dQ^T += K^T dS^T A = K^T rows (d-major)              B = dS^T key-pair panels
// dK / dV accumulate in fp32 blocks of the task over all its heads and strips, dQ^T in an fp32
// [D][Sq] block per head over all the task's key blocks, transposed into rows (16 x 16 blocks) at
// the end. The Q / dO operands of every (b, query head) and the K / V operands of every (b, kv
// head) are packed once by stage_amx_backward, in parallel, a wave of heads at a time
// (Plan::amx_wave_kv), so tasks only run GEMMs and the elementwise step (K and V rows that need no
// padding are read from the inputs in place).
// GQA: a task runs its kv head's whole group of query heads unless that leaves fewer than
// kBwdMinTasks tasks (flash_attention_plan.cpp); a task with part of the group writes a dK | dV
// partial, summed afterwards (reduce_group, shared with the vector backward). Key-chunk dQ
// partials and the swa features work as in the vector backward.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/amx_tile.h"
#include "kernels/common/counter_rng.h"
#include "kernels/common/profile.h"
#include "kernels/flash_attention/flash_attention_backward.h"
#include "kernels/flash_attention/flash_attention_common.h"
#include "kernels/flash_attention/flash_attention_swa_features.h"

#if defined(OP_AVX512_BF16)
namespace op_plugin {
namespace OP_ISA_NS {
namespace fa {

// The packed operands of the AMX backward (flash_attention_plan.h, Plan::bq_* / bkv_*). Rows of a
// sequence are padded to amx_rows(len) = pad32(len) + 32 (a multiple of 32 for the tiles, and no
// power-of-two row stride for the d-major K^T).
// float16 / float inputs (kParts 2 / 3): part i of each packed operand at its pointer + i * its
// *part stride.
struct AmxBwdKv {  // one (b, kv head)
  const uint16_t* ka;  // K rows [amx_rows][pad32(D)]: A of S^T (or the input's rows, see below)
  const uint16_t* va;  // V rows [amx_rows][pad32(Dv)]: A of dP^T (likewise)
  const uint16_t* kt;  // K^T [pad16(D)][amx_rows]: A of dQ^T
  int64_t ld;          // amx_rows(skv)
  int64_t lda_k, lda_v;  // row strides of ka and va (elements)
  bool k_in_place, v_in_place;  // ka / va point into the inputs (not packed)
  int64_t kapart, vapart, ktpart;
};

// K (V) rows are read by the tiles straight from the input when they need no padding (D, resp.
// Dv, a multiple of 32, and the keys a multiple of 32: the GEMMs read rows up to pad32 of a
// block's keys) and every row starts a cache line (a tile row split across two lines loads at
// half rate). The copy cost 3-6% of a window backward (S=8192 D=64, one thread), memory-bound.
inline bool amx_bwd_rows_in_place(const void* rows, int64_t row_stride, int64_t dim, int64_t skv) {
  return dim % 32 == 0 && skv % 32 == 0 && (row_stride * 2) % 64 == 0 &&
         reinterpret_cast<uintptr_t>(rows) % 64 == 0;
}
struct AmxBwdQ {  // one (b, query head)
  const uint16_t* qt;   // Q^T panels of 16 queries x pad32(D): B of S^T
  const uint16_t* dot;  // dO^T panels of 16 queries x pad32(Dv): B of dP^T
  const uint16_t* qp;   // Q panels of 16 columns over query pairs: B of dK (panel stride 16 * ld)
  const uint16_t* dop;  // dO panels likewise: B of dV
  const float* lse2;    // lse * log2(e) per query, +inf past Sq
  const float* delta;   // rowsum(dO * O) per query, 0 past Sq
  int64_t ld;           // amx_rows(sq)
  int64_t qtpart, dotpart, qppart, doppart;
};

template <int kParts>
AmxBwdKv amx_bwd_kv(const FlashAttnBwdParams& p, const Plan& plan, const void* ws, int64_t b, int64_t h) {
  const char* base = static_cast<const char*>(ws);
  const int64_t row0 = amx_kv_slot(p, plan, b, h) * plan.bkv_rows;
  AmxBwdKv a;
  const int64_t skv = p.seqlen_kv[b];
  a.ld = flash::amx_rows(skv);
  a.ka = reinterpret_cast<const uint16_t*>(base + plan.bkv_k_offset) + row0 * pad32(p.head_dim);
  a.va = reinterpret_cast<const uint16_t*>(base + plan.bkv_v_offset) + row0 * pad32(p.head_dim_v);
  a.lda_k = pad32(p.head_dim);
  a.lda_v = pad32(p.head_dim_v);
  const int64_t rows = plan.amx_wave_kv * plan.bkv_rows;
  a.kapart = rows * pad32(p.head_dim);
  a.vapart = rows * pad32(p.head_dim_v);
  a.ktpart = rows * pad16(p.head_dim);
  const uint16_t* k = static_cast<const uint16_t*>(p.k) + b * p.k_batch_stride + p.kv_start[b] * p.k_row_stride +
                      h * p.k_head_stride;
  const uint16_t* v = static_cast<const uint16_t*>(p.v) + b * p.v_batch_stride + p.kv_start[b] * p.v_row_stride +
                      h * p.v_head_stride;
  // (float16 / float inputs are always packed: into parts)
  a.k_in_place = kParts == 1 && amx_bwd_rows_in_place(k, p.k_row_stride, p.head_dim, skv);
  a.v_in_place = kParts == 1 && amx_bwd_rows_in_place(v, p.v_row_stride, p.head_dim_v, skv);
  if (a.k_in_place) {
    a.ka = k;
    a.lda_k = p.k_row_stride;
  }
  if (a.v_in_place) {
    a.va = v;
    a.lda_v = p.v_row_stride;
  }
  a.kt = reinterpret_cast<const uint16_t*>(base + plan.bkv_kt_offset) + row0 * pad16(p.head_dim);
  return a;
}

inline AmxBwdQ amx_bwd_q(const FlashAttnBwdParams& p, const Plan& plan, const void* ws, int64_t b, int64_t n) {
  const char* base = static_cast<const char*>(ws);
  // the query heads of kv slot s take the query slots s * group + n % group
  const int64_t row0 = (amx_kv_slot(p, plan, b, n / p.group) * p.group + n % p.group) * plan.bq_rows;
  AmxBwdQ a;
  a.ld = flash::amx_rows(p.seqlen_q[b]);
  a.qt = reinterpret_cast<const uint16_t*>(base + plan.bq_qt_offset) + row0 * pad32(p.head_dim);
  a.dot = reinterpret_cast<const uint16_t*>(base + plan.bq_dot_offset) + row0 * pad32(p.head_dim_v);
  a.qp = reinterpret_cast<const uint16_t*>(base + plan.bq_qp_offset) + row0 * pad16(p.head_dim);
  a.dop = reinterpret_cast<const uint16_t*>(base + plan.bq_dop_offset) + row0 * pad16(p.head_dim_v);
  a.lse2 = reinterpret_cast<const float*>(base + plan.bq_lse_offset) + row0;
  a.delta = reinterpret_cast<const float*>(base + plan.bq_delta_offset) + row0;
  const int64_t rows = plan.amx_wave_kv * p.group * plan.bq_rows;
  a.qtpart = rows * pad32(p.head_dim);
  a.dotpart = rows * pad32(p.head_dim_v);
  a.qppart = rows * pad16(p.head_dim);
  a.doppart = rows * pad16(p.head_dim_v);
  return a;
}

// Rows [0, rows) of a bf16 matrix (row stride ld) into a zero-padded [rows_pad][cols_pad] block.
inline void copy_rows_padded(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, uint16_t* dst,
                             int64_t rows_pad, int64_t cols_pad) {
  for (int64_t r = 0; r < rows_pad; ++r) {
    uint16_t* d = dst + r * cols_pad;
    if (r < rows) {
      std::memcpy(d, src + r * ld, static_cast<size_t>(cols) * 2);
      std::memset(d + cols, 0, static_cast<size_t>(cols_pad - cols) * 2);
    } else {
      std::memset(d, 0, static_cast<size_t>(cols_pad) * 2);
    }
  }
}

// Transposes rows [0, rows) x cols [0, cols) of a bf16 matrix into dst[c][r] (row stride ldd),
// zero for r in [rows, rows_pad) and c in [cols, cols_pad) (rows_pad a multiple of 16, cols_pad of
// 2): 16 x 16 transposes of 32-bit words (column pairs), each word row then split into its even
// and odd columns.
inline void transpose_bf16_padded(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, uint16_t* dst,
                                  int64_t ldd, int64_t rows_pad, int64_t cols_pad) {
  alignas(64) uint32_t blk[16 * 16];
  const __m512i split = _mm512_setr_epi32(0x00020000, 0x00060004, 0x000a0008, 0x000e000c, 0x00120010, 0x00160014,
                                          0x001a0018, 0x001e001c, 0x00030001, 0x00070005, 0x000b0009, 0x000f000d,
                                          0x00130011, 0x00170015, 0x001b0019, 0x001f001d);
  const int64_t words = (cols + 1) / 2, wpad = cols_pad / 2;
  for (int64_t r0 = 0; r0 < rows_pad; r0 += 16) {
    const int nr = static_cast<int>(imax(0, imin(16, rows - r0)));
    for (int64_t w0 = 0; w0 < wpad; w0 += 16) {
      const int nw = static_cast<int>(imax(0, imin(16, words - w0)));
      if ((ld & 1) == 0 && (cols & 1) == 0) {
        amx::transpose16x16_u32(reinterpret_cast<const uint32_t*>(src + r0 * ld + 2 * w0), ld / 2, nr, nw, blk, 16);
      } else {  // words that straddle rows, or a last word with one value: gather them first
        alignas(64) uint32_t g[16 * 16];
        for (int i = 0; i < nr; ++i)
          for (int c = 0; c < nw; ++c) {
            const uint16_t* e = src + (r0 + i) * ld + 2 * (w0 + c);
            const uint32_t hi = 2 * (w0 + c) + 1 < cols ? static_cast<uint32_t>(e[1]) << 16 : 0u;
            g[i * 16 + c] = static_cast<uint32_t>(e[0]) | hi;
          }
        amx::transpose16x16_u32(g, 16, nr, nw, blk, 16);
      }
      // word row c holds (column 2c, column 2c + 1) of rows r0 .. r0 + 15
      for (int64_t c = 0; c < 16 && w0 + c < wpad; ++c) {
        const __m512i v = _mm512_permutexvar_epi16(split, _mm512_load_si512(blk + 16 * c));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (2 * (w0 + c)) * ldd + r0), _mm512_castsi512_si256(v));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (2 * (w0 + c) + 1) * ldd + r0),
                            _mm512_extracti64x4_epi64(v, 1));
      }
    }
  }
}

// sum_c a[c] * b[c] of two bf16 rows, in fp32.
inline float dot_bf16(const uint16_t* a, const uint16_t* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    const __m512 x = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + c))), 16));
    const __m512 y = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + c))), 16));
    acc = _mm512_fmadd_ps(x, y, acc);
  }
  float d = _mm512_reduce_add_ps(acc);
  for (; c < n; ++c) d += bf16_to_float(a[c]) * bf16_to_float(b[c]);
  return d;
}

// sum_c a[c] * b[c] of two float (float16) rows, in fp32.
template <class T>
float dot_rows(const T* a, const T* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < n; c += 16) acc = _mm512_fmadd_ps(amx::load16(a + c, n - c), amx::load16(b + c, n - c), acc);
  return _mm512_reduce_add_ps(acc);
}

// The float16 / float inputs' K (V) rows in parts, rows [skv, ld) zero, and K^T from K's parts.
template <int kParts, class T>
void stage_amx_kv_parts(const FlashAttnBwdParams& p, const AmxBwdKv& a, int64_t skv, const T* k, const T* v) {
  const int64_t D = p.head_dim, Dv = p.head_dim_v, Dpad = pad32(D), Dvpad = pad32(Dv);
  uint16_t* ka = const_cast<uint16_t*>(a.ka);
  uint16_t* va = const_cast<uint16_t*>(a.va);
  amx::pack_a_rows_split<kParts>(k, p.k_row_stride, skv, D, ka, Dpad, Dpad, a.kapart);
  amx::pack_a_rows_split<kParts>(v, p.v_row_stride, skv, Dv, va, Dvpad, Dvpad, a.vapart);
  for (int part = 0; part < kParts; ++part) {
    std::memset(ka + part * a.kapart + skv * Dpad, 0, static_cast<size_t>((a.ld - skv) * Dpad) * 2);
    std::memset(va + part * a.vapart + skv * Dvpad, 0, static_cast<size_t>((a.ld - skv) * Dvpad) * 2);
    transpose_bf16_padded(ka + part * a.kapart, Dpad, skv, D, const_cast<uint16_t*>(a.kt) + part * a.ktpart, a.ld,
                          a.ld, pad16(D));
  }
}

// Packs the backward's operands (see AmxBwdKv / AmxBwdQ) of wave `wave`'s (b, kv head) items
// and of their query heads, in parallel; lse2 and Delta of those heads' query rows. kParts 2 / 3:
// float16 / float inputs, every operand in its bf16 parts.
template <int kParts>
void stage_amx_backward(const FlashAttnBwdParams& p, const Plan& plan, void* ws, int64_t wave) {
  const int64_t D = p.head_dim, Dv = p.head_dim_v;
  const int64_t Dpad = pad32(D), Dvpad = pad32(Dv), Dp = pad16(D), Dvp = pad16(Dv);
  const int64_t first = wave * plan.amx_wave_kv;
  const int64_t kv_items = imin(plan.amx_wave_kv, p.batch * p.heads_kv - first), q_items = kv_items * p.group;
  LseRef lse{p.lse, p.lse_dtype == OP_DT_DOUBLE};
  LseRef ssum{p.softmax_sum, p.lse_dtype == OP_DT_DOUBLE};
  // Work item u * (1 + group) is kv item u, the next group items its query heads: the contiguous
  // ranges a parallel_for hands its threads then hold whole units of like cost (kv items first
  // put the light K^T transposes on one thread and every query head's packing on the other).
  const int64_t unit = 1 + p.group;
  op_plugin::parallel_for(0, kv_items + q_items, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t u = it / unit, r = it % unit;
      if (r == 0) {
        const int64_t b = (first + u) / p.heads_kv, h = (first + u) % p.heads_kv;
        const AmxBwdKv a = amx_bwd_kv<kParts>(p, plan, ws, b, h);
        const int64_t skv = p.seqlen_kv[b];
        const int64_t k_off = b * p.k_batch_stride + p.kv_start[b] * p.k_row_stride + h * p.k_head_stride;
        const int64_t v_off = b * p.v_batch_stride + p.kv_start[b] * p.v_row_stride + h * p.v_head_stride;
        if constexpr (kParts > 1) {
          using T = amx::PartsInput<kParts>;
          stage_amx_kv_parts<kParts>(p, a, skv, static_cast<const T*>(p.k) + k_off, static_cast<const T*>(p.v) + v_off);
          continue;
        }
        const uint16_t* k = static_cast<const uint16_t*>(p.k) + k_off;
        const uint16_t* v = static_cast<const uint16_t*>(p.v) + v_off;
        if (!a.k_in_place) copy_rows_padded(k, p.k_row_stride, skv, D, const_cast<uint16_t*>(a.ka), a.ld, Dpad);
        if (!a.v_in_place) copy_rows_padded(v, p.v_row_stride, skv, Dv, const_cast<uint16_t*>(a.va), a.ld, Dvpad);
        transpose_bf16_padded(k, p.k_row_stride, skv, D, const_cast<uint16_t*>(a.kt), a.ld, a.ld, Dp);
        continue;
      }
      const int64_t kv = first + u;  // query head r - 1 of kv item u
      const int64_t b = kv / p.heads_kv, n = (kv % p.heads_kv) * p.group + (r - 1);
      const AmxBwdQ a = amx_bwd_q(p, plan, ws, b, n);
      const int64_t sq = p.seqlen_q[b];
      const int64_t q_off = b * p.q_batch_stride + p.q_start[b] * p.q_row_stride + n * p.q_head_stride;
      const int64_t o_off = b * p.o_batch_stride + p.q_start[b] * p.o_row_stride + n * p.o_head_stride;
      uint16_t* qt = const_cast<uint16_t*>(a.qt);
      uint16_t* dot = const_cast<uint16_t*>(a.dot);
      // the panels past Sq are zero (the packing below writes whole panels up to pad16(Sq))
      const int64_t written = pad16(sq);
      for (int part = 0; part < kParts; ++part) {
        std::memset(qt + part * a.qtpart + written * Dpad, 0, static_cast<size_t>((a.ld - written) * Dpad) * 2);
        std::memset(dot + part * a.dotpart + written * Dvpad, 0, static_cast<size_t>((a.ld - written) * Dvpad) * 2);
      }
      // In chunks of 64 query rows, so that each layout after the first reads its rows from L1:
      // Q and dO are read from memory once for their two layouts each (and dO once more with O for
      // Delta), not two and three times.
      constexpr int64_t kChunk = 64;
      float* lse2 = const_cast<float*>(a.lse2);
      float* delta = const_cast<float*>(a.delta);
      const int64_t lse_base = b * p.lse_batch_stride + n * p.lse_head_stride + p.q_start[b] * p.lse_row_stride;
      for (int64_t r0 = 0; r0 < imax(sq, 1); r0 += kChunk) {
        const int64_t rows = imax(0, imin(kChunk, sq - r0));
        const int64_t pairs_to = r0 + kChunk >= sq ? a.ld - r0 : kChunk;  // the last chunk zeroes the pairs past Sq
        uint16_t* qp = const_cast<uint16_t*>(a.qp) + 32 * (r0 / 2);
        uint16_t* dop = const_cast<uint16_t*>(a.dop) + 32 * (r0 / 2);
        if constexpr (kParts == 1) {
          const uint16_t* q = static_cast<const uint16_t*>(p.q) + q_off + r0 * p.q_row_stride;
          const uint16_t* dO = static_cast<const uint16_t*>(p.dout) + o_off + r0 * p.o_row_stride;
          amx::pack_b_transposed(q, p.q_row_stride, rows, D, qt + r0 * Dpad, Dpad);
          amx::pack_b_rows(q, p.q_row_stride, rows, D, qp, 16 * a.ld, pairs_to);
          amx::pack_b_transposed(dO, p.o_row_stride, rows, Dv, dot + r0 * Dvpad, Dvpad);
          amx::pack_b_rows(dO, p.o_row_stride, rows, Dv, dop, 16 * a.ld, pairs_to);
        } else {
          using T = amx::PartsInput<kParts>;
          const T* q = static_cast<const T*>(p.q) + q_off + r0 * p.q_row_stride;
          const T* dO = static_cast<const T*>(p.dout) + o_off + r0 * p.o_row_stride;
          amx::pack_b_transposed_split<kParts>(q, p.q_row_stride, rows, D, qt + r0 * Dpad, Dpad, a.qtpart);
          amx::pack_b_rows_split<kParts>(q, p.q_row_stride, rows, D, qp, 16 * a.ld, pairs_to, a.qppart);
          amx::pack_b_transposed_split<kParts>(dO, p.o_row_stride, rows, Dv, dot + r0 * Dvpad, Dvpad, a.dotpart);
          amx::pack_b_rows_split<kParts>(dO, p.o_row_stride, rows, Dv, dop, 16 * a.ld, pairs_to, a.doppart);
        }
        for (int64_t i = r0; i < r0 + rows; ++i) {
          const int64_t li = lse_base + i * p.lse_row_stride;
          const double l = p.softmax_sum ? Backward<Ops512Bf16>::lse_of_stats(lse.get(li), ssum.get(li)) : lse.get(li);
          lse2[i] = static_cast<float>(l * kLog2e);
          const int64_t r = o_off + i * p.o_row_stride;
          if constexpr (kParts == 1)
            delta[i] = dot_bf16(static_cast<const uint16_t*>(p.out) + r, static_cast<const uint16_t*>(p.dout) + r, Dv);
          else
            delta[i] = dot_rows(static_cast<const amx::PartsInput<kParts>*>(p.out) + r,
                                static_cast<const amx::PartsInput<kParts>*>(p.dout) + r, Dv);
        }
      }
      for (int64_t i = sq; i < a.ld; ++i) {
        lse2[i] = INFINITY;
        delta[i] = 0.0f;
      }
    }
  });
  (void)Dvp;
}

struct AmxBackward {
  using V = __m512;

  // kParts 1: bf16 inputs; 2 / 3: float16 / float inputs, every operand in bf16 parts.
  template <int kFeat, int kParts>
  static void task(const FlashAttnBwdParams& p, const Plan& plan, int out_kind, void* ws, const Task& t, char* slot) {
    // the task's query heads n0 .. n0 + heads - 1, of kv head h
    const int64_t b = t.b, n0 = t.n, heads = plan.bwd_task_heads, h = n0 / p.group;
    const int64_t D = p.head_dim, Dv = p.head_dim_v;
    const int64_t Dpad = pad32(D), Dvpad = pad32(Dv), Dp = pad16(D), Dvp = pad16(Dv);
    const int64_t Br = plan.amx_block_q, Bc = plan.amx_block_kv;
    const int64_t ldS = Br + 16, ldA = Br + 32, ldK = Dp + 16, ldV = Dvp + 16;
    const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b];
    const int64_t ob = out_elem_bytes(out_kind);
    // key blocks [jbeg, jend) of this chunk
    const int64_t C = plan.bwd_chunks, chunk = t.i0;
    const int64_t blocks = (skv + Bc - 1) / Bc;
    const int64_t jbeg = chunk * blocks / C * Bc, jend = imin(skv, (chunk + 1) * blocks / C * Bc);
    // head n's dQ partial of this chunk (C > 1)
    auto dqpart_of = [&](int64_t n) {
      return reinterpret_cast<float*>(static_cast<char*>(ws) + plan.dqpart_offset) +
             ((chunk * plan.dq_rows + b * plan.q_batch_rows + p.q_start[b]) * p.heads_q + n) * Dp;
    };
    const int64_t dqpart_ld = p.heads_q * Dp;
    char* dk = static_cast<char*>(p.dk) + (b * p.dk_batch_stride + p.kv_start[b] * p.dk_row_stride + h * p.dk_head_stride) * ob;
    char* dv = static_cast<char*>(p.dv) + (b * p.dv_batch_stride + p.kv_start[b] * p.dv_row_stride + h * p.dv_head_stride) * ob;
    const bool direct = p.group == heads;  // the task has the whole group: no dK | dV partial
    // dK/dV rows past seqused_kv are zero (written once, by the last chunk, when not reduced later)
    auto zero_kv_padding = [&]() {
      if (!direct || chunk != C - 1) return;
      for (int64_t j = skv; j < p.rows_kv[b]; ++j) {
        zero_row(out_kind, dk + j * p.dk_row_stride * ob, D);
        zero_row(out_kind, dv + j * p.dv_row_stride * ob, Dv);
      }
    };
    if (C > 1 && jbeg >= jend) {  // empty chunk: its dQ partials are zero
      for (int64_t g = 0; g < heads; ++g)
        for (int64_t i = 0; i < sq; ++i)
          std::memset(dqpart_of(n0 + g) + i * dqpart_ld, 0, sizeof(float) * static_cast<size_t>(D));
      zero_kv_padding();
      return;
    }
    const RowWindow w = flash::row_window(p, sq, skv);
    const AmxBwdKv kv = amx_bwd_kv<kParts>(p, plan, ws, b, h);
    const int64_t ldq = plan.amx_dq_ld;

    // The slot's layout is the one flash_attention_plan.cpp sizes.
    Carve c{slot};
    float* dqt_heads = c.take<float>(heads * Dp * ldq);  // head n0 + g's dQ^T at + g * Dp * ldq
    float* st = c.take<float>(Bc * ldS);
    float* dpt = c.take<float>(Bc * ldS);
    uint16_t* pt = c.take<uint16_t>(kParts * Bc * ldA);  // part i at + i * apart
    uint16_t* dst = c.take<uint16_t>(kParts * Bc * ldA);
    uint16_t* dsp = c.take<uint16_t>(kParts * Br * Bc);  // part i at + i * Br * Bc
    const int64_t apart = Bc * ldA, dspart = Br * Bc;
    float* dkacc = c.take<float>(Bc * ldK);
    float* dvacc = c.take<float>(Bc * ldV);
    float* tmp = c.take<float>(17 * ldK);  // 16 transposed dQ rows + conversion scratch
    float* bias = (kFeat & kFeatBias) ? c.take<float>(Bc * Br) : nullptr;
    uint8_t* mt = (kFeat & kFeatBias) ? c.take<uint8_t>(Bc * Br) : nullptr;

    // Query rows that can see a key of this chunk (all of them unless a window or the causal
    // diagonal cuts them off): only their dQ^T columns are accumulated, zeroed and transposed.
    const int64_t qlo = imax(0, w.first_row(jbeg)), qhi = imin(sq - 1, w.last_row(jend - 1));
    const int64_t col_lo = qlo & ~int64_t(31), col_hi = imin(ldq, pad32(qhi + 1));
    for (int64_t d = 0; d < heads * Dp && col_lo < col_hi; ++d)
      std::memset(dqt_heads + d * ldq + col_lo, 0, sizeof(float) * static_cast<size_t>(col_hi - col_lo));
    DropoutKey dkey;
    DropoutLanes lanes;
    if constexpr ((kFeat & kFeatDropout) != 0) {
      dkey = dropout_key(p.dropout_seed, p.dropout_offset, p.keep_prob);
      lanes.set(skv);
    }
    const float c2 = static_cast<float>(p.scale * kLog2e);
    const float sc_out = static_cast<float>(p.scale);
    float* partial = direct ? nullptr : reinterpret_cast<float*>(static_cast<char*>(ws) + plan.partial_offset);
    const int64_t prow0 = b * plan.kv_batch_rows + p.kv_start[b];

    amx::TileScope tiles;
    for (int64_t j0 = jbeg; j0 < jend; j0 += Bc) {
      const int64_t nc = imin(Bc, skv - j0), ncp = pad32(nc);
      const int64_t ilo = imax(0, w.first_row(j0)), ihi = imin(sq - 1, w.last_row(j0 + nc - 1));
      // dK / dV are not zeroed first: each strip's products write the key rows no earlier strip
      // wrote and accumulate into the others. Both ends of a strip's rows [klo, khi) only grow with
      // the strip's queries, so the rows written so far are one range [wlo, whi); the next heads'
      // strips see the same rows again and accumulate.
      int64_t wlo = -1, whi = 0;
      for (int64_t g = 0; g < heads; ++g) {
        const int64_t n = n0 + g;
        const AmxBwdQ qd = amx_bwd_q(p, plan, ws, b, n);
        float* dqt = dqt_heads + g * Dp * ldq;
        uint64_t e_head = 0;  // dropout element of (row 0, key 0) of this head
        if constexpr ((kFeat & kFeatDropout) != 0) e_head = dropout_row0(p, b, n, 0);
        float* dpse = p.want_dpse ? reinterpret_cast<float*>(static_cast<char*>(ws) + plan.dpse_offset) +
                                        (b * p.heads_q + n) * plan.dpse_rows * plan.dpse_cols
                                  : nullptr;
        for (int64_t i0 = ilo & ~int64_t(31); i0 <= ihi; i0 += Br) {
          const int64_t nq = pad32(imin(Br, ihi + 1 - i0));
          // The block's key rows [klo, khi) some query of the strip sees (a multiple of 32 each):
          // the causal diagonal's and a window's strips skip the rest, whose P^T and dS^T are zero.
          const int64_t i1 = imin(ihi, i0 + nq - 1);
          const int64_t klo = imax(0, w.lo(i0) - j0) & ~int64_t(31), khi = imin(ncp, pad32(w.hi(i1) - j0 + 1));
          if (khi <= klo) continue;
          const int64_t nk = khi - klo;
          {
            OP_PROFILE_SCOPE(kGemm);
            // S^T with the forward's order of part products: the same logits bit for bit (amx_tile.h)
            amx::gemm_parts<false, kParts, true>(nk, nq, Dpad, kv.ka + (j0 + klo) * kv.lda_k, kv.lda_k, kv.kapart,
                                                 qd.qt + (i0 / 16) * 16 * Dpad, 16 * Dpad, qd.qtpart, st + klo * ldS,
                                                 ldS, [] {});
            amx::gemm_parts<false, kParts>(nk, nq, Dvpad, kv.va + (j0 + klo) * kv.lda_v, kv.lda_v, kv.vapart,
                                           qd.dot + (i0 / 16) * 16 * Dvpad, 16 * Dvpad, qd.dotpart, dpt + klo * ldS, ldS,
                                           [] {});
          }
          {
            OP_PROFILE_SCOPE(kSoftmax);
            if constexpr ((kFeat & kFeatBias) != 0)
              build_bias<float>(p, b, n, i0, imin(nq, sq - i0), j0, nc, c2, bias, mt, Br);
            elementwise<kFeat, kParts>(w, qd, i0, nq, j0, nc, klo, khi, sq, c2, sc_out, st, dpt, ldS, pt, dst, ldA, apart,
                                       dsp, Bc, dspart, bias, Br, dpse, plan.dpse_cols, e_head, skv, lanes, dkey);
          }
          {
            OP_PROFILE_SCOPE(kGemm);
            auto dv_dk = [&](auto accumulate, int64_t r0, int64_t r1) {  // key rows [r0, r1)
              constexpr bool kAcc = decltype(accumulate)::value;
              if (r1 <= r0) return;
              amx::gemm_parts<kAcc, kParts>(r1 - r0, Dvp, nq, pt + r0 * ldA, ldA, apart, qd.dop + 32 * (i0 / 2),
                                            16 * qd.ld, qd.doppart, dvacc + r0 * ldV, ldV, [] {});
              amx::gemm_parts<kAcc, kParts>(r1 - r0, Dp, nq, dst + r0 * ldA, ldA, apart, qd.qp + 32 * (i0 / 2),
                                            16 * qd.ld, qd.qppart, dkacc + r0 * ldK, ldK, [] {});
            };
            if (wlo < 0) wlo = klo;
            dv_dk(std::true_type{}, klo, imin(khi, whi));
            dv_dk(std::false_type{}, imax(klo, whi), khi);
            whi = imax(whi, khi);
            amx::gemm_parts<true, kParts>(Dp, nq, nk, kv.kt + j0 + klo, kv.ld, kv.ktpart, dsp + 16 * klo, 16 * Bc, dspart,
                                          dqt + i0, ldq, [] {});
          }
        }
      }
      // dK (scaled) and dV of this key block, or the task's GQA partial; key rows no query of the
      // chunk sees are zero
      OP_PROFILE_SCOPE(kOther);
      if (wlo < 0) wlo = whi = 0;
      for (int64_t j = 0; j < nc; ++j)
        if (j < wlo || j >= whi) {
          std::memset(dkacc + j * ldK, 0, sizeof(float) * static_cast<size_t>(D));
          std::memset(dvacc + j * ldV, 0, sizeof(float) * static_cast<size_t>(Dv));
        }
      for (int64_t j = 0; j < nc; ++j) {
        if (direct) {
          store_row<float, true>(out_kind, dkacc + j * ldK, dk + (j0 + j) * p.dk_row_stride * ob, D, sc_out,
                                 tmp + 16 * ldK, /*stream=*/true);
          store_row<float, true>(out_kind, dvacc + j * ldV, dv + (j0 + j) * p.dv_row_stride * ob, Dv, 1.0f,
                                 tmp + 16 * ldK, /*stream=*/true);
        } else {
          float* row = partial + gqa_partial_offset(p, plan, prow0 + j0 + j, n0);
          std::memcpy(row, dkacc + j * ldK, sizeof(float) * static_cast<size_t>(D));
          std::memcpy(row + Dp, dvacc + j * ldV, sizeof(float) * static_cast<size_t>(Dv));
        }
      }
    }

    _mm_sfence();  // the streamed dK / dV rows are visible when the task returns

    // dQ: the task's [D][Sq] block transposed back into rows, 16 x 16 at a time; the rows outside
    // [qlo, qhi] got nothing from this chunk and are written as zeros
    OP_PROFILE_SCOPE(kReduce);
    const int64_t t_lo = qlo <= qhi ? qlo & ~int64_t(15) : sq, t_hi = qlo <= qhi ? imin(sq, (qhi | 15) + 1) : sq;
    for (int64_t g = 0; g < heads; ++g) {
      const int64_t n = n0 + g;
      const float* dqt = dqt_heads + g * Dp * ldq;
      float* dqpart = C > 1 ? dqpart_of(n) : nullptr;
      char* dq = static_cast<char*>(p.dq) + (b * p.dq_batch_stride + p.q_start[b] * p.dq_row_stride + n * p.dq_head_stride) * ob;
      auto zero_dq_row = [&](int64_t i) {
        if (C > 1)
          std::memset(dqpart + i * dqpart_ld, 0, sizeof(float) * static_cast<size_t>(D));
        else
          zero_row(out_kind, dq + i * p.dq_row_stride * ob, D);
      };
      for (int64_t i = 0; i < t_lo; ++i) zero_dq_row(i);
      for (int64_t i = t_hi; i < sq; ++i) zero_dq_row(i);
      for (int64_t i0 = t_lo; i0 < t_hi; i0 += 16) {
        for (int64_t d0 = 0; d0 < Dp; d0 += 16)
          amx::transpose16x16_u32(reinterpret_cast<const uint32_t*>(dqt + d0 * ldq + i0), ldq, 16, 16,
                                  reinterpret_cast<uint32_t*>(tmp + d0), ldK);
        for (int64_t i = i0; i < imin(sq, i0 + 16); ++i) {
          const float* row = tmp + (i - i0) * ldK;
          if (C > 1)
            std::memcpy(dqpart + i * dqpart_ld, row, sizeof(float) * static_cast<size_t>(D));
          else
            store_row<float, true>(out_kind, row, dq + i * p.dq_row_stride * ob, D, sc_out, tmp + 16 * ldK,
                                   /*stream=*/true);
        }
      }
      if (C == 1)
        for (int64_t i = sq; i < p.rows_q[b]; ++i) zero_row(out_kind, dq + i * p.dq_row_stride * ob, D);
    }
    zero_kv_padding();
    _mm_sfence();  // and the streamed dQ rows
  }

  // P^T and dS^T of key rows j0 + [klo, khi) against queries i0 + [0, nq) (vectors of 16 queries):
  // P^T = 2^(c2 S^T (+ bias) - lse2) (0 outside the row's window and past Sq), dS^T = P^T (dP^T -
  // Delta) (dropout: P Z / keep_prob feeds dV, dP Z / keep_prob feeds dS). Written as bf16 rows
  // pt, dst (A layout) and as key-pair panels dsp (B layout of dQ^T); key rows [nc, khi) are zero.
  // kParts 2 / 3: each in bf16 parts (part i at + i * apart, resp. + i * dspart).
  // Blocks of 32 queries outer, pairs of keys inner: a block's lse2 and Delta stay in registers,
  // every pointer steps by a constant, and each key row's 32 queries are one whole cache line of
  // pt and of dst (the loop the other way round spilled its pointers and wrote half lines: window
  // backward 3-4% slower, docs/decisions.md).
  template <int kFeat, int kParts>
  static void elementwise(const RowWindow& w, const AmxBwdQ& qd, int64_t i0, int64_t nq, int64_t j0, int64_t nc,
                          int64_t klo, int64_t khi, int64_t sq, float c2, float sc_out, const float* st,
                          float* dpt, int64_t ldS, uint16_t* pt, uint16_t* dst, int64_t ldA, int64_t apart,
                          uint16_t* dsp, int64_t Bc, int64_t dspart, const float* bias, int64_t ldb, float* dpse,
                          int64_t dpse_cols, uint64_t e_head, int64_t skv, const DropoutLanes& lanes,
                          const DropoutKey& dkey) {
    const V vc2 = _mm512_set1_ps(c2);
    const int64_t last_q = imin(sq - 1, i0 + nq - 1);
    // padding keys (past nc, whole pairs): zero rows and pairs
    const int64_t kend = imin(khi, imax(klo, (nc + 1) & ~int64_t(1)));
    for (int64_t j = kend; j < khi; j += 2)
      for (int part = 0; part < kParts; ++part) {
        std::memset(pt + part * apart + j * ldA, 0, static_cast<size_t>(2 * ldA) * 2);
        std::memset(dst + part * apart + j * ldA, 0, static_cast<size_t>(2 * ldA) * 2);
        for (int64_t q0 = 0; q0 < nq; q0 += 16) std::memset(dsp + part * dspart + 32 * (j / 2) + q0 * Bc, 0, 64);
      }
    for (int64_t q0 = 0; q0 < nq; q0 += 32) {
      const int64_t base = i0 + q0;
      const V l2a = _mm512_loadu_ps(qd.lse2 + base), l2b = _mm512_loadu_ps(qd.lse2 + base + 16);
      const V dla = _mm512_loadu_ps(qd.delta + base), dlb = _mm512_loadu_ps(qd.delta + base + 16);
      for (int64_t j = klo; j < kend; j += 2) {
        // queries that see key j0 + j (+ 1): [first_row, last_row] (clamped to the valid queries)
        const bool has1 = j + 1 < nc;
        const int64_t f0 = w.first_row(j0 + j), l0 = imin(w.last_row(j0 + j), last_q);
        const int64_t f1 = w.first_row(j0 + j + 1), l1 = imin(w.last_row(j0 + j + 1), last_q);
        const uint64_t e_vec = e_head + static_cast<uint64_t>(base * skv + j0 + j);
        // P^T and dS^T of key j + r (r = 0, 1) for queries base + 16 h (h = 0, 1); 16 queries none
        // of which sees the key (a window's band leaves up to a third of a block out) are 0, no exp
        V pd[2][2], ds[2][2];
        for (int r = 0; r < 2; ++r)
          for (int hq = 0; hq < 2; ++hq) {
            const int64_t f = r ? f1 : f0, l = r ? l1 : l0, qb = base + 16 * hq, off = (j + r) * ldS + q0 + 16 * hq;
            pd[r][hq] = ds[r][hq] = _mm512_setzero_ps();
            if ((r == 0 || has1) && qb <= l && qb + 15 >= f)
              pd[r][hq] = prob<kFeat, kParts>(st + off, dpt + off, bias ? bias + (j + r) * ldb + q0 + 16 * hq : nullptr,
                                              vc2, hq ? l2b : l2a, hq ? dlb : dla, qb, f, l,
                                              e_vec + static_cast<uint64_t>(r + 16 * hq * skv), lanes, dkey, &ds[r][hq]);
          }
        uint16_t* pair = dsp + 32 * (j / 2) + q0 * Bc;
        if constexpr (kParts == 1) {
          const __m512i p0 = (__m512i)_mm512_cvtne2ps_pbh(pd[0][1], pd[0][0]);
          const __m512i p1 = (__m512i)_mm512_cvtne2ps_pbh(pd[1][1], pd[1][0]);
          const __m512i d0 = (__m512i)_mm512_cvtne2ps_pbh(ds[0][1], ds[0][0]);
          const __m512i d1 = (__m512i)_mm512_cvtne2ps_pbh(ds[1][1], ds[1][0]);
          _mm512_storeu_si512(pt + j * ldA + q0, p0);
          _mm512_storeu_si512(pt + (j + 1) * ldA + q0, p1);
          _mm512_storeu_si512(dst + j * ldA + q0, d0);
          _mm512_storeu_si512(dst + (j + 1) * ldA + q0, d1);
          _mm512_storeu_si512(pair, _mm512_permutex2var_epi16(d0, pair_idx(0), d1));
          _mm512_storeu_si512(pair + 16 * Bc, _mm512_permutex2var_epi16(d0, pair_idx(16), d1));
        } else {
          for (int hq = 0; hq < 2; ++hq) {
            const auto p0 = amx::split<kParts>(pd[0][hq]), p1 = amx::split<kParts>(pd[1][hq]);
            const auto d0 = amx::split<kParts>(ds[0][hq]), d1 = amx::split<kParts>(ds[1][hq]);
            const int64_t q = q0 + 16 * hq;
            for (int part = 0; part < kParts; ++part) {
              store16(pt + part * apart + j * ldA + q, p0.part[part]);
              store16(pt + part * apart + (j + 1) * ldA + q, p1.part[part]);
              store16(dst + part * apart + j * ldA + q, d0.part[part]);
              store16(dst + part * apart + (j + 1) * ldA + q, d1.part[part]);
              store_pair(pair + part * dspart + 16 * hq * Bc, d0.part[part], d1.part[part]);
            }
          }
        }
        if (dpse) {  // scale * dS, transposed into [query][key]
          alignas(64) float d[2][32];
          for (int r = 0; r < 2; ++r) {
            _mm512_store_ps(d[r], ds[r][0]);
            _mm512_store_ps(d[r] + 16, ds[r][1]);
          }
          for (int64_t l = 0; l < 32 && base + l < sq; ++l) {
            dpse[(base + l) * dpse_cols + j0 + j] = d[0][l] * sc_out;
            if (has1) dpse[(base + l) * dpse_cols + j0 + j + 1] = d[1][l] * sc_out;
          }
        }
      }
    }
    // the rest of each A row (queries past nq) is never read: the GEMMs run over nq
  }

  static void store16(uint16_t* dst, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), v); }
  // 16-bit lane order for vpermt2w that interleaves lanes first .. first + 15 of a (key row j)
  // with the same lanes of b (row j + 1) into pairs (a function, not a static constant: no
  // AVX-512 instruction may run when the library loads)
  static __m512i pair_idx(int first) {
    alignas(64) uint16_t idx[32];
    for (int i = 0; i < 16; ++i) {
      idx[2 * i] = static_cast<uint16_t>(first + i);
      idx[2 * i + 1] = static_cast<uint16_t>(32 + first + i);
    }
    return _mm512_load_si512(idx);
  }
  // Two rows of 16 bf16 values -> 16 interleaved pairs (a0 b0 a1 b1 ...), as store_bf16_pair.
  static void store_pair(uint16_t* dst, __m256i a, __m256i b) {
    _mm512_storeu_si512(dst, _mm512_permutex2var_epi16(_mm512_castsi256_si512(a), pair_idx(0), _mm512_castsi256_si512(b)));
  }

  // One vector of 16 queries against one key: returns P^T as it feeds dV (dropout applied),
  // sets *ds to dS^T. Lanes outside [lo, hi] (queries that cannot see the key) are 0; the lane
  // mask is built only for vectors that have such lanes (a window's or the diagonal's edges).
  template <int kFeat, int kParts>
  static V prob(const float* s, const float* dp, const float* bias, V vc2, V l2, V dl, int64_t base, int64_t lo,
                int64_t hi, uint64_t e_vec, const DropoutLanes& lanes, const DropoutKey& dkey, V* ds) {
    V x;
    if constexpr ((kFeat & kFeatBias) != 0)
      x = _mm512_sub_ps(_mm512_fmadd_ps(_mm512_loadu_ps(s), vc2, _mm512_loadu_ps(bias)), l2);
    else
      x = _mm512_fmsub_ps(_mm512_loadu_ps(s), vc2, l2);
    if (base < lo || base + 15 > hi) x = Ops512Base::mask_range(x, base, lo, hi);
    // (float32: the float32 path's exp2, 1.5 ulp; bf16 and float16 need only the degree-5 one)
    const V pv = kParts == 3 ? Ops512Base::exp2(x) : Ops512Base::exp2_nonpositive(x);
    V pd = pv, dpv = _mm512_loadu_ps(dp);
    if constexpr ((kFeat & kFeatDropout) != 0) {
      const V z = dropout_apply<Ops512Base>(_mm512_set1_ps(1.0f), e_vec, lanes, dkey);
      pd = _mm512_mul_ps(pv, z);
      dpv = _mm512_mul_ps(dpv, z);
    }
    *ds = _mm512_mul_ps(pv, _mm512_sub_ps(dpv, dl));
    return pd;
  }
};

}  // namespace fa
}  // namespace OP_ISA_NS
}  // namespace op_plugin
#endif  // OP_AVX512_BF16
