// The plugin SDK (header-only): implement kvcache's C++ interfaces, export them with one macro.
// A component implements AttentionMask, Quantizer, EvictionPolicy, Backend, or
// remote::ByteStore (a transport of the shared tier).
//
//   class MyMask final : public kvcache::AttentionMask {
//    public:
//     explicit MyMask(const kvcache::sdk::Options& options);   // options = config section
//     ...
//   };
//   KVCACHE_PLUGIN("my-plugin", "1.0.0", kvcache::sdk::component<MyMask>("my-mask", "1.0.0"))
//
// The SDK generates the C tables of plugin_abi.h, checks the host's ABI major, and turns every
// exception into a status (kvcache::Error keeps its code; anything else becomes `internal`). A
// component class may define `static kvcache::sdk::Availability availability();` to say that it
// cannot run on this host (no GPU, no driver) while still loading.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kvcache/backend.hpp"
#include "kvcache/capabilities.hpp"
#include "kvcache/eviction.hpp"
#include "kvcache/mask.hpp"
#include "kvcache/plugin_abi.h"
#include "kvcache/quantizer.hpp"
#include "kvcache/remote/byte_store.hpp"
#include "kvcache/sdk/attention_thunks.hpp"
#include "kvcache/sdk/c_types.hpp"
#include "kvcache/sdk/format_codec.hpp"
#include "kvcache/sdk/guard.hpp"
#include "kvcache/sdk/options.hpp"
#include "kvcache/sdk/store_thunks.hpp"
#include "kvcache/status.hpp"

namespace kvcache::sdk {

struct Availability {
  bool available = true;
  std::string reason;  // why not, when !available
};

using kvcache::Capabilities;

// One exported component; made by component<T>().
struct ComponentSpec {
  std::uint32_t kind = 0;
  std::string name;
  std::string version;
  Capabilities capabilities;
  int32_t (*availability)(kvc_error*) = nullptr;
  const void* table = nullptr;
};

namespace detail {

template <class T>
int32_t create(const char* options_json, void** instance, kvc_error* err) noexcept {
  return guard(err, [&] { *instance = new T(Options::parse(options_json)); });
}

template <class T>
void destroy(void* instance) noexcept {
  delete static_cast<T*>(instance);
}

template <class T>
int32_t availability(kvc_error* err) noexcept {
  return guard(err, [&] {
    const Availability a = T::availability();
    if (!a.available) throw Error(Code::unavailable, a.reason);
  });
}

template <class T>
T& self(void* instance) {
  return *static_cast<T*>(instance);
}

// ---- masks ----

static_assert(sizeof(PositionRange) == sizeof(kvc_range) &&
              alignof(PositionRange) == alignof(kvc_range));

template <class T>
struct MaskThunks {
  static int32_t describe(void* instance, kvc_mask_desc* out, kvc_error* err) noexcept {
    return guard(err, [&] {
      const MaskDescription d = self<T>(instance).describe();
      kvc_mask_desc c{sizeof(kvc_mask_desc),
                      static_cast<std::uint32_t>(d.kind),
                      d.max_ranges,
                      d.positions_in_cache ? KVC_MASK_POSITIONS_IN_CACHE : 0u,
                      d.window,
                      d.sinks,
                      d.chunk};
      copy_out(c, out);
    });
  }
  static int32_t visible(void* instance, const int64_t* queries, uint64_t n, kvc_range* ranges,
                         uint32_t* counts, kvc_error* err) noexcept {
    return guard(err, [&] {
      const T& mask = self<T>(instance);
      const std::size_t per_query = mask.describe().max_ranges;
      mask.visible(
          std::span<const Position>(queries, n),
          std::span<PositionRange>(reinterpret_cast<PositionRange*>(ranges), n * per_query),
          std::span<std::uint32_t>(counts, n));
    });
  }
  static int32_t query_positions(void* instance, const int64_t* queries, uint64_t n,
                                 const kvc_range* ranges, const uint32_t* counts,
                                 int64_t* positions, kvc_error* err) noexcept {
    return guard(err, [&] {
      const T& mask = self<T>(instance);
      const std::size_t per_query = mask.describe().max_ranges;
      mask.query_positions(std::span<const Position>(queries, n),
                           std::span<const PositionRange>(
                               reinterpret_cast<const PositionRange*>(ranges), n * per_query),
                           std::span<const std::uint32_t>(counts, n),
                           std::span<Position>(positions, n * per_query));
    });
  }
  static constexpr kvc_mask_table table{
      sizeof(kvc_mask_table), &create<T>, &destroy<T>, &describe, &visible, &query_positions};
};

// ---- quantizers ----

template <class T>
struct QuantizerThunks {
  static constexpr kvc_quantizer_table table{sizeof(kvc_quantizer_table),
                                             &create<T>,
                                             &destroy<T>,
                                             &QuantizerCalls<T>::describe,
                                             &QuantizerCalls<T>::encode,
                                             &QuantizerCalls<T>::decode};
};

// ---- eviction ----

// The host's per-token callback seen as a TokenSource.
class HostTokens final : public TokenSource {
 public:
  explicit HostTokens(const kvc_cache_state& state) : state_(state) {}
  TokenDetail tokens(SeqId sequence) const override {
    const int64_t* positions = nullptr;
    const float* scores = nullptr;
    uint64_t count = 0;
    kvc_error err{sizeof(kvc_error), 0, {}};
    if (state_.tokens(state_.context, sequence, &positions, &scores, &count, &err) != KVC_OK)
      throw Error(static_cast<Code>(err.code), err.message);
    return {std::span<const Position>(positions, count),
            scores ? std::span<const float>(scores, count) : std::span<const float>()};
  }

 private:
  const kvc_cache_state& state_;
};

inline void send_plan(const EvictionPlan& plan, kvc_plan_builder* builder) {
  const auto check = [](int32_t rc, const char* what) {
    if (rc != KVC_OK) throw Error(static_cast<Code>(rc), std::string("host refused ") + what);
  };
  if (plan.free_cached_pages > 0)
    check(builder->free_cached_pages(builder->context, plan.free_cached_pages),
          "free_cached_pages");
  for (SeqId s : plan.preempt) check(builder->preempt(builder->context, s), "preempt");
  for (const DroppedRange& d : plan.drop)
    check(builder->drop(builder->context, d.sequence, d.range.begin, d.range.end), "drop");
}

template <class T>
struct EvictionThunks {
  template <class Decide>
  static int32_t decide(const kvc_cache_state* state, kvc_plan_builder* builder, kvc_error* err,
                        Decide&& policy_call) noexcept {
    return guard(err, [&] {
      // Entries are sequence_size bytes apart (ABI 1.3); a 1.2 host's are the 1.2 struct, which
      // is the whole of today's.
      const bool sized = state->struct_size >=
                         offsetof(kvc_cache_state, sequence_size) + sizeof(state->sequence_size);
      constexpr std::size_t kSequence_1_2 =
          offsetof(kvc_sequence_state, next_position) + sizeof(int64_t);
      const std::size_t stride = sized ? state->sequence_size : kSequence_1_2;
      if (stride < kSequence_1_2)
        throw Error(Code::invalid_argument, "sequence entries of " + std::to_string(stride) +
                                                " bytes are smaller than ABI 1.2's " +
                                                std::to_string(kSequence_1_2));
      std::vector<SequenceState> sequences;
      sequences.reserve(state->n_sequences);
      const auto* entries = reinterpret_cast<const std::byte*>(state->sequences);
      for (uint64_t i = 0; i < state->n_sequences; ++i) {
        kvc_sequence_state s{};  // fields of a newer minor than the host's stay zero
        std::memcpy(&s, entries + i * stride, std::min(stride, sizeof(s)));
        sequences.push_back({s.id, s.tokens, s.pages, s.priority, s.created_step, s.last_used_step,
                             s.next_position});
      }
      const HostTokens tokens(*state);
      const CacheState view{
          state->page_size, state->step, state->total_pages, state->free_pages, state->cached_pages,
          sequences,        &tokens};
      send_plan(policy_call(view), builder);
    });
  }
  static int32_t wants_scores(void* instance, uint32_t* out, kvc_error* err) noexcept {
    return guard(err, [&] { *out = self<T>(instance).wants_scores() ? 1u : 0u; });
  }
  static int32_t drops_tokens(void* instance, uint32_t* out, kvc_error* err) noexcept {
    return guard(err, [&] {
      const std::optional<bool> drops = self<T>(instance).drops_tokens();
      if (!drops) throw Error(Code::unsupported, "the policy does not say whether it drops tokens");
      *out = *drops ? 1u : 0u;
    });
  }
  static int32_t after_step(void* instance, const kvc_cache_state* state, kvc_plan_builder* plan,
                            kvc_error* err) noexcept {
    return decide(state, plan, err,
                  [&](const CacheState& view) { return self<T>(instance).after_step(view); });
  }
  static int32_t on_pressure(void* instance, const kvc_cache_state* state, uint64_t pages_needed,
                             kvc_plan_builder* plan, kvc_error* err) noexcept {
    return decide(state, plan, err, [&](const CacheState& view) {
      return self<T>(instance).on_pressure(view, pages_needed);
    });
  }
  static constexpr kvc_eviction_table table{sizeof(kvc_eviction_table),
                                            &create<T>,
                                            &destroy<T>,
                                            &wants_scores,
                                            &after_step,
                                            &on_pressure,
                                            &drops_tokens};
};

// ---- backends ----

template <class T>
struct BackendThunks {
  static int32_t device_count(void* instance, uint32_t* count, kvc_error* err) noexcept {
    return guard(err, [&] { *count = static_cast<uint32_t>(self<T>(instance).devices().size()); });
  }
  static int32_t device_info(void* instance, uint32_t index, kvc_device_info* out,
                             kvc_error* err) noexcept {
    return guard(err, [&] {
      const std::vector<DeviceInfo> devices = self<T>(instance).devices();
      if (index >= devices.size())
        throw Error(Code::invalid_argument, "device index " + std::to_string(index) +
                                                " out of range (" + std::to_string(devices.size()) +
                                                " devices)");
      const DeviceInfo& d = devices[index];
      kvc_device_info c{
          sizeof(kvc_device_info), d.index, d.available ? 1u : 0u, 0, d.memory_bytes, {}, {}};
      std::snprintf(c.name, sizeof(c.name), "%s", d.name.c_str());
      std::snprintf(c.reason, sizeof(c.reason), "%s", d.reason.c_str());
      copy_out(c, out);
    });
  }
  static void make_store(void* instance, const StoreSpec& spec, const kvc_store_table** table,
                         void** store) {
    std::unique_ptr<CacheStore> made = self<T>(instance).create_store(spec);
    if (!made) throw Error(Code::internal, "create_store returned no store");
    *table = &StoreThunks::table;
    *store = made.release();
  }
  static int32_t create_store(void* instance, const char* spec_json, const kvc_store_table** table,
                              void** store, kvc_error* err) noexcept {
    return guard(err, [&] {
      make_store(instance, store_spec_from_json(nlohmann::json::parse(spec_json)), table, store);
    });
  }
  static int32_t create_store_with(void* instance, const kvc_store_args* args,
                                   const kvc_store_table** table, void** store,
                                   kvc_error* err) noexcept {
    return guard(err, [&] {
      if (args == nullptr ||
          args->struct_size < offsetof(kvc_store_args, v_codec) + sizeof(args->v_codec) ||
          args->spec_json == nullptr)
        throw Error(Code::invalid_argument, "store arguments are incomplete");
      StoreSpec spec = store_spec_from_json(nlohmann::json::parse(args->spec_json));
      if (args->k_codec != nullptr) spec.k_codec = std::make_shared<LentQuantizer>(*args->k_codec);
      if (args->v_codec != nullptr) spec.v_codec = std::make_shared<LentQuantizer>(*args->v_codec);
      make_store(instance, spec, table, store);
    });
  }
  static int32_t create_attention(void* instance, const kvc_attention_table** table,
                                  void** attention, kvc_error* err) noexcept {
    return guard(err, [&] {
      std::unique_ptr<Attention> made = self<T>(instance).create_attention();
      if (!made) throw Error(Code::internal, "create_attention returned no attention");
      *table = &AttentionThunks::table;
      *attention = made.release();
    });
  }
  static int32_t memory_bandwidth(void* instance, uint64_t bytes, double* gbps,
                                  kvc_error* err) noexcept {
    return guard(err,
                 [&] { *gbps = self<T>(instance).memory_bandwidth_gbps(bytes).value_or(0.0); });
  }
  static constexpr kvc_backend_table table{sizeof(kvc_backend_table),
                                           &create<T>,
                                           &destroy<T>,
                                           &device_count,
                                           &device_info,
                                           &create_store,
                                           &create_attention,
                                           &memory_bandwidth,
                                           &create_store_with};
};

// ---- transports ----
template <class T>
struct TransportThunks {
  static std::vector<std::string> keys_of(const char* const* keys, uint64_t n) {
    return std::vector<std::string>(keys, keys + n);
  }
  static int32_t probe(void* instance, const char* const* keys, uint64_t n, uint8_t* held,
                       kvc_error* err) noexcept {
    return guard(err, [&] {
      const std::vector<bool> answer = self<T>(instance).probe(keys_of(keys, n));
      for (uint64_t i = 0; i < n; ++i) held[i] = i < answer.size() && answer[i] ? 1 : 0;
    });
  }
  static int32_t get(void* instance, const char* const* keys, uint64_t n, kvc_value_sink sink,
                     void* context, kvc_error* err) noexcept {
    return guard(err, [&] {
      self<T>(instance).get_each(keys_of(keys, n),
                                 [&](std::size_t i, std::span<const std::byte> v) {
                                   if (i < n && sink(context, i, v.data(), v.size()) != KVC_OK)
                                     throw Error(Code::internal, "the host refused a value");
                                 });
    });
  }
  static int32_t put_if_absent(void* instance, const char* const* keys, const void* const* values,
                               const uint64_t* sizes, uint64_t n, uint8_t* stored,
                               kvc_error* err) noexcept {
    return guard(err, [&] {
      std::vector<remote::Value> v;
      for (uint64_t i = 0; i < n; ++i) {
        const auto* bytes = static_cast<const std::byte*>(values[i]);
        v.emplace_back(bytes, bytes + sizes[i]);
      }
      const std::vector<bool> answer = self<T>(instance).put_if_absent(keys_of(keys, n), v);
      for (uint64_t i = 0; i < n; ++i) stored[i] = i < answer.size() && answer[i] ? 1 : 0;
    });
  }
  static int32_t remove(void* instance, const char* const* keys, uint64_t n,
                        kvc_error* err) noexcept {
    return guard(err, [&] { self<T>(instance).remove(keys_of(keys, n)); });
  }
  static int32_t describe(void* instance, char* out, uint64_t capacity, kvc_error* err) noexcept {
    return guard(err, [&] {
      if (capacity > 0) std::snprintf(out, capacity, "%s", self<T>(instance).describe().c_str());
    });
  }
  static constexpr kvc_transport_table table{sizeof(kvc_transport_table),
                                             &create<T>,
                                             &destroy<T>,
                                             &probe,
                                             &get,
                                             &put_if_absent,
                                             &remove,
                                             &describe};
};

// The thunks and kind of a component class, by the interface it implements.
template <class T>
constexpr auto thunks_of() {
  if constexpr (std::is_base_of_v<AttentionMask, T>)
    return MaskThunks<T>{};
  else if constexpr (std::is_base_of_v<Quantizer, T>)
    return QuantizerThunks<T>{};
  else if constexpr (std::is_base_of_v<EvictionPolicy, T>)
    return EvictionThunks<T>{};
  else if constexpr (std::is_base_of_v<Backend, T>)
    return BackendThunks<T>{};
  else if constexpr (std::is_base_of_v<remote::ByteStore, T>)
    return TransportThunks<T>{};
}

template <class T>
constexpr std::uint32_t kind_of() {
  if constexpr (std::is_base_of_v<AttentionMask, T>)
    return KVC_KIND_MASK;
  else if constexpr (std::is_base_of_v<Quantizer, T>)
    return KVC_KIND_QUANTIZER;
  else if constexpr (std::is_base_of_v<EvictionPolicy, T>)
    return KVC_KIND_EVICTION;
  else if constexpr (std::is_base_of_v<remote::ByteStore, T>)
    return KVC_KIND_TRANSPORT;
  else
    return KVC_KIND_BACKEND;
}

// Everything the descriptor points into; built once, never moved.
class PluginData {
 public:
  PluginData(const char* name, const char* version, std::vector<ComponentSpec> specs)
      : name_(name), version_(version), specs_(std::move(specs)) {
    capabilities_.reserve(specs_.size());
    format_names_.reserve(specs_.size());
    numerics_.reserve(specs_.size());
    for (const ComponentSpec& s : specs_) {
      std::vector<const char*>& formats = format_names_.emplace_back();
      for (const std::string& f : s.capabilities.formats) formats.push_back(f.c_str());
      const Capabilities& c = s.capabilities;
      const std::string& numerics = numerics_.emplace_back(c.numerics.dump());
      capabilities_.push_back(
          {sizeof(kvc_capabilities), static_cast<uint32_t>(formats.size()), formats.data(),
           static_cast<uint32_t>(c.head_dims.size()), c.head_dims.data(),
           static_cast<uint32_t>(c.page_sizes.size()), c.page_sizes.data(),
           c.device_kind.empty() ? nullptr : c.device_kind.c_str(), c.foreign_formats ? 1u : 0u, 0,
           numerics.c_str(), c.query_rotation ? 1u : 0u, 0});
      components_.push_back({sizeof(kvc_component), s.kind, s.name.c_str(), s.version.c_str(),
                             &capabilities_.back(), s.availability, s.table});
    }
    descriptor_ = {sizeof(kvc_plugin_descriptor),
                   KVC_ABI_MAJOR,
                   KVC_ABI_MINOR,
                   name_.c_str(),
                   version_.c_str(),
                   static_cast<uint32_t>(components_.size()),
                   components_.data()};
  }
  PluginData(const PluginData&) = delete;
  PluginData& operator=(const PluginData&) = delete;
  const kvc_plugin_descriptor* descriptor() const { return &descriptor_; }

 private:
  std::string name_;
  std::string version_;
  std::vector<ComponentSpec> specs_;
  std::vector<std::vector<const char*>> format_names_;
  std::vector<std::string> numerics_;
  std::vector<kvc_capabilities> capabilities_;
  std::vector<kvc_component> components_;
  kvc_plugin_descriptor descriptor_{};
};

template <class Make>
int32_t entry(const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err,
              Make make) noexcept {
  return guard(err, [&] {
    if (host == nullptr || host->abi_major != KVC_ABI_MAJOR)
      throw Error(
          Code::unsupported,
          "plugin needs kvcache ABI " + std::to_string(KVC_ABI_MAJOR) + ".x, host offers " +
              (host ? std::to_string(host->abi_major) + "." + std::to_string(host->abi_minor)
                    : std::string("nothing")));
    static const PluginData data = make();
    *out = data.descriptor();
  });
}

}  // namespace detail

// Declares a component implemented by class T (constructible from `const Options&`).
template <class T>
ComponentSpec component(std::string name, std::string version, Capabilities capabilities = {}) {
  constexpr bool known = std::is_base_of_v<AttentionMask, T> || std::is_base_of_v<Quantizer, T> ||
                         std::is_base_of_v<EvictionPolicy, T> || std::is_base_of_v<Backend, T> ||
                         std::is_base_of_v<remote::ByteStore, T>;
  static_assert(known,
                "a component implements AttentionMask, Quantizer, EvictionPolicy, Backend or "
                "remote::ByteStore (a transport)");
  static_assert(std::is_constructible_v<T, const Options&>, "a component is built from Options");
  ComponentSpec spec{
      detail::kind_of<T>(),    std::move(name), std::move(version),
      std::move(capabilities), nullptr,         &decltype(detail::thunks_of<T>())::table};
  if constexpr (requires { T::availability(); }) spec.availability = &detail::availability<T>;
  return spec;
}

}  // namespace kvcache::sdk

// Exports the plugin's entry function; the only symbol a plugin makes visible.
#define KVCACHE_PLUGIN(plugin_name, plugin_version, ...)                                     \
  extern "C" __attribute__((visibility("default"))) int32_t kvcache_plugin_entry(            \
      const kvc_host_info* host, const kvc_plugin_descriptor** out, kvc_error* err) {        \
    return ::kvcache::sdk::detail::entry(host, out, err, [] {                                \
      return ::kvcache::sdk::detail::PluginData(plugin_name, plugin_version, {__VA_ARGS__}); \
    });                                                                                      \
  }
