// The outcome of each conformance case, gathered while GoogleTest runs them, and the support
// matrix made from it: component x case -> passed / skipped (with the reason the component
// declared) / failed (with the first mismatch: the case, the index, what was expected and got).
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kvcache::conformance {

enum class Outcome { passed, skipped, failed };

struct CaseResult {
  std::string name;  // GoogleTest's: Backends/StoreConformance.ReserveIsAllOrNothing/cpu_tbb_...
  std::string test;  // the case without its parameters: StoreConformance.ReserveIsAllOrNothing
  std::string component;  // the backend it tested (record_case)
  std::string formats;    // the formats it stored, K/V or one name
  Outcome outcome = Outcome::passed;
  std::string message;  // skipped: the reason; failed: the first failure, at file:line
  double seconds = 0.0;
};

struct Summary {
  std::size_t passed = 0, skipped = 0, failed = 0;
};
Summary summarize(const std::vector<CaseResult>& results);

// One row per component and case with the counts of its variants, then the reasons for skips
// (each once, with how many cases it covers) and every failure with its first mismatch.
void print_matrix(std::ostream& out, const std::vector<CaseResult>& results);
nlohmann::json to_json(const std::vector<CaseResult>& results);

// A GoogleTest listener that records each case's outcome into `results`, and with `progress`
// keeps a one-line count of the cases run on stderr.
class Collector final : public ::testing::EmptyTestEventListener {
 public:
  Collector(std::vector<CaseResult>& results, bool progress)
      : results_(results), progress_(progress) {}
  void OnTestStart(const ::testing::TestInfo& info) override;
  void OnTestPartResult(const ::testing::TestPartResult& part) override;
  void OnTestEnd(const ::testing::TestInfo& info) override;
  void OnTestProgramEnd(const ::testing::UnitTest& unit) override;

 private:
  std::vector<CaseResult>& results_;
  bool progress_;
  CaseResult current_;
};

}  // namespace kvcache::conformance
