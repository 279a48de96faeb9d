// A Redis Cluster of a test's own: 3 masters and 3 replicas (redis-server processes on free
// loopback ports, each in a directory of its own for its nodes.conf), made with
// `redis-cli --cluster create`, nodes timing out after 1 s so that a replica takes over a killed
// master within a few seconds, and the other masters serving their slots meanwhile (not full
// coverage). available() is false, saying why, where redis-server is missing.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "redis_server.hpp"

namespace kvcache::testing {

class RedisCluster {
 public:
  RedisCluster() {
    char pattern[] = "/tmp/kvcache-cluster-XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      why_ = "cannot make a directory for the cluster";
      return;
    }
    dir_ = pattern;
    std::string addresses;
    for (int i = 0; i < 6; ++i) {
      const std::filesystem::path dir = dir_ / std::to_string(i);
      std::filesystem::create_directory(dir);
      nodes_.push_back(std::make_unique<RedisServer>(
          std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
                                   "--cluster-require-full-coverage", "no",
                                   "--repl-diskless-sync-delay", "0", "--dir", dir.string()}));
      if (!nodes_.back()->available()) {
        why_ = nodes_.back()->why();
        return;
      }
      addresses += " " + nodes_.back()->endpoint();
    }
    nodes_[0]->cli("--cluster create" + addresses + " --cluster-replicas 1 --cluster-yes");
    if (!wait_until_ok() || !wait_for_replicas()) why_ = "the cluster did not come up";
  }
  ~RedisCluster() {
    nodes_.clear();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  bool available() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  std::vector<std::unique_ptr<RedisServer>>& nodes() { return nodes_; }
  // The node at `index` is a master (of those still running).
  bool is_master(std::size_t index) const {
    return nodes_[index]->cli("ROLE").rfind("master", 0) == 0;
  }
  // Waits up to 15 s until every master has its replica online (synchronized once).
  bool wait_for_replicas() {
    for (int i = 0; i < 150; ++i) {
      int online = 0;
      for (const auto& n : nodes_)
        if (n->running() && n->cli("INFO replication").find("state=online") != std::string::npos)
          ++online;
      if (online == 3) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // Waits up to 15 s until the replica of the master at `index` has acknowledged all its master's
  // replication stream (the offset in "slave0:...,offset=M" reaches master_repl_offset).
  bool wait_for_replication(std::size_t index) {
    const auto number_after = [](const std::string& text, const std::string& key) {
      const std::size_t at = text.find(key);
      return at == std::string::npos ? -1 : std::stoll(text.substr(at + key.size()));
    };
    for (int i = 0; i < 150; ++i) {
      const std::string info = nodes_[index]->cli("INFO replication");
      const long long master = number_after(info, "master_repl_offset:");
      const std::size_t replica = info.find("slave0:");
      if (master >= 0 && replica != std::string::npos &&
          number_after(info.substr(replica), "offset=") >= master)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // Waits up to 15 s until `n` running nodes are masters (a killed master's replica promoted).
  bool wait_for_masters(std::size_t n) {
    for (int i = 0; i < 150; ++i) {
      std::size_t masters = 0;
      for (std::size_t j = 0; j < nodes_.size(); ++j)
        masters += nodes_[j]->running() && is_master(j);
      if (masters == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // Waits up to 15 s until every running node says cluster_state:ok.
  bool wait_until_ok() {
    for (int i = 0; i < 150; ++i) {
      bool ok = true;
      for (const auto& n : nodes_)
        if (n->running() && n->cli("CLUSTER INFO").find("cluster_state:ok") == std::string::npos)
          ok = false;
      if (ok) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

 private:
  std::string why_;
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

}  // namespace kvcache::testing
