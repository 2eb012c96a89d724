// Workspace layout: stage 1 reserves named regions, stage 2 finds them at the same offsets.
#pragma once
#include <cstdint>

namespace op_plugin {

class WorkspaceLayout {
 public:
  static constexpr uint64_t kAlignment = 64;  // one cache line; also AVX-512 aligned

  // Reserves `bytes` and returns the region's offset from the workspace base.
  uint64_t reserve(uint64_t bytes) {
    const uint64_t offset = size_;
    size_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
    return offset;
  }
  uint64_t size() const { return size_; }

 private:
  uint64_t size_ = 0;
};

// The workspace base rounded up to a cache line (stage 1 reserves kAlignment bytes more): every
// region of the layout is then 64-byte aligned whatever the caller's allocator gives (malloc
// gives 16). Tile loads of rows that straddle cache lines run at half speed, and streaming
// (non-temporal) stores need aligned addresses. Stage 2 finds every offset from it.
inline void* align_workspace(void* ws) {
  constexpr uintptr_t kLine = WorkspaceLayout::kAlignment;
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws) + kLine - 1) & ~(kLine - 1));
}

template <class T>
T* workspace_at(void* workspace, uint64_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(workspace) + offset);
}

}  // namespace op_plugin
