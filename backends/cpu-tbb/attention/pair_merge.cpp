#include "attention/pair_merge.hpp"

#include <algorithm>

#include "kernels/portable/portable_path.hpp"
#include "kvcache/numeric.hpp"

namespace kvcache::cpu {
namespace {

// Writes a float row into `out` (float32, float16 or bfloat16) at row index r.
void store_row(DLTensor& out, std::uint64_t index, const float* row, std::uint32_t dim) {
  auto* base = static_cast<std::byte*>(out.data) + out.byte_offset;
  if (out.dtype.code == kDLFloat && out.dtype.bits == 32) {
    std::copy_n(row, dim, reinterpret_cast<float*>(base) + index * dim);
    return;
  }
  auto* half = reinterpret_cast<std::uint16_t*>(base) + index * dim;
  for (std::uint32_t i = 0; i < dim; ++i)
    half[i] = out.dtype.code == kDLFloat ? fp16_from_float(row[i]) : bf16_from_float(row[i]);
}

}  // namespace

PairMerge::PairMerge(LayerRun& run, DLTensor& out)
    : run_(run),
      out_(out),
      state_memory_(static_cast<float*>(
          run.arena.allocate(run.schedule.state_at.back() * sizeof(float), 64))),
      partial_(run.schedule.items.size(), &run.arena),
      remaining_(run.pairs, &run.arena),
      finals_(run.pairs, nullptr, &run.arena),
      own_(run.pairs, &run.arena),
      weight_sums_(run.pairs * run.group, &run.arena) {
  const std::vector<std::size_t>& begin = run.schedule.part_begin;
  for (std::uint64_t pair = 0; pair < run.pairs; ++pair)
    remaining_[pair].store(static_cast<std::uint32_t>(begin[pair + 1] - begin[pair]),
                           std::memory_order_relaxed);
}

SoftmaxState& PairMerge::start(std::size_t item) {
  return partial_[item].emplace(run_.group * run_.schedule.items[item].width, run_.dim,
                                state_memory_ + run_.schedule.state_at[item]);
}

void PairMerge::finished(std::size_t item, float* row) {
  for (std::uint32_t j = 0; j < run_.schedule.items[item].width; ++j) {
    const std::size_t pair = run_.schedule.pair_of(item, j, run_.kv_heads);
    if (remaining_[pair].fetch_sub(1, std::memory_order_acq_rel) == 1) finish(pair, row);
  }
}

void PairMerge::finish_unseen() {
  std::pmr::vector<float> row(run_.dim, &run_.arena);
  const std::vector<std::size_t>& begin = run_.schedule.part_begin;
  for (std::uint64_t pair = 0; pair < run_.pairs; ++pair)
    if (begin[pair + 1] == begin[pair]) finish(pair, row.data());
}

void PairMerge::finish(std::uint64_t pair, float* row) {
  const WorkSchedule& w = run_.schedule;
  const std::uint32_t group = run_.group, dim = run_.dim, kv_heads = run_.kv_heads;
  const std::size_t* parts = w.part_items.data() + w.part_begin[pair];
  const std::size_t count = w.part_begin[pair + 1] - w.part_begin[pair];
  const std::uint64_t query = pair / kv_heads;
  const auto head_of = [&](std::size_t it) {  // the pair's first head in the part's state
    return static_cast<std::uint32_t>(query - w.items[it].query) * group;
  };
  SoftmaxState* state;
  std::size_t first = 0;
  if (count > 0 && w.items[parts[0]].width == 1) {
    state = &*partial_[parts[0]];
    first = 1;
  } else {
    state = &own_[pair].emplace(group, dim);
  }
  for (std::size_t i = first; i < count; ++i)
    state->merge(*partial_[parts[i]], dim, head_of(parts[i]));
  finals_[pair] = state;
  // The kernel head's real query heads only, not its padding.
  const auto kernel_head = static_cast<std::uint32_t>(pair % kv_heads);
  const std::uint32_t heads = run_.store.spec().model.q_heads;
  for (std::uint32_t g = 0; g < run_.hg.count(kernel_head % run_.hg.parts); ++g) {
    const float sum = weight_sums_[pair * group + g] = state->weight_sum(g);
    scale_into(state->acc.data() + std::size_t{g} * dim, sum > 0.0f ? 1.0f / sum : 0.0f, row, dim);
    store_row(out_, query * heads + run_.hg.query_head(kernel_head, g), row, dim);
  }
}

}  // namespace kvcache::cpu
