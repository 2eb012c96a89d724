// The vector row kernels, written once over an ISA traits class V and included only by the ISA
// sources (bar_rows.avx2.cpp, bar_rows.avx512.cpp). Every template here takes V, which each ISA
// source defines in its own namespace, so no instantiation can be shared between translation
// units compiled with different flags. No standard-library code is used here for the same reason.
//
// V provides:  Reg (kLanes floats), kLanes, kTile (registers per tile, see below),
//   zero(), set1(float), add, mul, fmadd(a, b, c) = a * b + c, hsum(Reg) -> float,
//   load(const T*) -> Reg and store<kStream>(T*, Reg) for T in {float, Half, BFloat16},
//   load1(const T*) -> float and store1(T*, float) for the scalar tails,
//   aligned_for_stream(const T*) and fence() for non-temporal stores.
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

// First pass of the backward, one row:  g = sum_h gh * x ;  d = sum_h sw * x.
template <class V, class T>
void grad_dots(const T* x, const T* gh, const float* sw, int64_t H, float* g, float* d) {
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
    sg += V::load1(gh + h) * v;
    sd += sw[h] * v;
  }
  *g = sg;
  *d = sd;
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
  if (args.stream && V::aligned_for_stream(args.out))
    mix_impl<V, true>(args);
  else
    mix_impl<V, false>(args);
}

// Second pass of the backward, for i = 0..n:
//   gv[i][h] = a[i] * gh[h] + b[i] * sw[h] + c[i] * v[i][h] ;  gsw[h] += sum_i b[i] * v[i][h].
// A tile keeps gh, sw and the gsw sum in registers (3 * kTile registers) while i runs over the
// rows; every v row is read once per tile (from L2) and every gv row written once.
template <class V, bool kStream, class T>
void grad_mix_impl(const GradMixArgs<T>& args) {
  using Reg = typename V::Reg;
  constexpr int64_t L = V::kLanes;
  constexpr int K = V::kTile;
  const RowSet<T>& v = args.v;
  const int64_t H = v.H, n = v.n;
  int64_t h = 0;
  for (; h + K * L <= H; h += K * L) {
    Reg gh[K], sw[K], acc[K];
    for (int k = 0; k < K; ++k) {
      gh[k] = V::load(args.gh + h + k * L);
      sw[k] = V::load(args.sw + h + k * L);
      acc[k] = V::zero();
    }
    for (int64_t i = 0; i <= n; ++i) {
      const T* row = (i < n ? v.blocks + i * H : v.partial) + h;
      T* out = (i < n ? args.grad_blocks + i * H : args.grad_partial) + h;
      const Reg a = V::set1(args.a[i]), b = V::set1(args.b[i]), c = V::set1(args.c[i]);
      for (int k = 0; k < K; ++k) {
        const Reg x = V::load(row + k * L);
        const Reg y = V::fmadd(c, x, V::fmadd(b, sw[k], V::mul(a, gh[k])));
        V::template store<kStream>(out + k * L, y);
        acc[k] = V::fmadd(b, x, acc[k]);
      }
    }
    for (int k = 0; k < K; ++k) {
      float* g = args.gsw + h + k * L;
      V::template store<false>(g, V::add(V::load(g), acc[k]));
    }
  }
  for (; h + L <= H; h += L) {
    const Reg gh = V::load(args.gh + h), sw = V::load(args.sw + h);
    Reg acc = V::zero();
    for (int64_t i = 0; i <= n; ++i) {
      const T* row = (i < n ? v.blocks + i * H : v.partial) + h;
      T* out = (i < n ? args.grad_blocks + i * H : args.grad_partial) + h;
      const Reg a = V::set1(args.a[i]), b = V::set1(args.b[i]), c = V::set1(args.c[i]);
      const Reg x = V::load(row);
      V::template store<kStream>(out, V::fmadd(c, x, V::fmadd(b, sw, V::mul(a, gh))));
      acc = V::fmadd(b, x, acc);
    }
    float* g = args.gsw + h;
    V::template store<false>(g, V::add(V::load(g), acc));
  }
  for (; h < H; ++h) {  // scalar tail
    const float gh = V::load1(args.gh + h), sw = args.sw[h];
    float acc = 0.0f;
    for (int64_t i = 0; i <= n; ++i) {
      const T* row = i < n ? v.blocks + i * H : v.partial;
      T* out = i < n ? args.grad_blocks + i * H : args.grad_partial;
      const float x = V::load1(row + h);
      V::store1(out + h, args.a[i] * gh + args.b[i] * sw + args.c[i] * x);
      acc += args.b[i] * x;
    }
    args.gsw[h] += acc;
  }
  if (kStream) V::fence();
}

template <class V, class T>
void grad_mix(const GradMixArgs<T>& args) {
  // Streaming needs every output row aligned: both row bases, and a row length that keeps it.
  const bool aligned = V::aligned_for_stream(args.grad_partial) &&
                       (args.v.n == 0 || (V::aligned_for_stream(args.grad_blocks) &&
                                          V::aligned_for_stream(args.grad_blocks + args.v.H)));
  if (args.stream && aligned)
    grad_mix_impl<V, true>(args);
  else
    grad_mix_impl<V, false>(args);
}

// The table of one ISA for storage type T.
template <class V, class T>
constexpr RowKernels<T> make_table() {
  return RowKernels<T>{norm_dot<V, T>, mix<V, T>, grad_dots<V, T>, grad_mix<V, T>};
}

}  // namespace simd
}  // namespace bar
}  // namespace op_plugin
