// The `resp` transport: a standalone Redis (or Valkey) server, or a Redis Cluster, as the shared
// tier's byte store. probe is EXISTS, get is GET, put-if-absent is SET NX, remove is UNLINK, each
// batch pipelined on one connection (a cluster: one per node, see resp_cluster.hpp). Standalone,
// an error reply fails the call; in a cluster, a key that fails (its node down, the cluster down)
// is a miss or a drop, and a call whose every key failed is an error.
//
// Options: endpoints [host:port] (one; a cluster's seed nodes, one or more), cluster (false),
// connect_timeout_ms (100), timeout_ms (1000), breaker_ms (a cluster node's pause after a
// failure; 1000), password_env (a variable holding the AUTH password; none by default), username
// (an ACL user, with password_env: a tenant's user may be limited to its keys, ~kvc1:<label>:*).
#pragma once

#include <memory>
#include <mutex>

#include "kvcache/remote/byte_store.hpp"
#include "kvcache/sdk/options.hpp"
#include "resp_cluster.hpp"
#include "resp_connection.hpp"

namespace kvcache::resp {

class RespTransport final : public remote::ByteStore {
 public:
  explicit RespTransport(const sdk::Options& options);

  std::vector<bool> probe(std::span<const std::string> keys) override;
  std::vector<std::optional<remote::Value>> get(std::span<const std::string> keys) override;
  void get_each(std::span<const std::string> keys, const ValueSink& sink) override;
  std::vector<bool> put_if_absent(std::span<const std::string> keys,
                                  std::span<const remote::Value> values) override;
  void remove(std::span<const std::string> keys) override;
  std::string describe() const override;

 private:
  // One command per key: `verb key [value] [extra...]`.
  static std::vector<std::vector<std::string_view>> commands(
      std::string_view verb, std::span<const std::string> keys,
      std::span<const remote::Value> values = {}, const std::vector<std::string_view>& extra = {});
  // Those commands pipelined under the lock; a reply each, null where the key failed (in a
  // cluster).
  std::vector<Reply> each(std::string_view verb, std::span<const std::string> keys,
                          std::span<const remote::Value> values = {},
                          std::vector<std::string_view> extra = {});

  std::mutex mutex_;                        // the host calls from its step and from its writer
  std::unique_ptr<Connection> connection_;  // standalone
  std::unique_ptr<Cluster> cluster_;
};

}  // namespace kvcache::resp
