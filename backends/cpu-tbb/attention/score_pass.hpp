// The score pass, when eviction wants scores (H2O): each visible key's final softmax weight,
// summed over the real query heads of its kernel head, added to its slot's score. It runs after
// every pair has merged (the weights need each head's final maximum and sum), over the float path.
#pragma once

#include "attention/layer_run.hpp"
#include "attention/pair_merge.hpp"

namespace kvcache::cpu {

void add_scores(const LayerRun& run, const PairMerge& merge);

}  // namespace kvcache::cpu
