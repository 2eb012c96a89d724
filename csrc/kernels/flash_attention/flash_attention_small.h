// Few query rows (decode, speculative decode): the flash engine's row kernels (torch-free, every
// ISA TU).
//
// The tile loops pad the query side to whole tiles (64 rows for the vector dataflow, 16 for AMX)
// and pack per-task panels sized for them: for one query row and a few keys that fixed cost is
// all there is (measured: about 8 us per head forward and 35 us backward at one row and 16 keys).
// Here each query row is computed on its own, vectors running along the head dimension, and the
// rows of a kv head's group, up to kSmallMaxPairs (head, row) pairs, go over the keys together,
// kSmallKeys keys at a time, so that each K / V row is read (and converted) once for all of them:
// a row's dot products with a block's keys are reduced together (Ops::hsums), and its O / dQ (or a
// key's dK / dV) stay in registers across the block (axpys); at AVX-512 the forward takes two
// rows at a time through both (dots2, axpys2), loading each K / V vector once for the two:
//   forward:  one task per (b, kv head, run of pairs, key split): s_j = c2 q.k_j (+ bias) over each
//             row's window, then m, l and out = sum_j 2^(s_j - m) v_j / l; sequences of more than
//             kSmallFwdSplitKeys keys in splits, each writing its (m, l, O) for combine_splits
//   backward: one task per (b, kv head, chunk of keys; one chunk unless the kv heads are few),
//             over the query heads of its group and their rows, so that dK and dV accumulate in
//             a fixed order with no partials: P_j = 2^(s_j - lse2), dP_j = dO.v_j,
//             dS_j = P_j (dP_j - Delta); dQ = scale sum_j dS_j k_j (a partial per chunk, summed
//             in chunk order by reduce_dq), dK_j += scale dS_j q, dV_j += P_j dO
// Every sum runs in the same order whichever rows share a pass (a row's logits, its exp sum and
// its O over ascending keys; dK_j and dV_j over the pairs in head-major order), so a row's result
// does not depend on the run it is in,
// with every feature of the tile loops (windows, seqused, TND, GQA, sinks, swa's pse, full mask,
// dropout and statistics) and their conventions for empty rows. Rows are computed in the
// accumulation type S (float; double for double inputs); bf16 / fp16 K and V rows are widened in
// registers as they are loaded (Small::loadv, raw_rows) or converted a block at a time.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/counter_rng.h"
#include "kernels/common/simd.h"
#include "kernels/flash_attention/flash_attention_backward.h"
#include "kernels/flash_attention/flash_attention_common.h"
#include "kernels/flash_attention/flash_attention_staging.h"
#include "kernels/flash_attention/flash_attention_swa_features.h"

namespace op_plugin {
namespace OP_ISA_NS {
namespace fa {

template <class Ops>
struct Small {
  using S = typename Ops::S;
  using V = typename Ops::V;
  static constexpr int W = Ops::W;

  static constexpr int kKeys = static_cast<int>(flash::kSmallKeys);
  static_assert(kKeys % W == 0, "a key block is whole reductions of Ops::hsums");

  // Scratch of one task for `pairs` query rows (flash_attention_plan.cpp sizes the slot with
  // small_rows_bytes): the K / V conversion blocks (kKeys rows ld apart) first, then row k's q,
  // accumulator, logits and dO at k * ld (k * ls for the logits). With the conversion rows after
  // the logits, a one-row bf16 forward ran 10% slower (the logits' stores 4 KiB from the K row's
  // loads, it seems).
  struct Rows {
    S *q, *dout, *acc, *s, *kblk, *vblk, *o;
    float* tmp;
    int64_t ld, ls;
  };
  static Rows carve(char* slot, const FlashAttnFwdParams& p, int64_t pairs) {
    const int64_t Dm = pad16(imax(p.head_dim, p.head_dim_v));
    Carve c{slot};
    Rows r;
    r.ld = Dm;
    r.ls = pad16(p.max_seqlen_kv);
    r.kblk = c.take<S>(kKeys * Dm);
    r.vblk = c.take<S>(kKeys * Dm);
    r.o = c.take<S>(Dm);
    r.tmp = c.take<float>(Dm);
    r.q = c.take<S>(pairs * Dm);
    r.acc = c.take<S>(pairs * Dm);
    r.s = c.take<S>(pairs * r.ls);
    r.dout = c.take<S>(pairs * Dm);
    return r;
  }

  // a.b = hsum(dot_part) + the tail's products in order (dot_tail). The part sums the even and
  // the odd W-chunks apart (one chain of dependent adds was the latency of every logit), then
  // together: 2 W partial sums.
  static V dot_part(const S* a, const S* b, int64_t n) {
    V acc0 = Ops::zero(), acc1 = Ops::zero();
    int64_t c = 0;
    for (; c + 2 * W <= n; c += 2 * W) {
      acc0 = Ops::add(acc0, Ops::mul(Ops::loadc(a + c), Ops::loadc(b + c)));
      acc1 = Ops::add(acc1, Ops::mul(Ops::loadc(a + c + W), Ops::loadc(b + c + W)));
    }
    if (c + W <= n) acc0 = Ops::add(acc0, Ops::mul(Ops::loadc(a + c), Ops::loadc(b + c)));
    return Ops::add(acc0, acc1);
  }
  // K / V rows as the dot products and axpys read them: S values (in place, or converted into the
  // task's scratch by block_as_s), or, where this ISA widens 16-bit values in registers (kWidens),
  // a bf16 / fp16 row's own bits (Bf16, F16), widened exactly as they are loaded. The sums are the
  // same either way; reading the bits in place saves the conversion's store and reload, and its
  // loads keep as many cache lines in flight as float32's (a row's conversion was a long run of
  // instructions per line, and 44% of a bf16 BSND decode waited in it on memory).
  struct Bf16 { uint16_t bits; };
  struct F16 { uint16_t bits; };
#if defined(OP_AVX512)
  static constexpr bool kWidens = std::is_same_v<V, __m512>;
#elif defined(__AVX2__) && defined(__F16C__)
  static constexpr bool kWidens = std::is_same_v<V, __m256>;
#else
  static constexpr bool kWidens = false;
#endif
  template <class E>
  static V loadv(const E* x) {
    if constexpr (std::is_same_v<E, S>) {
      return Ops::loadc(x);
    } else {
      static_assert(kWidens && sizeof(E) == 2, "raw 16-bit rows are read only where this ISA widens them");
#if defined(OP_AVX512)
      if constexpr (std::is_same_v<E, F16>) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
      const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
#elif defined(__AVX2__) && defined(__F16C__)
      if constexpr (std::is_same_v<E, F16>) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
      const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
#endif
    }
  }
  static S elem(const S* x) { return *x; }
  static S elem(const Bf16* x) { return static_cast<S>(bf16_to_float(x->bits)); }
  static S elem(const F16* x) { return static_cast<S>(half_bits_to_float(x->bits)); }
  template <class E>
  static S dot_tail(S s, const S* a, const E* b, int64_t n) {
    for (int64_t c = n - n % W; c < n; ++c) s += a[c] * elem(b + c);
    return s;
  }
  static S dot(const S* a, const S* b, int64_t n) { return dot_tail(Ops::hsum(dot_part(a, b, n)), a, b, n); }
  // x[t] = a.b_t for nk <= kKeys rows b_t = b + t * bs, each as dot computes it; the parts are
  // reduced W at a time (Ops::hsums), not one by one.
  template <class E>
  static void dots(const S* a, const E* b, int64_t bs, int nk, int64_t n, S* x) {
    const S* rows[1] = {a};
    S* out[1] = {x};
    dots_of<1>(rows, b, bs, nk, n, out);
  }
  // Two rows at once (kTwoRows): the dots, or axpys, of rows a0 and a1 against the same keys, each
  // row's operations those of the one-row function in the same order (so its sums are bitwise
  // the same), with each K (V) vector loaded, and a 16-bit one widened, once for both: a
  // load (and a widening) per multiply-add became one per two. GQA decode on Zen 4 ran
  // 1.1-1.3x faster (docs/decisions.md, "The row kernels take two rows at a time"). Where the
  // registers hold both rows: AVX-512's 32 (two rows' q chunks or O vectors, 16 each at most),
  // not AVX2's 16.
#if defined(OP_AVX512)
  static constexpr bool kTwoRows = std::is_same_v<V, __m512>;
#else
  static constexpr bool kTwoRows = false;
#endif
  template <class E>
  static void dots2(const S* a0, const S* a1, const E* b, int64_t bs, int nk, int64_t n, S* x0, S* x1) {
    const S* rows[2] = {a0, a1};
    S* out[2] = {x0, x1};
    dots_of<2>(rows, b, bs, nk, n, out);
  }
  // dots of R rows a[r] (into x[r]) against the same keys
  template <int R, class E>
  static void dots_of(const S* const* a, const E* b, int64_t bs, int nk, int64_t n, S* const* x) {
    switch (n / W) {  // the rows' chunks held in registers, when there are few enough of them
      case 1: return dots_n<R, 1>(a, b, bs, nk, n, x);
      case 2: return dots_n<R, 2>(a, b, bs, nk, n, x);
      case 3: return dots_n<R, 3>(a, b, bs, nk, n, x);
      case 4: return dots_n<R, 4>(a, b, bs, nk, n, x);
      case 5: return dots_n<R, 5>(a, b, bs, nk, n, x);
      case 6: return dots_n<R, 6>(a, b, bs, nk, n, x);
      case 7: return dots_n<R, 7>(a, b, bs, nk, n, x);
      case 8: return dots_n<R, 8>(a, b, bs, nk, n, x);
      default:
        for (int r = 0; r < R; ++r) dots_pieces(a[r], b, bs, nk, n, x[r]);
    }
  }
  // dots with the rows' NC = n / W whole chunks loaded once (dot_part loaded them again for every
  // key, and on Zen 4 those loads, not the multiplies, bounded the logits), same sums.
  template <int R, int NC, class E>
  static void dots_n(const S* const* a, const E* b, int64_t bs, int nk, int64_t n, S* const* x) {
    V av[R][NC];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < NC; ++c) av[r][c] = Ops::loadc(a[r] + c * W);
    V part[R][kKeys];
    for (int t = 0; t < nk; ++t) {
      const E* bt = b + t * bs;
      V acc0[R], acc1[R];  // each row's even and odd chunks
      for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = Ops::zero();
      for (int c = 0; c + 1 < NC; c += 2) {
        const V k0 = loadv(bt + c * W), k1 = loadv(bt + (c + 1) * W);
        for (int r = 0; r < R; ++r) {
          acc0[r] = Ops::add(acc0[r], Ops::mul(av[r][c], k0));
          acc1[r] = Ops::add(acc1[r], Ops::mul(av[r][c + 1], k1));
        }
      }
      if (NC % 2) {
        const V k0 = loadv(bt + (NC - 1) * W);
        for (int r = 0; r < R; ++r) acc0[r] = Ops::add(acc0[r], Ops::mul(av[r][NC - 1], k0));
      }
      for (int r = 0; r < R; ++r) part[r][t] = Ops::add(acc0[r], acc1[r]);
    }
    for (int r = 0; r < R; ++r) reduce_dots(part[r], a[r], b, bs, nk, n, x[r]);
  }
  // dots with more chunks than dots_n holds (AVX2 at D > 64): a's chunks held 8 at a time, each
  // key's two partial sums carried from one piece to the next, so the sums are dot_part's in its
  // order. dot_part loaded a's chunk again for every key, two loads a multiply-add: at D = 128 on
  // Zen 3 dots took 35% of a 12-row float32 forward, and these pieces made it 12% faster.
  template <class E>
  static void dots_pieces(const S* a, const E* b, int64_t bs, int nk, int64_t n, S* x) {
    const int nc = static_cast<int>(n / W);
    V even[kKeys], odd[kKeys];
    for (int t = 0; t < nk; ++t) even[t] = odd[t] = Ops::zero();
    for (int c0 = 0; c0 < nc; c0 += 8) {  // pieces start at even chunks: the parity is dot_part's
      const S* ap = a + c0 * W;
      const E* bp = b + c0 * W;
      switch (imin(8, nc - c0)) {
        case 8: dots_piece<8>(ap, bp, bs, nk, even, odd); break;
        case 7: dots_piece<7>(ap, bp, bs, nk, even, odd); break;
        case 6: dots_piece<6>(ap, bp, bs, nk, even, odd); break;
        case 5: dots_piece<5>(ap, bp, bs, nk, even, odd); break;
        case 4: dots_piece<4>(ap, bp, bs, nk, even, odd); break;
        case 3: dots_piece<3>(ap, bp, bs, nk, even, odd); break;
        case 2: dots_piece<2>(ap, bp, bs, nk, even, odd); break;
        default: dots_piece<1>(ap, bp, bs, nk, even, odd); break;
      }
    }
    V part[kKeys];
    for (int t = 0; t < nk; ++t) part[t] = Ops::add(even[t], odd[t]);
    reduce_dots(part, a, b, bs, nk, n, x);
  }
  template <int PC, class E>
  static void dots_piece(const S* a, const E* b, int64_t bs, int nk, V* even, V* odd) {
    V av[PC];
    for (int c = 0; c < PC; ++c) av[c] = Ops::loadc(a + c * W);
    for (int t = 0; t < nk; ++t) {
      const E* bt = b + t * bs;
      V acc0 = even[t], acc1 = odd[t];
      for (int c = 0; c + 1 < PC; c += 2) {
        acc0 = Ops::add(acc0, Ops::mul(av[c], loadv(bt + c * W)));
        acc1 = Ops::add(acc1, Ops::mul(av[c + 1], loadv(bt + (c + 1) * W)));
      }
      if (PC % 2) acc0 = Ops::add(acc0, Ops::mul(av[PC - 1], loadv(bt + (PC - 1) * W)));
      even[t] = acc0;
      odd[t] = acc1;
    }
  }
  template <class E>
  static void reduce_dots(V* part, const S* a, const E* b, int64_t bs, int nk, int64_t n, S* x) {
    for (int t = nk; t < kKeys; ++t) part[t] = Ops::zero();
    for (int t = 0; t < nk; t += W) Ops::hsums(part + t, x + t);
    if (n % W)
      for (int t = 0; t < nk; ++t) x[t] = dot_tail(x[t], a, b + t * bs, n);
  }
  static void axpy(S a, const S* x, S* y, int64_t n) {  // y += a x
    const V va = Ops::set1(a);
    int64_t c = 0;
    for (; c + W <= n; c += W) Ops::storec(y + c, Ops::add(Ops::loadc(y + c), Ops::mul(va, Ops::loadc(x + c))));
    for (; c < n; ++c) y[c] += a * x[c];
  }
  // y += a_t x_t for t < m (x_t = x + t * xs), t ascending (terms with a_t == 0 skipped when
  // kSkipZeros): axpy m times over, with y's vectors held in registers (NV of them at a time)
  // across the m rows.
  template <bool kSkipZeros, class E>
  static void axpys(const S* a, int m, const E* x, int64_t xs, S* y, int64_t n) {
    const S* w[1] = {a};
    S* out[1] = {y};
    axpys_of<1, kSkipZeros>(w, m, x, xs, out, n);
  }
  // axpys of two rows y0, y1 (weights a0, a1) over the same x rows (kTwoRows above)
  template <bool kSkipZeros, class E>
  static void axpys2(const S* a0, const S* a1, int m, const E* x, int64_t xs, S* y0, S* y1, int64_t n) {
    const S* w[2] = {a0, a1};
    S* out[2] = {y0, y1};
    axpys_of<2, kSkipZeros>(w, m, x, xs, out, n);
  }
  template <int R, bool kSkipZeros, class E>
  static void axpys_of(const S* const* a, int m, const E* x, int64_t xs, S* const* y, int64_t n) {
    int64_t c = 0;
    for (; c + 8 * W <= n; c += 8 * W) axpys_cols<R, 8, kSkipZeros>(a, m, x + c, xs, y, c);
    switch ((n - c) / W) {
      case 7: axpys_cols<R, 7, kSkipZeros>(a, m, x + c, xs, y, c); break;
      case 6: axpys_cols<R, 6, kSkipZeros>(a, m, x + c, xs, y, c); break;
      case 5: axpys_cols<R, 5, kSkipZeros>(a, m, x + c, xs, y, c); break;
      case 4: axpys_cols<R, 4, kSkipZeros>(a, m, x + c, xs, y, c); break;
      case 3: axpys_cols<R, 3, kSkipZeros>(a, m, x + c, xs, y, c); break;
      case 2: axpys_cols<R, 2, kSkipZeros>(a, m, x + c, xs, y, c); break;
      case 1: axpys_cols<R, 1, kSkipZeros>(a, m, x + c, xs, y, c); break;
      default: break;
    }
    for (c = n - n % W; c < n; ++c)
      for (int t = 0; t < m; ++t)
        for (int r = 0; r < R; ++r)
          if (!kSkipZeros || a[r][t] != S(0)) y[r][c] += a[r][t] * elem(x + t * xs + c);
  }
  // columns c0 .. c0 + NV * W - 1 of the rows y[r]
  template <int R, int NV, bool kSkipZeros, class E>
  static void axpys_cols(const S* const* a, int m, const E* x, int64_t xs, S* const* y, int64_t c0) {
    V acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = Ops::loadc(y[r] + c0 + v * W);
    for (int t = 0; t < m; ++t) {
      bool all = true;  // every row takes this term: the x vectors loaded once for all of them
      for (int r = 0; r < R; ++r) all = all && (!kSkipZeros || a[r][t] != S(0));
      if (all) {
        V va[R];
        for (int r = 0; r < R; ++r) va[r] = Ops::set1(a[r][t]);
        for (int v = 0; v < NV; ++v) {
          const V xv = loadv(x + t * xs + v * W);
          for (int r = 0; r < R; ++r) acc[r][v] = Ops::add(acc[r][v], Ops::mul(va[r], xv));
        }
        continue;
      }
      for (int r = 0; r < R; ++r) {  // some row skips the term (a zero weight: a masked key)
        if (a[r][t] == S(0)) continue;
        const V va = Ops::set1(a[r][t]);
        for (int v = 0; v < NV; ++v) acc[r][v] = Ops::add(acc[r][v], Ops::mul(va, loadv(x + t * xs + v * W)));
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v) Ops::storec(y[r] + c0 + v * W, acc[r][v]);
  }
  static S exp2s(S x) { return x == S(-INFINITY) ? S(0) : static_cast<S>(std::exp2(x)); }

  // Logit of (row i, key j) in log2 units from qk = q.k: c2 qk (+ c2 pse; -inf where the full mask
  // is set).
  static S logit_of_dot(const FlashAttnFwdParams& p, int64_t b, int64_t n, int64_t i, int64_t j, S c2, S qk) {
    S x = c2 * qk;
    if (p.pse) {
      const int64_t idx = b * p.pse_batch_stride + n * p.pse_head_stride + i * p.pse_row_stride + j;
      x += c2 * (p.pse_dtype == OP_DT_DOUBLE ? static_cast<S>(static_cast<const double*>(p.pse)[idx])
                                             : static_cast<S>(load_float(p.pse, p.pse_dtype, idx)));
    }
    if (p.full_mask &&
        p.full_mask[b * p.full_mask_batch_stride + n * p.full_mask_head_stride + i * p.full_mask_row_stride + j])
      x = S(-INFINITY);
    return x;
  }

  // Kept fraction of element (row i, key j) of head n: 1 / keep_prob or 0 (1 without dropout).
  static S keep(const FlashAttnFwdParams& p, const DropoutKey& k, int64_t b, int64_t n, int64_t i, int64_t j) {
    if (p.keep_prob >= 1.0) return S(1);
    return dropout_keep(dropout_row0(p, b, n, i) + static_cast<uint64_t>(j), k) ? static_cast<S>(k.scale) : S(0);
  }

  static const char* row_ptr(const void* base, int64_t es, int64_t b, int64_t bs, int64_t row, int64_t rs, int64_t head,
                             int64_t hs) {
    return static_cast<const char*>(base) + (b * bs + row * rs + head * hs) * es;
  }
  // Key j of kv head h of K (V when `value`), batch b: through the block table of a paged cache
  // (row j % page of block table[b][j / page]), else at row kv_start[b] + j.
  static const char* kv_row(const FlashAttnFwdParams& p, bool value, int64_t b, int64_t h, int64_t j) {
    const int64_t es = dtype_size(p.dtype), stride = value ? p.v_row_stride : p.k_row_stride;
    const int64_t hs = value ? p.v_head_stride : p.k_head_stride;
    const void* base = value ? p.v : p.k;
    if (p.kv_table != nullptr) {
      const int64_t page = p.kv_block_size, block = j / page;
      const int64_t page_stride = value ? p.v_block_stride : p.k_block_stride;
      return static_cast<const char*>(base) +
             (p.kv_table[b * p.kv_table_width + block] * page_stride + (j - block * page) * stride + h * hs) * es;
    }
    return row_ptr(base, es, b, value ? p.v_batch_stride : p.k_batch_stride, p.kv_start[b] + j, stride, h, hs);
  }
  static bool reads_in_place(const FlashAttnFwdParams& p) {
    return p.dtype == (sizeof(S) == 8 ? OP_DT_DOUBLE : OP_DT_FLOAT);
  }
  // Rows j0 .. j0 + nk - 1 of kv head h of K (or V when `value`) as S rows, *rs apart: read in
  // place when the dtype is S's own (a copy per key was a third of a decode call's kernel time),
  // else converted into buf (ld apart). A paged cache's rows are read in place when the block of
  // keys lies in one of its blocks (a 16-key block does whenever the cache's block size is a
  // multiple of 16: key blocks start on multiples of kKeys), else copied a run of rows at a time.
  static const S* block_as_s(const FlashAttnFwdParams& p, bool value, int64_t b, int64_t h, int64_t j0, int nk,
                             S* buf, int64_t ld, int64_t* rs) {
    const int64_t es = dtype_size(p.dtype), n = value ? p.head_dim_v : p.head_dim;
    const int64_t stride = value ? p.v_row_stride : p.k_row_stride;
    // rows of one block of a paged cache, or of a dense one, are stride apart
    const int64_t run = p.kv_table != nullptr ? p.kv_block_size : INT64_MAX;
    if (reads_in_place(p) && j0 / run == (j0 + nk - 1) / run) {
      *rs = stride;
      return reinterpret_cast<const S*>(kv_row(p, value, b, h, j0));
    }
    for (int t = 0; t < nk;) {  // a run of rows in one block of the cache at a time
      const char* row = kv_row(p, value, b, h, j0 + t);
      for (const int end = t + static_cast<int>(imin(nk - t, run - (j0 + t) % run)); t < end; ++t, row += stride * es)
        load_row<S>(row, p.dtype, n, buf + t * ld);
    }
    *rs = ld;
    return buf;
  }
  // A block of K (V) rows as the row kernels read them: S rows (block_as_s), or, `raw` (raw_rows),
  // the block's own 16-bit values in place, unless a paged block of keys spans two of the
  // cache's blocks (a block size that is not a multiple of kKeys).
  struct BlockRows {
    const void* x;
    int64_t rs;  // row stride, in elements
    int elem;    // 0: S, 1: bf16, 2: fp16
  };
  static BlockRows block_rows(const FlashAttnFwdParams& p, bool value, int64_t b, int64_t h, int64_t j0, int nk,
                              S* buf, int64_t ld, bool raw) {
    const int64_t run = p.kv_table != nullptr ? p.kv_block_size : INT64_MAX;
    if (raw && j0 / run == (j0 + nk - 1) / run)
      return {kv_row(p, value, b, h, j0), value ? p.v_row_stride : p.k_row_stride, p.dtype == OP_DT_BF16 ? 1 : 2};
    int64_t rs;
    const S* x = block_as_s(p, value, b, h, j0, nk, buf, ld, &rs);
    return {x, rs, 0};
  }
  // Whether a pass of `pairs` query rows reads 16-bit K / V raw: fp16 always (one instruction
  // widens a vector as it loads it), bf16 (a load-widen and a shift) for up to 8 rows at AVX2.
  // Each pair widens the rows again, and there with 16 pairs a bf16 block converted once ran
  // 1.04-1.19x faster forward (1.03-1.08x backward); with 8 pairs raw won 1.14x (1.12x), with 1 up
  // to 1.77x (Zen 3). At AVX-512 the forward widens once per two pairs (kTwoRows), and raw bf16
  // won at 16 pairs too (Zen 4: 1.03-1.14x forward, 1.00-1.02x backward).
  static bool raw_rows(const FlashAttnFwdParams& p, int64_t pairs) {
    return kWidens && (p.dtype == OP_DT_FLOAT16 || (p.dtype == OP_DT_BF16 && (kTwoRows || pairs <= 8)));
  }
  // f(rows) with the block's rows as a typed pointer (const S*, const Bf16* or const F16*)
  template <class F>
  static void with_rows(const BlockRows& r, F&& f) {
    if constexpr (kWidens) {
      if (r.elem == 1) return f(static_cast<const Bf16*>(r.x));
      if (r.elem == 2) return f(static_cast<const F16*>(r.x));
    }
    f(static_cast<const S*>(r.x));
  }
  // ---- forward: pairs k0 .. k0 + npairs - 1 of kv head h, batch b ---------------------------
  // Pair k is row k % sq of query head h * group + k / sq. With key splits (plan.fwd_splits > 1,
  // task i0 = k0 * splits + split) the task takes the split's keys and writes partials.
  static void forward_pairs(const FlashAttnFwdParams& p, const Plan& plan, int out_kind, const Task& t, char* slot,
                            void* ws) {
    const int64_t splits = plan.fwd_splits, k0 = t.i0 / splits, npairs = plan.small_pairs;
    // One row (decode without GQA) compiled on its own: its loops over the pairs vanish, and
    // with them 10-15% of a one-row call (bf16, 128-1024 keys, one thread).
    if (imin(npairs, p.group * p.seqlen_q[t.b] - k0) == 1)
      forward_pairs_n<true>(p, plan, out_kind, t.b, t.n, k0, t.i0 % splits, slot, ws);
    else
      forward_pairs_n<false>(p, plan, out_kind, t.b, t.n, k0, t.i0 % splits, slot, ws);
  }
  // A split's record of (q row, head): [max, exp sum, 14 unused, O's row], in S (Plan::fwd_part_offset)
  static S* split_record(const FlashAttnFwdParams& p, const Plan& plan, void* ws, int64_t split, int64_t b, int64_t n,
                         int64_t i) {
    const int64_t rec = pad16(p.head_dim_v) + 16;
    const int64_t row = b * plan.q_batch_rows + p.q_start[b] + i;
    return reinterpret_cast<S*>(static_cast<char*>(ws) + plan.fwd_part_offset) +
           ((split * plan.dq_rows + row) * p.heads_q + n) * rec;
  }
  template <bool kOneRow>
  static void forward_pairs_n(const FlashAttnFwdParams& p, const Plan& plan, int out_kind, int64_t b, int64_t h,
                              int64_t k0, int64_t split, char* slot, void* ws) {
    const int64_t D = p.head_dim, Dv = p.head_dim_v, es = dtype_size(p.dtype);
    const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b];
    const RowWindow w = flash::row_window(p, sq, skv);
    const int64_t npairs = plan.small_pairs, splits = plan.fwd_splits;
    const int64_t sb = flash::small_fwd_splits(skv, splits);
    const int64_t c0 = flash::small_fwd_split_start(skv, sb, split);  // the split's keys
    const int64_t c1 = flash::small_fwd_split_start(skv, sb, split + 1);
    const Rows r = carve(slot, p, npairs);
    const int64_t np = kOneRow ? 1 : imin(npairs, p.group * sq - k0);
    const S c2 = static_cast<S>(p.scale * kLog2e);
    const bool sink = p.sinks != nullptr && splits == 1;  // with splits, combine_splits adds the sink
    int64_t n[flash::kSmallMaxPairs], i[flash::kSmallMaxPairs], lok[flash::kSmallMaxPairs], hik[flash::kSmallMaxPairs];
    S m0[flash::kSmallMaxPairs], mx[flash::kSmallMaxPairs], muse[flash::kSmallMaxPairs], l[flash::kSmallMaxPairs];
    int64_t lo = INT64_MAX, hi = -1;  // the union of the rows' windows
    for (int64_t k = 0; k < np; ++k) {
      n[k] = h * p.group + (k0 + k) / sq;
      i[k] = (k0 + k) % sq;
      lok[k] = imax(w.lo(i[k]), c0);
      hik[k] = imin(w.hi(i[k]), c1 - 1);
      load_row<S>(row_ptr(p.q, es, b, p.q_batch_stride, p.q_start[b] + i[k], p.q_row_stride, n[k], p.q_head_stride),
                  p.dtype, D, r.q + k * r.ld);
      m0[k] = sink ? static_cast<S>(p.sinks[n[k]] * kLog2e) : S(-INFINITY);
      if (lok[k] <= hik[k]) {
        lo = imin(lo, lok[k]);
        hi = imax(hi, hik[k]);
      }
    }
    // Key blocks start on multiples of kKeys (the first may hold keys no row sees, which are
    // skipped): the order of every sum is the same, and a paged cache's blocks of a multiple of
    // kKeys keys are read whole, in place (block_rows).
    const int64_t lo_block = lo == INT64_MAX ? lo : lo / kKeys * kKeys;
    const bool raw = raw_rows(p, np);
    for (int64_t j0 = lo_block; j0 <= hi; j0 += kKeys) {  // the logits, a block of keys at a time
      const int nk = static_cast<int>(imin(kKeys, hi - j0 + 1));
      const BlockRows kb = block_rows(p, false, b, h, j0, nk, r.kblk, r.ld, raw);
      S qks[flash::kSmallMaxPairs][kKeys];  // pair k's dot products with the block's keys
      auto sees = [&](int64_t k) { return imax(j0, lok[k]) <= imin(j0 + nk - 1, hik[k]); };
      with_rows(kb, [&](auto x) {
        for (int64_t k = 0; k < np;) {
          if (kTwoRows && k + 1 < np && sees(k) && sees(k + 1)) {
            dots2(r.q + k * r.ld, r.q + (k + 1) * r.ld, x, kb.rs, nk, D, qks[k], qks[k + 1]);
            k += 2;
            continue;
          }
          if (sees(k)) dots(r.q + k * r.ld, x, kb.rs, nk, D, qks[k]);
          ++k;
        }
      });
      for (int64_t k = 0; k < np; ++k) {
        const int64_t a = imax(j0, lok[k]), e = imin(j0 + nk - 1, hik[k]);
        if (a > e) continue;
        const S* qk = qks[k];
        S* sk = r.s + k * r.ls;  // key j's logit at sk[j - lok[k]]
        if (!p.pse && !p.full_mask && a == j0 && e - a + 1 == kKeys) {
          for (int t = 0; t < kKeys; t += W)
            Ops::storec(sk + j0 - lok[k] + t, Ops::mul(Ops::set1(c2), Ops::loadc(qk + t)));
          continue;
        }
        for (int64_t j = a; j <= e; ++j) sk[j - lok[k]] = logit_of_dot(p, b, n[k], i[k], j, c2, qk[j - j0]);
      }
    }
    for (int64_t k = 0; k < np; ++k) {
      S* sk = r.s + k * r.ls;
      const int64_t nvis = imax(0, hik[k] - lok[k] + 1);
      // the maximum, NaN propagating: W lanes apart, then the lanes and the tail in order
      V vmax = Ops::set1(m0[k]);
      int64_t tv = 0;
      for (; tv + W <= nvis; tv += W) vmax = Ops::max_keep_nan(vmax, Ops::loadc(sk + tv));
      S lanes[W];
      Ops::storec(lanes, vmax);
      S m = m0[k];
      for (int64_t t = 0; t < W + nvis - tv; ++t) {
        const S x = t < W ? lanes[t] : sk[tv + t - W];
        if (m == m && (x > m || x != x)) m = x;
      }
      mx[k] = m;
      muse[k] = m == S(-INFINITY) ? S(0) : m;  // nothing visible: keep the exponents finite
      l[k] = sink ? exp2s(m0[k] - muse[k]) : S(0);
      // the weights, W at a time (the sum keeps every term, P V only the kept ones)
      V sum = Ops::zero();
      const V vm = Ops::set1(muse[k]);
      int64_t t = 0;
      for (; t + W <= nvis; t += W) {
        const V e = Ops::exp2(Ops::sub(Ops::loadc(sk + t), vm));
        Ops::storec(sk + t, e);
        sum = Ops::add(sum, e);
      }
      l[k] += Ops::hsum(sum);
      for (; t < nvis; ++t) {
        sk[t] = exp2s(sk[t] - muse[k]);
        l[k] += sk[t];
      }
      for (int64_t c = 0; c < Dv; ++c) r.acc[k * r.ld + c] = S(0);
    }
    DropoutKey dkey;
    if (p.keep_prob < 1.0) dkey = dropout_key(p.dropout_seed, p.dropout_offset, p.keep_prob);
    for (int64_t j0 = lo_block; j0 <= hi; j0 += kKeys) {  // out += P V, a block of keys at a time
      const int nk = static_cast<int>(imin(kKeys, hi - j0 + 1));
      const BlockRows vb = block_rows(p, true, b, h, j0, nk, r.vblk, r.ld, raw);
      // the weights of pair k's keys a .. e, times the kept fraction
      auto weights = [&](int64_t k, int64_t a, int64_t e, S* pe) -> const S* {
        const S* wk = r.s + k * r.ls + a - lok[k];
        if (p.keep_prob >= 1.0) return wk;
        for (int64_t j = a; j <= e; ++j) pe[j - a] = wk[j - a] * keep(p, dkey, b, n[k], i[k], j);
        return pe;
      };
      for (int64_t k = 0; k < np;) {
        const int64_t a = imax(j0, lok[k]), e = imin(j0 + nk - 1, hik[k]);
        if (a > e) {
          ++k;
          continue;
        }
        S pe0[kKeys], pe1[kKeys];
        const S* w0 = weights(k, a, e, pe0);
        // two pairs over the same keys (no window between them) share the V loads
        if (kTwoRows && k + 1 < np && imax(j0, lok[k + 1]) == a && imin(j0 + nk - 1, hik[k + 1]) == e) {
          const S* w1 = weights(k + 1, a, e, pe1);
          with_rows(vb, [&](auto x) {
            axpys2<true>(w0, w1, static_cast<int>(e - a + 1), x + (a - j0) * vb.rs, vb.rs, r.acc + k * r.ld,
                         r.acc + (k + 1) * r.ld, Dv);
          });
          k += 2;
          continue;
        }
        with_rows(vb, [&](auto x) {
          axpys<true>(w0, static_cast<int>(e - a + 1), x + (a - j0) * vb.rs, vb.rs, r.acc + k * r.ld, Dv);
        });
        ++k;
      }
    }
    for (int64_t k = 0; k < np; ++k) {
      if (splits == 1) {
        finalize_rows<S, Ops::kNativeBf16>(p, out_kind, b, n[k], i[k], 1, w, sink, m0[k], &muse[k], &l[k],
                                           r.acc + k * r.ld, 0, r.tmp);
        continue;
      }
      S* rec = split_record(p, plan, ws, split, b, n[k], i[k]);
      rec[0] = mx[k];
      rec[1] = l[k];
      std::memcpy(rec + 16, r.acc + k * r.ld, sizeof(S) * static_cast<size_t>(Dv));
    }
  }

  // Key splits: row (b, n, i)'s max M over the sink and the splits' maxima (NaN kept, as the
  // unsplit max does), exp sum sum_s l_s 2^(m_s - M) (+ the sink's 2^(sink - M)) and O likewise, in
  // split order, then the unsplit epilogue. A split that saw no key (max -inf) adds nothing.
  static void combine_splits(const FlashAttnFwdParams& p, const Plan& plan, int out_kind, void* ws) {
    const int64_t splits = plan.fwd_splits, Dv = p.head_dim_v;
    // (b, query head) items, each on its thread's slot (the tasks are done with them)
    run_items(plan, ws, 0, p.batch * p.heads_q, [&](int64_t it, char* slot) {
      const Rows r = carve(slot, p, 1);
      const int64_t b = it / p.heads_q, n = it % p.heads_q;
      const int64_t sq = p.seqlen_q[b], sb = flash::small_fwd_splits(p.seqlen_kv[b], splits);
      const RowWindow w = flash::row_window(p, sq, p.seqlen_kv[b]);
      const bool sink = p.sinks != nullptr;
      const S m0 = sink ? static_cast<S>(p.sinks[n] * kLog2e) : S(-INFINITY);
      for (int64_t i = 0; i < sq; ++i) {
        S m = m0;
        for (int64_t s = 0; s < sb; ++s) {
          const S x = split_record(p, plan, ws, s, b, n, i)[0];
          if (m == m && (x > m || x != x)) m = x;
        }
        const S muse = m == S(-INFINITY) ? S(0) : m;
        S l = sink ? exp2s(m0 - muse) : S(0);
        for (int64_t c = 0; c < Dv; ++c) r.o[c] = S(0);
        for (int64_t s = 0; s < sb; ++s) {
          const S* rec = split_record(p, plan, ws, s, b, n, i);
          if (rec[0] == S(-INFINITY)) continue;
          const S f = exp2s(rec[0] - muse);
          l += rec[1] * f;
          for (int64_t c = 0; c < Dv; ++c) r.o[c] += rec[16 + c] * f;
        }
        finalize_rows<S, Ops::kNativeBf16>(p, out_kind, b, n, i, 1, w, sink, m0, &muse, &l, r.o, 0, r.tmp);
      }
    });
  }

  // ---- backward: every query head of kv head h's group, batch b, keys c0 .. c1 - 1 ----------
  // The group's (head, row) pairs, head-major, kSmallMaxPairs at a time, each run over the union
  // of its rows' windows within chunk `chunk` (Plan::bwd_chunks, make_small_plan): the chunk's
  // dK and dV, and its share of dQ (a partial for reduce_dq when there are several chunks).
  static void backward_kv_head(const FlashAttnBwdParams& p, const Plan& plan, int out_kind, int64_t b, int64_t h,
                               int64_t chunk, char* slot, void* ws) {
    const int64_t D = p.head_dim, Dv = p.head_dim_v, es = dtype_size(p.dtype), ob = out_elem_bytes(out_kind);
    const int64_t sq = p.seqlen_q[b], skv = p.seqlen_kv[b], rows = p.rows_q[b];
    const int64_t C = plan.bwd_chunks, c0 = chunk * skv / C, c1 = (chunk + 1) * skv / C;
    const RowWindow w = flash::row_window(p, sq, skv);
    const int64_t P = plan.small_pairs;
    const Rows r = carve(slot, p, P);
    // dK | dV accumulators of the chunk's keys (key j at j - c0), after the row scratch
    S* dkv = reinterpret_cast<S*>(slot + small_rows_bytes(p, P));
    const int64_t Dp = pad16(D), ld = Dp + pad16(Dv);
    std::memset(dkv, 0, sizeof(S) * static_cast<size_t>((c1 - c0) * ld));
    S* dqpart = C > 1 ? reinterpret_cast<S*>(static_cast<char*>(ws) + plan.dqpart_offset) : nullptr;
    const S c2 = static_cast<S>(p.scale * kLog2e), sc = static_cast<S>(p.scale);
    LseRef lse{p.lse, p.lse_dtype == OP_DT_DOUBLE};
    LseRef ssum{p.softmax_sum, p.lse_dtype == OP_DT_DOUBLE};
    DropoutKey dkey;
    if (p.keep_prob < 1.0) dkey = dropout_key(p.dropout_seed, p.dropout_offset, p.keep_prob);
    S* dpse_all = p.want_dpse ? reinterpret_cast<S*>(static_cast<char*>(ws) + plan.dpse_offset) : nullptr;
    int64_t n[flash::kSmallMaxPairs], i[flash::kSmallMaxPairs], lok[flash::kSmallMaxPairs], hik[flash::kSmallMaxPairs];
    S lse2[flash::kSmallMaxPairs], delta[flash::kSmallMaxPairs];
    char* dq[flash::kSmallMaxPairs];
    for (int64_t k0 = 0; k0 < p.group * rows; k0 += P) {
      int64_t np = 0;  // the run's pairs with keys; the others' dQ rows are zero
      int64_t lo = INT64_MAX, hi = -1;
      for (int64_t k = k0; k < imin(k0 + P, p.group * rows); ++k) {
        const int64_t nk = h * p.group + k / rows, ik = k % rows;
        char* dqk = static_cast<char*>(p.dq) +
                    (b * p.dq_batch_stride + (p.q_start[b] + ik) * p.dq_row_stride + nk * p.dq_head_stride) * ob;
        if (ik >= sq || skv == 0) {  // with chunks, reduce_dq writes these zeros
          if (C == 1) zero_row(out_kind, dqk, D);
          continue;
        }
        n[np] = nk;
        i[np] = ik;
        dq[np] = dqk;
        S* q = r.q + np * r.ld;
        S* dout = r.dout + np * r.ld;
        load_row<S>(row_ptr(p.q, es, b, p.q_batch_stride, p.q_start[b] + ik, p.q_row_stride, nk, p.q_head_stride),
                    p.dtype, D, q);
        load_row<S>(row_ptr(p.out, es, b, p.o_batch_stride, p.q_start[b] + ik, p.o_row_stride, nk, p.o_head_stride),
                    p.dtype, Dv, r.o);
        load_row<S>(row_ptr(p.dout, es, b, p.o_batch_stride, p.q_start[b] + ik, p.o_row_stride, nk, p.o_head_stride),
                    p.dtype, Dv, dout);
        const int64_t li = b * p.lse_batch_stride + nk * p.lse_head_stride + (p.q_start[b] + ik) * p.lse_row_stride;
        lse2[np] = static_cast<S>(
            (p.softmax_sum ? Backward<Ops>::lse_of_stats(lse.get(li), ssum.get(li)) : lse.get(li)) * kLog2e);
        delta[np] = dot(dout, r.o, Dv);
        for (int64_t c = 0; c < D; ++c) r.acc[np * r.ld + c] = S(0);
        lok[np] = imax(w.lo(ik), c0);  // the window's keys in the chunk
        hik[np] = imin(w.hi(ik), c1 - 1);
        if (lok[np] <= hik[np]) {
          lo = imin(lo, lok[np]);
          hi = imax(hi, hik[np]);
        }
        ++np;
      }
      const bool raw = raw_rows(p, np);
      for (int64_t j0 = lo; j0 <= hi; j0 += kKeys) {  // a block of keys at a time
        const int nk = static_cast<int>(imin(kKeys, hi - j0 + 1));
        const BlockRows kb = block_rows(p, false, b, h, j0, nk, r.kblk, r.ld, raw);
        const BlockRows vb = block_rows(p, true, b, h, j0, nk, r.vblk, r.ld, raw);
        // dS and P z of key j0 + t, pair k, at [t][k]
        S dst[kKeys][flash::kSmallMaxPairs], pzt[kKeys][flash::kSmallMaxPairs];
        bool whole = true;  // every pair sees every key of the block
        for (int64_t k = 0; k < np; ++k) {
          const int64_t a = imax(j0, lok[k]), e = imin(j0 + nk - 1, hik[k]);
          whole = whole && a == j0 && e == j0 + nk - 1;
          if (a > e) continue;
          S qk[kKeys], dp[kKeys], dsk[kKeys];
          with_rows(kb, [&](auto x) { dots(r.q + k * r.ld, x, kb.rs, nk, D, qk); });
          with_rows(vb, [&](auto x) { dots(r.dout + k * r.ld, x, vb.rs, nk, Dv, dp); });
          // P of keys a .. e: the exponents, then 2^x W at a time (a libm exp2 per key was 6% of the time)
          const int m = static_cast<int>(e - a + 1);
          S pr[kKeys] = {};
          for (int u = 0; u < m; ++u) pr[u] = logit_of_dot(p, b, n[k], i[k], a + u, c2, qk[a + u - j0]) - lse2[k];
          for (int u = 0; u < m; u += W) Ops::storec(pr + u, Ops::exp2(Ops::loadc(pr + u)));
          for (int u = 0; u < m; ++u) {
            const int64_t j = a + u, t = j - j0;
            const S z = keep(p, dkey, b, n[k], i[k], j);
            dsk[u] = dst[t][k] = pr[u] * (dp[t] * z - delta[k]);
            pzt[t][k] = pr[u] * z;
            if (dpse_all) dpse_all[((b * p.heads_q + n[k]) * plan.dpse_rows + i[k]) * plan.dpse_cols + j] = dst[t][k] * sc;
          }
          with_rows(kb, [&](auto x) {  // dQ
            axpys<false>(dsk, static_cast<int>(e - a + 1), x + (a - j0) * kb.rs, kb.rs, r.acc + k * r.ld, D);
          });
        }
        for (int t = 0; t < nk; ++t) {  // dK (scaled when written) and dV, over the pairs in order
          S* dkj = dkv + (j0 + t - c0) * ld;
          if (whole) {
            axpys<false>(dst[t], static_cast<int>(np), r.q, r.ld, dkj, D);
            axpys<false>(pzt[t], static_cast<int>(np), r.dout, r.ld, dkj + Dp, Dv);
            continue;
          }
          for (int64_t k = 0; k < np; ++k) {
            if (j0 + t < lok[k] || j0 + t > hik[k]) continue;
            axpy(dst[t][k], r.q + k * r.ld, dkj, D);
            axpy(pzt[t][k], r.dout + k * r.ld, dkj + Dp, Dv);
          }
        }
      }
      for (int64_t k = 0; k < np; ++k) {
        if (C == 1) {
          store_row<S, Ops::kNativeBf16>(out_kind, r.acc + k * r.ld, dq[k], D, sc, r.tmp);
          continue;
        }
        S* part = dqpart + ((chunk * plan.dq_rows + b * plan.q_batch_rows + p.q_start[b] + i[k]) * p.heads_q + n[k]) * Dp;
        std::memcpy(part, r.acc + k * r.ld, sizeof(S) * static_cast<size_t>(D));
      }
    }
    char* dk = static_cast<char*>(p.dk) + (b * p.dk_batch_stride + p.kv_start[b] * p.dk_row_stride + h * p.dk_head_stride) * ob;
    char* dv = static_cast<char*>(p.dv) + (b * p.dv_batch_stride + p.kv_start[b] * p.dv_row_stride + h * p.dv_head_stride) * ob;
    for (int64_t j = c0; j < c1; ++j) {
      store_row<S, Ops::kNativeBf16>(out_kind, dkv + (j - c0) * ld, dk + j * p.dk_row_stride * ob, D, sc, r.tmp);
      store_row<S, Ops::kNativeBf16>(out_kind, dkv + (j - c0) * ld + Dp, dv + j * p.dv_row_stride * ob, Dv, S(1), r.tmp);
    }
    if (chunk == C - 1)  // rows past seqused_kv
      for (int64_t j = skv; j < p.rows_kv[b]; ++j) {
        zero_row(out_kind, dk + j * p.dk_row_stride * ob, D);
        zero_row(out_kind, dv + j * p.dv_row_stride * ob, Dv);
      }
  }

  // Bytes of the row scratch (carve); the backward's dK | dV accumulators follow it.
  static int64_t small_rows_bytes(const FlashAttnFwdParams& p, int64_t pairs) {
    return flash::small_rows_bytes(p.head_dim, p.head_dim_v, p.max_seqlen_kv, sizeof(S), pairs);
  }
};

// Runs the small-query path of the plan (Plan::small): forward tasks (b, kv head, first pair),
// backward tasks (b, kv head, chunk of keys); on the calling thread when the plan says the work
// is too small to share. With several chunks the caller sums the dQ partials (reduce_dq).
template <class Ops>
void run_small_forward(const FlashAttnFwdParams& p, const Plan& plan, void* ws, int out_kind) {
  run_tasks(plan, ws, [&](const Task& t, char* slot) { Small<Ops>::forward_pairs(p, plan, out_kind, t, slot, ws); });
  if (plan.fwd_splits > 1) Small<Ops>::combine_splits(p, plan, out_kind, ws);
}
template <class Ops>
void run_small_backward(const FlashAttnBwdParams& p, const Plan& plan, int out_kind, void* ws) {
  run_tasks(plan, ws, [&](const Task& t, char* slot) {
    Small<Ops>::backward_kv_head(p, plan, out_kind, t.b, t.n, t.i0, slot, ws);
  });
}

}  // namespace fa
}  // namespace OP_ISA_NS
}  // namespace op_plugin
