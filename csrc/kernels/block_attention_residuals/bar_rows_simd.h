// The vector row kernels, written once over an ISA traits class V and included only by the ISA
// sources (bar_rows.avx2.cpp, bar_rows.avx512.cpp). Every template here takes V, which each ISA
// source defines in its own namespace, so no instantiation can be shared between translation
// units compiled with different flags. No standard-library code is used here for the same reason.
//
// V provides:  Reg (kLanes floats), kLanes, kTile (registers per tile, see below),
//   zero(), set1(float), add, mul, fmadd(a, b, c) = a * b + c, hsum(Reg) -> float,
//   load(const T*) -> Reg and store<kStream>(T*, Reg) for T in {float, Half, BFloat16},
//   load1(const T*) -> float and store1(T*, float) for the scalar tails,
//   aligned_for_stream(const T*) and fence() for non-temporal stores, prefetch(const void*).
#pragma once
#include <cstdint>

#include "bar_rows.h"

namespace op_plugin {
namespace bar {
namespace simd {

// First pass of the forward, one row:  sumsq = sum_h x^2 ;  dot = sum_h x * sw.
// Two registers per sum (four independent FMA chains) cover the FMA latency; the loop is bound by
// the memory stream of x anyway.
template <class V, class T>
void norm_dot(const T* x, const float* sw, int64_t H, float* sumsq, float* dot) {
  using Reg = typename V::Reg;
  constexpr int64_t L = V::kLanes;
  Reg s0 = V::zero(), s1 = V::zero(), d0 = V::zero(), d1 = V::zero();
  int64_t h = 0;
  for (; h + 2 * L <= H; h += 2 * L) {
    const Reg x0 = V::load(x + h), x1 = V::load(x + h + L);
    s0 = V::fmadd(x0, x0, s0);
    s1 = V::fmadd(x1, x1, s1);
    d0 = V::fmadd(x0, V::load(sw + h), d0);
    d1 = V::fmadd(x1, V::load(sw + h + L), d1);
  }
  if (h + L <= H) {
    const Reg x0 = V::load(x + h);
    s0 = V::fmadd(x0, x0, s0);
    d0 = V::fmadd(x0, V::load(sw + h), d0);
    h += L;
  }
  float s = V::hsum(V::add(s0, s1)), d = V::hsum(V::add(d0, d1));
  for (; h < H; ++h) {  // scalar tail
    const float v = V::load1(x + h);
    s += v * v;
    d += v * sw[h];
  }
  *sumsq = s;
  *dot = d;
}

// First pass of the backward, one row:  g = sum_h gh * x ;  d = sum_h sw * x  (gh already fp32).
template <class V, class T>
void grad_dots(const T* x, const float* gh, const float* sw, int64_t H, float* g, float* d) {
  using Reg = typename V::Reg;
  constexpr int64_t L = V::kLanes;
  Reg g0 = V::zero(), g1 = V::zero(), d0 = V::zero(), d1 = V::zero();
  int64_t h = 0;
  for (; h + 2 * L <= H; h += 2 * L) {
    const Reg x0 = V::load(x + h), x1 = V::load(x + h + L);
    g0 = V::fmadd(V::load(gh + h), x0, g0);
    g1 = V::fmadd(V::load(gh + h + L), x1, g1);
    d0 = V::fmadd(V::load(sw + h), x0, d0);
    d1 = V::fmadd(V::load(sw + h + L), x1, d1);
  }
  if (h + L <= H) {
    const Reg x0 = V::load(x + h);
    g0 = V::fmadd(V::load(gh + h), x0, g0);
    d0 = V::fmadd(V::load(sw + h), x0, d0);
    h += L;
  }
  float sg = V::hsum(V::add(g0, g1)), sd = V::hsum(V::add(d0, d1));
  for (; h < H; ++h) {  // scalar tail
    const float v = V::load1(x + h);
    sg += gh[h] * v;
    sd += sw[h] * v;
  }
  *g = sg;
  *d = sd;
}

// out[h] = float(x[h]).
template <class V, class T>
void to_acc(const T* x, int64_t H, float* out) {
  constexpr int64_t L = V::kLanes;
  int64_t h = 0;
  for (; h + L <= H; h += L) V::template store<false>(out + h, V::load(x + h));
  for (; h < H; ++h) out[h] = V::load1(x + h);  // scalar tail
}

// Prefetches the cache lines of [p, p + bytes) (bytes a multiple of 64 or less than 64).
template <class V>
void prefetch_lines(const void* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) V::prefetch(static_cast<const char*>(p) + off);
}

// Second pass of the forward:  out[h] = sum_{i=0..n} p[i] * v[i][h].
// A tile of kTile registers of out stays in registers while i runs over the n + 1 rows, so out is
// written once and each v row is read once per tile (from L2: the first pass just read it).
template <class V, bool kStream, class T>
void mix_impl(const MixArgs<T>& args) {
  using Reg = typename V::Reg;
  constexpr int64_t L = V::kLanes;
  constexpr int K = V::kTile;
  const RowSet<T>& v = args.v;
  const int64_t H = v.H, n = v.n;
  T* out = args.out;
  int64_t h = 0;
  for (; h + K * L <= H; h += K * L) {
    Reg acc[K];
    for (int k = 0; k < K; ++k) acc[k] = V::zero();
    for (int64_t i = 0; i <= n; ++i) {
      const T* row = (i < n ? v.blocks + i * H : v.partial) + h;
      const Reg p = V::set1(args.p[i]);
      for (int k = 0; k < K; ++k) acc[k] = V::fmadd(p, V::load(row + k * L), acc[k]);
    }
    for (int k = 0; k < K; ++k) V::template store<kStream>(out + h + k * L, acc[k]);
  }
  for (; h + L <= H; h += L) {
    Reg acc = V::zero();
    for (int64_t i = 0; i <= n; ++i) {
      const T* row = (i < n ? v.blocks + i * H : v.partial) + h;
      acc = V::fmadd(V::set1(args.p[i]), V::load(row), acc);
    }
    V::template store<kStream>(out + h, acc);
  }
  for (; h < H; ++h) {  // scalar tail
    float acc = 0.0f;
    for (int64_t i = 0; i <= n; ++i) {
      const T* row = i < n ? v.blocks + i * H : v.partial;
      acc += args.p[i] * V::load1(row + h);
    }
    V::store1(out + h, acc);
  }
  if (kStream) V::fence();
}

template <class V, class T>
void mix(const MixArgs<T>& args) {
  // No software prefetch here: prefetching the next token's rows from this pass was measured
  // 20-25% slower (the pass is short and the hardware prefetchers already follow the rows).
  if (args.stream && V::aligned_for_stream(args.out))
    mix_impl<V, true>(args);
  else
    mix_impl<V, false>(args);
}

// One vector of the G rows at offset o. All loads come before the stores, so no load of a row
// waits on (or falsely depends on) the store to another row just issued at the same offset.
template <class V, int G, bool kStream, class T, class Reg>
inline void step(const GradRowsArgs<T>& r, int64_t o, const Reg* a, const Reg* b, const Reg* c) {
  const Reg gh = V::load(r.gh + o), sw = V::load(r.sw + o);
  Reg gsw = V::load(r.gsw + o);
  Reg x[G];
  for (int g = 0; g < G; ++g) x[g] = V::load(r.v[g] + o);
  for (int g = 0; g < G; ++g) {
    V::template store<kStream>(r.out[g] + o,
                               V::fmadd(c[g], x[g], V::fmadd(b[g], sw, V::mul(a[g], gh))));
    gsw = V::fmadd(b[g], x[g], gsw);
  }
  V::template store<false>(r.gsw + o, gsw);
}

// Second pass of the backward, a group of G rows (see GradRowsArgs):
//   gv[g] = a[g] gh + b[g] sw + c[g] v[g] ;  gsw = gsw + b[0] v[0] + b[1] v[1] + ... (in order).
template <class V, int G, bool kStream, bool kPrefetch, class T>
void grad_rows_impl(const GradRowsArgs<T>& r) {
  using Reg = typename V::Reg;
  constexpr int64_t L = V::kLanes;
  constexpr int K = V::kTile;
  const int64_t H = r.H;
  Reg a[G], b[G], c[G];
  for (int g = 0; g < G; ++g) {
    a[g] = V::set1(r.a[g]);
    b[g] = V::set1(r.b[g]);
    c[g] = V::set1(r.c[g]);
  }
  int64_t h = 0;
  for (; h + K * L <= H; h += K * L) {
    if (kPrefetch)
      for (int g = 0; g < G; ++g)
        prefetch_lines<V>(r.next[g] + h, K * L * static_cast<int64_t>(sizeof(T)));
    for (int k = 0; k < K; ++k) step<V, G, kStream>(r, h + k * L, a, b, c);
  }
  for (; h + L <= H; h += L) step<V, G, kStream>(r, h, a, b, c);
  for (; h < H; ++h) {  // scalar tail
    float gsw = r.gsw[h];
    for (int g = 0; g < G; ++g) {
      const float x = V::load1(r.v[g] + h);
      V::store1(r.out[g] + h, r.a[g] * r.gh[h] + r.b[g] * r.sw[h] + r.c[g] * x);
      gsw += r.b[g] * x;
    }
    r.gsw[h] = gsw;
  }
  if (kStream) V::fence();
}

template <class V, int G, class T>
void grad_rows_g(const GradRowsArgs<T>& r) {
  bool stream = r.stream;
  for (int g = 0; g < G; ++g) stream = stream && V::aligned_for_stream(r.out[g]);
  const bool prefetch = r.next[0] != nullptr;
  if (stream)
    prefetch ? grad_rows_impl<V, G, true, true>(r) : grad_rows_impl<V, G, true, false>(r);
  else
    prefetch ? grad_rows_impl<V, G, false, true>(r) : grad_rows_impl<V, G, false, false>(r);
}

template <class V, class T>
void grad_rows(const GradRowsArgs<T>& r) {
  static_assert(kGradRowGroup == 4, "one case per group size");
  switch (r.rows) {
    case 1: grad_rows_g<V, 1>(r); break;
    case 2: grad_rows_g<V, 2>(r); break;
    case 3: grad_rows_g<V, 3>(r); break;
    default: grad_rows_g<V, 4>(r); break;
  }
}

// The table of one ISA for storage type T.
template <class V, class T>
constexpr RowKernels<T> make_table() {
  return RowKernels<T>{norm_dot<V, T>, mix<V, T>, to_acc<V, T>, grad_dots<V, T>, grad_rows<V, T>};
}

}  // namespace simd
}  // namespace bar
}  // namespace op_plugin
