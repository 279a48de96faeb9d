// What a config's text must be before it is read: UTF-8 without control characters. YAML is
// Unicode and printable, yaml-cpp passes bytes through unchecked, a string that is not UTF-8
// cannot become a component's JSON options, and one with a NUL does not survive to_yaml.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvcache::detail {

// The offset of the first byte that does not begin or continue a well-formed UTF-8 sequence
// (overlong forms, surrogates and code points past U+10FFFF are not well formed), or nullopt.
inline std::optional<std::size_t> invalid_utf8_at(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<std::uint8_t>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // The sequence length and the range its second byte must lie in (RFC 3629, section 4).
    std::size_t length = 0;
    std::uint8_t low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;   // no overlong forms
      if (lead == 0xED) high = 0x9F;  // no surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;   // no overlong forms
      if (lead == 0xF4) high = 0x8F;  // nothing past U+10FFFF
    } else {
      return i;
    }
    for (std::size_t k = 1; k < length; ++k) {
      if (i + k >= text.size()) return i;
      const auto next = static_cast<std::uint8_t>(text[i + k]);
      if (next < (k == 1 ? low : 0x80) || next > (k == 1 ? high : 0xBF)) return i;
    }
    i += length;
  }
  return std::nullopt;
}

// The offset of the first control character a config may not hold, or nullopt: those YAML does
// not allow (c-printable: every C0 control but tab, line feed and carriage return, and DEL), and
// a carriage return outside a CRLF line break (yaml-cpp keeps some of a run of them in a scalar
// and drops others, so such a value does not survive to_yaml).
inline std::optional<std::size_t> control_character_at(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<std::uint8_t>(text[i]);
    if (c == '\r' && (i + 1 == text.size() || text[i + 1] != '\n')) return i;
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) return i;
  }
  return std::nullopt;
}

// The first byte a config's text may not hold, and why; nullopt when the text is fine.
struct TextFault {
  std::size_t at;
  const char* what;
};
inline std::optional<TextFault> text_fault(std::string_view text) {
  if (const auto at = invalid_utf8_at(text)) return TextFault{*at, "the text is not UTF-8 here"};
  if (const auto at = control_character_at(text))
    return TextFault{*at, "a control character, which YAML does not allow"};
  return std::nullopt;
}

}  // namespace kvcache::detail
