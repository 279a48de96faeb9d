#include "attention/score_pass.hpp"

#include <atomic>
#include <cmath>

#include "attention/key_blocks.hpp"
#include "kernels/portable/portable_path.hpp"

namespace kvcache::cpu {

void add_scores(const LayerRun& run, const PairMerge& merge) {
  run.for_each_item([&](std::size_t it, const TaskBuffers& buffers) {
    const Item& item = run.schedule.items[it];
    const std::size_t pair = item.query * run.kv_heads + item.kv_head;
    const SoftmaxState& final_state = merge.final_state(pair);
    const std::uint32_t group = run.group, real_heads = run.hg.count(item.kv_head % run.hg.parts);
    for_each_block(
        run, item, buffers, RowFormat::float32, RowFormat::float32, false,
        [&](const RowBlock&, const RowBlock&, std::uint64_t first, std::uint32_t n,
            std::uint32_t rotation) {
          block_logits(run.query(pair, item.width == 1 ? rotation : 0), group, run.dim, buffers.k,
                       n, buffers.logits);
          float* scores = run.step.pages[run.slots.query_sequence[item.query]].scores;
          for (std::uint32_t j = 0; j < n; ++j) {
            float weight = 0.0f;
            for (std::uint32_t g = 0; g < real_heads; ++g)
              weight += std::exp2(buffers.logits[std::size_t{g} * n + j] - final_state.m[g]) /
                        merge.weight_sum(pair, g);
            std::atomic_ref<float>(scores[first + j]).fetch_add(weight, std::memory_order_relaxed);
          }
        });
  });
}

}  // namespace kvcache::cpu
