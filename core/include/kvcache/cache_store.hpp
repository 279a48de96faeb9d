// CacheStore: paged KV memory on one device (docs/architecture.md).
//
// A page holds page_size token slots for every layer: one page id is valid across all layers,
// each layer having its own pools. A sequence grows by reserve() (all-or-nothing: on failure
// nothing changes and the error says pages needed vs free), then each layer's K/V are written by
// append(), which fills that layer's next reserved slots. Every slot records the logical
// position of its token, so masks and eviction keep working after drop() compacts a sequence.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>
#include <nlohmann/json.hpp>

#include "kvcache/engine_stream.hpp"
#include "kvcache/quantizer.hpp"
#include "kvcache/status.hpp"
#include "kvcache/types.hpp"

namespace kvcache {

// What a backend needs to build a store; crosses the plugin boundary as JSON.
struct StoreSpec {
  ModelShape model;
  std::uint32_t page_size = 16;
  std::uint64_t capacity_bytes = 0;
  bool prefix_caching = true;
  std::string k_format = "fp16";
  nlohmann::json k_options = nlohmann::json::object();
  std::string v_format = "fp16";
  nlohmann::json v_options = nlohmann::json::object();
  // Tests: fill every slot that holds no token with NaN bytes, so a read of padding shows.
  bool poison_unused = false;
  // The formats' own codecs (their Quantizer components), which a store uses for a format it
  // has no kernels of its own for; they outlive the store. Not part of the JSON: they cross the
  // ABI as kvc_format_codec.
  std::shared_ptr<const Quantizer> k_codec;
  std::shared_ptr<const Quantizer> v_codec;
};

inline nlohmann::json to_json(const StoreSpec& s) {
  return {{"model",
           {{"layers", s.model.layers},
            {"q_heads", s.model.q_heads},
            {"kv_heads", s.model.kv_heads},
            {"head_dim", s.model.head_dim}}},
          {"page_size", s.page_size},
          {"capacity_bytes", s.capacity_bytes},
          {"prefix_caching", s.prefix_caching},
          {"k_format", s.k_format},
          {"k_options", s.k_options},
          {"v_format", s.v_format},
          {"v_options", s.v_options},
          {"poison_unused", s.poison_unused}};
}

// Keys missing from `j` keep their defaults, so an older host's JSON still reads.
inline StoreSpec store_spec_from_json(const nlohmann::json& j) {
  StoreSpec s;
  const nlohmann::json model = j.value("model", nlohmann::json::object());
  s.model = {model.value("layers", 0u), model.value("q_heads", 0u), model.value("kv_heads", 0u),
             model.value("head_dim", 0u)};
  s.page_size = j.value("page_size", s.page_size);
  s.capacity_bytes = j.value("capacity_bytes", s.capacity_bytes);
  s.prefix_caching = j.value("prefix_caching", s.prefix_caching);
  s.k_format = j.value("k_format", s.k_format);
  s.k_options = j.value("k_options", s.k_options);
  s.v_format = j.value("v_format", s.v_format);
  s.v_options = j.value("v_options", s.v_options);
  s.poison_unused = j.value("poison_unused", s.poison_unused);
  return s;
}

struct StoreInfo {
  std::uint32_t page_size = 0;
  std::uint64_t total_pages = 0;
  std::uint64_t page_bytes = 0;  // one page across all layers, K and V, scales included
  TileLayout k_format;
  TileLayout v_format;
};

struct StoreStats {
  std::uint64_t total_pages = 0;
  std::uint64_t used_pages = 0;    // referenced by at least one sequence
  std::uint64_t cached_pages = 0;  // unreferenced but kept for prefix reuse; reclaimable
  std::uint64_t free_pages = 0;
  std::uint64_t sequences = 0;
  std::uint64_t occupied_slots = 0;  // slots of used pages holding a token (shared ones once)
  std::uint64_t unused_slots = 0;    // internal fragmentation: empty slots of used pages
  std::uint64_t page_bytes = 0;
  // A Cache of several layer groups sums its groups' stats; their pages differ in size, so
  // page_bytes is 0 there and these hold the sums of bytes.
  std::uint64_t used_bytes_sum = 0, total_bytes_sum = 0;
  std::uint64_t used_bytes() const {
    return page_bytes != 0 ? used_pages * page_bytes : used_bytes_sum;
  }
  std::uint64_t total_bytes() const {
    return page_bytes != 0 ? total_pages * page_bytes : total_bytes_sum;
  }
  double utilization() const {
    const std::uint64_t slots = occupied_slots + unused_slots;
    return slots == 0 ? 0.0 : static_cast<double>(occupied_slots) / static_cast<double>(slots);
  }
};

// Pages of sequences as CSR arrays (as FlashInfer takes them): the pages of sequence i are
// indices[indptr[i] .. indptr[i+1]), the last one holding last_page_len[i] tokens.
struct PageTable {
  std::vector<std::int32_t> indptr;
  std::vector<std::int32_t> indices;
  std::vector<std::int32_t> last_page_len;
};

// What import_page did: made the page, found an equal page published already (nothing
// changed), or found no page free or cached to hold it (nothing changed).
enum class PageImport : std::uint32_t { imported = 0, present = 1, no_room = 2 };

// Bytes of one page's image (see CacheStore::export_page).
inline std::uint64_t page_image_bytes(const StoreInfo& info, const ModelShape& model) {
  return std::uint64_t{model.layers} * model.kv_heads *
         (info.k_format.tile_bytes + info.v_format.tile_bytes);
}

class CacheStore {
 public:
  virtual ~CacheStore() = default;
  virtual StoreInfo info() const = 0;
  virtual StoreStats stats() const = 0;

  virtual SeqId create_sequence() = 0;
  // Unreferences the sequence's pages; full pages published to the prefix cache stay cached.
  virtual void release(SeqId sequence) = 0;
  // A new sequence sharing every page of `parent` (copy-on-write). All reserved slots of the
  // parent must have been written.
  virtual SeqId fork(SeqId parent) = 0;
  // Grows each sequences[i] by tokens[i] slots, all or nothing across the batch.
  virtual void reserve(std::span<const SeqId> sequences, std::span<const std::uint32_t> tokens) = 0;
  // Writes K and V of one layer for a batch: k and v are [sum(counts), kv_heads, head_dim]
  // (float32, float16 or bfloat16 on the host), the rows of sequences[i] being the next
  // counts[i] reserved slots of that layer.
  virtual void append(std::uint32_t layer, std::span<const SeqId> sequences,
                      std::span<const std::uint32_t> counts, const DLTensor& k,
                      const DLTensor& v) = 0;
  // append, enqueued on the engine's stream in order with the work that made k and v; with device
  // tensors it returns without waiting (docs/engine-step.md, "Streams"). Stores of backends that
  // declare engine_streams implement it; the default refuses (Error(unsupported)).
  virtual void append_on(EngineStream stream, std::uint32_t layer, std::span<const SeqId> sequences,
                         std::span<const std::uint32_t> counts, const DLTensor& k,
                         const DLTensor& v) {
    (void)stream, (void)layer, (void)sequences, (void)counts, (void)k, (void)v;
    throw Error(Code::unsupported,
                "this store takes no engine stream (ABI 1.10 engine_streams): its appends are "
                "done when they return");
  }
  // Gives back the newest `tokens` reserved slots of `sequence`, written or not, as if they had
  // never been reserved: how the Cache undoes a step that did not finish. All or nothing. The
  // default refuses (Error(unsupported)); stores built on paging::PagedStoreBase implement it.
  virtual void unreserve(SeqId sequence, std::uint64_t tokens) {
    throw Error(Code::unsupported, "this store cannot give back reserved slots (sequence " +
                                       std::to_string(sequence) + ", " + std::to_string(tokens) +
                                       " slots)");
  }
  // Keeps the first `tokens` tokens of `sequence` and gives back the rest, as if they had never
  // been reserved: pages past them return to the pool (cached if published), the positions are
  // handed out again, and attention scores and a grouping format's held rows are as they were at
  // that length, so appending again gives the bytes an append without the rolled-back tokens
  // gives. A page shared with a fork or published as a prefix is never written through (the next
  // reserve copies it). All or nothing: more tokens than held is Error(invalid_argument), a state
  // that cannot be given back Error(unsupported). The default, for stores that predate it (ABI
  // 1.8), gives back through unreserve, which refuses shared and published pages.
  virtual void truncate(SeqId sequence, std::uint64_t tokens) {
    const std::uint64_t held = length(sequence);
    if (tokens > held)
      throw Error(Code::invalid_argument, "cannot truncate sequence " + std::to_string(sequence) +
                                              " to " + std::to_string(tokens) +
                                              " tokens: it holds " + std::to_string(held));
    unreserve(sequence, held - tokens);
  }
  // Removes the tokens whose logical positions fall in `ranges` and compacts the sequence.
  // Returns how many tokens were removed.
  // A sequence that lost tokens this way publishes nothing more: the tokens after them were
  // computed without them.
  virtual std::uint64_t drop(SeqId sequence, std::span<const PositionRange> ranges) = 0;
  // drop() of positions that no later query sees and no later token was computed from (a
  // windowed layer group's pages behind its window): the sequence may still publish. The
  // default, for stores before ABI 1.9, drops through drop().
  virtual std::uint64_t drop_unseen(SeqId sequence, std::span<const PositionRange> ranges) {
    return drop(sequence, ranges);
  }

  // Tokens held (reserved slots).
  virtual std::uint64_t length(SeqId sequence) const = 0;
  // Slots of `layer` written so far.
  virtual std::uint64_t written(SeqId sequence, std::uint32_t layer) const = 0;
  virtual std::vector<Position> positions(SeqId sequence) const = 0;
  // Accumulated attention weight of each held token (see StepRequest::accumulate_scores).
  virtual std::vector<float> scores(SeqId sequence) const = 0;

  // Prefix cache. publish() offers the sequence's full pages, keyed by a hash chain over
  // token_ids (token_ids[i] is the token at position i). match() attaches to an empty sequence
  // the longest run of cached pages for token_ids and returns the number of tokens reused.
  virtual void publish_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) = 0;
  virtual std::uint64_t match_prefix(SeqId sequence, std::span<const std::int32_t> token_ids) = 0;
  // Drops up to `count` cached pages, least recently used first; returns how many.
  virtual std::uint64_t evict_cached(std::uint64_t count) = 0;

  // Tokens that match_prefix(token_ids) would reuse now, without attaching anything. The
  // default says 0 (no prefix reuse known); stores built on paging::PagedStoreBase answer.
  virtual std::uint64_t lookup_prefix(std::span<const std::int32_t> token_ids) const {
    (void)token_ids;
    return 0;
  }

  // The prefix cache by page, for a layer group that keeps only a window (docs/cache.md,
  // "Prefix reuse with layer groups"). prefix_pages: for each full page of token_ids, 1 when the
  // prefix cache holds it, whether or not the pages before it are held. attach_prefix: attaches
  // to an empty sequence the cached pages of token_ids with these page indices (ascending), as a
  // sequence that has seen token_ids and holds only those pages: its next position is
  // token_ids.size() (a multiple of page_size). All or nothing: false, with nothing attached,
  // when a page is not cached. The defaults, for stores before ABI 1.9, work on the contiguous
  // run alone: lookup_prefix, then match_prefix and drop_unseen of the pages not asked for.
  virtual std::vector<std::uint8_t> prefix_pages(std::span<const std::int32_t> token_ids) const {
    const std::uint64_t page_size = info().page_size;
    std::vector<std::uint8_t> held(token_ids.size() / page_size, 0);
    std::fill_n(held.begin(),
                std::min<std::size_t>(held.size(), lookup_prefix(token_ids) / page_size),
                std::uint8_t{1});
    return held;
  }
  virtual bool attach_prefix(SeqId sequence, std::span<const std::int32_t> token_ids,
                             std::span<const std::uint64_t> pages) {
    const std::uint64_t page_size = info().page_size;
    if (match_prefix(sequence, token_ids) < token_ids.size()) {
      truncate(sequence, 0);
      return false;
    }
    std::vector<PositionRange> gone;
    Position from = 0;
    for (const std::uint64_t page : pages) {
      const auto begin = static_cast<Position>(page * page_size);
      if (begin > from) gone.push_back({from, begin});
      from = begin + static_cast<Position>(page_size);
    }
    if (from < static_cast<Position>(token_ids.size()))
      gone.push_back({from, static_cast<Position>(token_ids.size())});
    if (!gone.empty()) drop_unseen(sequence, gone);
    return true;
  }

  // Pages that travel (docs/remote-tier.md). A page's image is every layer's K tiles of each KV
  // head, then its V tiles, each in its format's tile layout: page_image_bytes(info(), model)
  // in all. export_page copies `page` (an index of page_table()) into `image`. import_page makes
  // `image` a cached, published, unreferenced page: the last full page of token_ids (a multiple
  // of page_size tokens, the tokens at positions 0, 1, ...), as if a sequence had written and
  // published it; a later match_prefix attaches it. Both all or nothing. The defaults refuse
  // (Error(unsupported)): such a store has no remote tier.
  virtual void export_page(std::uint32_t page, std::span<std::byte> image) const {
    (void)image;
    throw Error(Code::unsupported,
                "this store cannot export pages (page " + std::to_string(page) + ")");
  }
  virtual PageImport import_page(std::span<const std::int32_t> token_ids,
                                 std::span<const std::byte> image) {
    (void)token_ids;
    (void)image;
    throw Error(Code::unsupported, "this store cannot import pages");
  }

  virtual PageTable page_table(std::span<const SeqId> sequences) const = 0;
  // Decoded K and V of one layer of a sequence, [written, kv_heads, head_dim] float32.
  virtual void gather(std::uint32_t layer, SeqId sequence, DLTensor& k, DLTensor& v) const = 0;
  // Raw bytes of one tile (page, layer, kv head), K or V: for checks against the reference.
  virtual std::vector<std::byte> read_tile(std::uint32_t page, std::uint32_t layer,
                                           std::uint32_t kv_head, bool value) const = 0;
};

}  // namespace kvcache
