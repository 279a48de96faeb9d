// Attention of plain loops: for each query and query head, the softmax over its visible keys'
// logits (in double), and the weighted sum of their values, each row decoded by the format.
// Decode and prefill differ only in how many queries a sequence has; the paging library's plan
// checks the request and turns the mask's position ranges into ranges of slots.
#pragma once

#include "kvcache/attention.hpp"

namespace scalar {

class ScalarAttention final : public kvcache::Attention {
 public:
  void decode(kvcache::CacheStore& store, const kvcache::AttentionRequest& request) override {
    attend(store, request, false);
  }
  void prefill(kvcache::CacheStore& store, const kvcache::AttentionRequest& request) override {
    attend(store, request, true);
  }

 private:
  static void attend(kvcache::CacheStore& store, const kvcache::AttentionRequest& request,
                     bool prefill);
};

}  // namespace scalar
