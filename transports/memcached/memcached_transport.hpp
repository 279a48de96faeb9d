// The `memcached` transport: one or more memcached servers as the remote tier's byte store,
// through libmemcached. Keys go to servers by consistent hashing (ketama), so a server's loss
// moves only its own keys; a server that fails `failure_limit` times in a row is removed from the
// ring (its keys then miss, and are written again to the servers left). get is one batched
// multi-get; probe, put-if-absent (add) and remove are one request a key, as libmemcached has no
// batched form of them. A failed request is a miss or a drop for its key; a call whose every key
// failed is an error (the tier's breaker counts it).
//
// Options: endpoints [host:port, ...] (at least one), connect_timeout_ms (100), timeout_ms (1000),
// failure_limit (2), retry_s (seconds before a removed server is tried again; 30). A value larger
// than the servers' item size (memcached -I, 1 MB by default) is not stored.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "kvcache/remote/byte_store.hpp"
#include "kvcache/sdk/options.hpp"

struct memcached_st;

namespace kvcache::memcached {

class MemcachedTransport final : public remote::ByteStore {
 public:
  explicit MemcachedTransport(const sdk::Options& options);

  std::vector<bool> probe(std::span<const std::string> keys) override;
  std::vector<std::optional<remote::Value>> get(std::span<const std::string> keys) override;
  void get_each(std::span<const std::string> keys, const ValueSink& sink) override;
  std::vector<bool> put_if_absent(std::span<const std::string> keys,
                                  std::span<const remote::Value> values) override;
  void remove(std::span<const std::string> keys) override;
  std::string describe() const override;

 private:
  std::mutex mutex_;  // a memcached_st serves one thread at a time
  std::unique_ptr<memcached_st, void (*)(memcached_st*)> client_;
  std::string endpoints_;  // for describe()
};

}  // namespace kvcache::memcached
