// Threading for the kernels. The kernel library owns no threads: the host (the torch binding)
// installs its pool once with opSetParallelBackend, so torch.set_num_threads is obeyed.
#pragma once
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

}  // namespace op_plugin
