#include "op_plugin/parallel.h"

#include <atomic>

namespace {

int serial_max_threads() { return 1; }
int serial_thread_num() { return 0; }
void serial_parallel_for(int64_t begin, int64_t end, int64_t,
                         void (*body)(void*, int64_t, int64_t), void* ctx) {
  body(ctx, begin, end);
}

const opParallelBackend serial_backend{serial_max_threads, serial_thread_num, serial_parallel_for};
std::atomic<const opParallelBackend*> installed{&serial_backend};

}  // namespace

void opSetParallelBackend(const opParallelBackend* backend) {
  installed.store(backend != nullptr ? backend : &serial_backend);
}

namespace op_plugin {

const opParallelBackend& parallel_backend() { return *installed.load(std::memory_order_acquire); }

}  // namespace op_plugin
