// Runs one work item's kernels into its partial softmax state: the pair's queries (or a tile's,
// one query's heads after another), its slots read in place by the kernels where both K and V can
// be, else block by block through key_blocks.hpp.
#pragma once

#include <cstddef>

#include "attention/layer_run.hpp"
#include "attention/pair_merge.hpp"

namespace kvcache::cpu {

void run_item(const LayerRun& run, std::size_t item, const TaskBuffers& buffers, PairMerge& merge);

}  // namespace kvcache::cpu
