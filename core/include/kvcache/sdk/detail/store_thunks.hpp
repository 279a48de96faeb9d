// The C table of every CacheStore a plugin makes: one table, dispatching through the virtual
// interface, so a backend author only implements kvcache::CacheStore.
#pragma once

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "kvcache/cache_store.hpp"
#include "kvcache/plugin_abi.h"
#include "kvcache/sdk/detail/c_types.hpp"
#include "kvcache/sdk/detail/guard.hpp"

namespace kvcache::sdk::detail {

struct StoreThunks {
  static CacheStore& store(void* s) { return *static_cast<CacheStore*>(s); }

  static void destroy(void* s) noexcept { delete static_cast<CacheStore*>(s); }
  static int32_t info(void* s, kvc_store_info* out, kvc_error* err) noexcept {
    return guard(err, [&] {
      const StoreInfo i = store(s).info();
      const kvc_store_info c{sizeof(kvc_store_info),
                             i.page_size,
                             i.total_pages,
                             i.page_bytes,
                             to_c<kvc_format_desc_1_0>(i.k_format),
                             to_c<kvc_format_desc_1_0>(i.v_format)};
      copy_out(c, out);
    });
  }
  static int32_t format(void* s, uint32_t value, kvc_format_desc* out, kvc_error* err) noexcept {
    return guard(err, [&] {
      const StoreInfo i = store(s).info();
      copy_out(to_c(value != 0 ? i.v_format : i.k_format), out);
    });
  }
  static int32_t stats(void* s, kvc_store_stats* out, kvc_error* err) noexcept {
    return guard(err, [&] {
      const StoreStats t = store(s).stats();
      const kvc_store_stats c{sizeof(kvc_store_stats),
                              0,
                              t.total_pages,
                              t.used_pages,
                              t.cached_pages,
                              t.free_pages,
                              t.sequences,
                              t.occupied_slots,
                              t.unused_slots,
                              t.page_bytes};
      copy_out(c, out);
    });
  }
  static int32_t create_sequence(void* s, uint64_t* id, kvc_error* err) noexcept {
    return guard(err, [&] { *id = store(s).create_sequence(); });
  }
  static int32_t release(void* s, uint64_t id, kvc_error* err) noexcept {
    return guard(err, [&] { store(s).release(id); });
  }
  static int32_t fork(void* s, uint64_t parent, uint64_t* child, kvc_error* err) noexcept {
    return guard(err, [&] { *child = store(s).fork(parent); });
  }
  static int32_t reserve(void* s, const uint64_t* ids, const uint32_t* tokens, uint64_t n,
                         kvc_error* err) noexcept {
    return guard(err, [&] {
      store(s).reserve(std::span<const SeqId>(ids, n), std::span<const std::uint32_t>(tokens, n));
    });
  }
  static int32_t append(void* s, uint32_t layer, const uint64_t* ids, const uint32_t* counts,
                        uint64_t n, const DLTensor* k, const DLTensor* v, kvc_error* err) noexcept {
    return guard(err, [&] {
      store(s).append(layer, std::span<const SeqId>(ids, n),
                      std::span<const std::uint32_t>(counts, n), *k, *v);
    });
  }
  static int32_t append_on(void* s, uint32_t layer, const uint64_t* ids, const uint32_t* counts,
                           uint64_t n, const DLTensor* k, const DLTensor* v, void* stream,
                           kvc_error* err) noexcept {
    return guard(err, [&] {
      store(s).append_on(EngineStream{stream}, layer, std::span<const SeqId>(ids, n),
                         std::span<const std::uint32_t>(counts, n), *k, *v);
    });
  }
  static int32_t unreserve(void* s, uint64_t id, uint64_t tokens, kvc_error* err) noexcept {
    return guard(err, [&] { store(s).unreserve(id, tokens); });
  }
  static int32_t truncate(void* s, uint64_t id, uint64_t tokens, kvc_error* err) noexcept {
    return guard(err, [&] { store(s).truncate(id, tokens); });
  }
  static int32_t lookup_prefix(void* s, const int32_t* tokens, uint64_t n, uint64_t* out,
                               kvc_error* err) noexcept {
    return guard(err,
                 [&] { *out = store(s).lookup_prefix(std::span<const std::int32_t>(tokens, n)); });
  }
  static int32_t export_page(void* s, uint32_t page, void* out, uint64_t size,
                             kvc_error* err) noexcept {
    return guard(err, [&] {
      store(s).export_page(page, std::span<std::byte>(static_cast<std::byte*>(out), size));
    });
  }
  static int32_t import_page(void* s, const int32_t* tokens, uint64_t n, const void* image,
                             uint64_t size, uint32_t* result, kvc_error* err) noexcept {
    return guard(err, [&] {
      *result = static_cast<uint32_t>(store(s).import_page(
          std::span<const std::int32_t>(tokens, n),
          std::span<const std::byte>(static_cast<const std::byte*>(image), size)));
    });
  }
  static int32_t drop(void* s, uint64_t id, const kvc_range* ranges, uint64_t n, uint64_t* dropped,
                      kvc_error* err) noexcept {
    return guard(err, [&] {
      *dropped = store(s).drop(
          id, std::span<const PositionRange>(reinterpret_cast<const PositionRange*>(ranges), n));
    });
  }
  static int32_t drop_unseen(void* s, uint64_t id, const kvc_range* ranges, uint64_t n,
                             uint64_t* dropped, kvc_error* err) noexcept {
    return guard(err, [&] {
      *dropped = store(s).drop_unseen(
          id, std::span<const PositionRange>(reinterpret_cast<const PositionRange*>(ranges), n));
    });
  }
  static int32_t prefix_pages(void* s, const int32_t* tokens, uint64_t n, uint8_t* held,
                              kvc_error* err) noexcept {
    return guard(err, [&] {
      const std::vector<std::uint8_t> v =
          store(s).prefix_pages(std::span<const std::int32_t>(tokens, n));
      std::copy(v.begin(), v.end(), held);
    });
  }
  static int32_t attach_prefix(void* s, uint64_t id, const int32_t* tokens, uint64_t n,
                               const uint64_t* pages, uint64_t count, uint32_t* attached,
                               kvc_error* err) noexcept {
    return guard(err, [&] {
      *attached = store(s).attach_prefix(id, std::span<const std::int32_t>(tokens, n),
                                         std::span<const std::uint64_t>(pages, count))
                      ? 1
                      : 0;
    });
  }
  static int32_t length(void* s, uint64_t id, uint64_t* out, kvc_error* err) noexcept {
    return guard(err, [&] { *out = store(s).length(id); });
  }
  static int32_t written(void* s, uint64_t id, uint32_t layer, uint64_t* out,
                         kvc_error* err) noexcept {
    return guard(err, [&] { *out = store(s).written(id, layer); });
  }
  static int32_t positions(void* s, uint64_t id, int64_t* out, uint64_t capacity, uint64_t* count,
                           kvc_error* err) noexcept {
    return guard(err, [&] {
      const std::vector<Position> p = store(s).positions(id);
      std::copy_n(p.begin(), std::min<std::size_t>(capacity, p.size()), out);
      *count = p.size();
    });
  }
  static int32_t publish_prefix(void* s, uint64_t id, const int32_t* tokens, uint64_t n,
                                kvc_error* err) noexcept {
    return guard(err,
                 [&] { store(s).publish_prefix(id, std::span<const std::int32_t>(tokens, n)); });
  }
  static int32_t match_prefix(void* s, uint64_t id, const int32_t* tokens, uint64_t n,
                              uint64_t* matched, kvc_error* err) noexcept {
    return guard(err, [&] {
      *matched = store(s).match_prefix(id, std::span<const std::int32_t>(tokens, n));
    });
  }
  static int32_t evict_cached(void* s, uint64_t count, uint64_t* evicted, kvc_error* err) noexcept {
    return guard(err, [&] { *evicted = store(s).evict_cached(count); });
  }
  static int32_t page_table(void* s, const uint64_t* ids, uint64_t n, int32_t* indptr,
                            int32_t* indices, uint64_t capacity, int32_t* last_page_len,
                            kvc_error* err) noexcept {
    return guard(err, [&] {
      const PageTable t = store(s).page_table(std::span<const SeqId>(ids, n));
      std::copy(t.indptr.begin(), t.indptr.end(), indptr);
      std::copy(t.last_page_len.begin(), t.last_page_len.end(), last_page_len);
      if (capacity >= t.indices.size()) std::copy(t.indices.begin(), t.indices.end(), indices);
    });
  }
  static int32_t gather(void* s, uint32_t layer, uint64_t id, DLTensor* k, DLTensor* v,
                        kvc_error* err) noexcept {
    return guard(err, [&] { store(s).gather(layer, id, *k, *v); });
  }
  static int32_t read_tile(void* s, uint32_t page, uint32_t layer, uint32_t kv_head, uint32_t value,
                           void* out, uint64_t capacity, uint64_t* size, kvc_error* err) noexcept {
    return guard(err, [&] {
      const std::vector<std::byte> tile = store(s).read_tile(page, layer, kv_head, value != 0);
      *size = tile.size();
      if (capacity >= tile.size()) std::memcpy(out, tile.data(), tile.size());
    });
  }

  static int32_t scores(void* s, uint64_t id, float* out, uint64_t capacity, uint64_t* count,
                        kvc_error* err) noexcept {
    return guard(err, [&] {
      const std::vector<float> v = store(s).scores(id);
      std::copy_n(v.begin(), std::min<std::size_t>(capacity, v.size()), out);
      *count = v.size();
    });
  }

  static constexpr kvc_store_table table{sizeof(kvc_store_table),
                                         &destroy,
                                         &info,
                                         &stats,
                                         &create_sequence,
                                         &release,
                                         &fork,
                                         &reserve,
                                         &append,
                                         &drop,
                                         &length,
                                         &written,
                                         &positions,
                                         &publish_prefix,
                                         &match_prefix,
                                         &evict_cached,
                                         &page_table,
                                         &gather,
                                         &read_tile,
                                         &scores,
                                         &format,
                                         &unreserve,
                                         &lookup_prefix,
                                         &export_page,
                                         &import_page,
                                         &truncate,
                                         &drop_unseen,
                                         &prefix_pages,
                                         &attach_prefix,
                                         &append_on};
};

}  // namespace kvcache::sdk::detail
