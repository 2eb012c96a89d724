// Storage types of the kernels and their scalar conversions to and from float (torch-free; part of
// the public kernel API, for kernel authors and C++ callers filling fp16/bf16 tensors).
// Vector conversions live next to the vector code of each ISA.
#pragma once
#include <cstdint>
#include <cstring>
#include "op_plugin/tensor.h"

namespace op_plugin {

// IEEE binary16 and bfloat16, stored as raw bits.
struct Half { uint16_t bits; };
struct BFloat16 { uint16_t bits; };

inline float to_float(float x) { return x; }
inline double to_float(double x) { return x; }

inline float to_float(BFloat16 x) {
  const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The scalar conversions are portable code only: an inline function whose body changed with
// the ISA flags of the including file would have several definitions, and the linker keeps any
// one of them. Vector code converts with its own ISA's instructions (simd.h).
#include "op_plugin/fp16_bits.inc"

inline float to_float(Half x) { return half_bits_to_float(x.bits); }

// Round to nearest even, as torch does; NaN stays NaN.
inline BFloat16 to_bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}

inline Half to_half(float f) { return Half{float_to_half_bits(f)}; }  // round to nearest even

template <class T> T from_float(float f);
template <> inline float from_float<float>(float f) { return f; }
template <> inline BFloat16 from_float<BFloat16>(float f) { return to_bfloat16(f); }
template <> inline Half from_float<Half>(float f) { return to_half(f); }
template <class T> T from_double(double f) { return from_float<T>(static_cast<float>(f)); }
template <> inline double from_double<double>(double f) { return f; }

// Accumulation type: float for the 16/32-bit types, double for double.
template <class T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };
template <class T> using acc_t = typename Acc<T>::type;

// Calls f(T{}) with the storage type of a floating dtype; returns false for other dtypes.
template <class F>
bool dispatch_floating(opDataType dtype, F&& f) {
  switch (dtype) {
    case OP_DT_FLOAT: f(float{}); return true;
    case OP_DT_DOUBLE: f(double{}); return true;
    case OP_DT_FLOAT16: f(Half{}); return true;
    case OP_DT_BF16: f(BFloat16{}); return true;
    default: return false;
  }
}

}  // namespace op_plugin
