#include "runner.hpp"

#include <gtest/gtest.h>

namespace kvcache::conformance {

std::vector<CaseResult> run(const RunOptions& options) {
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
