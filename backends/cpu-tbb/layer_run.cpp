#include "layer_run.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kvcache/formats.hpp"
#include "portable_path.hpp"

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

// What the layer keeps until it returns comes from one arena: decodes of a few tokens are
// dominated by per-call costs, some thirty allocations among them. Its first buffer holds the
// scaled queries, the items' softmax states and bookkeeping, up to 4 MiB (a large prefill's
// further buffers grow from that, not from its whole size): every further buffer costs a call
// microseconds, its pages new each time. Not for what the parallel tasks
// allocate (the arena is not synchronized).
std::size_t arena_bytes(std::uint64_t pairs, std::uint32_t group, std::uint32_t dim,
                        const WorkSchedule& schedule) {
  return std::min<std::uint64_t>((pairs * group * dim + schedule.state_at.back()) * sizeof(float) +
                                     schedule.items.size() * 64 + pairs * 64 + 16384,
                                 std::uint64_t{4} << 20);
}

}  // namespace

LayerRun::LayerRun(PagedStore& store_, const paging::AttentionPlan& slots_, const HeadGroups& heads,
                   const WorkSchedule& schedule_, std::uint32_t layer_, const InputRows& q_rows,
                   float scale, bool accumulate_scores)
    : store(store_),
      slots(slots_),
      schedule(schedule_),
      layer(layer_),
      scores(accumulate_scores),
      hg(heads),
      kv_heads(store_.spec().model.kv_heads * hg.parts),
      group(hg.width),
      dim(store_.spec().model.head_dim),
      page(store_.page_size()),
      pairs(slots_.queries * kv_heads),
      arena(arena_bytes(pairs, group, dim, schedule_)),
      views(&arena),
      kc(store_.codec(false)),
      vc(store_.codec(true)),
      kernels(&arena),
      q8_(&arena) {
  views.reserve(slots.sequences.size());
  for (const SeqId id : slots.sequences) views.push_back(store.view(id, layer));

  // Pre-scaled for a base-2 softmax; not zeroed first: every element is written.
  const float factor = (scale > 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(dim))) *
                       std::numbers::log2e_v<float>;
  q_ = static_cast<float*>(arena.allocate(pairs * group * dim * sizeof(float), 64));
  RowBuffer buffer(dim);
  for (std::uint64_t i = 0; i < slots.queries; ++i)
    for (std::uint32_t h = 0; h < kv_heads; ++h)
      for (std::uint32_t g = 0; g < group; ++g)
        scale_into(q_rows.row(i, hg.query_head(h, g), buffer.data()), factor,
                   q_ + ((i * kv_heads + h) * group + g) * dim, dim);
  turn_queries(q_rows, factor);

  // Accumulated scores need the exact logits of the float path (the weights must match the
  // reference), so they keep it.
  for (std::uint32_t width = 1; width <= schedule.max_width; width *= 2)
    kernels.emplace_back(group * width, dim, scores ? RowFormat::float32 : kc.row_kind(),
                         vc.row_kind());
  if (integer_rows(kernels[0].keys())) {
    q8_.reserve(pairs + rotations_ * kv_heads);
    for (std::uint64_t pair = 0; pair < pairs; ++pair)
      q8_.push_back(kernels[0].quantize(query(pair), &arena));
    for (std::size_t r = 0; r < rotations_ * kv_heads; ++r)
      q8_.push_back(kernels[0].quantize(turned_ + r * group * dim, &arena));
  }
  float_rows_ = scores || std::any_of(kernels.begin(), kernels.end(), [](const auto& a) {
                  return a.keys() == RowFormat::float32 || a.values() == RowFormat::float32;
                });

  // In pages, from the smaller of the two tiles and the farther of the two distances (K and V
  // may differ in format).
  const std::size_t small_tile = std::min(kc.layout().tile_bytes, vc.layout().tile_bytes);
  const std::size_t distance =
      std::max(prefetch_bytes(kc.row_kind()), prefetch_bytes(vc.row_kind()));
  ahead_pages = std::max<std::size_t>(2, (distance + small_tile - 1) / small_tile);
}

void LayerRun::turn_queries(const InputRows& q_rows, float factor) {
  const QueryRotations turn = slots.angles();
  rotations_ = slots.rotation_count();
  if (rotations_ == 0) return;
  // Which query each rotation turns (a rotation is one query's, for one of its ranges); a rotation
  // no span uses (its range held no slots) stays unturned and unread.
  std::pmr::vector<std::uint64_t> query_of(rotations_, slots.queries, &arena);
  for (std::uint64_t i = 0; i < slots.queries; ++i)
    for (const paging::SlotSpan& s : slots.visible[i])
      if (s.rotation != 0) query_of[s.rotation - 1] = i;
  turned_ =
      static_cast<float*>(arena.allocate(rotations_ * kv_heads * group * dim * sizeof(float), 64));
  RowBuffer buffer(dim), row(dim);
  for (std::size_t r = 0; r < rotations_; ++r)
    for (std::uint32_t h = 0; h < kv_heads; ++h)
      for (std::uint32_t g = 0; g < group; ++g) {
        float* to = turned_ + ((r * kv_heads + h) * group + g) * dim;
        if (query_of[r] == slots.queries) {
          std::fill(to, to + dim, 0.0f);
          continue;
        }
        const float* from = q_rows.row(query_of[r], hg.query_head(h, g), buffer.data());
        std::copy(from, from + dim, row.data());
        turn.rotate(r, row.data());
        scale_into(row.data(), factor, to, dim);
      }
}

}  // namespace kvcache::cpu
