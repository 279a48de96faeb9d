#include "paged_store.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "input_rows.hpp"
#include "kvcache/numeric.hpp"

namespace kvcache::cpu {
namespace {

std::string pages_text(std::uint64_t n) {
  return std::to_string(n) + (n == 1 ? " page" : " pages");
}

const StoreSpec& validated(const StoreSpec& s) {
  const ModelShape& m = s.model;
  if (m.layers == 0 || m.q_heads == 0 || m.kv_heads == 0 || m.head_dim == 0)
    throw Error(Code::invalid_argument, "model shape must be positive in every field");
  if (m.q_heads % m.kv_heads != 0)
    throw Error(Code::invalid_argument, "q_heads must be a multiple of kv_heads");
  if (s.page_size == 0 || (s.page_size & (s.page_size - 1)) != 0 || s.page_size > 1024)
    throw Error(Code::invalid_argument, "page_size must be a power of two up to 1024");
  return s;
}

std::uint32_t page_count(const StoreSpec& s) {
  const std::uint64_t cost = page_cost(s);
  const std::uint64_t pages = s.capacity_bytes / cost;
  if (pages == 0)
    throw Error(Code::invalid_argument, "capacity of " + std::to_string(s.capacity_bytes) +
                                            " bytes holds no page (one page takes " +
                                            std::to_string(cost) + " bytes)");
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(pages, 0x7FFFFFFF));
}

}  // namespace

PagedStore::PagedStore(const StoreSpec& spec)
    : spec_(validated(spec)),
      page_size_(spec.page_size),
      k_codec_(parse_format(spec.k_format, spec.k_options), spec.model.head_dim, spec.page_size),
      v_codec_(parse_format(spec.v_format, spec.v_options), spec.model.head_dim, spec.page_size),
      memory_(nullptr, &std::free),
      pool_(page_count(spec_)),
      prefix_(pool_.total(), page_size_) {
  const std::uint32_t pages = pool_.total();
  const std::uint64_t heads = spec_.model.kv_heads;
  k_pool_bytes_ = std::size_t{pages} * heads * k_codec_.layout().tile_bytes;
  layer_stride_ = k_pool_bytes_ + std::size_t{pages} * heads * v_codec_.layout().tile_bytes;
  page_bytes_ = std::uint64_t{spec_.model.layers} * heads *
                (k_codec_.layout().tile_bytes + v_codec_.layout().tile_bytes);
  const std::size_t total = layer_stride_ * spec_.model.layers;
  memory_.reset(static_cast<std::byte*>(std::aligned_alloc(64, (total + 63) / 64 * 64)));
  if (!memory_)
    throw Error(Code::out_of_memory, "cannot allocate " + std::to_string(total) + " bytes");
  // Touch every page now, in parallel: the pools are committed at creation, so no append ever
  // pays for a page fault (and each page lands on the NUMA node of a worker).
  const int fill = spec_.poison_unused ? 0xFF : 0;
  const std::size_t block = std::size_t{1} << 21;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, (total + block - 1) / block),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t b = r.begin(); b != r.end(); ++b)
                        std::memset(memory_.get() + b * block, fill,
                                    std::min(block, total - b * block));
                    });
  positions_ = std::make_unique<Position[]>(std::size_t{pages} * page_size_);
  fill_.assign(pages, 0);
}

PagedStore::~PagedStore() = default;

PagedStore::Sequence& PagedStore::find(SeqId id) {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) throw Error(Code::not_found, "no sequence " + std::to_string(id));
  return it->second;
}

const PagedStore::Sequence& PagedStore::find(SeqId id) const {
  return const_cast<PagedStore*>(this)->find(id);
}

std::byte* PagedStore::tile(PageId page, std::uint32_t layer, std::uint32_t head,
                            bool value) const {
  const SlotCodec& codec = value ? v_codec_ : k_codec_;
  return memory_.get() + layer * layer_stride_ + (value ? k_pool_bytes_ : 0) +
         (std::size_t{page} * spec_.model.kv_heads + head) * codec.layout().tile_bytes;
}

bool PagedStore::fully_written(const Sequence& s) const {
  return std::all_of(s.written.begin(), s.written.end(),
                     [&](std::uint64_t w) { return w == s.length; });
}

PageId PagedStore::take_page() {
  if (pool_.free_count() == 0) prefix_.forget(pool_.evict_oldest_cached());
  const PageId page = pool_.allocate();
  fill_[page] = 0;
  if (spec_.poison_unused) poison_slots(page, 0);
  return page;
}

void PagedStore::release_page(PageId page) {
  pool_.release(page, spec_.prefix_caching && prefix_.published(page));
}

void PagedStore::poison_slots(PageId page, std::uint32_t from_slot) {
  for (std::uint32_t layer = 0; layer < spec_.model.layers; ++layer) {
    for (std::uint32_t h = 0; h < spec_.model.kv_heads; ++h) {
      for (const bool value : {false, true}) {
        const StorageFormat& f = (value ? v_codec_ : k_codec_).layout();
        std::byte* t = tile(page, layer, h, value);
        if (from_slot == 0) {  // the whole tile, group meta included
          std::memset(t, 0xFF, f.tile_bytes);
          continue;
        }
        const std::size_t n = page_size_ - from_slot;
        std::memset(t + from_slot * f.slot_code_bytes, 0xFF, n * f.slot_code_bytes);
        std::memset(t + f.code_bytes + from_slot * f.slot_meta_bytes, 0xFF, n * f.slot_meta_bytes);
      }
    }
  }
  std::fill_n(slot_positions(page) + from_slot, page_size_ - from_slot, Position{-1});
}

void PagedStore::copy_page(PageId from, PageId to) {
  for (std::uint32_t layer = 0; layer < spec_.model.layers; ++layer) {
    for (const bool value : {false, true}) {
      const std::size_t bytes =
          spec_.model.kv_heads * (value ? v_codec_ : k_codec_).layout().tile_bytes;
      std::memcpy(tile(to, layer, 0, value), tile(from, layer, 0, value), bytes);
    }
  }
  std::copy_n(slot_positions(from), page_size_, slot_positions(to));
  fill_[to] = fill_[from];
}

void PagedStore::copy_slot(PageId from, std::uint32_t from_slot, PageId to, std::uint32_t to_slot) {
  for (std::uint32_t layer = 0; layer < spec_.model.layers; ++layer) {
    for (std::uint32_t h = 0; h < spec_.model.kv_heads; ++h) {
      k_codec_.copy_slot(tile(from, layer, h, false), from_slot, tile(to, layer, h, false),
                         to_slot);
      v_codec_.copy_slot(tile(from, layer, h, true), from_slot, tile(to, layer, h, true), to_slot);
    }
  }
  slot_positions(to)[to_slot] = slot_positions(from)[from_slot];
}

void PagedStore::make_private(Sequence& s, std::size_t i) {
  const PageId copy = take_page();
  copy_page(s.pages[i], copy);
  release_page(s.pages[i]);
  s.pages[i] = copy;
}

std::uint16_t* PagedStore::residual_row(Sequence& s, std::uint32_t layer, std::uint32_t head,
                                        bool value, std::uint64_t slot) const {
  const std::uint32_t group = (value ? v_codec_ : k_codec_).spec().group;
  std::vector<std::uint16_t>& residual = value ? s.residual_v : s.residual_k;
  return residual.data() +
         ((std::size_t{layer} * spec_.model.kv_heads + head) * group + slot % group) *
             spec_.model.head_dim;
}

void PagedStore::encode_groups(const Sequence& s, std::uint32_t layer, std::uint32_t head,
                               bool value, std::uint64_t begin, std::uint64_t end,
                               std::uint64_t append_begin, std::uint64_t append_end,
                               const InputRows& rows, std::uint64_t first_row,
                               float* group_rows) const {
  const SlotCodec& codec = value ? v_codec_ : k_codec_;
  const std::uint32_t dim = spec_.model.head_dim;
  const std::uint64_t group = codec.spec().group;
  for (std::uint64_t start = begin - begin % group; start < end; start += group) {
    if (start + group > append_end) break;  // incomplete: its rows wait in the residual
    // Every row of a group goes through fp16, whether it waited in the residual or not, so the
    // codes do not depend on how tokens were batched.
    for (std::uint64_t slot = start; slot < start + group; ++slot) {
      float* out = group_rows + (slot - start) * dim;
      if (slot < append_begin) {
        const std::uint16_t* held =
            residual_row(const_cast<Sequence&>(s), layer, head, value, slot);
        for (std::uint32_t i = 0; i < dim; ++i) out[i] = float_from_fp16(held[i]);
      } else {
        const float* in = rows.row(first_row + (slot - append_begin), head, out);
        for (std::uint32_t i = 0; i < dim; ++i) out[i] = float_from_fp16(fp16_from_float(in[i]));
      }
    }
    codec.encode_group(group_rows, tile(s.pages[start / page_size_], layer, head, value),
                       static_cast<std::uint32_t>(start % page_size_));
  }
}

void PagedStore::read_row(const Sequence& s, std::uint32_t layer, std::uint32_t head, bool value,
                          std::uint64_t slot, float* row) const {
  const SlotCodec& codec = value ? v_codec_ : k_codec_;
  const std::uint32_t group = codec.spec().group;
  if (codec.spec().groups_tokens() && (slot / group + 1) * group > s.written[layer]) {
    const std::uint16_t* held = residual_row(const_cast<Sequence&>(s), layer, head, value, slot);
    for (std::uint32_t i = 0; i < spec_.model.head_dim; ++i) row[i] = float_from_fp16(held[i]);
    return;
  }
  codec.decode(tile(s.pages[slot / page_size_], layer, head, value),
               static_cast<std::uint32_t>(slot % page_size_), row);
}

StoreInfo PagedStore::info() const {
  return {page_size_, pool_.total(), page_bytes_, k_codec_.layout(), v_codec_.layout()};
}

StoreStats PagedStore::stats() const {
  std::shared_lock lock(mutex_);
  StoreStats s;
  s.total_pages = pool_.total();
  s.free_pages = pool_.free_count();
  s.cached_pages = pool_.cached_count();
  s.used_pages = pool_.used_count();
  s.sequences = sequences_.size();
  s.page_bytes = page_bytes_;
  for (PageId p = 0; p < pool_.total(); ++p)
    if (pool_.refs(p) > 0) s.occupied_slots += fill_[p];
  s.unused_slots = s.used_pages * page_size_ - s.occupied_slots;
  return s;
}

SeqId PagedStore::create_sequence() {
  std::unique_lock lock(mutex_);
  const SeqId id = next_id_++;
  Sequence& s = sequences_[id];
  s.written.assign(spec_.model.layers, 0);
  const std::size_t per_group =
      std::size_t{spec_.model.layers} * spec_.model.kv_heads * spec_.model.head_dim;
  if (k_codec_.spec().groups_tokens()) s.residual_k.assign(per_group * k_codec_.spec().group, 0);
  if (v_codec_.spec().groups_tokens()) s.residual_v.assign(per_group * v_codec_.spec().group, 0);
  return id;
}

void PagedStore::release(SeqId id) {
  std::unique_lock lock(mutex_);
  Sequence& s = find(id);
  // Last page first: it becomes the least recently cached, so a prefix chain is reclaimed from
  // its leaf and its root stays matchable longest.
  for (auto p = s.pages.rbegin(); p != s.pages.rend(); ++p) release_page(*p);
  sequences_.erase(id);
}

SeqId PagedStore::fork(SeqId parent_id) {
  std::unique_lock lock(mutex_);
  const Sequence& parent = find(parent_id);
  if (!fully_written(parent))
    throw Error(Code::invalid_argument, "cannot fork sequence " + std::to_string(parent_id) +
                                            " while reserved slots are unwritten");
  for (PageId p : parent.pages) pool_.retain(p);
  const SeqId id = next_id_++;
  sequences_.emplace(id, parent);  // references into an unordered_map survive a rehash
  return id;
}

void PagedStore::reserve(std::span<const SeqId> ids, std::span<const std::uint32_t> tokens) {
  if (ids.size() != tokens.size())
    throw Error(Code::invalid_argument, "reserve: sequences and token counts differ in number");
  std::unique_lock lock(mutex_);
  std::map<SeqId, std::uint64_t> growth;  // a sequence named twice grows by the sum
  for (std::size_t i = 0; i < ids.size(); ++i) {
    find(ids[i]);
    growth[ids[i]] += tokens[i];
  }
  std::uint64_t needed = 0;
  for (const auto& [id, n] : growth) {
    const Sequence& s = sequences_.at(id);
    const std::uint64_t pages_after = (s.length + n + page_size_ - 1) / page_size_;
    needed += pages_after - s.pages.size();
    const bool shared_partial =
        n > 0 && s.length % page_size_ != 0 && pool_.refs(s.pages.back()) > 1;
    needed += shared_partial ? 1 : 0;  // copy-on-write of the last page
  }
  const std::uint64_t available = std::uint64_t{pool_.free_count()} + pool_.cached_count();
  if (needed > available)
    throw Error(Code::out_of_memory,
                "reserve needs " + pages_text(needed) + ", " + std::to_string(available) +
                    " available (" + std::to_string(pool_.free_count()) + " free, " +
                    std::to_string(pool_.cached_count()) + " cached); nothing was reserved");
  for (const auto& [id, n] : growth) {
    Sequence& s = sequences_.at(id);
    if (n == 0) continue;
    if (s.length % page_size_ != 0 && pool_.refs(s.pages.back()) > 1)
      make_private(s, s.pages.size() - 1);
    for (std::uint64_t t = 0; t < n; ++t) {
      const std::uint64_t slot = s.length + t;
      if (slot % page_size_ == 0) s.pages.push_back(take_page());
      const PageId page = s.pages.back();
      slot_positions(page)[slot % page_size_] = s.next_position++;
      fill_[page] = static_cast<std::uint32_t>(slot % page_size_ + 1);
    }
    s.length += n;
    s.scores.resize(s.length, 0.0f);
  }
}

void PagedStore::append(std::uint32_t layer, std::span<const SeqId> ids,
                        std::span<const std::uint32_t> counts, const DLTensor& k,
                        const DLTensor& v) {
  if (ids.size() != counts.size())
    throw Error(Code::invalid_argument, "append: sequences and counts differ in number");
  if (layer >= spec_.model.layers)
    throw Error(Code::invalid_argument, "layer " + std::to_string(layer) + " out of range (" +
                                            std::to_string(spec_.model.layers) + " layers)");
  std::shared_lock lock(mutex_);
  std::uint64_t rows = 0;
  std::vector<Sequence*> seqs;
  std::vector<std::uint64_t> first_row;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    Sequence& s = find(ids[i]);
    if (std::find(seqs.begin(), seqs.end(), &s) != seqs.end())
      throw Error(Code::invalid_argument,
                  "append: sequence " + std::to_string(ids[i]) + " appears twice in one batch");
    if (s.written[layer] + counts[i] > s.length)
      throw Error(Code::invalid_argument,
                  "append of " + std::to_string(counts[i]) + " tokens to sequence " +
                      std::to_string(ids[i]) + " layer " + std::to_string(layer) + " exceeds its " +
                      std::to_string(s.length - s.written[layer]) + " reserved unwritten slots");
    seqs.push_back(&s);
    first_row.push_back(rows);
    rows += counts[i];
  }
  const std::uint32_t heads = spec_.model.kv_heads;
  const std::uint32_t dim = spec_.model.head_dim;
  const InputRows k_rows(k, rows, heads, dim, "k");
  const InputRows v_rows(v, rows, heads, dim, "v");

  // Work items: chunks of up to `chunk` tokens of one sequence, aligned to token groups so that
  // each group is encoded by one task. Rows are read in memory order where the format allows.
  std::uint32_t chunk = 16;
  for (const SlotCodec* c : {&k_codec_, &v_codec_})
    if (c->spec().groups_tokens()) chunk = std::max(chunk, c->spec().group);
  struct Chunk {
    std::size_t seq;
    std::uint32_t begin, end;
  };
  std::vector<Chunk> chunks;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    for (std::uint32_t b = 0; b < counts[i];) {
      const std::uint64_t slot = seqs[i]->written[layer] + b;
      const auto e =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(counts[i], b + chunk - slot % chunk));
      chunks.push_back({i, b, e});
      b = e;
    }
  }
  const auto rows_of = [&](bool value) -> const InputRows& { return value ? v_rows : k_rows; };
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, chunks.size()),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      RowBuffer input_buffer(dim);
                      float* const input = input_buffer.data();
                      std::vector<float> group_rows(std::size_t{chunk} * dim);
                      for (std::size_t item = r.begin(); item != r.end(); ++item) {
                        const Chunk& c = chunks[item];
                        const Sequence& s = *seqs[c.seq];
                        const std::uint64_t base = s.written[layer];  // slot of the append's row 0
                        for (std::uint32_t t = c.begin; t < c.end; ++t) {
                          const std::uint64_t slot = base + t;
                          const PageId page = s.pages[slot / page_size_];
                          const auto in_page = static_cast<std::uint32_t>(slot % page_size_);
                          for (std::uint32_t h = 0; h < heads; ++h) {
                            // The next token's rows arrive while this one is encoded.
                            if (t + 4 < c.end) {
                              k_rows.prefetch(first_row[c.seq] + t + 4, h);
                              v_rows.prefetch(first_row[c.seq] + t + 4, h);
                            }
                            for (const bool value : {false, true}) {
                              const SlotCodec& codec = value ? v_codec_ : k_codec_;
                              if (!codec.spec().groups_tokens())
                                codec.encode(rows_of(value).row(first_row[c.seq] + t, h, input),
                                             tile(page, layer, h, value), in_page);
                            }
                          }
                        }
                        for (const bool value : {false, true}) {
                          const SlotCodec& codec = value ? v_codec_ : k_codec_;
                          if (!codec.spec().groups_tokens()) continue;
                          for (std::uint32_t h = 0; h < heads; ++h)
                            encode_groups(s, layer, h, value, base + c.begin, base + c.end, base,
                                          base + counts[c.seq], rows_of(value), first_row[c.seq],
                                          group_rows.data());
                        }
                      }
                      SlotCodec::finish_writes();
                    });
  // The rows of each sequence's last, incomplete group wait in fp16 (after the parallel part,
  // which may still have read earlier rows of the residual).
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    std::vector<float> input(dim);
    for (const bool value : {false, true}) {
      const SlotCodec& codec = value ? v_codec_ : k_codec_;
      if (!codec.spec().groups_tokens()) continue;
      const std::uint64_t base = seqs[i]->written[layer], end = base + counts[i];
      const std::uint64_t tail = std::max(base, end / codec.spec().group * codec.spec().group);
      for (std::uint64_t slot = tail; slot < end; ++slot) {
        for (std::uint32_t h = 0; h < heads; ++h) {
          const float* row = rows_of(value).row(first_row[i] + (slot - base), h, input.data());
          std::uint16_t* held = residual_row(*seqs[i], layer, h, value, slot);
          for (std::uint32_t j = 0; j < dim; ++j) held[j] = fp16_from_float(row[j]);
        }
      }
    }
  }
  for (std::size_t i = 0; i < seqs.size(); ++i) seqs[i]->written[layer] += counts[i];
}

std::uint64_t PagedStore::drop(SeqId id, std::span<const PositionRange> ranges) {
  std::unique_lock lock(mutex_);
  Sequence& s = find(id);
  for (const SlotCodec* c : {&k_codec_, &v_codec_})
    if (c->spec().groups_tokens())
      throw Error(Code::unsupported, "cannot drop tokens stored as " + c->spec().name() +
                                         ": its scales span groups of tokens");
  if (!fully_written(s))
    throw Error(Code::invalid_argument, "cannot drop from sequence " + std::to_string(id) +
                                            " while reserved slots are unwritten");
  const auto dropped_at = [&](std::uint64_t slot) {
    const Position p = slot_positions(s.pages[slot / page_size_])[slot % page_size_];
    return std::any_of(ranges.begin(), ranges.end(),
                       [&](const PositionRange& r) { return p >= r.begin && p < r.end; });
  };
  std::uint64_t first = 0;
  while (first < s.length && !dropped_at(first)) ++first;
  if (first == s.length) return 0;
  std::vector<std::uint64_t> kept;  // slots after `first` that survive, in order
  for (std::uint64_t slot = first + 1; slot < s.length; ++slot)
    if (!dropped_at(slot)) kept.push_back(slot);
  const std::uint64_t new_length = first + kept.size();
  const std::uint64_t new_pages = (new_length + page_size_ - 1) / page_size_;

  // Pages from the first changed one on are rewritten: shared ones need private copies first.
  std::uint64_t copies = 0;
  for (std::size_t i = first / page_size_; i < new_pages; ++i) copies += pool_.refs(s.pages[i]) > 1;
  const std::uint64_t available = std::uint64_t{pool_.free_count()} + pool_.cached_count();
  if (copies > available)
    throw Error(Code::out_of_memory, "drop needs " + pages_text(copies) +
                                         " to copy shared pages, " + std::to_string(available) +
                                         " available; nothing was dropped");
  for (std::size_t i = first / page_size_; i < new_pages; ++i) {
    if (pool_.refs(s.pages[i]) > 1) {
      make_private(s, i);
    } else {
      prefix_.forget(s.pages[i]);  // its contents change: it no longer matches its hash
    }
  }
  std::uint64_t to = first;
  for (std::uint64_t from : kept) {
    copy_slot(s.pages[from / page_size_], static_cast<std::uint32_t>(from % page_size_),
              s.pages[to / page_size_], static_cast<std::uint32_t>(to % page_size_));
    ++to;
  }
  for (std::size_t i = new_pages; i < s.pages.size(); ++i) release_page(s.pages[i]);
  s.pages.resize(new_pages);
  if (new_pages > 0) {
    const PageId last = s.pages.back();
    fill_[last] = static_cast<std::uint32_t>(new_length - (new_pages - 1) * page_size_);
    if (spec_.poison_unused) poison_slots(last, fill_[last]);
  }
  std::vector<float> scores(s.scores.begin(),
                            s.scores.begin() + static_cast<std::ptrdiff_t>(first));
  for (std::uint64_t from : kept) scores.push_back(s.scores[from]);
  s.scores = std::move(scores);
  const std::uint64_t removed = s.length - new_length;
  s.length = new_length;
  std::fill(s.written.begin(), s.written.end(), new_length);
  s.contiguous = false;
  s.chain.resize(std::min<std::size_t>(s.chain.size(), first / page_size_));
  return removed;
}

std::uint64_t PagedStore::length(SeqId id) const {
  std::shared_lock lock(mutex_);
  return find(id).length;
}

std::uint64_t PagedStore::written(SeqId id, std::uint32_t layer) const {
  std::shared_lock lock(mutex_);
  const Sequence& s = find(id);
  if (layer >= s.written.size()) throw Error(Code::invalid_argument, "layer out of range");
  return s.written[layer];
}

std::vector<Position> PagedStore::positions(SeqId id) const {
  std::shared_lock lock(mutex_);
  const Sequence& s = find(id);
  std::vector<Position> out(s.length);
  for (std::uint64_t slot = 0; slot < s.length; ++slot)
    out[slot] = slot_positions(s.pages[slot / page_size_])[slot % page_size_];
  return out;
}

std::vector<float> PagedStore::scores(SeqId id) const {
  std::shared_lock lock(mutex_);
  return find(id).scores;
}

PagedStore::LayerView PagedStore::view(SeqId id, std::uint32_t layer) {
  Sequence& s = find(id);
  if (layer >= spec_.model.layers) throw Error(Code::invalid_argument, "layer out of range");
  return {s.pages.data(), s.written[layer], s.scores.data()};
}

void PagedStore::publish_prefix(SeqId id, std::span<const std::int32_t> token_ids) {
  std::unique_lock lock(mutex_);
  Sequence& s = find(id);
  if (!spec_.prefix_caching) return;
  if (!s.contiguous)
    throw Error(Code::invalid_argument, "sequence " + std::to_string(id) +
                                            " was compacted; its pages cannot serve as a prefix");
  const std::uint64_t written_all = *std::min_element(s.written.begin(), s.written.end());
  const std::uint64_t full = std::min(written_all, std::uint64_t{token_ids.size()}) / page_size_;
  for (std::uint64_t i = s.chain.size(); i < full; ++i) {
    const auto tokens = token_ids.subspan(i * page_size_, page_size_);
    const std::uint64_t parent = i == 0 ? 0 : s.chain[i - 1];
    const std::uint64_t hash = PrefixIndex::chain(parent, tokens);
    prefix_.publish(s.pages[i], parent, hash, tokens);
    s.chain.push_back(hash);
  }
}

std::uint64_t PagedStore::match_prefix(SeqId id, std::span<const std::int32_t> token_ids) {
  std::unique_lock lock(mutex_);
  Sequence& s = find(id);
  if (s.length != 0)
    throw Error(Code::invalid_argument, "match_prefix needs an empty sequence; sequence " +
                                            std::to_string(id) + " holds " +
                                            std::to_string(s.length) + " tokens");
  if (!spec_.prefix_caching) return 0;
  std::uint64_t parent = 0;
  for (std::uint64_t i = 0; (i + 1) * page_size_ <= token_ids.size(); ++i) {
    const auto tokens = token_ids.subspan(i * page_size_, page_size_);
    const std::uint64_t hash = PrefixIndex::chain(parent, tokens);
    const auto page = prefix_.find(parent, hash, tokens);
    if (!page) break;
    pool_.retain(*page);
    s.pages.push_back(*page);
    s.chain.push_back(hash);
    parent = hash;
  }
  s.length = s.pages.size() * page_size_;
  s.scores.assign(s.length, 0.0f);
  s.next_position = static_cast<Position>(s.length);
  std::fill(s.written.begin(), s.written.end(), s.length);
  return s.length;
}

std::uint64_t PagedStore::evict_cached(std::uint64_t count) {
  std::unique_lock lock(mutex_);
  std::uint64_t evicted = 0;
  for (; evicted < count && pool_.cached_count() > 0; ++evicted)
    prefix_.forget(pool_.evict_oldest_cached());
  return evicted;
}

PageTable PagedStore::page_table(std::span<const SeqId> ids) const {
  std::shared_lock lock(mutex_);
  PageTable t;
  t.indptr.push_back(0);
  for (SeqId id : ids) {
    const Sequence& s = find(id);
    t.indices.insert(t.indices.end(), s.pages.begin(), s.pages.end());
    t.indptr.push_back(static_cast<std::int32_t>(t.indices.size()));
    t.last_page_len.push_back(
        s.pages.empty() ? 0
                        : static_cast<std::int32_t>(s.length - (s.pages.size() - 1) * page_size_));
  }
  return t;
}

void PagedStore::gather(std::uint32_t layer, SeqId id, DLTensor& k, DLTensor& v) const {
  std::shared_lock lock(mutex_);
  const Sequence& s = find(id);
  if (layer >= spec_.model.layers) throw Error(Code::invalid_argument, "layer out of range");
  const std::uint64_t n = s.written[layer];
  const std::uint32_t heads = spec_.model.kv_heads;
  const std::uint32_t dim = spec_.model.head_dim;
  float* k_out = output_rows(k, n, heads, dim, "k");
  float* v_out = output_rows(v, n, heads, dim, "v");
  for (std::uint64_t slot = 0; slot < n; ++slot) {
    for (std::uint32_t h = 0; h < heads; ++h) {
      read_row(s, layer, h, false, slot, k_out + (slot * heads + h) * dim);
      read_row(s, layer, h, true, slot, v_out + (slot * heads + h) * dim);
    }
  }
}

std::vector<std::byte> PagedStore::read_tile(std::uint32_t page, std::uint32_t layer,
                                             std::uint32_t head, bool value) const {
  if (page >= pool_.total() || layer >= spec_.model.layers || head >= spec_.model.kv_heads)
    throw Error(Code::invalid_argument, "read_tile: page, layer or head out of range");
  std::shared_lock lock(mutex_);
  const std::byte* t = tile(page, layer, head, value);
  return {t, t + (value ? v_codec_ : k_codec_).layout().tile_bytes};
}

}  // namespace kvcache::cpu
