#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <map>
#include <tuple>

namespace kvcache::conformance {
namespace {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::passed:
      return "passed";
    case Outcome::skipped:
      return "skipped";
    case Outcome::failed:
      return "failed";
  }
  return "?";
}

// GoogleTest's name without the instantiation prefix and the parameter suffix.
std::string test_of(const ::testing::TestInfo& info) {
  std::string suite = info.test_suite_name();
  if (const auto slash = suite.find('/'); slash != std::string::npos) suite.erase(0, slash + 1);
  std::string name = info.name();
  if (const auto slash = name.find('/'); slash != std::string::npos) name.erase(slash);
  return suite + "." + name;
}

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace

Summary summarize(const std::vector<CaseResult>& results) {
  Summary s;
  for (const CaseResult& r : results) {
    if (r.outcome == Outcome::passed) ++s.passed;
    if (r.outcome == Outcome::skipped) ++s.skipped;
    if (r.outcome == Outcome::failed) ++s.failed;
  }
  return s;
}

void print_matrix(std::ostream& out, const std::vector<CaseResult>& results) {
  std::map<std::pair<std::string, std::string>, Summary> cells;
  std::map<std::tuple<std::string, std::string, std::string>, std::size_t> reasons;
  std::size_t component_width = 9, test_width = 4;
  for (const CaseResult& r : results) {
    Summary& cell = cells[{r.component, r.test}];
    if (r.outcome == Outcome::passed) ++cell.passed;
    if (r.outcome == Outcome::skipped) {
      ++cell.skipped;
      ++reasons[{r.component, r.test, r.message}];
    }
    if (r.outcome == Outcome::failed) ++cell.failed;
    component_width = std::max(component_width, r.component.size());
    test_width = std::max(test_width, r.test.size());
  }
  const auto row = [&](const std::string& component, const std::string& test, auto passed,
                       auto skipped, auto failed) {
    out << std::left << std::setw(static_cast<int>(component_width + 2)) << component
        << std::setw(static_cast<int>(test_width + 2)) << test << std::right << std::setw(7)
        << passed << std::setw(8) << skipped << std::setw(7) << failed << '\n';
  };
  row("component", "case", "passed", "skipped", "failed");
  for (const auto& [key, cell] : cells)
    row(key.first, key.second, cell.passed, cell.skipped, cell.failed);
  if (!reasons.empty()) {
    out << "\nskipped, as the components declared:\n";
    for (const auto& [key, count] : reasons)
      out << "  " << std::get<0>(key) << "  " << std::get<1>(key) << " (" << count
          << (count == 1 ? " case): " : " cases): ") << one_line(std::get<2>(key)) << '\n';
  }
  const Summary total = summarize(results);
  if (total.failed > 0) {
    out << "\nfailed, each with its first mismatch:\n";
    for (const CaseResult& r : results)
      if (r.outcome == Outcome::failed)
        out << "  " << r.name << "\n    " << one_line(r.message) << '\n';
  }
  out << '\n'
      << results.size() << " cases: " << total.passed << " passed, " << total.skipped
      << " skipped, " << total.failed << " failed\n";
}

nlohmann::json to_json(const std::vector<CaseResult>& results) {
  nlohmann::json cases = nlohmann::json::array();
  for (const CaseResult& r : results)
    cases.push_back({{"name", r.name},
                     {"case", r.test},
                     {"component", r.component},
                     {"formats", r.formats},
                     {"outcome", outcome_name(r.outcome)},
                     {"message", r.message},
                     {"seconds", r.seconds}});
  const Summary s = summarize(results);
  return {{"cases", cases},
          {"summary", {{"passed", s.passed}, {"skipped", s.skipped}, {"failed", s.failed}}}};
}

void Collector::OnTestStart(const ::testing::TestInfo& info) {
  current_ = CaseResult{};
  current_.name = std::string(info.test_suite_name()) + "." + info.name();
  current_.test = test_of(info);
  if (progress_) {
    const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
    std::string line = "[" + std::to_string(results_.size() + 1) + "/" +
                       std::to_string(unit.test_to_run_count()) + "] " + current_.name;
    line.resize(100, ' ');
    std::fprintf(stderr, "\r%s", line.c_str());
    std::fflush(stderr);
  }
}

void Collector::OnTestPartResult(const ::testing::TestPartResult& part) {
  if (!current_.message.empty() || part.type() == ::testing::TestPartResult::kSuccess) return;
  if (part.skipped()) {
    current_.message = part.message();
  } else {
    current_.message = std::string(part.file_name() != nullptr ? part.file_name() : "?") + ":" +
                       std::to_string(part.line_number()) + ": " + part.message();
  }
}

void Collector::OnTestEnd(const ::testing::TestInfo& info) {
  const ::testing::TestResult& result = *info.result();
  current_.outcome = result.Failed()    ? Outcome::failed
                     : result.Skipped() ? Outcome::skipped
                                        : Outcome::passed;
  if (current_.outcome == Outcome::passed) current_.message.clear();
  for (int i = 0; i < result.test_property_count(); ++i) {
    const ::testing::TestProperty& p = result.GetTestProperty(i);
    if (std::string(p.key()) == "component") current_.component = p.value();
    if (std::string(p.key()) == "formats") current_.formats = p.value();
  }
  if (current_.component.empty()) current_.component = "-";
  current_.seconds = static_cast<double>(result.elapsed_time()) / 1000.0;
  results_.push_back(std::move(current_));
}

void Collector::OnTestProgramEnd(const ::testing::UnitTest&) {
  if (progress_) std::fprintf(stderr, "\r%100s\r", "");
}

}  // namespace kvcache::conformance
