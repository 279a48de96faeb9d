// A transport of the remote tier: a batched byte store that knows nothing of pages (keys and
// opaque values). Everything that gives the bytes meaning (keys, wire format, verification)
// stays in the tier, so a transport may be dumb, and may fail: any call may throw, and the tier
// takes every failure of a call as a miss for its reads and a drop for its writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvcache::remote {

using Value = std::vector<std::byte>;

class ByteStore {
 public:
  virtual ~ByteStore() = default;
  // Per key, whether a value is held now (a later get may still miss: values may be evicted).
  virtual std::vector<bool> probe(std::span<const std::string> keys) = 0;
  // Per key, its value, or nullopt when absent.
  virtual std::vector<std::optional<Value>> get(std::span<const std::string> keys) = 0;
  // Hands each held value to sink(index of its key, its bytes), once, in any order (a transport
  // over several servers answers in theirs), the bytes valid during that call only: what the tier
  // reads through (it verifies and imports each page from the transport's buffer) and what a
  // plugin's get goes through. By default through get(); a transport whose client holds the bytes
  // already hands them over without a copy of its own, and one that reads them in turn may hand
  // each over as it arrives. What the sink throws ends the call and goes on to the caller; the
  // sink must not call the transport (it may hold its lock).
  using ValueSink = std::function<void(std::size_t index, std::span<const std::byte> bytes)>;
  virtual void get_each(std::span<const std::string> keys, const ValueSink& sink) {
    const std::vector<std::optional<Value>> values = get(keys);
    for (std::size_t i = 0; i < values.size() && i < keys.size(); ++i)
      if (values[i]) sink(i, *values[i]);
  }
  // Stores each value whose key is absent (a present one is left as it is: values are
  // immutable); per key, whether it was stored.
  virtual std::vector<bool> put_if_absent(std::span<const std::string> keys,
                                          std::span<const Value> values) = 0;
  // Best effort: removes the keys (a value that failed verification).
  virtual void remove(std::span<const std::string> keys) = 0;
  // "memory 'shared'", "resp 127.0.0.1:6379": for logs and errors.
  virtual std::string describe() const = 0;

 protected:
  // get() through get_each(), each value copied: for a transport whose get_each is its read.
  std::vector<std::optional<Value>> get_through_each(std::span<const std::string> keys) {
    std::vector<std::optional<Value>> values(keys.size());
    get_each(keys, [&](std::size_t i, std::span<const std::byte> v) {
      if (i < values.size()) values[i] = Value(v.begin(), v.end());
    });
    return values;
  }
};

}  // namespace kvcache::remote
