// Forward tile loop of the flash attention engine, AMX-BF16 dataflow (bf16 inputs on a CPU with
// AMX tiles; AVX-512 translation unit only). float32 (float16) inputs run the same loop with every
// operand in three (two) bf16 parts (kParts 3, 2: amx::kSplitPairs), at their dtype's accuracy.
//
// Row layout, as PyTorch's CPU flash kernel: per task (b, query head n, block of
// plan.amx_block_q query rows) and key block of plan.amx_block_kv keys, for each strip of 32
// query rows:
//   S = Q K^T        A = the query rows, packed once per task (zero-padded to 32 columns);
//                    B = K^T as VNNI panels, packed once per call for every (b, kv head)
//   softmax          over each row of S (vectors run along the keys): scale, mask/window lanes,
//                    swa's pse / full mask / dropout, the online max and sum; P written as bf16
//                    rows, which is exactly the A layout of the next GEMM
//   O += P V         B = V as VNNI panels (key pairs), packed once per call; O stays in an fp32
//                    block of the task, rescaled by the row's alpha when its max moves
// Every GEMM operand is read from the layout tiles load, so nothing is copied between GEMMs,
// and the tile configuration is loaded once per task (amx::TileScope). A strip's softmax runs
// interleaved with the next strip's S = Q K^T, which the core overlaps (software pipelining; bf16
// only: float inputs in parts measured faster with the softmax first).
// Per strip the key range starts at the first key and stops at the last key a row of the strip
// can see (causal and window blocks cut short); key blocks outside the window are never visited.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/amx_tile.h"
#include "kernels/common/counter_rng.h"
#include "kernels/common/profile.h"
#include "kernels/flash_attention/flash_attention_common.h"
#include "kernels/flash_attention/flash_attention_swa_features.h"

#if defined(OP_AVX512_BF16)
namespace op_plugin {
namespace OP_ISA_NS {
namespace fa {

// Strides of the packed operands (flash_attention_plan.h): K panels of 16 keys x Dpad, V panels
// of 16 columns x (keys rounded up to 32).
struct AmxPanels {
  const uint16_t* k;  // K^T panels of (b, h): panel p (keys 16p..16p+15) at k + p * 16 * dpad
  const uint16_t* v;  // V panels of (b, h): column panel c at v + c * vld, key pair r at + 32 r
  int64_t dpad, vld;
  int64_t kpart, vpart;  // float inputs: elements between the parts of K (of V)
};

inline AmxPanels amx_panels(const FlashAttnFwdParams& p, const Plan& plan, const void* ws, int64_t b, int64_t h) {
  AmxPanels a;
  a.dpad = pad32(p.head_dim);
  const int64_t dvp = pad16(p.head_dim_v);
  const int64_t row0 = amx_kv_slot(p, plan, b, h) * plan.panel_rows;
  a.k = reinterpret_cast<const uint16_t*>(static_cast<const char*>(ws) + plan.kpanel_offset) + row0 * a.dpad;
  a.v = reinterpret_cast<const uint16_t*>(static_cast<const char*>(ws) + plan.vpanel_offset) + row0 * dvp;
  a.vld = pad32(p.seqlen_kv[b]) * 16;
  a.kpart = plan.amx_wave_kv * plan.panel_rows * a.dpad;
  a.vpart = plan.amx_wave_kv * plan.panel_rows * dvp;
  return a;
}

// Packs K^T and V panels of wave `wave`'s (b, kv head) items (Plan::amx_wave_kv) for the actual
// keys [0, seqlen_kv[b]) (keys past it, padding up to a multiple of 32 included, are zero: their
// P is 0 and 0 * garbage would not be). kParts 2 / 3: float16 / float inputs, each panel in its
// bf16 parts.
template <int kParts>
void stage_amx_panels(const FlashAttnFwdParams& p, const Plan& plan, void* ws, int64_t wave) {
  constexpr int64_t kChunk = 256;  // keys per work item (a multiple of 32)
  const int64_t D = p.head_dim, Dv = p.head_dim_v;
  const int64_t first = wave * plan.amx_wave_kv, items = imin(plan.amx_wave_kv, p.batch * p.heads_kv - first);
  int64_t chunks = 0;
  for (int64_t b = 0; b < p.batch; ++b) chunks = imax(chunks, (pad32(p.seqlen_kv[b]) + kChunk - 1) / kChunk);
  op_plugin::parallel_for(0, items * chunks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const int64_t c = it % chunks, h = (first + it / chunks) % p.heads_kv, b = (first + it / chunks) / p.heads_kv;
      const int64_t skv = p.seqlen_kv[b], kpad = pad32(skv);
      const int64_t j0 = c * kChunk;
      if (j0 >= kpad) continue;
      const int64_t nk = imin(kChunk, kpad - j0), valid = imax(0, imin(nk, skv - j0));
      const AmxPanels a = amx_panels(p, plan, ws, b, h);
      uint16_t* kdst = const_cast<uint16_t*>(a.k) + (j0 / 16) * 16 * a.dpad;
      uint16_t* vdst = const_cast<uint16_t*>(a.v) + 32 * (j0 / 2);
      const int64_t k_off = b * p.k_batch_stride + (p.kv_start[b] + j0) * p.k_row_stride + h * p.k_head_stride;
      const int64_t v_off = b * p.v_batch_stride + (p.kv_start[b] + j0) * p.v_row_stride + h * p.v_head_stride;
      if constexpr (kParts == 1) {
        amx::pack_b_transposed(static_cast<const uint16_t*>(p.k) + k_off, p.k_row_stride, valid, D, kdst, a.dpad);
        amx::pack_b_rows(static_cast<const uint16_t*>(p.v) + v_off, p.v_row_stride, valid, Dv, vdst, a.vld, nk);
      } else {
        using T = amx::PartsInput<kParts>;
        amx::pack_b_transposed_split<kParts>(static_cast<const T*>(p.k) + k_off, p.k_row_stride, valid, D, kdst, a.dpad,
                                             a.kpart);
        amx::pack_b_rows_split<kParts>(static_cast<const T*>(p.v) + v_off, p.v_row_stride, valid, Dv, vdst, a.vld, nk,
                                       a.vpart);
      }
      const int64_t kpanels_written = (valid + 15) / 16;
      for (int part = 0; part < kParts; ++part)
        std::memset(kdst + part * a.kpart + kpanels_written * 16 * a.dpad, 0,
                    static_cast<size_t>((nk / 16 - kpanels_written) * 16 * a.dpad) * 2);
    }
  });
}

struct AmxForward {
  using S = float;
  using V = __m512;
  static constexpr float kLazyMaxLog2 = 8.0f;  // see softmax_row

  // kParts 1: bf16 inputs; 2 / 3: float16 / float inputs, every operand in bf16 parts.
  template <int kFeat, int kParts>
  static void task(const FlashAttnFwdParams& p, const Plan& plan, void* ws, int out_kind, const Task& t, char* slot) {
    const int64_t b = t.b, n = t.n, i0 = t.i0;
    const int64_t h = n / p.group;
    const int64_t D = p.head_dim, Dv = p.head_dim_v;
    const int64_t Br = plan.amx_block_q, Bc = plan.amx_block_kv;
    const int64_t kLdS = flash::amx_ld_scores(Bc), kLdP = flash::amx_ld_p(Bc);
    const int64_t Dpad = pad32(D), Dvp = pad16(Dv), ldO = Dvp + 16;
    const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b];
    const int64_t rows = imin(Br, sq - i0);
    const RowWindow w = flash::row_window(p, sq, skv);
    const AmxPanels pan = amx_panels(p, plan, ws, b, h);

    Carve c{slot};
    uint16_t* qa = c.take<uint16_t>(kParts * Br * Dpad);  // part i at qa + i * qpart
    float* s = c.take<float>(64 * kLdS);  // two 32-row halves (see Item)
    uint16_t* pa = c.take<uint16_t>(kParts * Br * kLdP);  // part i at pa + i * ppart
    const int64_t qpart = Br * Dpad, ppart = Br * kLdP;
    float* o = c.take<float>(Br * ldO);
    float* m = c.take<float>(Br);
    float* l = c.take<float>(Br);
    float* tmp = c.take<float>(ldO);

    // (the slot's layout is the one flash_attention_plan.cpp sizes)
    const int64_t rows16 = (rows + 15) / 16 * 16;
    {
      OP_PROFILE_SCOPE(kPack);
      // Q rows, zero-padded to Dpad columns and to a multiple of 16 rows.
      const int64_t q_off = b * p.q_batch_stride + (p.q_start[b] + i0) * p.q_row_stride + n * p.q_head_stride;
      if constexpr (kParts == 1) {
        const uint16_t* q = static_cast<const uint16_t*>(p.q) + q_off;
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(qa + r * Dpad, q + r * p.q_row_stride, static_cast<size_t>(D) * 2);
          std::memset(qa + r * Dpad + D, 0, static_cast<size_t>(Dpad - D) * 2);
        }
      } else {
        amx::pack_a_rows_split<kParts>(static_cast<const amx::PartsInput<kParts>*>(p.q) + q_off, p.q_row_stride, rows, D, qa,
                                       Dpad, Dpad, qpart);
      }
      for (int part = 0; part < kParts; ++part) {
        std::memset(qa + part * qpart + rows * Dpad, 0, static_cast<size_t>((rows16 - rows) * Dpad) * 2);
        // P rows past `rows` stay zero for the whole task (the PV GEMM runs over whole 16-row tiles).
        std::memset(pa + part * ppart + rows * kLdP, 0, static_cast<size_t>((rows16 - rows) * kLdP) * 2);
      }
    }

    const float c2 = static_cast<float>(p.scale * kLog2e);  // logits in log2 units
    const bool sink = p.sinks != nullptr;
    const float m0 = sink ? static_cast<float>(static_cast<double>(p.sinks[n]) * kLog2e) : -INFINITY;
    for (int64_t i = 0; i < rows; ++i) {
      m[i] = m0;
      l[i] = sink ? 1.0f : 0.0f;
    }
    DropoutKey dkey;
    DropoutLanes lanes;
    if constexpr ((kFeat & kFeatDropout) != 0) {
      dkey = dropout_key(p.dropout_seed, p.dropout_offset, p.keep_prob);
      lanes.set(1);
    }

    amx::TileScope tiles;
    // Items (key block j0, strip of 32 rows r0), in order. Strip by strip so that the strip's P
    // and O stay in L1 between the GEMMs and the softmax (its scores, 67 KB at 512 keys, are read
    // back from L2); the block of K and V streams from L2. Keys [j0, j0 + nk) cover what the strip's rows can see (causal and window blocks
    // are cut short per strip). Software-pipelined, since the core overlaps tile and vector
    // instructions that are close in the stream (docs/decisions.md): an item's softmax rows are
    // spread over the blocks of the next item's S = Q K^T, then its own O += P V runs. (Spreading
    // half of them over the previous item's O += P V as well measured no faster.) The scores
    // alternate between the two 32-row halves of the score buffer by item, so the next item's S
    // never overwrites the one being read; an item's softmax rescales its O rows after the
    // previous item of its strip has finished its O += P V (one item earlier at the latest).
    struct Item {
      int64_t j0, r0, srows, m16, nk;
      float* s;
    };
    auto softmax_rows = [&](const Item& it, int64_t& done, int64_t upto) {
      for (; done < upto; ++done) {
        const int64_t r = it.r0 + done;
        softmax_row<kFeat, kParts>(p, b, n, i0 + r, it.j0, it.nk, w, c2, it.s + done * kLdS, pa + r * kLdP, ppart,
                                   m + r, l + r, o + r * ldO, Dvp, dkey, lanes);
      }
    };
    // A hook for amx::gemm: after its k-th of `blocks` blocks, the item's rows up to an even share of
    // [done, upto).
    auto spread = [&](int64_t blocks, const Item& it, int64_t& done, int64_t upto) {
      return [&softmax_rows, &it, &done, blocks, upto, start = done, issued = int64_t(0)]() mutable {
        softmax_rows(it, done, start + (upto - start) * ++issued / blocks);
      };
    };
    // Both GEMMs read the key block's K / V panels once per strip, from L2: in bf16 their tiles
    // load with the non-temporal hint (kStreamB), so they leave L1 to the scores, P and O.
    constexpr bool kStreamPanels = kParts == 1;
    auto scores = [&](const Item& it, auto&& between) {
      amx::gemm_parts<false, kParts, false, kStreamPanels>(it.m16, it.nk, Dpad, qa + it.r0 * Dpad, Dpad, qpart,
                                                           pan.k + (it.j0 / 16) * 16 * Dpad, 16 * Dpad, pan.kpart,
                                                           it.s, kLdS, between);
    };
    // O is not zeroed first: a strip's first O += P V writes it (O = P V); the softmax's rescale of
    // the strip's O rows just before it scales values that write then replaces. A strip no key
    // block reaches holds only rows that see no key, which finalize_rows writes as zeros without
    // reading O.
    static_assert(flash::kAmxPartsBlockQ / 32 <= 32 && flash::kAmxBlockQ / 32 <= 32, "a bit per 32-row strip");
    uint32_t strips_written = 0;
    auto pv = [&](const Item& it) {
      const uint32_t bit = uint32_t{1} << (it.r0 / 32);
      auto run = [&](auto accumulate) {
        amx::gemm_parts<decltype(accumulate)::value, kParts, false, kStreamPanels>(
            it.m16, Dvp, it.nk, pa + it.r0 * kLdP, kLdP, ppart, pan.v + 32 * (it.j0 / 2), pan.vld, pan.vpart,
            o + it.r0 * ldO, ldO, [] {});
      };
      if (strips_written & bit)
        run(std::true_type{});
      else
        run(std::false_type{});
      strips_written |= bit;
    };
    Item pending{};  // the item whose scores are computed and whose softmax and O += P V are not
    bool has_pending = false;
    int half = 0;
    const int64_t jlo = w.lo(i0) & ~int64_t(31), jhi = w.hi(i0 + rows - 1);
    for (int64_t j0 = jlo; j0 <= jhi; j0 += Bc) {
      for (int64_t r0 = 0; r0 < rows; r0 += 32) {
        const int64_t srows = imin(32, rows - r0);
        // the strip's keys in this block: from its first row's window start (a window's later
        // strips see less of the task's first block) to its last row's end
        const int64_t js = imax(j0, w.lo(i0 + r0) & ~int64_t(31));
        const int64_t vis = imin(j0 + Bc, w.hi(i0 + r0 + srows - 1) + 1) - js;
        if (vis <= 0) continue;
        const Item it{js, r0, srows, (srows + 15) / 16 * 16, pad32(vis), s + half * 32 * kLdS};
        half ^= 1;
        if (!has_pending) {
          OP_PROFILE_SCOPE(kGemm);
          scores(it, [] {});
        } else {
          OP_PROFILE_SCOPE(kOverlap);
          int64_t done = 0;
          if constexpr (kParts == 1) {
            scores(it, spread(amx::gemm_blocks(it.m16, it.nk), pending, done, pending.srows));
          } else {
            // operands in parts: 3-6 times the tile work per softmax row, and spreading the rows
            // over it measured 11% slower than running them first (float32, docs/decisions.md)
            softmax_rows(pending, done, pending.srows);
            scores(it, [] {});
          }
          pv(pending);
        }
        pending = it;
        has_pending = true;
      }
    }
    if (has_pending) {
      {
        OP_PROFILE_SCOPE(kSoftmax);
        int64_t done = 0;
        softmax_rows(pending, done, pending.srows);
      }
      OP_PROFILE_SCOPE(kGemm);
      pv(pending);
    }
    OP_PROFILE_SCOPE(kOther);
    finalize_rows<float, true>(p, out_kind, b, n, i0, rows, w, sink, m0, m, l, o, ldO, tmp, /*stream=*/true);
    _mm_sfence();  // the streamed output rows are visible when the task returns
  }

  // One query row i over keys j0 .. j0 + nk - 1 (nk a multiple of 32): x = c2 * S (+ bias),
  // masked to the row's window; m, l updated online; P = 2^(x - m) as bf16 (dropout applied to
  // P only, never to the sum); the row's O rescaled when its max moves (lazily: kLazyMaxLog2, so
  // x - m may reach 8 and exp2_nonpositive serves up to there). Without swa features and
  // with a positive scale (the usual case) the max is taken over S itself and x is formed in the
  // exponent's FMA, so S is read twice and never written. kParts 2 / 3: P in bf16 parts (part i
  // at prow + i * ppart); float32 takes the float32 path's exp2 (1.5 ulp), the others the degree-5
  // one (2 ulp).
  template <int kFeat, int kParts>
  static void softmax_row(const FlashAttnFwdParams& p, int64_t b, int64_t n, int64_t i, int64_t j0, int64_t nk,
                          const RowWindow& w, float c2, float* srow, uint16_t* prow, int64_t ppart, float* m, float* l,
                          float* orow, int64_t Dvp, const DropoutKey& dkey, const DropoutLanes& lanes) {
    const int64_t lo = w.lo(i) - j0, hi = w.hi(i) - j0;  // visible keys of the row, block-relative
    if (lo > hi || hi < 0 || lo >= nk) {
      for (int part = 0; part < kParts; ++part) std::memset(prow + part * ppart, 0, static_cast<size_t>(nk) * 2);
      return;
    }
    const bool full = lo <= 0 && hi >= nk - 1;
    const bool plain = kFeat == 0 && c2 > 0.0f;
    // Only the 32-key groups [jb, je) hold visible keys (a window's edges, the causal diagonal):
    // the rest of P is zero and costs no exp.
    const int64_t jb = full ? 0 : imax(lo, 0) & ~int64_t(31), je = full ? nk : imin(nk, pad32(hi + 1));
    for (int part = 0; part < kParts; ++part) {
      if (jb > 0) std::memset(prow + part * ppart, 0, static_cast<size_t>(jb) * 2);
      if (je < nk) std::memset(prow + part * ppart + je, 0, static_cast<size_t>(nk - je) * 2);
    }
    const V vc2 = _mm512_set1_ps(c2);
    V mx = _mm512_set1_ps(-INFINITY);
    if (plain) {
      // independent chains (one max chain is latency-bound): four per 64 keys on full rows,
      // which spend most of their time here, two per 32 keys at the edges
      V mx1 = mx;
      if (full) {
        V mx2 = mx, mx3 = mx;
        int64_t j = jb;
        for (; j + 64 <= je; j += 64) {
          mx = _mm512_max_ps(mx, _mm512_loadu_ps(srow + j));
          mx1 = _mm512_max_ps(mx1, _mm512_loadu_ps(srow + j + 16));
          mx2 = _mm512_max_ps(mx2, _mm512_loadu_ps(srow + j + 32));
          mx3 = _mm512_max_ps(mx3, _mm512_loadu_ps(srow + j + 48));
        }
        if (j < je) {
          mx = _mm512_max_ps(mx, _mm512_loadu_ps(srow + j));
          mx1 = _mm512_max_ps(mx1, _mm512_loadu_ps(srow + j + 16));
        }
        mx = _mm512_max_ps(mx, mx2);
        mx1 = _mm512_max_ps(mx1, mx3);
      } else {
        // only the vectors at the window's two edges need lane masks
        for (int64_t j = jb; j < je; j += 32) {
          V x0 = _mm512_loadu_ps(srow + j), x1 = _mm512_loadu_ps(srow + j + 16);
          if (j < lo || j + 31 > hi) {
            x0 = Ops512Base::mask_range(x0, j, lo, hi);
            x1 = Ops512Base::mask_range(x1, j + 16, lo, hi);
          }
          mx = _mm512_max_ps(mx, x0);
          mx1 = _mm512_max_ps(mx1, x1);
        }
      }
      mx = _mm512_max_ps(mx, mx1);
    } else {
      for (int64_t j = jb; j < je; j += 16) {
        V x = _mm512_mul_ps(_mm512_loadu_ps(srow + j), vc2);
        if constexpr ((kFeat & kFeatBias) != 0) x = _mm512_add_ps(x, bias16(p, b, n, i, j0 + j, c2));
        if (!full) x = Ops512Base::mask_range(x, j, lo, hi);
        _mm512_storeu_ps(srow + j, x);
        mx = _mm512_max_ps(mx, x);
      }
    }
    const float bmax = _mm512_reduce_max_ps(mx);
    const float mold = *m;
    float mnew = std::fmax(mold, plain ? bmax * c2 : bmax);
    // The row keeps its max while the block's exceeds it by at most kLazyMaxLog2 (P up to 2^8:
    // as exact in bf16 and in the fp32 sums), so O is rescaled only when the max jumps (as
    // FlashAttention-4 does): one thread, dense 22.4 -> 21.8 ms, causal 12.9 -> 12.3. Not for
    // swa's statistics, which report the row's true max.
    if (p.softmax_sum == nullptr && mold != -INFINITY && mnew - mold <= kLazyMaxLog2) mnew = mold;
    const float muse = mnew == -INFINITY ? 0.0f : mnew;  // nothing visible yet: keep exp2 finite
    const V vm = _mm512_set1_ps(muse);
    V sum0 = _mm512_setzero_ps(), sum1 = sum0;
    uint64_t e0 = 0;
    if constexpr ((kFeat & kFeatDropout) != 0) e0 = dropout_row0(p, b, n, i) + static_cast<uint64_t>(j0);
    for (int64_t j = jb; j < je; j += 32) {
      V x0, x1;
      if (plain) {
        x0 = _mm512_fmsub_ps(_mm512_loadu_ps(srow + j), vc2, vm);
        x1 = _mm512_fmsub_ps(_mm512_loadu_ps(srow + j + 16), vc2, vm);
        if (!full && (j < lo || j + 31 > hi)) {
          x0 = Ops512Base::mask_range(x0, j, lo, hi);
          x1 = Ops512Base::mask_range(x1, j + 16, lo, hi);
        }
      } else {
        x0 = _mm512_sub_ps(_mm512_loadu_ps(srow + j), vm);
        x1 = _mm512_sub_ps(_mm512_loadu_ps(srow + j + 16), vm);
      }
      V p0, p1;
      if constexpr (kParts == 3) {
        p0 = Ops512Base::exp2(x0);
        p1 = Ops512Base::exp2(x1);
      } else {
        p0 = Ops512Base::exp2_nonpositive(x0);
        p1 = Ops512Base::exp2_nonpositive(x1);
      }
      sum0 = _mm512_add_ps(sum0, p0);
      sum1 = _mm512_add_ps(sum1, p1);
      if constexpr ((kFeat & kFeatDropout) != 0) {
        p0 = dropout_apply<Ops512Base>(p0, e0 + j, lanes, dkey);
        p1 = dropout_apply<Ops512Base>(p1, e0 + j + 16, lanes, dkey);
      }
      if constexpr (kParts == 1) {
        _mm512_storeu_si512(prow + j, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
      } else {
        const auto s0 = amx::split<kParts>(p0), s1 = amx::split<kParts>(p1);
        for (int part = 0; part < kParts; ++part) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(prow + part * ppart + j), s0.part[part]);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(prow + part * ppart + j + 16), s1.part[part]);
        }
      }
    }
    const float alpha = mold == -INFINITY ? 0.0f : exp2_scalar(mold - muse);
    *l = *l * alpha + _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
    *m = mnew;
    if (alpha != 1.0f) {
      const V va = _mm512_set1_ps(alpha);
      for (int64_t c = 0; c < Dvp; c += 16) _mm512_storeu_ps(orow + c, _mm512_mul_ps(_mm512_loadu_ps(orow + c), va));
    }
  }

  // swa's additive bias for keys jg .. jg + 15 of row i: c2 * pse, -inf where the full mask is set.
  static V bias16(const FlashAttnFwdParams& p, int64_t b, int64_t n, int64_t i, int64_t jg, float c2) {
    V x = _mm512_setzero_ps();
    const int64_t skv = p.seqlen_kv[b];
    const int cnt = static_cast<int>(imax(0, imin(16, skv - jg)));
    const __mmask16 live = static_cast<__mmask16>(cnt >= 16 ? 0xffffu : (1u << cnt) - 1u);
    if (p.pse) {
      const int64_t base = b * p.pse_batch_stride + n * p.pse_head_stride + i * p.pse_row_stride + jg;
      alignas(64) float f[16] = {};
      for (int c = 0; c < cnt; ++c) f[c] = load_float(p.pse, p.pse_dtype, base + c);
      x = _mm512_mul_ps(_mm512_load_ps(f), _mm512_set1_ps(c2));
    }
    if (p.full_mask) {
      const uint8_t* mrow =
          p.full_mask + b * p.full_mask_batch_stride + n * p.full_mask_head_stride + i * p.full_mask_row_stride + jg;
      const __m128i bytes = _mm_maskz_loadu_epi8(live, mrow);
      const __mmask16 masked = _mm_test_epi8_mask(bytes, bytes);
      x = _mm512_mask_mov_ps(x, masked, _mm512_set1_ps(-INFINITY));
    }
    return x;
  }
};

}  // namespace fa
}  // namespace OP_ISA_NS
}  // namespace op_plugin
#endif  // OP_AVX512_BF16
