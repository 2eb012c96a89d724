// Helpers shared by the flash attention engine's loops (torch-free, one copy per ISA TU):
// output stores in every dtype, lse access, operand packing, scratch carving, the task runner.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/simd.h"
#include "kernels/flash_attention/flash_attention_plan.h"
#include "op_plugin/parallel.h"

namespace op_plugin {
namespace OP_ISA_NS {
namespace fa {

using flash::FlashAttnBwdParams;
using flash::FlashAttnFwdParams;
using flash::kBlockKV;
using flash::kBlockQ;
using flash::pad16;
using flash::Plan;
using flash::RowWindow;
using flash::Task;
using flash::align_workspace;
using flash::pad32;

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

// Output element kinds.
enum Out : int { kOutF32 = 0, kOutF64 = 1, kOutBf16 = 2, kOutF16 = 3 };

// `stream` (the AMX paths, which fence): bf16 rows of whole cache lines stream (store_bf16_row).
template <class S, bool kNativeBf16>
inline void store_row(int out_kind, const S* src, void* dst, int64_t n, S scale, float* tmp, bool stream = false) {
#if defined(OP_AVX512_BF16)
  if constexpr (std::is_same_v<S, float> && kNativeBf16) {
    if (out_kind == kOutBf16) {
      store_bf16_row(src, static_cast<uint16_t*>(dst), n, scale, stream);
      return;
    }
  }
#endif
  (void)stream;
  if (out_kind == kOutF64) {
    double* d = static_cast<double*>(dst);
    for (int64_t c = 0; c < n; ++c) d[c] = static_cast<double>(src[c]) * static_cast<double>(scale);
    return;
  }
  if (out_kind == kOutF32) {
    float* d = static_cast<float*>(dst);
    for (int64_t c = 0; c < n; ++c) d[c] = static_cast<float>(src[c] * scale);
    return;
  }
  for (int64_t c = 0; c < n; ++c) tmp[c] = static_cast<float>(src[c] * scale);
  if (out_kind == kOutBf16)
    cvt_f32_to_bf16<kNativeBf16>(tmp, static_cast<uint16_t*>(dst), n);
  else
    cvt_f32_to_f16(tmp, static_cast<uint16_t*>(dst), n);
}

inline void zero_row(int out_kind, void* dst, int64_t n) {
  const int64_t bytes = out_kind == kOutF64 ? 8 : out_kind == kOutF32 ? 4 : 2;
  std::memset(dst, 0, static_cast<size_t>(n * bytes));
}

inline int64_t out_elem_bytes(int out_kind) { return out_kind == kOutF64 ? 8 : out_kind == kOutF32 ? 4 : 2; }

// lse element access (float or double tensor).
struct LseRef {
  void* base;
  bool f64;
  double get(int64_t idx) const {
    return f64 ? static_cast<const double*>(base)[idx] : static_cast<double>(static_cast<const float*>(base)[idx]);
  }
  void set(int64_t idx, double v) const {
    if (f64)
      static_cast<double*>(base)[idx] = v;
    else
      static_cast<float*>(base)[idx] = static_cast<float>(v);
  }
};

// Packs rows [0, rows) x cols [0, n) of a row-major operand (row stride ld) transposed into
// dst[(c / KP) * ldd + r * KP + c % KP] (fp32: dst[c][r]; bf16: 32-bit pairs of c), zero for
// rows >= rows up to `rows_pad` and for the odd pair tail.
template <class T, int KP>
inline void pack_transposed(const T* src, int64_t ld, int64_t rows, int64_t rows_pad, int64_t n, T* dst,
                            int64_t ldd) {
  const int64_t npairs = (n + KP - 1) / KP;
  if (KP == 1) {
    // fp32 / fp64: blocks of 8 rows keep the source rows in cache while columns are written.
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
      const int64_t r1 = imin(rows, r0 + 8);
      for (int64_t c = 0; c < n; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * ld + c];
    }
    for (int64_t c = 0; c < n; ++c)
      for (int64_t r = rows; r < rows_pad; ++r) dst[c * ldd + r] = T(0);
  } else {
    // bf16 pairs: a 32-bit transpose of the [rows][n/2] view.
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
      const int64_t r1 = imin(rows, r0 + 8);
      for (int64_t cp = 0; cp < npairs; ++cp)
        for (int64_t r = r0; r < r1; ++r) {
          const T* s = src + r * ld + cp * 2;
          T* d = dst + cp * ldd + r * 2;
          d[0] = s[0];
          d[1] = (cp * 2 + 1 < n) ? s[1] : T(0);
        }
    }
    for (int64_t cp = 0; cp < npairs; ++cp)
      for (int64_t r = rows; r < rows_pad; ++r) {
        dst[cp * ldd + r * 2] = T(0);
        dst[cp * ldd + r * 2 + 1] = T(0);
      }
  }
}

// Packs rows [0, rows) of a row-major bf16 operand into row pairs: dst[(r/2) * 2*ldd + 2c + r%2],
// c < n; a missing odd last row is zero; pair rows up to rows_pad/2 are zero.
inline void pack_row_pairs(const uint16_t* src, int64_t ld, int64_t rows, int64_t rows_pad, int64_t n,
                           uint16_t* dst, int64_t ldd) {
  int64_t r = 0;
  for (; r + 1 < rows; r += 2) interleave_u16(src + r * ld, src + (r + 1) * ld, dst + (r / 2) * 2 * ldd, n);
  if (r < rows) {
    interleave_u16(src + r * ld, nullptr, dst + (r / 2) * 2 * ldd, n);
    r += 2;
  }
  for (; r < rows_pad; r += 2) std::memset(dst + (r / 2) * 2 * ldd, 0, static_cast<size_t>(2 * n) * 2);
}

// Bump allocator over one slot of the workspace.
struct Carve {
  char* p;
  template <class X>
  X* take(int64_t count) {
    X* r = reinterpret_cast<X*>(p);
    p += (static_cast<int64_t>(sizeof(X)) * count + 63) / 64 * 64;
    return r;
  }
};

// The wave slot of (b, kv head h) in the AMX dataflow's packed operands (Plan::amx_wave_kv).
inline int64_t amx_kv_slot(const FlashAttnFwdParams& p, const Plan& plan, int64_t b, int64_t h) {
  return (b * p.heads_kv + h) % plan.amx_wave_kv;
}

// Runs body(item, slot_base) over items [begin, end) in order, from a shared counter, on up to
// plan.slots threads, each with its slot of scratch: the schedule varies with the thread count, the
// arithmetic of an item does not.
template <class Body>
inline void run_items(const Plan& plan, void* workspace, int64_t begin, int64_t end, const Body& body) {
  int64_t next = begin;
  int64_t* counter = &next;
  const int64_t slots = imin(plan.slots, end - begin);
  op_plugin::parallel_for(0, slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      char* base = static_cast<char*>(workspace) + plan.slot_offset + static_cast<uint64_t>(s) * plan.slot_bytes;
      for (;;) {
        const int64_t t = __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
        if (t >= end) break;
        body(t, base);
      }
    }
  });
}
// Runs body(task, slot_base) over the plan's tasks [begin, end) (all of them by default), in
// their order (longest first).
template <class Body>
inline void run_tasks(const Plan& plan, void* workspace, const Body& body, int64_t begin = 0, int64_t end = -1) {
  if (end < 0) end = plan.num_tasks;
  run_items(plan, workspace, begin, end, [&](int64_t t, char* slot) { body(plan.tasks[t], slot); });
}

// Runs the AMX dataflow's waves: for each, stage(wave) packs its operands, then its tasks run.
template <class Stage, class Body>
inline void run_waves(const Plan& plan, void* workspace, const Stage& stage, const Body& body) {
  for (int64_t wave = 0; wave < plan.num_waves; ++wave) {
    stage(wave);
    run_tasks(plan, workspace, body, plan.wave_task0[wave], plan.wave_task0[wave + 1]);
  }
}

// Whether swa's full mask sets every key of query row i's window (the row then has no key).
inline bool window_fully_masked(const FlashAttnFwdParams& p, int64_t b, int64_t n, int64_t i, const RowWindow& w) {
  if (p.full_mask == nullptr) return false;
  const uint8_t* row =
      p.full_mask + b * p.full_mask_batch_stride + n * p.full_mask_head_stride + i * p.full_mask_row_stride;
  for (int64_t j = w.lo(i); j <= w.hi(i); ++j)
    if (row[j] == 0) return false;
  return true;
}

// Forward epilogue of query rows i0 .. i0 + rows - 1 of head n, batch b: out = O / l (O row i at
// acc + i * ld_acc), lse = (m + log2 l) ln 2 (m, l in log2 units); rows without keys: out 0,
// lse +inf. swa statistics: max = m ln 2, sum = l (8 copies); rows with no key: out 0, max
// -FLT_MAX, sum FLT_MAX (SPEC §2.3). With a sink such a row ends with m = sink, l = 1, and so does
// a row whose keys all weigh under float's epsilon against the sink: the full mask tells them
// apart (found by the kernel tests' random cases: one key 15 below the sink).
template <class S, bool kNativeBf16>
inline void finalize_rows(const FlashAttnFwdParams& p, int out_kind, int64_t b, int64_t n, int64_t i0, int64_t rows,
                          const RowWindow& w, bool sink, S m0, const S* m, const S* l, const S* acc, int64_t ld_acc,
                          float* tmp, bool stream = false) {
  const int64_t Dv = p.head_dim_v;
  const int64_t ob = out_elem_bytes(out_kind);
  char* out = static_cast<char*>(p.out) +
              (b * p.o_batch_stride + (p.q_start[b] + i0) * p.o_row_stride + n * p.o_head_stride) * ob;
  LseRef lse{p.lse, p.lse_dtype == OP_DT_DOUBLE};
  LseRef ssum{p.softmax_sum, p.lse_dtype == OP_DT_DOUBLE};
  const bool stats = p.softmax_sum != nullptr;
  const int64_t lse_base = b * p.lse_batch_stride + n * p.lse_head_stride + (p.q_start[b] + i0) * p.lse_row_stride;
  for (int64_t i = 0; i < rows; ++i) {
    void* orow = out + i * p.o_row_stride * ob;
    // NaN is not empty: it propagates
    const bool empty = w.lo(i0 + i) > w.hi(i0 + i) || l[i] == S(0) ||
                       (stats && sink && m[i] == m0 && l[i] == S(1) && window_fully_masked(p, b, n, i0 + i, w));
    const int64_t li = lse_base + i * p.lse_row_stride;
    if (stats) {
      const double mx = empty ? -FLT_MAX : static_cast<double>(m[i]) * kLn2;
      const double sm = empty ? FLT_MAX : static_cast<double>(l[i]);
      for (int r = 0; r < 8; ++r) {
        lse.set(li + r, mx);
        ssum.set(li + r, sm);
      }
    }
    if (empty) {
      zero_row(out_kind, orow, Dv);
      if (p.lse && !stats) lse.set(li, INFINITY);
      continue;
    }
    store_row<S, kNativeBf16>(out_kind, acc + i * ld_acc, orow, Dv, S(1) / l[i], tmp, stream);
    if (p.lse && !stats) lse.set(li, (static_cast<double>(m[i]) + std::log2(static_cast<double>(l[i]))) * kLn2);
  }
}

inline int out_kind_of(opDataType dt) {
  switch (dt) {
    case OP_DT_DOUBLE: return kOutF64;
    case OP_DT_BF16: return kOutBf16;
    case OP_DT_FLOAT16: return kOutF16;
    default: return kOutF32;
  }
}

}  // namespace fa
}  // namespace OP_ISA_NS
}  // namespace op_plugin
