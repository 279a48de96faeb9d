// "Did you mean ...?" for names typed by people: config keys, component names, option names.
// Header-only so the plugin SDK uses the very same rule as the host.
#pragma once

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvcache {

// Optimal string alignment distance (Levenshtein plus adjacent transposition), case-insensitive.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  const auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// The candidate closest to `name`, if it is close enough to be a plausible typo: at most a third
// of the longer name's length (and at least 2) edits away.
template <class Range>
std::optional<std::string> nearest_name(std::string_view name, const Range& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const auto& candidate : candidates) {
    const std::string_view c(candidate);
    const std::size_t distance = edit_distance(name, c);
    const std::size_t limit = std::max<std::size_t>(2, std::max(name.size(), c.size()) / 3);
    if (distance <= limit && (!best || distance < best_distance)) {
      best = std::string(c);
      best_distance = distance;
    }
  }
  return best;
}

// " (did you mean 'x'?)" or "" — ready to append to a message.
template <class Range>
std::string did_you_mean(std::string_view name, const Range& candidates) {
  const auto best = nearest_name(name, candidates);
  return best ? " (did you mean '" + *best + "'?)" : std::string();
}

// "a, b, c": names listed in a message.
template <class Range>
std::string name_list(const Range& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace kvcache
