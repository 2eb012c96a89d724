// Storage types of the kernels and their scalar conversions to and from float (torch-free).
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
// one of them (an AVX-512 body could then run on a baseline path). Vector code converts with
// its own ISA's instructions (csrc/kernels/common/simd.h).
inline float to_float(Half x) {
  // Exact conversion of every binary16 value (normals, subnormals, inf, nan).
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16;
  uint32_t exponent = (x.bits >> 10) & 0x1fu;
  uint32_t mantissa = x.bits & 0x3ffu;
  uint32_t u;
  if (exponent == 0x1f) {
    u = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    u = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    u = sign;
  } else {
    exponent = 113;
    while ((mantissa & 0x400u) == 0) { mantissa <<= 1; --exponent; }
    u = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline BFloat16 to_bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(u >> 16)};
}

inline Half to_half(float f) {  // round to nearest even, as F16C and torch do
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return Half{static_cast<uint16_t>(sign | 0x7e00u)};       // nan
  if (abs >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};      // overflow -> inf
  if (abs < 0x38800000u) {                                                          // subnormal or 0
    if (abs < 0x33000000u) return Half{sign};
    // value = mantissa * 2^(exponent - 150); the half subnormal unit is 2^-24.
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;
    uint32_t q = mantissa >> shift;
    const uint32_t rem = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return Half{static_cast<uint16_t>(sign | q)};
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  return Half{static_cast<uint16_t>(sign | r)};
}

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
