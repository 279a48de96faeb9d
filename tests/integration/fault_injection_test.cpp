// Faults injected into every kind of plugin mid-step (tests/plugins/faulty_backend.cpp): a
// store's reserve or append, a step's plan or attention, a mask's ranges, an eviction plan, each
// throwing a kvcache::Error, a std::exception, something else, std::bad_alloc, or answering
// garbage. After each: the error reached the caller with the component's name, the Cache holds
// exactly what it held before the failed step (or the report says what left), its pages add up,
// the next steps work and attention equals the reference. Also: a pool that cannot be allocated.
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cache_checks.hpp"
#include "cache_workload.hpp"
#include "kvcache/cache.hpp"
#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"
#include "test_registry.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const Registry> registry() {
  return testing::test_registry();
}

// Two layers, GQA groups of 2, fp32: 1 KiB a token, and by default 24 pages of 8 tokens.
std::unique_ptr<Cache> open_cache(const std::string& backend, const std::string& more = "",
                                  const std::string& cache = "{page_size: 8, capacity: 192KiB}") {
  return Cache::open(parse_config("model: {layers: 2, q_heads: 4, kv_heads: 2, head_dim: 32, "
                                  "rope: {theta: 10000}}\n"
                                  "format: fp32\ncache: " +
                                      cache + "\nbackend: [" + backend + "]\n" + more,
                                  "fault_injection_test.yaml", {}),
                     registry());
}

using testing::Workload;

// The Cache holds exactly what the workload's reports say, its pages add up, and attention on
// every sequence equals the reference.
void check(Cache& cache, const Workload& w) {
  w.check_nothing_lost();
  testing::expect_pages_add_up(cache);
  std::mt19937 rng(11);
  for (const SeqId id : w.live()) testing::expect_attention_equals_the_reference(cache, id, rng);
}

struct Injected {
  std::string call;  // the backend's call that fails
  int at;            // which call of it
  std::string how;
  Code code;  // what the caller sees
};

std::string name_of(const ::testing::TestParamInfo<Injected>& info) {
  return info.param.call + "_" + std::to_string(info.param.at) + "_" + info.param.how;
}

class BackendFault : public ::testing::TestWithParam<Injected> {};

// A prompt of 12 tokens for two sequences, then decode steps; the injected call fails once,
// mid-way. The failed step is dropped; the next ones work and attention is exact.
TEST_P(BackendFault, MidStepFailureReachesTheCallerAndTheNextStepWorks) {
  const Injected& f = GetParam();
  const auto cache = open_cache("{name: test-faulty, fail: " + f.call +
                                ", at: " + std::to_string(f.at) + ", how: " + f.how + "}");
  Workload w(*cache);
  const std::vector<SeqId> ids{w.add(), w.add()};
  int failures = 0;
  for (int step = 0; step < 6; ++step) {
    try {
      w.step(ids, step == 0 ? 12 : 1);
    } catch (const Error& e) {
      ++failures;
      EXPECT_EQ(e.code(), f.code) << e.what();
      EXPECT_THAT(e.what(), HasSubstr("backend 'test-faulty'"));
      if (f.how == "error" || f.how == "std") {
        EXPECT_THAT(e.what(), HasSubstr("injected failure"));
      }
      check(*cache, w);  // as before the failed step
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_EQ(failures, 1);
  check(*cache, w);
  EXPECT_EQ(w.held(ids[0]).size(), failures == 1 ? 16u : 17u);
}

INSTANTIATE_TEST_SUITE_P(
    Calls, BackendFault,
    // Two calls of append and run a step (one a layer), one of reserve and plan.
    ::testing::Values(Injected{"reserve", 3, "error", Code::unavailable},
                      Injected{"append", 5, "error", Code::unavailable},  // a first layer
                      Injected{"append", 4, "std", Code::internal},       // a last layer
                      Injected{"append", 6, "unknown", Code::internal},
                      Injected{"append", 3, "oom", Code::out_of_memory},
                      Injected{"plan", 2, "error", Code::unavailable},
                      Injected{"plan", 4, "oom", Code::out_of_memory},
                      Injected{"run", 4, "error", Code::unavailable},
                      Injected{"run", 7, "std", Code::internal}),
    name_of);

// A failed append can also be retried within the step: the step goes on as if nothing happened.
TEST(Faults, AFailedAppendCanBeRetriedInTheSameStep) {
  const auto cache = open_cache("{name: test-faulty, fail: append, at: 2}");
  const ModelShape& m = cache->model();
  const SeqId id = cache->add_sequence();
  Step step = cache->begin_step(id, 3);
  const std::vector<float> kv(3 * m.kv_heads * m.head_dim, 0.25f);
  const Tensor k = Tensor::host(kv.data(), {3, m.kv_heads, m.head_dim});
  step.append(0, k, k);
  EXPECT_THROW(step.append(1, k, k), Error);
  step.append(1, k, k);
  (void)step.finish();
  EXPECT_EQ(cache->store().written(id, 1), 3u);
  Workload w(*cache);
  w.step({w.add()}, 2);  // the next step works
}

// The mask's ranges are checked: one that fails or answers garbage in begin_step is refused with
// its name, and the reserve made for the step is undone.
class MaskFault : public ::testing::TestWithParam<std::string> {};

TEST_P(MaskFault, IsRefusedWithItsNameAndTheReserveIsUndone) {
  const auto cache = open_cache(
      "cpu-tbb", "mask: {name: test-faulty-mask, fail: visible, at: 3, how: " + GetParam() + "}\n");
  Workload w(*cache);
  const std::vector<SeqId> ids{w.add(), w.add()};
  w.step(ids, 5);
  w.step(ids, 1);
  const StoreStats before = cache->stats();
  try {
    w.step(ids, 1);
    ADD_FAILURE() << "the mask's third answer should be refused";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("mask 'test-faulty-mask'"));
    if (GetParam() == "too-many") {
      EXPECT_THAT(e.what(), HasSubstr("3 ranges, more than its 2"));
    }
    if (GetParam() == "reversed" || GetParam() == "overlap") {
      EXPECT_THAT(e.what(), HasSubstr("overlaps the range before it"));
    }
  }
  EXPECT_EQ(cache->stats().used_pages, before.used_pages);
  check(*cache, w);
  w.step(ids, 1);
  check(*cache, w);
}

INSTANTIATE_TEST_SUITE_P(Answers, MaskFault,
                         ::testing::Values("error", "std", "too-many", "reversed", "overlap"));

// A mask that places a query at a position below 0 is refused with its name, the reserve undone.
TEST(Faults, AQueryPlacedBelowZeroIsRefusedNamingTheMask) {
  const auto cache = open_cache(
      "cpu-tbb", "mask: {name: test-faulty-mask, fail: query_positions, at: 2, how: below-zero}\n");
  Workload w(*cache);
  const std::vector<SeqId> ids{w.add(), w.add()};
  w.step(ids, 5);
  const StoreStats before = cache->stats();
  try {
    w.step(ids, 1);
    ADD_FAILURE() << "a query position below 0 should be refused";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("mask 'test-faulty-mask'"));
    EXPECT_THAT(e.what(), HasSubstr("below 0"));
  }
  EXPECT_EQ(cache->stats().used_pages, before.used_pages);
  check(*cache, w);
  w.step(ids, 1);
  check(*cache, w);
}

// A step whose reserve evicted and whose mask then failed: the error carries the report.
TEST(Faults, AFailureAfterBeginStepEvictedCarriesTheReport) {
  const auto cache = open_cache(
      "cpu-tbb", "eviction: oldest-first\nmask: {name: test-faulty-mask, fail: visible, at: 3}\n");
  Workload w(*cache);
  const SeqId old = w.add();
  w.step({old}, 16 * 8);  // 16 of 24 pages
  const SeqId young = w.add();
  w.step({young}, 4 * 8);
  try {
    w.step({young}, 6 * 8);  // needs old's pages
    ADD_FAILURE() << "the mask's third answer fails";
  } catch (const EvictionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("mask 'test-faulty-mask'"));
    EXPECT_EQ(e.report().preempted, std::vector<SeqId>{old});
  }
  check(*cache, w);
  w.step({young}, 6 * 8);
  check(*cache, w);
}

// An eviction plan that names what the cache does not hold is refused whole: nothing of it is
// carried out, and the error names the policy.
class PlanFault : public ::testing::TestWithParam<std::string> {};

TEST_P(PlanFault, IsRefusedWholeNamingThePolicy) {
  const auto cache = open_cache(
      "cpu-tbb",
      "eviction: {name: test-faulty-eviction, fail: on_pressure, how: " + GetParam() + "}\n");
  Workload w(*cache);
  const SeqId old = w.add();
  w.step({old}, 16 * 8);
  const SeqId young = w.add();
  w.step({young}, 4 * 8);
  try {
    w.step({young}, 6 * 8);
    ADD_FAILURE() << "the plan should be refused";
  } catch (const Error& e) {  // nothing was evicted: not an EvictionError
    EXPECT_EQ(dynamic_cast<const EvictionError*>(&e), nullptr);
    EXPECT_THAT(e.what(), HasSubstr("eviction 'test-faulty-eviction'"));
    if (GetParam() != "error") {
      EXPECT_THAT(e.what(), HasSubstr("refused whole"));
    }
  }
  check(*cache, w);  // old is still there: the sound part of the plan was not carried out either
  EXPECT_EQ(w.live().size(), 2u);
  w.step({young}, 2 * 8);
  check(*cache, w);
}

INSTANTIATE_TEST_SUITE_P(Plans, PlanFault,
                         ::testing::Values("error", "unknown-sequence", "unknown-position",
                                           "twice"));

// The proactive hook failing in finish(): the step's tokens stay (the step is done), what
// begin_step evicted is in the error's report, and the next step works.
TEST(Faults, AFailingProactiveHookKeepsTheStepAndItsReport) {
  const auto cache = open_cache(
      "cpu-tbb",
      "eviction: {name: test-faulty-eviction, fail: after_step, at: 3, how: unknown-sequence}\n");
  Workload w(*cache);
  const std::vector<SeqId> ids{w.add(), w.add()};
  w.step(ids, 4);
  w.step(ids, 1);
  try {
    w.step(ids, 1);
    ADD_FAILURE() << "the third after_step plan should be refused";
  } catch (const EvictionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("refused whole"));
  }
  for (const SeqId id : ids) EXPECT_EQ(cache->store().length(id), 6u) << "the step stands";
  w.step(ids, 1);
  for (const SeqId id : ids) EXPECT_EQ(cache->store().length(id), 7u);
}

// A plan carried out part way (its drop failing after its preemption) reports what it did.
TEST(Faults, AnEvictionThatFailsPartWayReportsWhatItRemoved) {
  const auto cache = open_cache("{name: test-faulty, fail: drop}",
                                "eviction: {name: test-faulty-eviction, fail: on_pressure, "
                                "how: drop-too}\n");
  Workload w(*cache);
  const SeqId old = w.add();
  w.step({old}, 12 * 8);
  const SeqId middle = w.add();
  w.step({middle}, 6 * 8);
  const SeqId young = w.add();
  w.step({young}, 2 * 8);
  try {
    w.step({young}, 8 * 8);
    ADD_FAILURE() << "the plan's drop fails";
  } catch (const EvictionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("injected failure in drop"));
    EXPECT_EQ(e.report().preempted, std::vector<SeqId>{old});
    EXPECT_TRUE(e.report().dropped.empty());
  }
  check(*cache, w);
}

// A drop whose count is wrong does not fool the report: it is computed from the positions.
TEST(Faults, AWrongDropCountDoesNotChangeTheReport) {
  const auto cache = open_cache("{name: test-faulty, fail: drop, times: 0, how: garbage}",
                                "eviction: {name: streaming, sinks: 2, window: 16}\n");
  Workload w(*cache);
  const SeqId id = w.add();
  w.step({id}, 8);
  std::size_t dropped = 0;
  for (int i = 0; i < 40; ++i) {
    w.step({id}, 1);
    dropped = 48 - w.held(id).size();
  }
  EXPECT_GT(dropped, 0u);
  check(*cache, w);
}

// A pool larger than the host can give: a clear error, and no Cache.
TEST(Faults, APoolThatCannotBeAllocatedIsAClearError) {
  try {
    (void)open_cache("cpu-tbb", "", "{page_size: 8, capacity: 64TiB}");
    ADD_FAILURE() << "64 TiB should not be allocated";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::out_of_memory) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("cpu-tbb"));
    EXPECT_THAT(e.what(), HasSubstr("GiB"));
  }
}

}  // namespace
}  // namespace kvcache
