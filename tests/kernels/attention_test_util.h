// Shared harness of the attention kernel tests (torch-free): EXPECT counters, a std::thread
// parallel backend whose thread count the test sets (g_threads), and contiguous test tensors.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "kernels/common/scalar_types.h"
#include "op_plugin/op_api.h"

static int g_pass = 0, g_fail = 0;
#define EXPECT(cond, ...)                              \
  do {                                                 \
    if (cond) {                                        \
      ++g_pass;                                        \
    } else {                                           \
      ++g_fail;                                        \
      std::printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      std::printf(__VA_ARGS__);                        \
      std::printf("\n");                               \
    }                                                  \
  } while (0)

// ---- a std::thread parallel backend ---------------------------------------------------------
static int g_threads = 1;
static thread_local int t_thread_num = 0;
static int be_max_threads() { return g_threads; }
static int be_thread_num() { return t_thread_num; }
static void be_parallel_for(int64_t begin, int64_t end, int64_t grain, void (*body)(void*, int64_t, int64_t),
                            void* ctx) {
  const int64_t n = end - begin;
  int64_t chunks = std::min<int64_t>(g_threads, (n + grain - 1) / grain);
  if (chunks <= 1) { body(ctx, begin, end); return; }
  const int64_t per = (n + chunks - 1) / chunks;
  std::vector<std::thread> pool;
  for (int64_t c = 1; c < chunks; ++c) {
    const int64_t b = begin + c * per, e = std::min(end, b + per);
    if (b >= e) break;
    pool.emplace_back([=] { t_thread_num = static_cast<int>(c); body(ctx, b, e); t_thread_num = 0; });
  }
  body(ctx, begin, std::min(end, begin + per));
  for (auto& t : pool) t.join();
}
static const opParallelBackend g_backend{be_max_threads, be_thread_num, be_parallel_for};

// ---- tensors ------------------------------------------------------------------------------
struct Buf {
  std::vector<unsigned char> bytes;
  opTensor t{};
};
static Buf make_buf(opDataType dt, std::vector<int64_t> shape) {
  Buf b;
  b.t.dtype = dt;
  b.t.ndim = static_cast<int32_t>(shape.size());
  int64_t n = 1;
  for (int d = b.t.ndim - 1; d >= 0; --d) {
    b.t.shape[d] = shape[d];
    b.t.strides[d] = n;
    n *= shape[d];
  }
  b.bytes.assign(static_cast<size_t>(n * op_plugin::dtype_size(dt)) + 64, 0);
  b.t.data = b.bytes.data();
  return b;
}
static double get(const Buf& b, int64_t i) {
  using namespace op_plugin;
  switch (b.t.dtype) {
    case OP_DT_FLOAT: return static_cast<const float*>(b.t.data)[i];
    case OP_DT_DOUBLE: return static_cast<const double*>(b.t.data)[i];
    case OP_DT_BF16: return to_float(static_cast<const BFloat16*>(b.t.data)[i]);
    case OP_DT_FLOAT16: return to_float(static_cast<const Half*>(b.t.data)[i]);
    case OP_DT_INT32: return static_cast<const int32_t*>(b.t.data)[i];
    case OP_DT_UINT8: case OP_DT_BOOL: return static_cast<const uint8_t*>(b.t.data)[i];
    default: return 0;
  }
}
static void set(Buf& b, int64_t i, double v) {
  using namespace op_plugin;
  switch (b.t.dtype) {
    case OP_DT_FLOAT: static_cast<float*>(b.t.data)[i] = static_cast<float>(v); break;
    case OP_DT_DOUBLE: static_cast<double*>(b.t.data)[i] = v; break;
    case OP_DT_BF16: static_cast<BFloat16*>(b.t.data)[i] = to_bfloat16(static_cast<float>(v)); break;
    case OP_DT_FLOAT16: static_cast<Half*>(b.t.data)[i] = to_half(static_cast<float>(v)); break;
    case OP_DT_INT32: static_cast<int32_t*>(b.t.data)[i] = static_cast<int32_t>(v); break;
    case OP_DT_UINT8: case OP_DT_BOOL: static_cast<uint8_t*>(b.t.data)[i] = static_cast<uint8_t>(v); break;
    default: break;
  }
}

// Relative error tolerance of a dtype against a float64 reference.
static double tol_of(opDataType dt) {
  switch (dt) {
    case OP_DT_DOUBLE: return 1e-9;
    case OP_DT_FLOAT: return 2e-5;
    case OP_DT_FLOAT16: return 4e-3;
    default: return 2.5e-2;
  }
}
