#include "remote/write_queue.hpp"

#include <exception>

namespace kvcache::remote {
namespace {
constexpr std::size_t kBatchPages = 32;  // pages per probe and put: one round trip each
}

WriteQueue::WriteQueue(ByteStore& store, Breaker& breaker, std::uint64_t capacity_bytes,
                       WriteCounters& counters)
    : store_(store),
      breaker_(breaker),
      capacity_(capacity_bytes),
      counters_(counters),
      thread_([this] { run(); }) {}

WriteQueue::~WriteQueue() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  counters_.dropped += pages_.size();
}

bool WriteQueue::push(std::string key, Value value) {
  {
    std::lock_guard lock(mutex_);
    if (bytes_ + value.size() > capacity_) {
      ++counters_.dropped;
      return false;
    }
    bytes_ += value.size();
    ++pushed_;
    ++counters_.queued;
    pages_.emplace_back(std::move(key), std::move(value));
  }
  wake_.notify_one();
  return true;
}

bool WriteQueue::flush(std::chrono::milliseconds deadline) {
  std::unique_lock lock(mutex_);
  const std::uint64_t target = pushed_;
  return done_.wait_for(lock, deadline, [&] { return finished_ >= target; });
}

void WriteQueue::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !pages_.empty(); });
    if (stop_) return;
    std::deque<std::pair<std::string, Value>> batch;
    std::uint64_t bytes = 0;
    while (!pages_.empty() && batch.size() < kBatchPages) {
      bytes += pages_.front().second.size();
      batch.push_back(std::move(pages_.front()));
      pages_.pop_front();
    }
    lock.unlock();
    send(batch);
    lock.lock();
    bytes_ -= bytes;
    finished_ += batch.size();
    done_.notify_all();
  }
}

void WriteQueue::send(std::deque<std::pair<std::string, Value>>& batch) {
  if (!breaker_.allow()) {
    counters_.skipped += 1;
    counters_.dropped += batch.size();
    return;
  }
  try {
    std::vector<std::string> keys;
    for (const auto& page : batch) keys.push_back(page.first);
    const std::vector<bool> held = store_.probe(keys);
    std::vector<std::string> absent;
    std::vector<Value> values;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (i < held.size() && held[i]) {
        ++counters_.present;
        continue;
      }
      absent.push_back(std::move(batch[i].first));
      values.push_back(std::move(batch[i].second));
    }
    const std::vector<bool> stored =
        absent.empty() ? std::vector<bool>{} : store_.put_if_absent(absent, values);
    breaker_.success();
    for (std::size_t i = 0; i < absent.size(); ++i) {
      if (i < stored.size() && stored[i]) {
        ++counters_.written;
        counters_.bytes += values[i].size();
      } else {
        ++counters_.present;  // another writer's value came first
      }
    }
  } catch (const std::exception&) {
    ++counters_.failures;
    counters_.dropped += batch.size();
    breaker_.failure();
  }
}

}  // namespace kvcache::remote
