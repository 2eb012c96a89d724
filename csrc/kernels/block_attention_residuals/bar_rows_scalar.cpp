// Portable scalar row kernels (baseline flags) and the run-time choice of the row-kernel table.
// The math of each kernel is stated in bar_rows.h; the ISA variants follow the same summation
// order per lane, so the scalar code is the readable reference.
#include "bar_rows.h"

namespace op_plugin {
namespace bar {
namespace scalar {
namespace {

template <class T>
acc_t<T> load(const T* p) {
  return static_cast<acc_t<T>>(to_float(*p));
}

template <class T>
void norm_dot(const T* x, const acc_t<T>* sw, int64_t H, acc_t<T>* sumsq, acc_t<T>* dot) {
  using A = acc_t<T>;
  A s = 0, d = 0;
  for (int64_t h = 0; h < H; ++h) {
    const A v = load(x + h);
    s += v * v;
    d += v * sw[h];
  }
  *sumsq = s;
  *dot = d;
}

template <class T>
void mix(const MixArgs<T>& args) {
  using A = acc_t<T>;
  const RowSet<T>& v = args.v;
  for (int64_t h = 0; h < v.H; ++h) {
    A acc = 0;
    for (int64_t i = 0; i <= v.n; ++i) acc += args.p[i] * load(v.row(i) + h);
    args.out[h] = from_double<T>(acc);
  }
}

template <class T>
void grad_dots(const T* x, const T* gh, const acc_t<T>* sw, int64_t H, acc_t<T>* g,
               acc_t<T>* d) {
  using A = acc_t<T>;
  A sg = 0, sd = 0;
  for (int64_t h = 0; h < H; ++h) {
    const A v = load(x + h);
    sg += load(gh + h) * v;
    sd += sw[h] * v;
  }
  *g = sg;
  *d = sd;
}

template <class T>
void grad_mix(const GradMixArgs<T>& args) {
  using A = acc_t<T>;
  const RowSet<T>& v = args.v;
  for (int64_t h = 0; h < v.H; ++h) {
    const A gh = load(args.gh + h);
    const A sw = args.sw[h];
    A acc = 0;
    for (int64_t i = 0; i <= v.n; ++i) {
      const A x = load(v.row(i) + h);
      T* out = i < v.n ? args.grad_blocks + i * v.H : args.grad_partial;
      out[h] = from_double<T>(args.a[i] * gh + args.b[i] * sw + args.c[i] * x);
      acc += args.b[i] * x;
    }
    args.gsw[h] += acc;
  }
}

}  // namespace

template <class T>
const RowKernels<T>& table() {
  static const RowKernels<T> kTable{norm_dot<T>, mix<T>, grad_dots<T>, grad_mix<T>};
  return kTable;
}

template const RowKernels<float>& table<float>();
template const RowKernels<double>& table<double>();
template const RowKernels<Half>& table<Half>();
template const RowKernels<BFloat16>& table<BFloat16>();

}  // namespace scalar

namespace {

template <class T>
const RowKernels<T>& simd_table(Isa isa, const RowKernels<T>& k512, const RowKernels<T>& k2) {
  if (static_cast<int>(isa) >= static_cast<int>(Isa::kAvx512)) return k512;
  if (static_cast<int>(isa) >= static_cast<int>(Isa::kAvx2)) return k2;
  return scalar::table<T>();
}

}  // namespace

template <>
const RowKernels<float>& row_kernels<float>(Isa isa) {
  return simd_table(isa, avx512::kFloat, avx2::kFloat);
}
template <>
const RowKernels<Half>& row_kernels<Half>(Isa isa) {
  return simd_table(isa, avx512::kHalf, avx2::kHalf);
}
template <>
const RowKernels<BFloat16>& row_kernels<BFloat16>(Isa isa) {
  return simd_table(isa, avx512::kBFloat16, avx2::kBFloat16);
}
template <>
const RowKernels<double>& row_kernels<double>(Isa) {
  return scalar::table<double>();
}

}  // namespace bar
}  // namespace op_plugin
