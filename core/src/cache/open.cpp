// Cache::open: the composition. The first available backend of the preference list makes, for
// each layer group, a store of the group's layers in its formats and an attention; the group's
// mask decides what its queries see and, in a cache of several groups, which pages it frees.
#include <cstdlib>
#include <numeric>

#include <spdlog/spdlog.h>

#include "cache/cache_impl.hpp"
#include "cache/windows.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/remote/transports.hpp"

namespace kvcache {

StoreSpec store_spec(const Config& config) {
  StoreSpec spec;
  spec.model = config.model;
  spec.page_size = config.cache.page_size;
  spec.capacity_bytes = config.cache.capacity_bytes;
  spec.prefix_caching = config.cache.prefix_caching;
  spec.k_format = config.k_format.name;
  spec.k_options = config.k_format.options;
  spec.v_format = config.v_format.name;
  spec.v_options = config.v_format.options;
  return spec;
}

StoreSpec store_spec(const Config& config, const Registry& registry) {
  return with_codecs(store_spec(config), registry);
}

namespace {

// Puts the remote tier in front of a group's store (the config as the group sees it). A store
// that cannot copy pages (a plugin before ABI 1.7) keeps working without it, saying so. In a
// cache of several groups the model's identity in each group's keys names the group's layers:
// two groups' pages never meet, and only hosts with the same layout share them.
void attach_tier(Cache::Impl& impl, Cache::Impl::Group& group, RemoteSettings remote,
                 const Config& config, bool hybrid) {
  if (hybrid && !remote.model.empty()) {
    remote.model += " layers";
    for (const std::uint32_t layer : group.info.layers) remote.model += " " + std::to_string(layer);
  }
  remote::TierSettings settings{remote, {}, {}};
  if (!remote.salt_env.empty()) {
    const char* salt = std::getenv(remote.salt_env.c_str());
    if (salt == nullptr)
      throw Error(Code::invalid_argument,
                  "remote.namespace.salt_env names " + remote.salt_env + ", which is not set");
    settings.salt = salt;
  }
  settings.formats = {config.k_format.name, config.k_format.options, config.v_format.name,
                      config.v_format.options};
  std::unique_ptr<remote::ByteStore> transport = remote::make_transport(remote, *impl.registry);
  if (const auto why = remote::TieredStore::unsupported(*group.store, config.model)) {
    spdlog::warn("remote tier off: backend {}: {}", impl.backend_name, *why);
    return;
  }
  const std::string where = transport->describe();
  auto tier = std::make_unique<remote::TieredStore>(std::move(group.store), std::move(transport),
                                                    config.model, std::move(settings));
  group.tier = tier.get();
  group.kv = &tier->inner();
  group.store = std::move(tier);
  spdlog::info("remote tier: {} (namespace {})", where, remote.label);
}

// The config as one group sees it: its layers, mask and formats. A uniform config is one group,
// "all", of every layer.
std::vector<std::pair<LayerGroup, Config>> group_configs(const Config& config) {
  std::vector<LayerGroup> groups = config.layer_groups;
  if (groups.empty()) {
    LayerGroup all{"all", config.mask, config.k_format, config.v_format, {}, {}};
    all.layers.resize(config.model.layers);
    std::iota(all.layers.begin(), all.layers.end(), 0u);
    groups.push_back(std::move(all));
  }
  std::vector<std::pair<LayerGroup, Config>> out;
  for (LayerGroup& group : groups) {
    Config c = config;
    c.model.layers = static_cast<std::uint32_t>(group.layers.size());
    c.mask = group.mask;
    c.k_format = group.k_format;
    c.v_format = group.v_format;
    c.layer_groups.clear();
    out.emplace_back(std::move(group), std::move(c));
  }
  return out;
}

// Each group's share of the capacity: in proportion to what a sequence of layers.context tokens
// holds in it (its page's bytes times the pages its mask keeps, and one for the step in flight,
// which a sliding group reserves before it frees the page its window left), so that the groups
// run out together at that length.
std::vector<std::uint64_t> capacity_shares(std::uint64_t capacity, std::uint64_t context,
                                           std::uint32_t page_size, std::uint32_t rollback,
                                           const std::vector<StoreSpec>& specs,
                                           const std::vector<MaskDescription>& masks) {
  std::vector<long double> weights;
  long double total = 0;
  for (std::size_t g = 0; g < specs.size(); ++g) {
    weights.push_back(
        static_cast<long double>(page_cost(specs[g])) *
        static_cast<long double>(windows::pages_kept(masks[g], context, page_size, rollback) + 1));
    total += weights.back();
  }
  std::vector<std::uint64_t> shares;
  for (const long double weight : weights)
    shares.push_back(
        static_cast<std::uint64_t>(static_cast<long double>(capacity) * weight / total));
  return shares;
}

const ComponentInfo& choose_backend(Cache::Impl& impl, const Config& config) {
  std::string why;
  for (const ComponentChoice& entry : config.backends) {
    const ComponentInfo* info = impl.registry->find(ComponentKind::backend, entry.name);
    if (info != nullptr && info->available) {
      impl.backend_name = entry.name;
      if (!why.empty()) spdlog::info("backend {} chosen; before it: {}", entry.name, why);
      impl.backend = impl.registry->create_backend(entry.name, entry.options);
      return *info;
    }
    why += (why.empty() ? "" : "; ") + entry.name + ": " +
           (info == nullptr ? std::string("not installed") : info->unavailable_reason);
  }
  throw Error(Code::unavailable,
              "no backend of the preference list is available here (" + why + ")");
}

// Groups that do not cover the model's layers once each (a Config made in code, not read).
void refuse_for_groups(const Config& config) {
  if (config.layer_groups.empty()) return;
  std::vector<int> owners(config.model.layers, 0);
  for (const LayerGroup& group : config.layer_groups)
    for (const std::uint32_t layer : group.layers) {
      if (layer >= config.model.layers)
        throw Error(Code::invalid_argument, "layers.groups." + group.name + ": layer " +
                                                std::to_string(layer) + " is past the model's " +
                                                std::to_string(config.model.layers));
      ++owners[layer];
    }
  for (std::uint32_t layer = 0; layer < config.model.layers; ++layer)
    if (owners[layer] != 1)
      throw Error(Code::invalid_argument, "layers: layer " + std::to_string(layer) + " is in " +
                                              std::to_string(owners[layer]) +
                                              " groups; every layer is in exactly one");
}

}  // namespace

std::unique_ptr<Cache> Cache::open(const Config& config, std::shared_ptr<const Registry> registry) {
  auto impl = std::make_unique<Impl>();
  impl->registry = registry;
  impl->model = config.model;
  impl->page_size = config.cache.page_size;
  impl->rollback = config.group_rollback;
  const bool hybrid = !config.layer_groups.empty();
  if (config.eviction.name != "none")
    impl->policy = registry->create_eviction(config.eviction.name, config.eviction.options);
  refuse_for_groups(config);
  const ComponentInfo& chosen = choose_backend(*impl, config);
  std::vector<std::pair<LayerGroup, Config>> parts = group_configs(config);
  std::vector<StoreSpec> specs;
  std::vector<MaskDescription> masks;
  for (auto& [group, c] : parts) {
    const std::string where = hybrid ? "layers.groups." + group.name + "." : "";
    // A format the backend cannot run, or a mask that places queries where the model's RoPE or
    // the backend cannot, is refused before any memory is taken.
    if (const std::vector<Diagnostic> refused = format_refusals(c, chosen); !refused.empty())
      throw Error(Code::unsupported, where + refused.front().key + ": " + refused.front().message);
    // A policy that drops tokens, against a format that cannot lose one: refused before any
    // memory is taken, in each group (a dropped token leaves every layer).
    if (impl->policy)
      if (const auto drops = token_drop_check(c, *registry, *impl->policy)) {
        if (drops->severity == Diagnostic::Severity::error)
          throw Error(Code::invalid_argument, where + drops->message);
        spdlog::warn("{}{}", where, drops->message);
      }
    Impl::Group g;
    g.mask = registry->create_mask(c.mask.name, c.mask.options);
    if (const auto positions = position_check(c, chosen, *g.mask))
      throw Error(Code::unsupported, where + positions->message);
    if (g.mask->describe().positions_in_cache) {
      g.rope = *c.rope;
      g.rope_frequencies = rope_frequencies(*c.rope, c.model.head_dim);
    }
    g.info = {group.name, group.layers, g.mask->describe(),
              hybrid && windows::frees(g.mask->describe())};
    StoreSpec spec = store_spec(c, *registry);
    impl->frees_pages = impl->frees_pages || g.info.frees_pages;
    if (g.info.frees_pages)
      for (const auto& [key, choice] :
           {std::pair{"format.k", &c.k_format}, std::pair{"format.v", &c.v_format}})
        if (registry->create_quantizer(choice->name, choice->options)
                ->describe(c.model.head_dim, c.cache.page_size)
                .granularity == Granularity::channel)
          throw Error(Code::unsupported,
                      where + key + ": " + choice->name +
                          " scales over groups of tokens, so group '" + group.name +
                          "' cannot free the pages its window leaves behind; choose a per-token "
                          "format for a windowed group");
    specs.push_back(std::move(spec));
    masks.push_back(g.info.mask);
    impl->groups.push_back(std::move(g));
  }
  if (hybrid) {
    const std::vector<std::uint64_t> shares =
        capacity_shares(config.cache.capacity_bytes, config.group_context, config.cache.page_size,
                        config.group_rollback, specs, masks);
    for (std::size_t i = 0; i < specs.size(); ++i) specs[i].capacity_bytes = shares[i];
  }
  impl->places.resize(config.model.layers);
  for (std::size_t i = 0; i < impl->groups.size(); ++i) {
    Impl::Group& g = impl->groups[i];
    for (std::uint32_t local = 0; local < g.info.layers.size(); ++local)
      impl->places[g.info.layers[local]] = {i, local};
    try {
      g.store = impl->backend->create_store(specs[i]);
    } catch (const Error& e) {
      if (!hybrid) throw;
      throw Error(e.code(), "layers.groups." + g.info.name + ": " + e.what());
    }
    g.kv = g.store.get();
    if (config.remote) attach_tier(*impl, g, *config.remote, parts[i].second, hybrid);
    if (i > 0) {
      auto map = std::make_unique<GroupStore>(std::move(g.store));
      g.map = map.get();
      g.store = std::move(map);
    }
    g.attention = impl->backend->create_attention();
    impl->infos.push_back(g.info);
  }
  return std::unique_ptr<Cache>(new Cache(std::move(impl)));
}

std::unique_ptr<Cache> Cache::open(std::string_view path_or_yaml) {
  const Config config = read_config(path_or_yaml, process_environment());
  return open(config, Registry::load(config.plugins));
}

}  // namespace kvcache
