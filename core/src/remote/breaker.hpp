// A circuit breaker for a transport: after `failures` failed calls in a row it opens, and every
// call is skipped (a miss, a dropped write) for `open_for`; then one call may try again, and a
// success closes it. So a dead store costs one timeout per open period, not one per call.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

namespace kvcache::remote {

class Breaker {
 public:
  using Clock = std::chrono::steady_clock;
  Breaker(std::uint32_t failures, std::chrono::milliseconds open_for)
      : limit_(failures == 0 ? 1 : failures), open_for_(open_for) {}

  bool allow() {
    std::lock_guard lock(mutex_);
    if (failures_ < limit_) return true;
    if (Clock::now() < open_until_) return false;
    open_until_ = Clock::now() + open_for_;  // one try per period while it stays broken
    return true;
  }
  void success() {
    std::lock_guard lock(mutex_);
    failures_ = 0;
  }
  void failure() {
    std::lock_guard lock(mutex_);
    if (++failures_ >= limit_) open_until_ = Clock::now() + open_for_;
  }

 private:
  std::mutex mutex_;
  std::uint32_t limit_;
  std::chrono::milliseconds open_for_;
  std::uint32_t failures_ = 0;
  Clock::time_point open_until_{};
};

}  // namespace kvcache::remote
