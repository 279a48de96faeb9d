#include "attention/item_runner.hpp"

#include <bit>
#include <optional>
#include <vector>

#include "attention/key_blocks.hpp"

namespace kvcache::cpu {

void run_item(const LayerRun& run, std::size_t it, const TaskBuffers& buffers, PairMerge& merge) {
  const Item& item = run.schedule.items[it];
  const std::uint32_t group = run.group, dim = run.dim;
  SoftmaxState& state = merge.start(it);
  const BlockAttention& kernels = run.step.kernels[std::countr_zero(item.width)];
  const std::size_t pair = item.query * run.kv_heads + item.kv_head;
  const float* qg = run.query(pair);
  const QuantizedQuery* qq = run.quantized(pair);
  // The query as a segment turns it (a tile's segments never do: tiles share unturned spans).
  const auto turn = [&](std::uint32_t rotation) {
    if (item.width == 1) {
      qg = run.query(pair, rotation);
      qq = run.quantized(pair, rotation);
    }
  };
  // A tile's query heads for this kernel head, one query's after another.
  std::vector<float> tile_q;
  std::optional<QuantizedQuery> tile_q8;
  if (item.width > 1) {
    for (std::uint32_t j = 0; j < item.width; ++j) {
      const float* from = run.query((item.query + j) * run.kv_heads + item.kv_head);
      tile_q.insert(tile_q.end(), from, from + std::size_t{group} * dim);
    }
    qg = tile_q.data();
    if (integer_rows(kernels.keys())) qq = &tile_q8.emplace(kernels.quantize(qg));
  }
  PendingValues pending;
  if (kernels.keys() != RowFormat::float32 && kernels.values() != RowFormat::float32) {
    // Both sides read in place: the kernels walk the pages themselves.
    const PagedStore::SequencePages& view = run.step.pages[run.slots.query_sequence[item.query]];
    BlockAttention::PageRun pages{run.tiles(item.kv_head, false),
                                  run.tiles(item.kv_head, true),
                                  run.kc.layout().tile_bytes,
                                  run.vc.layout().tile_bytes,
                                  run.kc.layout().code_bytes,
                                  run.vc.layout().code_bytes,
                                  view.pages,
                                  run.page,
                                  0,
                                  0,
                                  run.step.ahead_pages};
    for (std::size_t i = item.first; i < item.end; ++i) {
      const Segment& segment = run.schedule.segments[i];
      pages.begin = segment.begin;
      pages.end = segment.end;
      turn(segment.rotation);
      kernels(qg, qq, pages, state, pending, buffers.logits);
    }
  } else {
    for_each_block(run, item, buffers, kernels.keys(), kernels.values(), true,
                   [&](const RowBlock& keys, const RowBlock& values, std::uint64_t, std::uint32_t n,
                       std::uint32_t rotation) {
                     turn(rotation);
                     kernels(qg, qq, keys, values, n, state, pending, buffers.logits);
                   });
  }
  kernels.flush(pending);
  merge.finished(it, buffers.row);
}

}  // namespace kvcache::cpu
