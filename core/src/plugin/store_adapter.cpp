#include "kvcache/cache_store.hpp"

#include <unordered_set>

#include "plugin/adapters.hpp"
#include "plugin/c_types.hpp"

namespace kvcache::plugin {
namespace {

class HostStore final : public CacheStore {
 public:
  HostStore(std::unique_ptr<PluginInstance<kvc_store_table>> instance,
            std::vector<std::shared_ptr<const Quantizer>> codecs)
      : codecs_(std::move(codecs)), s_(std::move(instance)) {}

  StoreInfo info() const override {
    kvc_store_info i{};
    i.struct_size = sizeof(i);
    i.k_format.struct_size = sizeof(i.k_format);
    i.v_format.struct_size = sizeof(i.v_format);
    s_->call(&kvc_store_table::info, &i);
    StoreInfo out{i.page_size, i.total_pages, i.page_bytes, from_c(i.k_format), from_c(i.v_format)};
    if (s_->has(&kvc_store_table::format)) {  // the whole description, from ABI 1.3 on
      for (const bool value : {false, true}) {
        kvc_format_desc d{};
        d.struct_size = sizeof(d);
        s_->call(&kvc_store_table::format, value ? 1u : 0u, &d);
        (value ? out.v_format : out.k_format) = from_c(d);
      }
    }
    return out;
  }
  StoreStats stats() const override {
    kvc_store_stats t{};
    t.struct_size = sizeof(t);
    s_->call(&kvc_store_table::stats, &t);
    return {t.total_pages, t.used_pages,     t.cached_pages, t.free_pages,
            t.sequences,   t.occupied_slots, t.unused_slots, t.page_bytes};
  }
  SeqId create_sequence() override {
    uint64_t id = 0;
    s_->call(&kvc_store_table::create_sequence, &id);
    return id;
  }
  void release(SeqId id) override {
    s_->call(&kvc_store_table::release, id);
    inexact_.erase(id);
  }
  SeqId fork(SeqId parent) override {
    uint64_t child = 0;
    s_->call(&kvc_store_table::fork, parent, &child);
    if (inexact_.contains(parent)) inexact_.insert(child);
    return child;
  }
  void reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> tokens) override {
    same_size(ids.size(), tokens.size());
    s_->call(&kvc_store_table::reserve, ids.data(), tokens.data(), uint64_t{ids.size()});
  }
  void append(std::uint32_t layer, std::span<const SeqId> ids,
              std::span<const std::uint32_t> counts, const DLTensor& k,
              const DLTensor& v) override {
    same_size(ids.size(), counts.size());
    s_->call(&kvc_store_table::append, layer, ids.data(), counts.data(), uint64_t{ids.size()}, &k,
             &v);
  }
  void append_on(EngineStream stream, std::uint32_t layer, std::span<const SeqId> ids,
                 std::span<const std::uint32_t> counts, const DLTensor& k,
                 const DLTensor& v) override {
    same_size(ids.size(), counts.size());
    if (!s_->has(&kvc_store_table::append_on))
      throw Error(Code::unsupported,
                  s_->who() +
                      " takes no engine stream (ABI 1.10 append_on): its appends are done "
                      "when they return");
    s_->call(&kvc_store_table::append_on, layer, ids.data(), counts.data(), uint64_t{ids.size()},
             &k, &v, stream.handle);
  }
  std::uint64_t drop(SeqId id, std::span<const PositionRange> ranges) override {
    uint64_t dropped = 0;
    s_->call(&kvc_store_table::drop, id, reinterpret_cast<const kvc_range*>(ranges.data()),
             uint64_t{ranges.size()}, &dropped);
    return dropped;
  }
  std::uint64_t drop_unseen(SeqId id, std::span<const PositionRange> ranges) override {
    if (s_->has(&kvc_store_table::drop_unseen)) {
      uint64_t dropped = 0;
      s_->call(&kvc_store_table::drop_unseen, id, reinterpret_cast<const kvc_range*>(ranges.data()),
               uint64_t{ranges.size()}, &dropped);
      return dropped;
    }
    const std::uint64_t dropped = drop(id, ranges);
    if (dropped > 0) inexact_.insert(id);
    return dropped;
  }
  std::uint64_t length(SeqId id) const override {
    uint64_t n = 0;
    s_->call(&kvc_store_table::length, id, &n);
    return n;
  }
  std::uint64_t written(SeqId id, std::uint32_t layer) const override {
    uint64_t n = 0;
    s_->call(&kvc_store_table::written, id, layer, &n);
    return n;
  }
  std::vector<Position> positions(SeqId id) const override {
    return per_slot<Position>(&kvc_store_table::positions, id);
  }
  void publish_prefix(SeqId id, std::span<const std::int32_t> tokens) override {
    if (inexact_.contains(id)) return;  // see inexact_
    s_->call(&kvc_store_table::publish_prefix, id, tokens.data(), uint64_t{tokens.size()});
  }
  std::uint64_t match_prefix(SeqId id, std::span<const std::int32_t> tokens) override {
    uint64_t matched = 0;
    s_->call(&kvc_store_table::match_prefix, id, tokens.data(), uint64_t{tokens.size()}, &matched);
    return matched;
  }
  std::uint64_t evict_cached(std::uint64_t count) override {
    uint64_t evicted = 0;
    s_->call(&kvc_store_table::evict_cached, count, &evicted);
    return evicted;
  }
  PageTable page_table(std::span<const SeqId> ids) const override {
    PageTable t;
    t.indptr.resize(ids.size() + 1);
    t.last_page_len.resize(ids.size());
    for (std::size_t capacity = 0;;) {  // the first call tells the size
      t.indices.resize(capacity);
      s_->call(&kvc_store_table::page_table, ids.data(), uint64_t{ids.size()}, t.indptr.data(),
               t.indices.data(), uint64_t{capacity}, t.last_page_len.data());
      const auto needed = static_cast<std::size_t>(t.indptr.back());
      if (needed <= capacity) return t;
      capacity = needed;
    }
  }
  std::vector<std::uint8_t> prefix_pages(std::span<const std::int32_t> tokens) const override {
    if (!s_->has(&kvc_store_table::prefix_pages)) return CacheStore::prefix_pages(tokens);
    std::vector<std::uint8_t> held(tokens.size() / info().page_size, 0);
    s_->call(&kvc_store_table::prefix_pages, tokens.data(), uint64_t{tokens.size()}, held.data());
    return held;
  }
  bool attach_prefix(SeqId id, std::span<const std::int32_t> tokens,
                     std::span<const std::uint64_t> pages) override {
    if (!s_->has(&kvc_store_table::attach_prefix))
      return CacheStore::attach_prefix(id, tokens, pages);
    uint32_t attached = 0;
    s_->call(&kvc_store_table::attach_prefix, id, tokens.data(), uint64_t{tokens.size()},
             pages.data(), uint64_t{pages.size()}, &attached);
    return attached != 0;
  }
  void unreserve(SeqId id, std::uint64_t tokens) override {
    if (!s_->has(&kvc_store_table::unreserve))
      throw Error(Code::unsupported,
                  s_->who() + ": the store predates ABI 1.5 and cannot give back reserved slots");
    s_->call(&kvc_store_table::unreserve, id, uint64_t{tokens});
  }
  void truncate(SeqId id, std::uint64_t tokens) override {
    if (!s_->has(&kvc_store_table::truncate)) return CacheStore::truncate(id, tokens);
    s_->call(&kvc_store_table::truncate, id, uint64_t{tokens});
  }
  std::uint64_t lookup_prefix(std::span<const std::int32_t> tokens) const override {
    if (!s_->has(&kvc_store_table::lookup_prefix)) return 0;
    uint64_t n = 0;
    s_->call(&kvc_store_table::lookup_prefix, tokens.data(), uint64_t{tokens.size()}, &n);
    return n;
  }
  void export_page(std::uint32_t page, std::span<std::byte> image) const override {
    if (!s_->has(&kvc_store_table::export_page))
      throw Error(Code::unsupported, s_->who() + ": the store predates ABI 1.7 (no remote tier)");
    s_->call(&kvc_store_table::export_page, page, static_cast<void*>(image.data()),
             uint64_t{image.size()});
  }
  PageImport import_page(std::span<const std::int32_t> tokens,
                         std::span<const std::byte> image) override {
    if (!s_->has(&kvc_store_table::import_page))
      throw Error(Code::unsupported, s_->who() + ": the store predates ABI 1.7 (no remote tier)");
    uint32_t result = 0;
    s_->call(&kvc_store_table::import_page, tokens.data(), uint64_t{tokens.size()},
             static_cast<const void*>(image.data()), uint64_t{image.size()}, &result);
    if (result > static_cast<uint32_t>(PageImport::no_room))
      throw Error(Code::internal, s_->who() + ": import_page answered " + std::to_string(result) +
                                      ", not a kvc_page_import value");
    return static_cast<PageImport>(result);
  }
  void gather(std::uint32_t layer, SeqId id, DLTensor& k, DLTensor& v) const override {
    s_->call(&kvc_store_table::gather, layer, id, &k, &v);
  }
  std::vector<float> scores(SeqId id) const override {
    return per_slot<float>(&kvc_store_table::scores, id);
  }
  // The plugin's own handle, for a call that passes this store back to the same plugin.
  void* handle_for(const PluginLibrary& library) const {
    if (s_->library().get() != &library)
      throw Error(Code::invalid_argument, s_->who() + " belongs to another plugin");
    return s_->handle();
  }
  std::vector<std::byte> read_tile(std::uint32_t page, std::uint32_t layer, std::uint32_t head,
                                   bool value) const override {
    std::vector<std::byte> tile;
    uint64_t size = 0;
    s_->call(&kvc_store_table::read_tile, page, layer, head, value ? 1u : 0u, nullptr, uint64_t{0},
             &size);
    tile.resize(size);
    s_->call(&kvc_store_table::read_tile, page, layer, head, value ? 1u : 0u, tile.data(), size,
             &size);
    return tile;
  }

 private:
  // One value per held token, through a table entry that writes up to a capacity.
  template <class T, class Fn>
  std::vector<T> per_slot(Fn kvc_store_table::*fn, SeqId id) const {
    std::vector<T> out(length(id));
    uint64_t count = 0;
    s_->call(fn, id, out.data(), uint64_t{out.size()}, &count);
    out.resize(std::min<uint64_t>(count, out.size()));
    return out;
  }
  void same_size(std::size_t a, std::size_t b) const {
    if (a != b) throw Error(Code::invalid_argument, s_->who() + ": batch spans differ in size");
  }
  std::vector<std::shared_ptr<const Quantizer>> codecs_;  // declared first: released last
  // Sequences of a store before ABI 1.9 that lost pages to drop_unseen through drop: the store
  // refuses to publish them, and the host's window rule must not make that an error.
  std::unordered_set<SeqId> inexact_;
  std::unique_ptr<PluginInstance<kvc_store_table>> s_;
};

}  // namespace

void* store_handle(CacheStore& store, const PluginLibrary& library) {
  auto* host = dynamic_cast<HostStore*>(&store);
  if (host == nullptr)
    throw Error(Code::invalid_argument, "this store was not made by a plugin backend");
  return host->handle_for(library);
}

std::unique_ptr<CacheStore> make_store(std::shared_ptr<const PluginLibrary> library,
                                       const kvc_store_table* table, void* store,
                                       const std::string& who,
                                       std::vector<std::shared_ptr<const Quantizer>> codecs) {
  return std::make_unique<HostStore>(adopt(std::move(library), table, store, who),
                                     std::move(codecs));
}

}  // namespace kvcache::plugin
