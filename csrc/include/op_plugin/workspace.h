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

template <class T>
T* workspace_at(void* workspace, uint64_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(workspace) + offset);
}

}  // namespace op_plugin
