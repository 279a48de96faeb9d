#include "runner.hpp"

#include <utility>

#include <gtest/gtest.h>

namespace kvcache::conformance {

std::vector<CaseResult> run(Setup setup, const RunOptions& options) {
  configure(std::move(setup));  // before InitGoogleTest generates the cases
  std::string program = "kvcache-conformance", filter = "--gtest_filter=" + options.filter;
  char* argv[] = {program.data(), filter.data(), nullptr};
  int argc = 2;
  ::testing::InitGoogleTest(&argc, argv);
  std::vector<CaseResult> results;
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new Collector(results, options.progress));  // owned by GoogleTest
  [[maybe_unused]] const int failed = RUN_ALL_TESTS();         // each outcome is in `results`
  return results;
}

}  // namespace kvcache::conformance
