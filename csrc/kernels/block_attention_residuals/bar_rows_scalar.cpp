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

// Dot products keep kLanes interleaved partial sums (like the vector kernels' lanes): more
// accurate than one running sum over H (each partial sees H / kLanes terms) and free of the
// loop-carried dependency; the partials are then added pairwise.
constexpr int kLanes = 8;

template <class A>
A sum_lanes(A (&s)[kLanes]) {
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) s[l] += s[l + w];
  return s[0];
}

template <class T>
void norm_dot(const T* x, const acc_t<T>* sw, int64_t H, acc_t<T>* sumsq, acc_t<T>* dot) {
  using A = acc_t<T>;
  A s[kLanes] = {}, d[kLanes] = {};
  int64_t h = 0;
  for (; h + kLanes <= H; h += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const A v = load(x + h + l);
      s[l] += v * v;
      d[l] += v * sw[h + l];
    }
  for (int l = 0; h < H; ++h, ++l) {  // tail
    const A v = load(x + h);
    s[l] += v * v;
    d[l] += v * sw[h];
  }
  *sumsq = sum_lanes(s);
  *dot = sum_lanes(d);
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
void to_acc(const T* x, int64_t H, acc_t<T>* out) {
  for (int64_t h = 0; h < H; ++h) out[h] = load(x + h);
}

template <class T>
void grad_dots(const T* x, const acc_t<T>* gh, const acc_t<T>* sw, int64_t H, acc_t<T>* g,
               acc_t<T>* d) {
  using A = acc_t<T>;
  A sg[kLanes] = {}, sd[kLanes] = {};
  int64_t h = 0;
  for (; h + kLanes <= H; h += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const A v = load(x + h + l);
      sg[l] += gh[h + l] * v;
      sd[l] += sw[h + l] * v;
    }
  for (int l = 0; h < H; ++h, ++l) {  // tail
    const A v = load(x + h);
    sg[l] += gh[h] * v;
    sd[l] += sw[h] * v;
  }
  *g = sum_lanes(sg);
  *d = sum_lanes(sd);
}

template <class T>
void grad_rows(const GradRowsArgs<T>& r) {
  using A = acc_t<T>;
  for (int64_t h = 0; h < r.H; ++h) {
    A gsw = r.gsw[h];
    for (int g = 0; g < r.rows; ++g) {
      const A x = load(r.v[g] + h);
      r.out[g][h] = from_double<T>(r.a[g] * r.gh[h] + r.b[g] * r.sw[h] + r.c[g] * x);
      gsw += r.b[g] * x;
    }
    r.gsw[h] = gsw;
  }
}

}  // namespace

template <class T>
const RowKernels<T>& table() {
  static const RowKernels<T> kTable{norm_dot<T>, mix<T>, to_acc<T>, grad_dots<T>, grad_rows<T>};
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
  if (static_cast<int>(isa) >= static_cast<int>(Isa::kAvx512Bf16)) return avx512::kBFloat16Native;
  return simd_table(isa, avx512::kBFloat16, avx2::kBFloat16);
}
template <>
const RowKernels<double>& row_kernels<double>(Isa) {
  return scalar::table<double>();
}

}  // namespace bar
}  // namespace op_plugin
