// The `resp` transport: a standalone Redis (or Valkey) server as the shared tier's byte store.
// probe is EXISTS, get is GET, put-if-absent is SET NX, remove is UNLINK, each batch pipelined
// on one connection. A Redis Cluster's redirections (MOVED, ASK) are errors here: every
// endpoint after the first is refused rather than half-used.
//
// Options: endpoints [host:port] (one), connect_timeout_ms (100), timeout_ms (1000),
// password_env (a variable holding the AUTH password; none by default), username (an ACL user,
// with password_env: a tenant's user may be limited to its keys, ~kvc1:<label>:*).
#pragma once

#include <mutex>

#include "kvcache/remote/byte_store.hpp"
#include "kvcache/sdk/options.hpp"
#include "resp_connection.hpp"

namespace kvcache::resp {

class RespTransport final : public remote::ByteStore {
 public:
  explicit RespTransport(const sdk::Options& options);

  std::vector<bool> probe(std::span<const std::string> keys) override;
  std::vector<std::optional<remote::Value>> get(std::span<const std::string> keys) override;
  std::vector<bool> put_if_absent(std::span<const std::string> keys,
                                  std::span<const remote::Value> values) override;
  void remove(std::span<const std::string> keys) override;
  std::string describe() const override;

 private:
  // One command per key: `verb key [extra...]`, pipelined under the lock.
  std::vector<Reply> each(std::string_view verb, std::span<const std::string> keys,
                          std::span<const remote::Value> values = {},
                          std::vector<std::string_view> extra = {});

  std::mutex mutex_;  // the host calls from its step and from its writer
  Connection connection_;
};

}  // namespace kvcache::resp
