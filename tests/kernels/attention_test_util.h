// Shared harness of the attention kernel tests (torch-free): EXPECT counters, a std::thread
// parallel backend whose thread count the test sets (g_threads), and contiguous test tensors.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
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

// b as a view with padded rows: its last dimension pad elements short of the next row's start,
// the padding NaN (as the attention ops' strided: q, k, v may be).
static Buf padded_rows(const Buf& b, int64_t pad) {
  const int nd = b.t.ndim;
  const int64_t last = b.t.shape[nd - 1], rows = last ? op_plugin::numel(b.t) / last : 0;
  const int64_t es = op_plugin::dtype_size(b.t.dtype);
  Buf p;
  p.t = b.t;
  p.bytes.assign(static_cast<size_t>(rows * (last + pad) * es) + 64, 0xff);
  p.t.data = p.bytes.data();
  p.t.strides[nd - 1] = 1;
  for (int d = nd - 2; d >= 0; --d) p.t.strides[d] = d == nd - 2 ? last + pad : p.t.strides[d + 1] * p.t.shape[d + 1];
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(p.bytes.data() + r * (last + pad) * es, static_cast<const unsigned char*>(b.t.data) + r * last * es,
                static_cast<size_t>(last * es));
  return p;
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
// Every element of b as a double (get's values), for references that read rows through pointers
// (get's dtype switch per element was most of the kernel tests' time).
static std::vector<double> as_double(const Buf& b) {
  std::vector<double> d(static_cast<size_t>(op_plugin::numel(b.t)));
  for (size_t t = 0; t < d.size(); ++t) d[t] = get(b, static_cast<int64_t>(t));
  return d;
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
    case OP_DT_FLOAT: return 4e-6;
    case OP_DT_FLOAT16: return 4e-3;
    default: return 2.5e-2;
  }
}

// ---- random valid calls (property-based cases beside the hand-picked ones) -------------------
// OP_PLUGIN_KERNEL_TEST_RANDOM sets how many a test draws (default 16), OP_PLUGIN_KERNEL_TEST_SEED
// the seed (default 1; the test prints it, to replay a failure).
struct RandomDraw {
  std::mt19937_64 rng;
  int count;
  uint64_t seed;
  RandomDraw() {
    const char* count_env = std::getenv("OP_PLUGIN_KERNEL_TEST_RANDOM");
    const char* seed_env = std::getenv("OP_PLUGIN_KERNEL_TEST_SEED");
    count = count_env ? std::atoi(count_env) : 16;
    seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : 1;
    rng.seed(seed);
    std::printf("random cases: %d, seed %llu\n", count, static_cast<unsigned long long>(seed));
  }
  int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
  bool one_in(int64_t n) { return pick(0, n - 1) == 0; }
  // A sequence length: uniform, or at and around the engines' tile edges (vector blocks of 64
  // query rows and 96 keys, AMX strips of 32 rows, decode sizes).
  int64_t length() {
    static const int64_t edges[] = {1, 2, 4, 5, 31, 32, 33, 63, 64, 65, 95, 96, 97, 128, 129, 191, 192, 193};
    return one_in(3) ? pick(1, 200) : edges[pick(0, static_cast<int64_t>(sizeof edges / sizeof edges[0]) - 1)];
  }
  // A key count: as length(), but never 1. Rows that all see one key have P = 1 and dS = 0, so dK
  // is exactly 0, and the float rounding of dP - Delta summed over the rows has nothing to be
  // compared with (a rounding artefact of the comparison's scale, found at S2 = 1, not a bug).
  int64_t key_length() {
    const int64_t n = length();
    return n == 1 ? 2 : n;
  }
  // A head dim, and a value head dim at most that.
  int64_t head_dim() {
    static const int64_t dims[] = {1, 7, 16, 32, 40, 64, 128};
    return dims[pick(0, 6)];
  }
  int64_t value_dim(int64_t D) { return one_in(2) ? D : pick(1, D); }
  // TND per-sequence lengths of a batch of 1-4: some sequences empty, never all of them (T > 0).
  std::vector<int64_t> tnd_lengths(int64_t B, bool keys) {
    std::vector<int64_t> l;
    for (int64_t b = 0; b < B; ++b) l.push_back(one_in(6) ? 0 : keys ? key_length() : length());
    if (std::accumulate(l.begin(), l.end(), int64_t(0)) == 0) l[0] = keys ? key_length() : length();
    return l;
  }
  // seqused of a sequence of n rows (keys: 0 or at least 2).
  int64_t used(int64_t n, bool keys) {
    const int64_t u = pick(0, n);
    return keys && u == 1 ? 0 : u;
  }
};

// Runs each random case in float and bf16, and in float16 / float64 every fourth case, checking
// 1 vs 2 threads bitwise every third: run(case, dtype, check_threads).
template <class Case, class Run>
static void run_random_cases(const std::vector<Case>& cs, Run run) {
  const opDataType dts[] = {OP_DT_FLOAT, OP_DT_BF16, OP_DT_FLOAT16, OP_DT_DOUBLE};
  for (size_t i = 0; i < cs.size(); ++i)
    for (opDataType dt : dts)
      if ((dt != OP_DT_FLOAT16 && dt != OP_DT_DOUBLE) || i % 4 == 0) run(cs[i], dt, i % 3 == 0);
}
