// The remote tier's in-order hand-over (core/src/remote/in_order.hpp): values of a run that arrive
// in any order reach the consumer in the run's order, once each, and nothing passes a refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "remote/in_order.hpp"

namespace kvcache::remote {
namespace {

std::vector<std::byte> value_of(std::size_t i) {
  return {static_cast<std::byte>(i), static_cast<std::byte>(i + 1)};
}

struct Consumer {
  std::vector<std::size_t> seen;
  std::size_t refuse = ~std::size_t{0};  // the value refused, by its first byte
  bool operator()(std::span<const std::byte> v) {
    const auto i = static_cast<std::size_t>(v[0]);
    if (i == refuse) return false;
    seen.push_back(i);
    return true;
  }
};

TEST(InOrder, AnyArrivalOrderIsPassedOnInTheRunsOrder) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::size_t> order(12);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    Consumer c;
    InOrder run(order.size(), [&](std::span<const std::byte> v) { return c(v); });
    for (const std::size_t i : order) {
      const std::vector<std::byte> v = value_of(i);
      run.take(i, v);  // borrowed for the call only: a value kept must be a copy
    }
    std::vector<std::size_t> want(12);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(c.seen, want);
    EXPECT_EQ(run.passed(), 12u);
    EXPECT_FALSE(run.stopped());
  }
}

TEST(InOrder, ARefusalStopsTheRunAndNothingAfterItPasses) {
  Consumer c;
  c.refuse = 2;
  InOrder run(6, [&](std::span<const std::byte> v) { return c(v); });
  for (const std::size_t i : {5, 3, 1, 0, 2, 4}) run.take(i, value_of(i));
  EXPECT_EQ(c.seen, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(run.passed(), 2u);
  EXPECT_TRUE(run.stopped());
}

TEST(InOrder, RepeatsAndIndexesOutsideTheRunAreReadPast) {
  Consumer c;
  InOrder run(3, [&](std::span<const std::byte> v) { return c(v); });
  run.take(1, value_of(1));
  run.take(1, value_of(1));
  run.take(7, value_of(7));
  run.take(0, value_of(0));
  run.take(0, value_of(0));
  EXPECT_EQ(c.seen, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(run.passed(), 2u);
  EXPECT_FALSE(run.stopped());
}

}  // namespace
}  // namespace kvcache::remote
