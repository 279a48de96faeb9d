// What every transport must do as a batched byte store (remote::ByteStore), checked the same way
// against each real server.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/remote/byte_store.hpp"
#include "kvcache/status.hpp"
#include "local_server.hpp"

namespace kvcache::testing {

// n keys: prefix0, prefix1, ...
inline std::vector<std::string> keys_named(const std::string& prefix, int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(prefix + std::to_string(i));
  return keys;
}

// Probe, put-if-absent (a value once stored stays), get of binary values and of a missing key,
// remove: on an empty store.
inline void expect_a_batched_byte_store(remote::ByteStore& store) {
  const std::vector<std::string> keys{"kvc1:t:a", "kvc1:t:b", "kvc1:t:c"};
  EXPECT_EQ(store.probe(keys), (std::vector<bool>{false, false, false}));
  remote::Value binary(70000);
  for (std::size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<std::byte>(i % 251);
  const std::vector<remote::Value> values{binary, remote::Value{std::byte{0}}};
  const std::vector<std::string> two(keys.begin(), keys.begin() + 2);
  EXPECT_EQ(store.put_if_absent(two, values), (std::vector<bool>{true, true}));
  const std::vector<remote::Value> other{remote::Value{std::byte{9}}, remote::Value{}};
  EXPECT_EQ(store.put_if_absent(two, other), (std::vector<bool>{false, false}))
      << "a value once stored stays";
  EXPECT_EQ(store.probe(keys), (std::vector<bool>{true, true, false}));
  const auto got = store.get(keys);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], binary);
  EXPECT_EQ(got[1], values[1]);
  EXPECT_FALSE(got[2].has_value());
  store.remove(two);
  EXPECT_EQ(store.probe(keys), (std::vector<bool>{false, false, false}));

  // A batch larger than a transport's groups of requests, every third key absent: get_each
  // hands over each held value once, under its own index.
  const std::vector<std::string> many = keys_named("kvc1:t:many", 50);
  std::vector<std::string> held;
  std::vector<remote::Value> held_values;
  for (std::size_t i = 0; i < many.size(); ++i)
    if (i % 3 != 1) {
      held.push_back(many[i]);
      held_values.emplace_back(1000 * i + 1, static_cast<std::byte>(i));
    }
  EXPECT_EQ(store.put_if_absent(held, held_values), std::vector<bool>(held.size(), true));
  std::vector<int> seen(many.size(), 0);
  store.get_each(many, [&](std::size_t i, std::span<const std::byte> v) {
    ASSERT_LT(i, many.size());
    ++seen[i];
    EXPECT_EQ(remote::Value(v.begin(), v.end()),
              remote::Value(1000 * i + 1, static_cast<std::byte>(i)))
        << "key " << i;
  });
  for (std::size_t i = 0; i < many.size(); ++i) EXPECT_EQ(seen[i], i % 3 != 1 ? 1 : 0) << i;
  store.remove(held);
}

// With `server` killed, a call is Error(unavailable) naming it, and so is the next one (which
// tries again), both within 2 s (the store's timeouts are the caller's: a few hundred ms).
inline void expect_a_dead_server_is_an_error(remote::ByteStore& store, LocalServer& server) {
  const std::vector<std::string> keys{"k"};
  EXPECT_EQ(store.probe(keys), std::vector<bool>{false});
  server.kill();
  const auto start = std::chrono::steady_clock::now();
  try {
    store.probe(keys);
    ADD_FAILURE() << "a dead server answered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::unavailable) << e.what();
    EXPECT_THAT(e.what(), ::testing::HasSubstr(server.endpoint()));
  }
  EXPECT_THROW(store.probe(keys), Error) << "and again";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

}  // namespace kvcache::testing
