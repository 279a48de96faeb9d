// The layout of one device staging area, planned on the host: pieces on 16-byte boundaries.
// Pieces copied from host arrays come first and go up in one upload (host()); pieces that are
// only reserved (inputs uploaded on their own, scratch the kernels write) follow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace kvcache::gpu {

class StagingLayout {
 public:
  // The offset of a copy of `v`. Copies must precede every reserve().
  template <class T>
  std::uint64_t copy(const std::vector<T>& v) {
    if (host_.size() != size_) throw std::logic_error("StagingLayout: a copy after a reserve");
    const std::uint64_t at = reserve(v.size() * sizeof(T));
    const auto* p = reinterpret_cast<const std::byte*>(v.data());
    host_.insert(host_.end(), p, p + v.size() * sizeof(T));
    host_.resize(size_);
    return at;
  }
  // The offset of `bytes` of room, a multiple of `alignment` (a power of two, at least 16).
  std::uint64_t reserve(std::uint64_t bytes, std::uint64_t alignment = 16) {
    const std::uint64_t at = (size_ + alignment - 1) / alignment * alignment;
    size_ = (at + bytes + 15) / 16 * 16;
    return at;
  }
  std::uint64_t size() const { return size_; }
  // What copy() collected: the first host().size() bytes of the area.
  const std::vector<std::byte>& host() const { return host_; }

 private:
  std::uint64_t size_ = 0;
  std::vector<std::byte> host_;
};

}  // namespace kvcache::gpu
