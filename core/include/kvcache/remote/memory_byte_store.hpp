// The in-process transport: a named space of values that every Cache of the process naming the
// same space shares (as two hosts share a Redis), with faults to inject for tests: a dead, slow,
// full or lying store, and values that vanish between a probe and a get.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kvcache/export.hpp"
#include "kvcache/host_only.hpp"
#include "kvcache/remote/byte_store.hpp"

namespace kvcache::remote {

struct MemoryFaults {
  bool down = false;                  // every call throws, as a dead server's client does
  std::chrono::milliseconds delay{};  // every call takes this long first
  std::size_t capacity = SIZE_MAX;    // values held at most; a put past it evicts the oldest
  bool vanish_after_probe = false;    // a probe's hit is gone by the get (evicted in between)
  // Applied to every value a get returns (flip a byte, cut it short, forge a header).
  std::function<void(const std::string& key, Value& value)> tamper = {};
};

class KVCACHE_API MemorySpace {
 public:
  // The process's space of this name, made on first use.
  static std::shared_ptr<MemorySpace> named(const std::string& name);

  const std::string& name() const { return name_; }
  // Faults apply from the next call on.
  void set_faults(MemoryFaults faults);
  std::size_t size() const;
  std::vector<std::string> keys() const;
  // Changes a stored value in place (a corrupted or forged value at rest); false if absent.
  bool mutate(const std::string& key, const std::function<void(Value&)>& change);
  void clear();

  explicit MemorySpace(std::string name) : name_(std::move(name)) {}

 private:
  friend class MemoryByteStore;
  // The faults to apply, after the delay; throws when the store is down.
  MemoryFaults enter() const;

  std::string name_;
  mutable std::mutex mutex_;
  MemoryFaults faults_;
  std::map<std::string, Value> values_;
  std::map<std::string, std::uint64_t> age_;  // insertion order, for eviction at capacity
  std::uint64_t next_age_ = 0;
};

class KVCACHE_API MemoryByteStore final : public ByteStore {
 public:
  explicit MemoryByteStore(std::shared_ptr<MemorySpace> space) : space_(std::move(space)) {}

  std::vector<bool> probe(std::span<const std::string> keys) override;
  std::vector<std::optional<Value>> get(std::span<const std::string> keys) override;
  std::vector<bool> put_if_absent(std::span<const std::string> keys,
                                  std::span<const Value> values) override;
  void remove(std::span<const std::string> keys) override;
  std::string describe() const override { return "memory '" + space_->name() + "'"; }

 private:
  std::shared_ptr<MemorySpace> space_;
};

}  // namespace kvcache::remote
