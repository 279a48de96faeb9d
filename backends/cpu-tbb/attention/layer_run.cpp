#include "attention/layer_run.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/portable/portable_path.hpp"

namespace kvcache::cpu {

LayerRun::LayerRun(PagedStore& store_, const paging::AttentionPlan& slots_, const HeadGroups& heads,
                   const WorkSchedule& schedule_, const StepKernels& step_, std::uint32_t layer_,
                   const InputRows& q_rows, float scale)
    : store(store_),
      slots(slots_),
      schedule(schedule_),
      step(step_),
      layer(layer_),
      hg(heads),
      kv_heads(store_.spec().model.kv_heads * hg.parts),
      group(hg.width),
      dim(store_.spec().model.head_dim),
      page(store_.page_size()),
      pairs(slots_.queries * kv_heads),
      buffer_(step_),
      arena(buffer_.data(), step_.arena_bytes),
      kc(store_.codec(false)),
      vc(store_.codec(true)),
      q8_(&arena) {
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

  if (integer_rows(step.kernels[0].keys())) {
    q8_.reserve(pairs + rotations_ * kv_heads);
    for (std::uint64_t pair = 0; pair < pairs; ++pair)
      q8_.push_back(step.kernels[0].quantize(query(pair), &arena));
    for (std::size_t r = 0; r < rotations_ * kv_heads; ++r)
      q8_.push_back(step.kernels[0].quantize(turned_ + r * group * dim, &arena));
  }
}

void LayerRun::turn_queries(const InputRows& q_rows, float factor) {
  const QueryRotations turn = slots.angles();
  rotations_ = step.rotation_query.size();
  if (rotations_ == 0) return;
  const std::vector<std::uint64_t>& query_of = step.rotation_query;
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
