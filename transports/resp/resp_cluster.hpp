// A Redis Cluster as the resp transport sees it: which master holds each of the 16,384 hash
// slots (CRC16 of the key, or of its {hash tag}, mod 16384; learnt from CLUSTER SLOTS), one
// connection per node, and the redirections: MOVED updates the slot's owner and resends there,
// ASK resends once to the named node after ASKING, TRYAGAIN resends after a pause, CLUSTERDOWN and
// anything else fail the key. A node that cannot be reached is skipped by its own breaker for a
// while and the slot map is read again (a replica may have been promoted), at most every 100 ms.
// Not thread-safe: the transport holds its lock around it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "resp_connection.hpp"

namespace kvcache::resp {

// The hash slot of a key, as Redis Cluster computes it.
std::uint16_t key_slot(std::string_view key);

struct ConnectionSettings {
  std::chrono::milliseconds connect_timeout{100}, timeout{1000};
  std::string username, password;
};

class Cluster {
 public:
  Cluster(std::vector<Endpoint> seeds, ConnectionSettings settings,
          std::chrono::milliseconds breaker);

  // commands[i] acts on key keys[i]: a reply each, or null where the key failed (its node
  // unreachable or down, the cluster down, redirections past a bound).
  std::vector<Reply> run(const std::vector<std::vector<std::string_view>>& commands,
                         const std::vector<std::string_view>& keys);
  std::string describe() const;

 private:
  struct Node {
    std::unique_ptr<Connection> connection;
    std::chrono::steady_clock::time_point closed_until{};  // the breaker
  };
  Node& node(const std::string& name);
  // Reads the slot map from the first node that answers; false when none does.
  bool refresh();

  std::vector<Endpoint> seeds_;
  ConnectionSettings settings_;
  std::chrono::milliseconds breaker_;
  std::vector<std::string> owner_;  // per slot, "host:port" of its master ("" unknown)
  std::map<std::string, Node> nodes_;
  std::chrono::steady_clock::time_point refreshed_{};
};

}  // namespace kvcache::resp
