#include "kvcache/attention.hpp"

#include "plugin/adapters.hpp"

namespace kvcache::plugin {
namespace {

class HostAttention final : public Attention {
 public:
  explicit HostAttention(std::unique_ptr<PluginInstance<kvc_attention_table>> instance)
      : a_(std::move(instance)) {}

  void decode(CacheStore& store, const AttentionRequest& request) override {
    run(&kvc_attention_table::decode, store, request);
  }
  void prefill(CacheStore& store, const AttentionRequest& request) override {
    run(&kvc_attention_table::prefill, store, request);
  }

 private:
  template <class Fn>
  void run(Fn kvc_attention_table::*fn, CacheStore& store, const AttentionRequest& r) {
    if (r.q == nullptr || r.out == nullptr)
      throw Error(Code::invalid_argument, a_->who() + ": q and out are required");
    if (r.visible.max_ranges == 0 ||
        r.visible.ranges.size() < r.visible.counts.size() * r.visible.max_ranges)
      throw Error(Code::invalid_argument, a_->who() + ": visible ranges hold fewer than " +
                                              std::to_string(r.visible.max_ranges) + " per query");
    const bool prefill = !r.query_counts.empty();
    if (prefill && r.query_counts.size() != r.sequences.size())
      throw Error(Code::invalid_argument, a_->who() + ": one query count per sequence");
    const kvc_attention_args args{sizeof(kvc_attention_args),
                                  r.layer,
                                  r.sequences.data(),
                                  r.sequences.size(),
                                  prefill ? r.query_counts.data() : nullptr,
                                  r.q,
                                  r.out,
                                  reinterpret_cast<const kvc_range*>(r.visible.ranges.data()),
                                  r.visible.counts.data(),
                                  r.visible.counts.size(),
                                  r.visible.max_ranges,
                                  r.scale,
                                  r.accumulate_scores ? 1u : 0u,
                                  0};
    void* handle = store_handle(store, *a_->library());
    a_->call(fn, handle, &args);
  }

  std::unique_ptr<PluginInstance<kvc_attention_table>> a_;
};

}  // namespace

std::unique_ptr<Attention> make_attention(std::shared_ptr<const PluginLibrary> library,
                                          const kvc_attention_table* table, void* attention,
                                          const std::string& who) {
  return std::make_unique<HostAttention>(std::make_unique<PluginInstance<kvc_attention_table>>(
      std::move(library), table, attention, who));
}

}  // namespace kvcache::plugin
