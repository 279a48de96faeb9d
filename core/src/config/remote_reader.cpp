// The `remote:` section (docs/remote-tier.md): the remote tier's transport, namespace, writes,
// reads and breaker.
#include <algorithm>
#include <cctype>

#include "config/overlay.hpp"

namespace kvcache::detail {

void Overlay::remote_key(YamlReader& reader, RemoteSettings& remote, const std::string& key,
                         const Field& value) {
  const auto nested = [&](std::initializer_list<std::string_view> keys, auto read) {
    reader.for_each_entry(value, keys, read);
  };
  const auto count = [&](const Field& f, std::uint32_t& out) {
    if (const auto n = reader.positive_int(f)) out = *n;
  };
  if (key == "transport") {
    reader.component(value, remote.transport);
  } else if (key == "endpoints") {
    const auto items = reader.items(value, "a list of endpoints");
    if (!items) return;
    remote.endpoints.clear();
    for (const Field& item : *items)
      if (const auto endpoint = reader.text(item, "an endpoint"))
        remote.endpoints.push_back(*endpoint);
  } else if (key == "model") {
    if (const auto model = reader.text(value, "the model's identity")) remote.model = *model;
  } else if (key == "namespace") {
    nested({"label", "salt_env"}, [&](const std::string& k, const Field& f) {
      const auto text = reader.text(f, k == "label" ? "a label" : "a variable's name");
      if (!text) return;
      const bool plain = std::all_of(text->begin(), text->end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
      });
      if (!plain)
        reader.error(f,
                     "expected letters, digits, '_', '-' or '.' (it is part of every key), "
                     "got '" +
                         *text + "'");
      else
        (k == "label" ? remote.label : remote.salt_env) = *text;
    });
  } else if (key == "write") {
    nested({"queue"}, [&](const std::string&, const Field& f) {
      if (const auto bytes = reader.size(f)) remote.queue_bytes = *bytes;
    });
  } else if (key == "read") {
    nested({"min_pages", "batch_pages", "deadline_ms"}, [&](const std::string& k, const Field& f) {
      count(f, k == "min_pages"     ? remote.min_pages
               : k == "batch_pages" ? remote.batch_pages
                                    : remote.deadline_ms);
    });
  } else if (key == "breaker") {
    nested({"failures", "open_ms"}, [&](const std::string& k, const Field& f) {
      count(f, k == "failures" ? remote.breaker_failures : remote.breaker_open_ms);
    });
  }
}

}  // namespace kvcache::detail
