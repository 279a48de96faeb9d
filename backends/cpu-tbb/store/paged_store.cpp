#include "store/paged_store.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "kvcache/numeric.hpp"
#include "store/host_memory.hpp"
#include "store/input_rows.hpp"

namespace kvcache::cpu {
namespace {

// The pools in 2 MiB-aligned memory that the kernel is asked to back with huge pages: attention
// walks pages scattered over the pool, and with 4 KiB pages nearly every tile it reads starts
// with a TLB miss, which huge pages avoid. Without them (another
// OS, or transparent huge pages off) the memory is the same, only slower to walk.
constexpr std::size_t kHugePage = std::size_t{1} << 21;
std::byte* allocate_pool(std::size_t bytes) {
  const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  auto* memory = static_cast<std::byte*>(std::aligned_alloc(kHugePage, rounded));
#if defined(__linux__)
  if (memory != nullptr) madvise(memory, rounded, MADV_HUGEPAGE);
#endif
  return memory;
}

// Copies into pool memory past the caches: an imported page is written whole and read later,
// and ordinary stores into cold memory first read each line they write.
void stream_copy(std::byte* to, const std::byte* from, std::size_t bytes) {
#if defined(__SSE2__)
  std::size_t i = 0;
  if (reinterpret_cast<std::uintptr_t>(to) % 16 == 0)
    for (; i + 64 <= bytes; i += 64)
      for (std::size_t j = 0; j < 64; j += 16)
        _mm_stream_si128(reinterpret_cast<__m128i*>(to + i + j),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i + j)));
  std::copy_n(from + i, bytes - i, to + i);
#else
  std::copy_n(from, bytes, to);
#endif
}

}  // namespace

PagedStore::PagedStore(const StoreSpec& spec)
    : PagedStoreBase(fits_host_memory(spec)),
      page_size_(spec.page_size),
      k_codec_(format(false), spec.model.head_dim, spec.page_size),
      v_codec_(format(true), spec.model.head_dim, spec.page_size),
      memory_(nullptr, &std::free) {
  const std::size_t tiles = std::size_t{book_.total_pages()} * spec.model.kv_heads;  // per pool
  k_pool_bytes_ = tiles * k_codec_.layout().tile_bytes;
  layer_stride_ = k_pool_bytes_ + tiles * v_codec_.layout().tile_bytes;
  const std::size_t total = layer_stride_ * spec.model.layers;
  memory_.reset(allocate_pool(total));
  if (!memory_)
    throw Error(Code::out_of_memory,
                "cannot allocate the pool of " + std::to_string(total) + " bytes");
  // Touch every page now, in parallel: the pools are committed at creation, so no append ever
  // pays for a page fault (and each page lands on the NUMA node of a worker).
  const int fill = spec.poison_unused ? 0xFF : 0;
  const std::size_t block = kHugePage;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, (total + block - 1) / block),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t b = r.begin(); b != r.end(); ++b)
                        std::memset(memory_.get() + b * block, fill,
                                    std::min(block, total - b * block));
                    });
}

PagedStore::~PagedStore() = default;

void PagedStore::poison(PageId page, std::uint32_t from_slot) {
  for (std::uint32_t layer = 0; layer < spec().model.layers; ++layer) {
    for (std::uint32_t h = 0; h < spec().model.kv_heads; ++h) {
      for (const bool value : {false, true}) {
        const TileLayout& f = codec(value).layout();
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
}

void PagedStore::copy_page(PageId from, PageId to) {
  for (std::uint32_t layer = 0; layer < spec().model.layers; ++layer) {
    for (std::uint32_t h = 0; h < spec().model.kv_heads; ++h)
      for (const bool value : {false, true})
        std::memcpy(tile(to, layer, h, value), tile(from, layer, h, value),
                    codec(value).layout().tile_bytes);
  }
}

void PagedStore::move_slots(std::span<const paging::SlotMove> moves) {
  for (const paging::SlotMove& m : moves) {
    for (std::uint32_t layer = 0; layer < spec().model.layers; ++layer) {
      for (std::uint32_t h = 0; h < spec().model.kv_heads; ++h) {
        for (const bool value : {false, true})
          codec(value).copy_slot(tile(m.from_page, layer, h, value), m.from_slot,
                                 tile(m.to_page, layer, h, value), m.to_slot);
      }
    }
  }
}

void PagedStore::read_page(PageId page, std::span<std::byte> image) const {
  std::byte* out = image.data();
  for_each_tile(page,
                [&](const std::byte* t, std::size_t bytes) { out = std::copy_n(t, bytes, out); });
}

void PagedStore::write_page(PageId page, std::span<const std::byte> image) {
  const std::byte* in = image.data();
  for_each_tile(page, [&](std::byte* t, std::size_t bytes) {
    stream_copy(t, in, bytes);
    in += bytes;
  });
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

void PagedStore::encode_groups(const Sequence& s, std::uint32_t layer, std::uint32_t head,
                               bool value, std::uint64_t begin, std::uint64_t end,
                               std::uint64_t append_begin, std::uint64_t append_end,
                               const InputRows& rows, std::uint64_t first_row,
                               float* group_rows) const {
  const SlotCodec& codec = value ? v_codec_ : k_codec_;
  const std::uint32_t dim = spec().model.head_dim;
  const std::uint64_t group = codec.spec().group;
  for (std::uint64_t start = begin - begin % group; start < end; start += group) {
    if (start + group > append_end) break;  // incomplete: its rows wait in the residual
    // Every row of a group goes through fp16, whether it waited in the residual or not, so the
    // codes do not depend on how tokens were batched.
    for (std::uint64_t slot = start; slot < start + group; ++slot) {
      float* out = group_rows + (slot - start) * dim;
      if (slot < append_begin) {
        const std::uint16_t* held = book_.residual_row(s, layer, head, value, slot);
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
    const std::uint16_t* held = book_.residual_row(s, layer, head, value, slot);
    for (std::uint32_t i = 0; i < spec().model.head_dim; ++i) row[i] = float_from_fp16(held[i]);
    return;
  }
  codec.decode(tile(s.pages[slot / page_size_], layer, head, value),
               static_cast<std::uint32_t>(slot % page_size_), row);
}

void PagedStore::append(std::uint32_t layer, std::span<const SeqId> ids,
                        std::span<const std::uint32_t> counts, const DLTensor& k,
                        const DLTensor& v) {
  std::shared_lock lock(mutex_);
  const AppendClaims::Claim claim(appending_, ids);
  const std::vector<Sequence*> seqs = book_.check_append(layer, ids, counts);
  std::vector<std::uint64_t> first_row;
  std::uint64_t rows = 0;
  for (const std::uint32_t c : counts) {
    first_row.push_back(rows);
    rows += c;
  }
  const std::uint32_t heads = spec().model.kv_heads;
  const std::uint32_t dim = spec().model.head_dim;
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
  const bool grouped = k_codec_.spec().groups_tokens() || v_codec_.spec().groups_tokens();
  const auto encode = [&](const tbb::blocked_range<std::size_t>& r) {
    RowBuffer input_buffer(dim);
    float* const input = input_buffer.data();
    // Only formats that group tokens need it: zeroing it was most of a one-token append.
    std::vector<float> group_rows(grouped ? std::size_t{chunk} * dim : 0);
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
                        base + counts[c.seq], rows_of(value), first_row[c.seq], group_rows.data());
      }
    }
    SlotCodec::finish_writes();
  };
  // One chunk (a decode of one sequence) runs here: handing it to the scheduler costs more.
  const tbb::blocked_range<std::size_t> all(0, chunks.size());
  if (chunks.size() == 1)
    encode(all);
  else
    tbb::parallel_for(all, encode);
  // After the parallel part, which may still have read earlier rows of the residual.
  for (std::size_t i = 0; i < seqs.size(); ++i)
    for (const bool value : {false, true})
      if (codec(value).spec().groups_tokens())
        hold_rows(*seqs[i], layer, value, counts[i], value ? v_rows : k_rows, first_row[i]);
  for (std::size_t i = 0; i < seqs.size(); ++i) seqs[i]->written[layer] += counts[i];
}

void PagedStore::hold_rows(Sequence& s, std::uint32_t layer, bool value, std::uint32_t count,
                           const InputRows& rows, std::uint64_t first_row) {
  const std::uint32_t heads = spec().model.kv_heads;
  std::vector<float> input(spec().model.head_dim);
  const std::uint64_t base = s.written[layer], end = base + count;
  for (std::uint64_t slot = std::max(base, book_.kept_rows_from(end, value)); slot < end; ++slot)
    for (std::uint32_t h = 0; h < heads; ++h) {
      const float* row = rows.row(first_row + (slot - base), h, input.data());
      std::uint16_t* held = book_.residual_row(s, layer, h, value, slot);
      for (std::uint32_t j = 0; j < input.size(); ++j) held[j] = fp16_from_float(row[j]);
    }
}

PagedStore::SequencePages PagedStore::sequence_pages(SeqId id) {
  Sequence& s = find(id);
  return {s.pages.data(), s.scores.data()};
}

void PagedStore::gather(std::uint32_t layer, SeqId id, DLTensor& k, DLTensor& v) const {
  std::shared_lock lock(mutex_);
  const Sequence& s = find(id);
  book_.check_layer(layer);
  const std::uint64_t n = s.written[layer];
  const std::uint32_t heads = spec().model.kv_heads;
  const std::uint32_t dim = spec().model.head_dim;
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
  book_.check_tile(page, layer, head);
  std::shared_lock lock(mutex_);
  const std::byte* t = tile(page, layer, head, value);
  return {t, t + (value ? v_codec_ : k_codec_).layout().tile_bytes};
}

}  // namespace kvcache::cpu
