// The tier's writes: pages staged at publish (copies, so the step goes on) and sent by one
// background thread, skipping keys the store holds already. Bounded in bytes: a page that does
// not fit is dropped and counted, never waited for, so a slow store never slows a step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "kvcache/remote/byte_store.hpp"
#include "remote/breaker.hpp"

namespace kvcache::remote {

struct WriteCounters {
  std::atomic<std::uint64_t> queued{0}, written{0}, present{0}, dropped{0}, failures{0}, skipped{0},
      bytes{0};
};

class WriteQueue {
 public:
  WriteQueue(ByteStore& store, Breaker& breaker, std::uint64_t capacity_bytes,
             WriteCounters& counters);
  // Stops the thread; pages not sent yet are dropped (and counted).
  ~WriteQueue();
  WriteQueue(const WriteQueue&) = delete;
  WriteQueue& operator=(const WriteQueue&) = delete;

  // False when the page does not fit (dropped, counted).
  bool push(std::string key, Value value);
  // Waits until every page pushed so far is sent or dropped; false if `deadline` passed first.
  bool flush(std::chrono::milliseconds deadline);

 private:
  void run();
  void send(std::deque<std::pair<std::string, Value>>& batch);

  ByteStore& store_;
  Breaker& breaker_;
  const std::uint64_t capacity_;
  WriteCounters& counters_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<std::pair<std::string, Value>> pages_;
  std::uint64_t bytes_ = 0;     // of pages_ and the batch being sent
  std::uint64_t pushed_ = 0;    // pages accepted
  std::uint64_t finished_ = 0;  // pages sent or dropped
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace kvcache::remote
