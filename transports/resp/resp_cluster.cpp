#include "resp_cluster.hpp"

#include <hiredis/hiredis.h>

#include <thread>

#include "kvcache/status.hpp"

namespace kvcache::resp {
namespace {

constexpr std::size_t kSlots = 16384;
constexpr int kRounds = 4;  // a key is sent at most this often (redirections, TRYAGAIN)
constexpr auto kRefreshGap = std::chrono::milliseconds(100);

// CRC16-CCITT (XMODEM): polynomial 0x1021, initial 0.
std::uint16_t crc16(std::string_view bytes) {
  std::uint16_t crc = 0;
  for (const char c : bytes) {
    crc ^= static_cast<std::uint16_t>(static_cast<std::uint8_t>(c) << 8);
    for (int bit = 0; bit < 8; ++bit)
      crc = static_cast<std::uint16_t>(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

bool starts_with(const Reply& r, std::string_view word) {
  return std::string_view(r->str, r->len).starts_with(word);
}

// "MOVED 3999 127.0.0.1:6381" or "ASK ...": the slot and the node.
std::pair<std::size_t, std::string> redirection(const Reply& r) {
  const std::string_view text(r->str, r->len);
  const std::size_t first = text.find(' '), second = text.find(' ', first + 1);
  const std::size_t slot = std::stoul(std::string(text.substr(first + 1, second - first - 1)));
  return {slot, std::string(text.substr(second + 1))};
}

}  // namespace

std::uint16_t key_slot(std::string_view key) {
  const std::size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const std::size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return static_cast<std::uint16_t>(crc16(key) % kSlots);
}

Cluster::Cluster(std::vector<Endpoint> seeds, ConnectionSettings settings,
                 std::chrono::milliseconds breaker)
    : seeds_(std::move(seeds)), settings_(std::move(settings)), breaker_(breaker), owner_(kSlots) {}

Cluster::Node& Cluster::node(const std::string& name) {
  Node& n = nodes_[name];
  if (!n.connection) {
    n.connection = std::make_unique<Connection>(sdk::parse_endpoint(name, kDefaultPort),
                                                settings_.connect_timeout, settings_.timeout,
                                                settings_.username, settings_.password);
  }
  return n;
}

bool Cluster::refresh() {
  const auto now = std::chrono::steady_clock::now();
  if (now - refreshed_ < kRefreshGap) return false;
  refreshed_ = now;
  // The nodes known, then the seeds: the first that answers gives the map.
  std::vector<std::string> asked;
  for (const auto& [name, n] : nodes_)
    if (n.closed_until <= now) asked.push_back(name);
  for (const Endpoint& e : seeds_) asked.push_back(e.text());
  for (const std::string& name : asked) {
    Node& n = node(name);
    try {
      const std::vector<Reply> replies = n.connection->pipeline({{"CLUSTER", "SLOTS"}});
      const redisReply* r = replies[0].get();
      if (r->type != REDIS_REPLY_ARRAY) continue;
      std::vector<std::string> owner(kSlots);
      for (std::size_t i = 0; i < r->elements; ++i) {
        const redisReply* range = r->element[i];
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
        const redisReply* master = range->element[2];
        if (master->type != REDIS_REPLY_ARRAY || master->elements < 2) continue;
        std::string host(master->element[0]->str, master->element[0]->len);
        if (host.empty()) host = name.substr(0, name.rfind(':'));  // "the node you asked"
        const std::string at = host + ":" + std::to_string(master->element[1]->integer);
        for (long long s = range->element[0]->integer; s <= range->element[1]->integer; ++s)
          owner[static_cast<std::size_t>(s)] = at;
      }
      owner_ = std::move(owner);
      return true;
    } catch (const Error&) {
      n.closed_until = now + breaker_;
    }
  }
  return false;
}

std::vector<Reply> Cluster::run(const std::vector<std::vector<std::string_view>>& commands,
                                const std::vector<std::string_view>& keys) {
  std::vector<Reply> replies;
  for (std::size_t i = 0; i < commands.size(); ++i) replies.emplace_back(nullptr, freeReplyObject);
  if (owner_[key_slot(keys.empty() ? "" : keys[0])].empty()) refresh();
  struct Pending {
    std::size_t index;
    std::string asked;  // the node an ASK named, for this send only
  };
  std::vector<Pending> pending;
  for (std::size_t i = 0; i < commands.size(); ++i) pending.push_back({i, ""});
  bool stale = false;  // a node failed or a slot moved: read the map again afterwards
  for (int round = 0; round < kRounds && !pending.empty(); ++round) {
    std::map<std::string, std::vector<Pending>> by_node;
    for (Pending& p : pending) {
      const std::string& at = p.asked.empty() ? owner_[key_slot(keys[p.index])] : p.asked;
      if (!at.empty()) by_node[at].push_back(std::move(p));
    }
    pending.clear();
    bool pause = false;
    const auto now = std::chrono::steady_clock::now();
    for (auto& [name, sent] : by_node) {
      Node& n = node(name);
      if (n.closed_until > now) {
        stale = true;
        continue;
      }
      std::vector<std::vector<std::string_view>> batch;
      for (const Pending& p : sent) {
        if (!p.asked.empty()) batch.push_back({"ASKING"});
        batch.push_back(commands[p.index]);
      }
      std::vector<Reply> got;
      try {
        got = n.connection->pipeline(batch);
      } catch (const Error&) {
        n.closed_until = now + breaker_;
        stale = true;
        continue;
      }
      std::size_t at = 0;
      for (Pending& p : sent) {
        if (!p.asked.empty()) ++at;  // ASKING's +OK
        Reply& r = got[at++];
        if (r->type != REDIS_REPLY_ERROR) {
          replies[p.index] = std::move(r);
        } else if (starts_with(r, "MOVED ")) {
          const auto [slot, to] = redirection(r);
          owner_[slot] = to;
          stale = true;
          pending.push_back({p.index, ""});
        } else if (starts_with(r, "ASK ")) {
          pending.push_back({p.index, redirection(r).second});
        } else if (starts_with(r, "TRYAGAIN")) {
          pause = true;
          pending.push_back({p.index, ""});
        }  // CLUSTERDOWN, or any other error: the key fails
      }
    }
    if (pause) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (stale) refresh();
  return replies;
}

std::string Cluster::describe() const {
  std::string seeds;
  for (const Endpoint& e : seeds_) {
    if (!seeds.empty()) seeds += ',';
    seeds += e.text();
  }
  return "resp cluster " + seeds;
}

}  // namespace kvcache::resp
