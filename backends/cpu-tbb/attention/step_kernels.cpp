#include "attention/step_kernels.hpp"

#include <algorithm>

#include "kernels/row_format.hpp"

namespace kvcache::cpu {
namespace {

// How far ahead of the rows being read their stream asks for tiles, in bytes of the rows of
// `kind`: at least two pages, and more for small tiles, so that a format read fast (int4: a
// 16-slot page of 1-1.3 KB in a few hundred ns) asks early enough to cover the memory's latency.
// int8 twice as far: on Zen 4, with the two distances taking turns call by call in one run, int8
// calls ran faster with 16 KB than with 8, where fp16 and bf16 ran no faster and int4 slower
// (figures: docs/perf-log.md, "Figures that stood in code comments").
constexpr std::size_t prefetch_bytes(RowFormat kind) {
  return kind == RowFormat::int8 ? 16384 : 8192;
}

// What a layer keeps until it returns comes from one arena: decodes of a few tokens are
// dominated by per-call costs, some thirty allocations among them. Its first buffer holds the
// scaled queries, the items' softmax states and bookkeeping, up to 4 MiB (a large prefill's
// further buffers grow from that, not from its whole size): every further buffer costs a call
// microseconds, its pages new each time. Not for what the parallel tasks allocate (the arena is
// not synchronized).
std::size_t first_buffer_bytes(std::uint64_t pairs, std::uint32_t group, std::uint32_t dim,
                               const WorkSchedule& schedule) {
  return std::min<std::uint64_t>((pairs * group * dim + schedule.state_at.back()) * sizeof(float) +
                                     schedule.items.size() * 64 + pairs * 64 + 16384,
                                 std::uint64_t{4} << 20);
}

}  // namespace

StepKernels::StepKernels(PagedStore& store, const paging::AttentionPlan& slots,
                         const HeadGroups& heads, const WorkSchedule& schedule,
                         bool accumulate_scores) {
  const std::uint32_t dim = store.spec().model.head_dim;
  const SlotCodec &kc = store.codec(false), &vc = store.codec(true);
  // Accumulated scores need the exact logits of the float path (the weights must match the
  // reference), so they keep it.
  for (std::uint32_t width = 1; width <= schedule.max_width; width *= 2)
    kernels.emplace_back(heads.width * width, dim,
                         accumulate_scores ? RowFormat::float32 : kc.row_kind(), vc.row_kind());
  float_rows = accumulate_scores || std::any_of(kernels.begin(), kernels.end(), [](const auto& a) {
                 return a.keys() == RowFormat::float32 || a.values() == RowFormat::float32;
               });
  // In pages, from the smaller of the two tiles and the farther of the two distances (K and V
  // may differ in format).
  const std::size_t small_tile = std::min(kc.layout().tile_bytes, vc.layout().tile_bytes);
  const std::size_t distance =
      std::max(prefetch_bytes(kc.row_kind()), prefetch_bytes(vc.row_kind()));
  ahead_pages = std::max<std::size_t>(2, (distance + small_tile - 1) / small_tile);

  rotation_query.assign(slots.rotation_count(), slots.queries);
  for (std::uint64_t i = 0; i < slots.queries; ++i)
    for (const paging::SlotSpan& s : slots.visible[i])
      if (s.rotation != 0) rotation_query[s.rotation - 1] = i;

  const std::uint64_t pairs = slots.queries * store.spec().model.kv_heads * heads.parts;
  arena_bytes = first_buffer_bytes(pairs, heads.width, dim, schedule);
  buffer_ = std::make_unique_for_overwrite<std::byte[]>(arena_bytes);
  pages.reserve(slots.sequences.size());
  for (const SeqId id : slots.sequences) pages.push_back(store.sequence_pages(id));
}

StepKernels::Buffer::Buffer(const StepKernels& step) : step_(step) {
  if (step.buffer_taken_.test_and_set(std::memory_order_acquire)) {
    own_ = std::make_unique_for_overwrite<std::byte[]>(step.arena_bytes);
    data_ = own_.get();
  } else {
    data_ = step.buffer_.get();
  }
}

StepKernels::Buffer::~Buffer() {
  if (!own_) step_.buffer_taken_.clear(std::memory_order_release);
}

}  // namespace kvcache::cpu
