#include "memcached_transport.hpp"

#include <libmemcached/memcached.h>

#include <unordered_map>

#include "kvcache/sdk/endpoints.hpp"
#include "kvcache/status.hpp"

namespace kvcache::memcached {
namespace {

// Whether rc means the server could not be asked (as against an answer: found, not found, not
// stored).
bool unreachable(memcached_return_t rc) {
  switch (rc) {
    case MEMCACHED_SUCCESS:
    case MEMCACHED_NOTFOUND:
    case MEMCACHED_NOTSTORED:
    case MEMCACHED_DATA_EXISTS:
    case MEMCACHED_E2BIG:
    case MEMCACHED_END:
      return false;
    default:
      return true;
  }
}

}  // namespace

MemcachedTransport::MemcachedTransport(const sdk::Options& o)
    : client_(memcached_create(nullptr), memcached_free) {
  o.only({"endpoints", "connect_timeout_ms", "timeout_ms", "failure_limit", "retry_s"});
  if (!client_) throw Error(Code::out_of_memory, "memcached: no memory for a client");
  const nlohmann::json endpoints = o.json().value("endpoints", nlohmann::json::array());
  if (!endpoints.is_array() || endpoints.empty())
    throw Error(Code::invalid_argument,
                "option 'endpoints': the memcached transport takes a list of host:port");
  for (const sdk::Endpoint& e : sdk::parse_endpoints(endpoints, 11211)) {
    if (memcached_server_add(client_.get(), e.host.c_str(), static_cast<in_port_t>(e.port)) !=
        MEMCACHED_SUCCESS)
      throw Error(Code::invalid_argument, "memcached: cannot add server " + e.text());
    if (!endpoints_.empty()) endpoints_ += ',';
    endpoints_ += e.text();
  }
  const auto timeout_ms = o.get<std::uint32_t>("timeout_ms", 1000);
  const std::pair<memcached_behavior_t, std::uint64_t> behaviors[] = {
      {MEMCACHED_BEHAVIOR_DISTRIBUTION, MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA},
      {MEMCACHED_BEHAVIOR_TCP_NODELAY, 1},
      {MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, o.get<std::uint32_t>("connect_timeout_ms", 100)},
      {MEMCACHED_BEHAVIOR_POLL_TIMEOUT, timeout_ms},
      {MEMCACHED_BEHAVIOR_SND_TIMEOUT, std::uint64_t{timeout_ms} * 1000},
      {MEMCACHED_BEHAVIOR_RCV_TIMEOUT, std::uint64_t{timeout_ms} * 1000},
      {MEMCACHED_BEHAVIOR_SERVER_FAILURE_LIMIT, o.get<std::uint32_t>("failure_limit", 2)},
      {MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS, 1},
      {MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, o.get<std::uint32_t>("retry_s", 30)},
  };
  for (const auto& [behavior, value] : behaviors)
    if (memcached_behavior_set(client_.get(), behavior, value) != MEMCACHED_SUCCESS)
      throw Error(Code::internal, "memcached: a client setting was refused");
}

std::vector<bool> MemcachedTransport::probe(std::span<const std::string> keys) {
  std::lock_guard lock(mutex_);
  std::vector<bool> held;
  std::size_t failed = 0;
  for (const std::string& key : keys) {
    const memcached_return_t rc = memcached_exist(client_.get(), key.data(), key.size());
    failed += unreachable(rc);
    held.push_back(rc == MEMCACHED_SUCCESS);
  }
  if (!keys.empty() && failed == keys.size())
    throw Error(Code::unavailable, "memcached " + endpoints_ + ": no server answered");
  return held;
}

std::vector<std::optional<remote::Value>> MemcachedTransport::get(
    std::span<const std::string> keys) {
  return get_through_each(keys);
}

// Straight from libmemcached's results: no copy of the transport's own.
void MemcachedTransport::get_each(std::span<const std::string> keys, const ValueSink& sink) {
  if (keys.empty()) return;
  std::vector<const char*> names;
  std::vector<std::size_t> lengths;
  std::unordered_map<std::string_view, std::size_t> index;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    names.push_back(keys[i].data());
    lengths.push_back(keys[i].size());
    index.emplace(keys[i], i);
  }
  std::lock_guard lock(mutex_);
  const memcached_return_t sent =
      memcached_mget(client_.get(), names.data(), lengths.data(), names.size());
  if (sent != MEMCACHED_SUCCESS && sent != MEMCACHED_SOME_ERRORS)
    throw Error(Code::unavailable, "memcached " + endpoints_ + ": multi-get failed: " +
                                       memcached_strerror(client_.get(), sent));
  memcached_return_t rc;
  while (memcached_result_st* r = memcached_fetch_result(client_.get(), nullptr, &rc)) {
    const std::string_view key(memcached_result_key_value(r), memcached_result_key_length(r));
    if (const auto at = index.find(key); at != index.end())
      sink(at->second, {reinterpret_cast<const std::byte*>(memcached_result_value(r)),
                        memcached_result_length(r)});
    memcached_result_free(r);
  }
}

std::vector<bool> MemcachedTransport::put_if_absent(std::span<const std::string> keys,
                                                    std::span<const remote::Value> values) {
  if (keys.size() != values.size())
    throw Error(Code::invalid_argument, "put_if_absent: keys and values differ in number");
  std::lock_guard lock(mutex_);
  std::vector<bool> stored;
  std::size_t failed = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const memcached_return_t rc =
        memcached_add(client_.get(), keys[i].data(), keys[i].size(),
                      reinterpret_cast<const char*>(values[i].data()), values[i].size(), 0, 0);
    failed += unreachable(rc);
    stored.push_back(rc == MEMCACHED_SUCCESS);
  }
  if (!keys.empty() && failed == keys.size())
    throw Error(Code::unavailable, "memcached " + endpoints_ + ": no server answered");
  return stored;
}

void MemcachedTransport::remove(std::span<const std::string> keys) {
  std::lock_guard lock(mutex_);
  for (const std::string& key : keys) memcached_delete(client_.get(), key.data(), key.size(), 0);
}

std::string MemcachedTransport::describe() const {
  return "memcached " + endpoints_;
}

}  // namespace kvcache::memcached
