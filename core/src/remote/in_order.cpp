#include "remote/in_order.hpp"

#include <utility>

namespace kvcache::remote {

InOrder::InOrder(std::size_t count, Consume consume)
    : count_(count), consume_(std::move(consume)) {}

void InOrder::take(std::size_t index, std::span<const std::byte> value) {
  if (stopped_ || index < passed_ || index >= count_) return;
  if (index > passed_) {
    early_.try_emplace(index, value.begin(), value.end());
    return;
  }
  if (!pass(value)) return;
  for (auto at = early_.find(passed_); at != early_.end(); at = early_.find(passed_)) {
    const std::vector<std::byte> waiting = std::move(at->second);
    early_.erase(at);
    if (!pass(waiting)) return;
  }
}

bool InOrder::pass(std::span<const std::byte> value) {
  if (!consume_(value)) {
    stopped_ = true;
    early_.clear();
    return false;
  }
  ++passed_;
  return true;
}

}  // namespace kvcache::remote
