// Runs the conformance cases in this process and returns each one's outcome: what `kvcache
// conformance` calls, after configure() (setup.hpp). The cases are GoogleTest's
// (store_cases.cpp, attention_cases.cpp), the same ones ctest runs, so nothing is written twice;
// GoogleTest runs once per process.
#pragma once

#include <string>
#include <vector>

#include "report.hpp"
#include "setup.hpp"

namespace kvcache::conformance {

struct RunOptions {
  std::string filter = "*";  // GoogleTest's: globs separated by ':', '-' before exclusions
  bool progress = false;     // a progress line on stderr
};

std::vector<CaseResult> run(const RunOptions& options);

}  // namespace kvcache::conformance
