// Threading for the kernels. The kernel library owns no threads: the host (the torch binding)
// installs its pool once with opSetParallelBackend, so torch.set_num_threads is obeyed.
#pragma once
#include <atomic>
#include <cstdint>

struct opParallelBackend {
  int (*max_threads)();  // threads a parallel_for may use
  int (*thread_num)();   // index of the calling thread inside a parallel region, [0, max_threads)
  // Calls body(ctx, b, e) on disjoint chunks covering [begin, end); chunks are at least
  // `grain` long except the last.
  void (*parallel_for)(int64_t begin, int64_t end, int64_t grain,
                       void (*body)(void* ctx, int64_t begin, int64_t end), void* ctx);
};

// nullptr restores the built-in serial backend.
extern "C" void opSetParallelBackend(const opParallelBackend* backend);

namespace op_plugin {

const opParallelBackend& parallel_backend();
inline int max_threads() { return parallel_backend().max_threads(); }
inline int thread_num() { return parallel_backend().thread_num(); }

// Runs f(begin, end) over chunks of [begin, end). Results must not depend on how the range is
// chunked: that is what keeps every kernel bitwise identical for any thread count.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  if (begin >= end) return;
  if (grain < 1) grain = 1;
  if (end - begin <= grain || max_threads() <= 1) {
    f(begin, end);
    return;
  }
  parallel_backend().parallel_for(
      begin, end, grain,
      [](void* ctx, int64_t b, int64_t e) { (*static_cast<const F*>(ctx))(b, e); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

// parallel_for whose threads claim chunks of `grain` in order from a shared counter, for loops of
// few, long chunks: a static split makes every call wait for its slowest thread, and a core that
// runs slower (another process on it, a busy hyperthread sibling on a shared host) would then hold
// up the whole call. The same contract: results must not depend on which thread runs a chunk.
template <class F>
void parallel_for_dynamic(int64_t begin, int64_t end, int64_t grain, const F& f) {
  if (begin >= end) return;
  if (grain < 1) grain = 1;
  const int64_t chunks = (end - begin + grain - 1) / grain;
  const int64_t workers = chunks < max_threads() ? chunks : max_threads();
  if (workers <= 1) {
    f(begin, end);
    return;
  }
  std::atomic<int64_t> next{0};
  parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t b = begin + c * grain;
      f(b, end - b < grain ? end : b + grain);
    }
  });
}

}  // namespace op_plugin
