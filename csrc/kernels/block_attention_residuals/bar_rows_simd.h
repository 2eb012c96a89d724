// The vector row kernels, written once over a vector class Vec and included only by the ISA
// sources (bar_rows.avx2.cpp, bar_rows.avx512.cpp). Vec is RowVec below: kernels/common/simd.h's
// AccVec of the including translation unit's ISA (namespace op_plugin::isa_*) seen through the
// storage types, in an anonymous namespace, so no instantiation can be shared between translation
// units compiled with different flags. No standard-library code is used here for the same reason.
#pragma once
#include <cstdint>

#include "bar_rows.h"
#include "kernels/common/simd.h"

namespace op_plugin {
namespace bar {
namespace simd {
namespace {

// AccVec (V, W lanes, zero/set1/add/mul/fma/hsum, prefetch, fence, stream_aligned) with
//   load(const T*) -> V and store<kStream>(T*, V) for T in {float, Half, BFloat16},
//   load1(const T*) -> float and store1(T*, float) for the scalar tails,
//   kTile: registers per tile (see the ISA sources),
//   kNativeBf16: BFloat16 vector stores by the AVX512_BF16 instruction (the scalar tails keep the
//   emulated rounding, bit for bit float_to_bf16).
template <int kTileRegs, bool kNativeBf16 = false>
struct RowVec : OP_ISA_NS::AccVec {
  using Acc = OP_ISA_NS::AccVec;
  static constexpr int kTile = kTileRegs;

  using Acc::load;
  static V load(const Half* p) { return Acc::load_f16(&p->bits); }
  static V load(const BFloat16* p) { return Acc::load_bf16(&p->bits); }
  template <bool kStream>
  static void store(float* p, V x) { Acc::store<kStream>(p, x); }
  template <bool kStream>
  static void store(Half* p, V x) { Acc::store_f16<kStream>(&p->bits, x); }
  template <bool kStream>
  static void store(BFloat16* p, V x) { Acc::store_bf16<kStream, kNativeBf16>(&p->bits, x); }

  static float load1(const float* p) { return *p; }
  static float load1(const Half* p) { return Acc::f16_to_f32(p->bits); }
  static float load1(const BFloat16* p) { return OP_ISA_NS::bf16_to_float(p->bits); }
  static void store1(float* p, float x) { *p = x; }
  static void store1(Half* p, float x) { p->bits = Acc::f32_to_f16(x); }
  static void store1(BFloat16* p, float x) { p->bits = Acc::f32_to_bf16(x); }
};

}  // namespace

// First pass of the forward, one row:  sumsq = sum_h x^2 ;  dot = sum_h x * sw.
// Two registers per sum (four independent FMA chains) cover the FMA latency; the loop is bound by
// the memory stream of x anyway.
template <class Vec, class T>
void norm_dot(const T* x, const float* sw, int64_t H, float* sumsq, float* dot) {
  using V = typename Vec::V;
  constexpr int64_t W = Vec::W;
  V s0 = Vec::zero(), s1 = Vec::zero(), d0 = Vec::zero(), d1 = Vec::zero();
  int64_t h = 0;
  for (; h + 2 * W <= H; h += 2 * W) {
    const V x0 = Vec::load(x + h), x1 = Vec::load(x + h + W);
    s0 = Vec::fma(s0, x0, x0);
    s1 = Vec::fma(s1, x1, x1);
    d0 = Vec::fma(d0, x0, Vec::load(sw + h));
    d1 = Vec::fma(d1, x1, Vec::load(sw + h + W));
  }
  if (h + W <= H) {
    const V x0 = Vec::load(x + h);
    s0 = Vec::fma(s0, x0, x0);
    d0 = Vec::fma(d0, x0, Vec::load(sw + h));
    h += W;
  }
  float s = Vec::hsum(Vec::add(s0, s1)), d = Vec::hsum(Vec::add(d0, d1));
  for (; h < H; ++h) {  // scalar tail
    const float v = Vec::load1(x + h);
    s += v * v;
    d += v * sw[h];
  }
  *sumsq = s;
  *dot = d;
}

// First pass of the backward, one row:  g = sum_h gh * x ;  d = sum_h sw * x  (gh already fp32).
template <class Vec, class T>
void grad_dots(const T* x, const float* gh, const float* sw, int64_t H, float* g, float* d) {
  using V = typename Vec::V;
  constexpr int64_t W = Vec::W;
  V g0 = Vec::zero(), g1 = Vec::zero(), d0 = Vec::zero(), d1 = Vec::zero();
  int64_t h = 0;
  for (; h + 2 * W <= H; h += 2 * W) {
    const V x0 = Vec::load(x + h), x1 = Vec::load(x + h + W);
    g0 = Vec::fma(g0, Vec::load(gh + h), x0);
    g1 = Vec::fma(g1, Vec::load(gh + h + W), x1);
    d0 = Vec::fma(d0, Vec::load(sw + h), x0);
    d1 = Vec::fma(d1, Vec::load(sw + h + W), x1);
  }
  if (h + W <= H) {
    const V x0 = Vec::load(x + h);
    g0 = Vec::fma(g0, Vec::load(gh + h), x0);
    d0 = Vec::fma(d0, Vec::load(sw + h), x0);
    h += W;
  }
  float sg = Vec::hsum(Vec::add(g0, g1)), sd = Vec::hsum(Vec::add(d0, d1));
  for (; h < H; ++h) {  // scalar tail
    const float v = Vec::load1(x + h);
    sg += gh[h] * v;
    sd += sw[h] * v;
  }
  *g = sg;
  *d = sd;
}

// out[h] = float(x[h]).
template <class Vec, class T>
void to_acc(const T* x, int64_t H, float* out) {
  constexpr int64_t W = Vec::W;
  int64_t h = 0;
  for (; h + W <= H; h += W) Vec::template store<false>(out + h, Vec::load(x + h));
  for (; h < H; ++h) out[h] = Vec::load1(x + h);  // scalar tail
}

// Prefetches the cache lines of [p, p + bytes) (bytes a multiple of 64 or less than 64).
template <class Vec>
void prefetch_lines(const void* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) Vec::prefetch(static_cast<const char*>(p) + off);
}

// Second pass of the forward:  out[h] = sum_{i=0..n} p[i] * v[i][h].
// A tile of kTile registers of out stays in registers while i runs over the n + 1 rows, so out is
// written once and each v row is read once per tile (from L2: the first pass just read it).
template <class Vec, bool kStream, class T>
void mix_impl(const MixArgs<T>& args) {
  using V = typename Vec::V;
  constexpr int64_t W = Vec::W;
  constexpr int K = Vec::kTile;
  const RowSet<T>& v = args.v;
  const int64_t H = v.H, n = v.n;
  T* out = args.out;
  int64_t h = 0;
  for (; h + K * W <= H; h += K * W) {
    V acc[K];
    for (int k = 0; k < K; ++k) acc[k] = Vec::zero();
    for (int64_t i = 0; i <= n; ++i) {
      const T* row = (i < n ? v.blocks + i * H : v.partial) + h;
      const V p = Vec::set1(args.p[i]);
      for (int k = 0; k < K; ++k) acc[k] = Vec::fma(acc[k], p, Vec::load(row + k * W));
    }
    for (int k = 0; k < K; ++k) Vec::template store<kStream>(out + h + k * W, acc[k]);
  }
  for (; h + W <= H; h += W) {
    V acc = Vec::zero();
    for (int64_t i = 0; i <= n; ++i) {
      const T* row = (i < n ? v.blocks + i * H : v.partial) + h;
      acc = Vec::fma(acc, Vec::set1(args.p[i]), Vec::load(row));
    }
    Vec::template store<kStream>(out + h, acc);
  }
  for (; h < H; ++h) {  // scalar tail
    float acc = 0.0f;
    for (int64_t i = 0; i <= n; ++i) {
      const T* row = i < n ? v.blocks + i * H : v.partial;
      acc += args.p[i] * Vec::load1(row + h);
    }
    Vec::store1(out + h, acc);
  }
  if (kStream) Vec::fence();
}

template <class Vec, class T>
void mix(const MixArgs<T>& args) {
  // No software prefetch here: prefetching the next token's rows from this pass was measured
  // 20-25% slower (the pass is short and the hardware prefetchers already follow the rows).
  if (args.stream && Vec::stream_aligned(args.out))
    mix_impl<Vec, true>(args);
  else
    mix_impl<Vec, false>(args);
}

// One vector of the G rows at offset o. All loads come before the stores, so no load of a row
// waits on (or falsely depends on) the store to another row just issued at the same offset.
// Plain stores, not non-temporal ones: the next vector's loads (v, gh, sw, gsw at o + W) fall in
// the same line modulo 4 KiB as the stores just issued at o (all four are 4 KiB aligned when they
// come from torch), and such a load flushes a non-temporal line from its write-combining buffer
// half filled: 3-4x slower on Zen 3 (docs/decisions.md, "Block AttnRes's backward without
// non-temporal stores").
template <class Vec, int G, class T, class V>
inline void step(const GradRowsArgs<T>& r, int64_t o, const V* a, const V* b, const V* c) {
  const V gh = Vec::load(r.gh + o), sw = Vec::load(r.sw + o);
  V gsw = Vec::load(r.gsw + o);
  V x[G];
  for (int g = 0; g < G; ++g) x[g] = Vec::load(r.v[g] + o);
  for (int g = 0; g < G; ++g) {
    Vec::template store<false>(r.out[g] + o,
                               Vec::fma(Vec::fma(Vec::mul(a[g], gh), b[g], sw), c[g], x[g]));
    gsw = Vec::fma(gsw, b[g], x[g]);
  }
  Vec::template store<false>(r.gsw + o, gsw);
}

// Second pass of the backward, a group of G rows (see GradRowsArgs):
//   gv[g] = a[g] gh + b[g] sw + c[g] v[g] ;  gsw = gsw + b[0] v[0] + b[1] v[1] + ... (in order).
template <class Vec, int G, bool kPrefetch, class T>
void grad_rows_impl(const GradRowsArgs<T>& r) {
  using V = typename Vec::V;
  constexpr int64_t W = Vec::W;
  constexpr int K = Vec::kTile;
  const int64_t H = r.H;
  V a[G], b[G], c[G];
  for (int g = 0; g < G; ++g) {
    a[g] = Vec::set1(r.a[g]);
    b[g] = Vec::set1(r.b[g]);
    c[g] = Vec::set1(r.c[g]);
  }
  int64_t h = 0;
  for (; h + K * W <= H; h += K * W) {
    if (kPrefetch)
      for (int g = 0; g < G; ++g)
        prefetch_lines<Vec>(r.next[g] + h, K * W * static_cast<int64_t>(sizeof(T)));
    for (int k = 0; k < K; ++k) step<Vec, G>(r, h + k * W, a, b, c);
  }
  for (; h + W <= H; h += W) step<Vec, G>(r, h, a, b, c);
  for (; h < H; ++h) {  // scalar tail
    float gsw = r.gsw[h];
    for (int g = 0; g < G; ++g) {
      const float x = Vec::load1(r.v[g] + h);
      Vec::store1(r.out[g] + h, r.a[g] * r.gh[h] + r.b[g] * r.sw[h] + r.c[g] * x);
      gsw += r.b[g] * x;
    }
    r.gsw[h] = gsw;
  }
}

template <class Vec, int G, class T>
void grad_rows_g(const GradRowsArgs<T>& r) {
  if (r.next[0] != nullptr)
    grad_rows_impl<Vec, G, true>(r);
  else
    grad_rows_impl<Vec, G, false>(r);
}

template <class Vec, class T>
void grad_rows(const GradRowsArgs<T>& r) {
  static_assert(kGradRowGroup == 4, "one case per group size");
  switch (r.rows) {
    case 1: grad_rows_g<Vec, 1>(r); break;
    case 2: grad_rows_g<Vec, 2>(r); break;
    case 3: grad_rows_g<Vec, 3>(r); break;
    default: grad_rows_g<Vec, 4>(r); break;
  }
}

// The table of one ISA for storage type T.
template <class Vec, class T>
constexpr RowKernels<T> make_table() {
  return RowKernels<T>{norm_dot<Vec, T>, mix<Vec, T>, to_acc<Vec, T>, grad_dots<Vec, T>, grad_rows<Vec, T>};
}

}  // namespace simd
}  // namespace bar
}  // namespace op_plugin
