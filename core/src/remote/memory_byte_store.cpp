#include "kvcache/remote/memory_byte_store.hpp"

#include <thread>

#include "kvcache/status.hpp"

namespace kvcache::remote {

std::shared_ptr<MemorySpace> MemorySpace::named(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<MemorySpace>> spaces;
  std::lock_guard lock(mutex);
  std::shared_ptr<MemorySpace> space = spaces[name].lock();
  if (!space) {
    space = std::make_shared<MemorySpace>(name);
    spaces[name] = space;
  }
  return space;
}

void MemorySpace::set_faults(MemoryFaults faults) {
  std::lock_guard lock(mutex_);
  faults_ = std::move(faults);
}

std::size_t MemorySpace::size() const {
  std::lock_guard lock(mutex_);
  return values_.size();
}

std::vector<std::string> MemorySpace::keys() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> keys;
  for (const auto& entry : values_) keys.push_back(entry.first);
  return keys;
}

bool MemorySpace::mutate(const std::string& key, const std::function<void(Value&)>& change) {
  std::lock_guard lock(mutex_);
  const auto it = values_.find(key);
  if (it == values_.end()) return false;
  change(it->second);
  return true;
}

void MemorySpace::clear() {
  std::lock_guard lock(mutex_);
  values_.clear();
  age_.clear();
}

MemoryFaults MemorySpace::enter() const {
  MemoryFaults faults;
  {
    std::lock_guard lock(mutex_);
    faults = faults_;
  }
  if (faults.delay.count() > 0) std::this_thread::sleep_for(faults.delay);
  if (faults.down)
    throw Error(Code::unavailable, "memory store '" + name_ + "' is down (injected)");
  return faults;
}

std::vector<bool> MemoryByteStore::probe(std::span<const std::string> keys) {
  const MemoryFaults faults = space_->enter();
  std::lock_guard lock(space_->mutex_);
  std::vector<bool> held;
  for (const std::string& key : keys) {
    held.push_back(space_->values_.contains(key));
    if (held.back() && faults.vanish_after_probe) {
      space_->values_.erase(key);
      space_->age_.erase(key);
    }
  }
  return held;
}

std::vector<std::optional<Value>> MemoryByteStore::get(std::span<const std::string> keys) {
  const MemoryFaults faults = space_->enter();
  std::vector<std::optional<Value>> out;
  {
    std::lock_guard lock(space_->mutex_);
    for (const std::string& key : keys) {
      const auto it = space_->values_.find(key);
      out.push_back(it == space_->values_.end() ? std::nullopt : std::optional(it->second));
    }
  }
  if (faults.tamper)
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (out[i]) faults.tamper(keys[i], *out[i]);
  return out;
}

std::vector<bool> MemoryByteStore::put_if_absent(std::span<const std::string> keys,
                                                 std::span<const Value> values) {
  if (keys.size() != values.size())
    throw Error(Code::invalid_argument, "put_if_absent: keys and values differ in number");
  const MemoryFaults faults = space_->enter();
  std::lock_guard lock(space_->mutex_);
  std::vector<bool> stored;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (faults.capacity == 0 || space_->values_.contains(keys[i])) {
      stored.push_back(false);
      continue;
    }
    while (space_->values_.size() >= faults.capacity) {  // evict the oldest, as an LRU server
      auto oldest = space_->age_.begin();
      for (auto it = space_->age_.begin(); it != space_->age_.end(); ++it)
        if (it->second < oldest->second) oldest = it;
      space_->values_.erase(oldest->first);
      space_->age_.erase(oldest);
    }
    space_->values_.emplace(keys[i], values[i]);
    space_->age_[keys[i]] = space_->next_age_++;
    stored.push_back(true);
  }
  return stored;
}

void MemoryByteStore::remove(std::span<const std::string> keys) {
  space_->enter();
  std::lock_guard lock(space_->mutex_);
  for (const std::string& key : keys) {
    space_->values_.erase(key);
    space_->age_.erase(key);
  }
}

}  // namespace kvcache::remote
