#include "serving_simulation.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <random>

#include <fmt/format.h>

#include "kvcache/cache.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/host_tensor.hpp"
#include "quantization_error.hpp"
#include "synthetic_rows.hpp"

namespace kvcache::tool {
namespace {

using Clock = std::chrono::steady_clock;

std::int32_t token_id(std::int64_t stream, std::uint32_t i) {
  return static_cast<std::int32_t>((stream * 1000003 + i * 7919) % 32000);
}

struct Running {
  Request request;
  std::size_t index = 0;  // in the request list
  SeqId sequence = 0;
  std::uint32_t pending = 0;   // prompt tokens not yet computed
  std::uint32_t reserved = 0;  // of them, reserved for the next step (a prefill chunk)
  std::uint32_t generated = 0;
  std::vector<std::int32_t> prompt_ids;
};

std::vector<std::int32_t> prompt_ids(const Request& r, std::size_t index) {
  std::vector<std::int32_t> ids;
  for (std::uint32_t i = 0; i < r.prompt_tokens; ++i)
    ids.push_back(r.prefix_id && i < kSharedPrefix ? token_id(-1 - *r.prefix_id, i)
                                                   : token_id(static_cast<std::int64_t>(index), i));
  return ids;
}

// The simulation's mutable state and its metrics.
class Simulation {
 public:
  // masks: each layer group's, in the order of cache.groups().
  Simulation(Cache& cache, std::vector<std::unique_ptr<AttentionMask>> masks,
             const SimulationOptions& o, std::vector<Request> requests, double layer_scale)
      : cache_(cache),
        masks_(std::move(masks)),
        o_(o),
        requests_(std::move(requests)),
        layer_scale_(layer_scale),
        rows_(o.seed) {
    for (std::size_t i = 0; i < requests_.size(); ++i) queue_.push_back(i);
    // A token's bytes in one layer of each layer group (one in a uniform cache).
    for (std::size_t g = 0; g < cache.groups().size(); ++g) {
      const StoreInfo info = cache.group_store(g).info();
      bytes_per_token_.push_back(
          static_cast<double>(info.k_format.tile_bytes + info.v_format.tile_bytes) *
          cache.model().kv_heads / info.page_size);
      page_size_ = info.page_size;
    }
  }

  nlohmann::json run() {
    const auto start = Clock::now();
    while (finished_ + rejected_ < requests_.size()) {
      if (running_.empty() && !queue_.empty())
        now_ = std::max(now_, requests_[queue_.front()].arrival);
      const auto step_start = Clock::now();
      admit();
      compute();
      note(cache_.end_step());
      retire();
      const double seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
      now_ += seconds;
      sample(seconds);
      if (o_.progress) progress();
    }
    total_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
    if (o_.progress) std::cerr << '\n';
    if (!o_.chart.empty()) write_chart();
    return report();
  }

 private:
  void admit() {
    while (!queue_.empty() && running_.size() < o_.max_batch &&
           requests_[queue_.front()].arrival <= now_) {
      const std::size_t index = queue_.front();
      Running r{requests_[index],
                index,
                cache_.add_sequence(),
                0,
                0,
                0,
                prompt_ids(requests_[index], index)};
      // Reuse cached prefix pages; the last prompt token is always computed.
      const std::uint64_t matched =
          r.request.prefix_id
              ? cache_.match_prefix(
                    r.sequence,
                    std::span<const std::int32_t>(r.prompt_ids).first(r.prompt_ids.size() - 1))
              : 0;
      prefix_hits_ += matched;
      prompt_tokens_ += r.prompt_ids.size();
      r.pending = static_cast<std::uint32_t>(r.prompt_ids.size() - matched);
      r.reserved = chunk(r.pending);
      // Admission waits for free memory rather than evicting running requests (as vLLM's
      // scheduler does): otherwise two requests could take turns preempting each other forever.
      // It also leaves a page per running sequence, so that the next decode step fits; in
      // every layer group.
      bool room = true;
      for (std::size_t g = 0; g < masks_.size() && !running_.empty(); ++g) {
        const StoreStats st = cache_.group_store(g).stats();
        room = room && st.free_pages + st.cached_pages >=
                           (r.reserved + page_size_ - 1) / page_size_ + 1 + running_.size();
      }
      if (!room) {
        cache_.release(r.sequence);
        return;
      }
      queue_.pop_front();  // preempted requests go back to the front while reserving
      std::string failure;
      try {
        const EvictionReport report =
            cache_.reserve(std::vector<SeqId>{r.sequence}, std::vector<std::uint32_t>{r.reserved});
        note(report);
        // A policy may choose the newcomer itself: then it did not fit.
        if (std::find(report.preempted.begin(), report.preempted.end(), r.sequence) !=
            report.preempted.end())
          failure = "the eviction policy preempted the request being admitted";
      } catch (const CacheFull& full) {
        note(full.report());
        cache_.release(r.sequence);
        failure = full.what();
      }
      if (failure.empty()) {
        running_.push_back(std::move(r));
        continue;
      }
      if (running_.empty()) {  // it cannot fit even alone: rejected, never retried
        ++rejected_;
        rejections_.push_back({{"request", index}, {"reason", failure}});
        continue;
      }
      queue_.push_front(index);  // wait for memory
      return;
    }
  }

  // The prompt tokens of the next prefill step: all of them, or a chunk.
  std::uint32_t chunk(std::uint32_t pending) const {
    return o_.prefill_chunk > 0 ? std::min(pending, o_.prefill_chunk) : pending;
  }

  void compute() {
    // Decode steps need one more slot each, a prompt's next chunk its tokens. Reserving may
    // preempt running requests (they leave running_), so the batches are formed only once it
    // succeeded.
    for (;;) {
      std::vector<SeqId> ids;
      std::vector<std::uint32_t> counts;
      for (const Running& r : running_) {
        if (r.pending > 0 && r.reserved > 0) continue;  // reserved at admission
        ids.push_back(r.sequence);
        counts.push_back(r.pending > 0 ? chunk(r.pending) : 1);
      }
      if (ids.empty()) break;
      try {
        note(cache_.reserve(ids, counts));
        for (Running& r : running_)
          if (r.pending > 0 && r.reserved == 0) r.reserved = chunk(r.pending);
        break;
      } catch (const CacheFull& full) {
        note(full.report());
        // No policy made room: preempt the newest sequence (recompute later), as vLLM does.
        if (running_.size() <= 1) {
          reject_running(running_.back(), full.what());
        } else {
          preempt(running_.back().sequence);
        }
      }
    }
    std::vector<Running*> prefill, decode;
    for (Running& r : running_) (r.pending > 0 ? prefill : decode).push_back(&r);
    run_layers(prefill, true);
    run_layers(decode, false);
    for (Running* r : prefill) {
      r->pending -= r->reserved;
      r->reserved = 0;
      if (r->pending == 0) cache_.publish_prefix(r->sequence, r->prompt_ids);
    }
    for (Running* r : decode) ++r->generated, ++generated_;
  }

  // Keys group g's mask lets the newest `queries` tokens of a sequence see, in one of its
  // layers: what attention reads.
  std::uint64_t visible_keys(std::size_t g, SeqId sequence, std::uint32_t queries) const {
    const std::vector<Position> held = cache_.group_store(g).positions(sequence);
    const AttentionMask& mask = *masks_[g];
    const std::uint32_t max_ranges = mask.describe().max_ranges;
    std::vector<Position> q;
    for (std::uint32_t j = 0; j < queries; ++j) q.push_back(held[held.size() - queries + j]);
    std::vector<PositionRange> ranges(q.size() * max_ranges);
    std::vector<std::uint32_t> counts(q.size());
    mask.visible(q, ranges, counts);
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < q.size(); ++i)
      for (std::uint32_t r = 0; r < counts[i]; ++r) {
        const PositionRange& range = ranges[i * max_ranges + r];
        total +=
            static_cast<std::uint64_t>(std::lower_bound(held.begin(), held.end(), range.end) -
                                       std::lower_bound(held.begin(), held.end(), range.begin));
      }
    return total;
  }

  void run_layers(const std::vector<Running*>& batch, bool prefill) {
    if (batch.empty()) return;
    const ModelShape& m = cache_.model();
    std::vector<SeqId> ids;
    std::vector<std::uint32_t> counts;
    std::uint64_t rows = 0;
    std::vector<std::uint64_t> visible(masks_.size());  // per layer group
    for (const Running* r : batch) {
      ids.push_back(r->sequence);
      counts.push_back(prefill ? r->reserved : 1);
      rows += counts.back();
      for (std::size_t g = 0; g < masks_.size(); ++g)
        visible[g] += visible_keys(g, r->sequence, counts.back());
    }
    std::vector<float> k(rows * m.kv_heads * m.head_dim), q(rows * m.q_heads * m.head_dim),
        out(q.size());
    rows_.fill(k, m.head_dim);
    rows_.fill(q, m.head_dim);
    std::int64_t kv_shape[3] = {static_cast<std::int64_t>(rows), m.kv_heads, m.head_dim};
    std::int64_t q_shape[3] = {static_cast<std::int64_t>(rows), m.q_heads, m.head_dim};
    const DLTensor kt = host_tensor(k.data(), kv_shape);
    const DLTensor qt = host_tensor(q.data(), q_shape);
    DLTensor ot = host_tensor(out.data(), q_shape);
    for (std::uint32_t layer = 0; layer < m.layers; ++layer) {
      cache_.append(layer, ids, counts, kt, kt);
      const auto start = Clock::now();
      prefill ? cache_.prefill(layer, ids, counts, qt, ot) : cache_.decode(layer, ids, qt, ot);
      attention_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
      const std::size_t g = cache_.place(layer).group;
      attention_bytes_ += static_cast<double>(visible[g]) * bytes_per_token_[g];
    }
  }

  void note(const EvictionReport& report) {
    for (SeqId id : report.preempted) {
      const auto it = std::find_if(running_.begin(), running_.end(),
                                   [&](const Running& r) { return r.sequence == id; });
      if (it == running_.end()) continue;
      ++preemptions_;
      requeue(it);
    }
    for (const DroppedRange& d : report.dropped)
      evicted_tokens_ += static_cast<std::uint64_t>(d.range.size());
    evictions_ += report.dropped.size();
  }

  // A preempted request is recomputed from scratch when memory allows; one preempted
  // kMaxPreemptions times is rejected, so no request is retried forever.
  void requeue(std::deque<Running>::iterator it) {
    if (++times_preempted_[it->index] > kMaxPreemptions) {
      ++rejected_;
      rejections_.push_back({{"request", it->index},
                             {"reason", "preempted " + std::to_string(kMaxPreemptions) +
                                            " times: the cache is too small for this load"}});
    } else {
      queue_.push_front(it->index);
    }
    running_.erase(it);
  }

  void preempt(SeqId id) {
    const auto it = std::find_if(running_.begin(), running_.end(),
                                 [&](const Running& r) { return r.sequence == id; });
    cache_.release(id);
    ++preemptions_;
    requeue(it);
  }

  void reject_running(Running& r, const std::string& why) {
    cache_.release(r.sequence);
    rejections_.push_back({{"request", r.index}, {"reason", why}});
    ++rejected_;
    running_.erase(
        std::find_if(running_.begin(), running_.end(), [&](const Running& x) { return &x == &r; }));
  }

  void retire() {
    for (auto it = running_.begin(); it != running_.end();) {
      if (it->pending == 0 && it->generated >= it->request.output_tokens) {
        cache_.release(it->sequence);
        ++finished_;
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void sample(double seconds) {
    const StoreStats st = cache_.stats();
    const std::uint64_t slots = st.used_pages * page_size_;
    std::uint64_t held = 0, baseline = 0;
    for (const Running& r : running_) {
      std::uint64_t most = 0;  // in the group that keeps the most of it
      for (std::size_t g = 0; g < masks_.size(); ++g)
        most = std::max(most, cache_.group_store(g).length(r.sequence));
      held += most;
      baseline += std::max<std::uint64_t>(o_.baseline_max_len,
                                          r.request.prompt_tokens + r.request.output_tokens);
    }
    if (slots > 0) {
      utilization_sum_ += static_cast<double>(st.occupied_slots) / static_cast<double>(slots);
      fragmentation_sum_ += static_cast<double>(st.unused_slots) / static_cast<double>(slots);
      baseline_sum_ +=
          baseline > 0 ? static_cast<double>(held) / static_cast<double>(baseline) : 0.0;
      ++samples_;
    }
    peak_bytes_ = std::max(peak_bytes_, st.used_bytes());
    peak_running_ = std::max<std::uint64_t>(peak_running_, running_.size());
    timeline_.push_back({now_,
                         static_cast<double>(st.used_pages) / static_cast<double>(st.total_pages),
                         seconds > 0 ? static_cast<double>(running_.size()) / seconds : 0.0});
  }

  void progress() const {
    if (!isatty(2)) return;
    const std::size_t done = finished_ + rejected_, width = 30;
    const std::size_t filled = requests_.empty() ? width : done * width / requests_.size();
    std::cerr << fmt::format("\r[{}{}] {}/{} requests, {} running, {} tokens generated",
                             std::string(filled, '#'), std::string(width - filled, '.'), done,
                             requests_.size(), running_.size(), generated_)
              << std::flush;
  }

  void write_chart() const {
    std::ofstream svg(o_.chart);
    if (!svg) throw Error(Code::invalid_argument, "cannot write chart '" + o_.chart + "'");
    const double w = 760, h = 300, x0 = 60, y0 = 20;
    const double t_end = timeline_.empty() ? 1.0 : std::max(timeline_.back()[0], 1e-9);
    double top = 1.0;
    for (const auto& p : timeline_) top = std::max(top, p[2]);
    std::string memory, throughput;
    for (const auto& p : timeline_) {
      const double x = x0 + p[0] / t_end * w;
      memory += fmt::format("{:.1f},{:.1f} ", x, y0 + h - p[1] * h);
      throughput += fmt::format("{:.1f},{:.1f} ", x, y0 + h - p[2] / top * h);
    }
    svg << fmt::format(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' "
        "font-size='12'>\n"
        "<rect width='100%' height='100%' fill='white'/>\n"
        "<text x='{}' y='14'>kvcache bench: KV memory in use (blue, share of pages) and decode "
        "tokens/s (orange, peak {:.0f})</text>\n"
        "<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='black'/><line x1='{}' y1='{}' x2='{}' "
        "y2='{}' stroke='black'/>\n"
        "<text x='{}' y='{}'>0</text><text x='{}' y='{}'>{:.2f} s</text><text x='5' "
        "y='{}'>100%</text>\n"
        "<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='{}'/>\n"
        "<polyline fill='none' stroke='#ff7f0e' stroke-width='1' points='{}'/>\n</svg>\n",
        x0 + w + 20, y0 + h + 40, x0, top, x0, y0 + h, x0 + w, y0 + h, x0, y0, x0, y0 + h, x0,
        y0 + h + 16, x0 + w - 30, y0 + h + 16, t_end, y0 + 10, memory, throughput);
  }

  nlohmann::json report() const {
    const double n = samples_ > 0 ? static_cast<double>(samples_) : 1.0;
    return {{"requests", requests_.size()},
            {"finished", finished_},
            {"rejected", rejected_},
            {"rejections", rejections_},
            {"generated_tokens", generated_},
            {"seconds", total_seconds_},
            {"tokens_per_second", static_cast<double>(generated_) / total_seconds_},
            {"attention_gbps",
             attention_seconds_ > 0 ? attention_bytes_ / attention_seconds_ / 1e9 : 0.0},
            {"kv_utilization", utilization_sum_ / n},
            {"fragmentation", fragmentation_sum_ / n},
            {"baseline_utilization", baseline_sum_ / n},
            {"prefix_hit_rate", prompt_tokens_ > 0 ? static_cast<double>(prefix_hits_) /
                                                         static_cast<double>(prompt_tokens_)
                                                   : 0.0},
            {"evictions", evictions_},
            {"evicted_tokens", evicted_tokens_},
            {"preemptions", preemptions_},
            {"peak_running", peak_running_},
            {"peak_kv_bytes",
             static_cast<std::uint64_t>(static_cast<double>(peak_bytes_) * layer_scale_)}};
  }

  Cache& cache_;
  std::vector<std::unique_ptr<AttentionMask>> masks_;
  const SimulationOptions& o_;
  std::vector<Request> requests_;
  double layer_scale_;
  SyntheticRows rows_;
  static constexpr int kMaxPreemptions = 8;
  std::deque<std::size_t> queue_;
  std::map<std::size_t, int> times_preempted_;
  std::deque<Running> running_;
  double now_ = 0.0, total_seconds_ = 0.0, attention_seconds_ = 0.0, attention_bytes_ = 0.0;
  std::vector<double> bytes_per_token_;  // per layer group
  std::uint32_t page_size_ = 0;
  std::size_t finished_ = 0, rejected_ = 0;
  std::uint64_t generated_ = 0, prompt_tokens_ = 0, prefix_hits_ = 0, preemptions_ = 0,
                evictions_ = 0, evicted_tokens_ = 0;
  std::uint64_t peak_bytes_ = 0, peak_running_ = 0, samples_ = 0;
  double utilization_sum_ = 0.0, fragmentation_sum_ = 0.0, baseline_sum_ = 0.0;
  nlohmann::json rejections_ = nlohmann::json::array();
  std::vector<std::array<double, 3>> timeline_;  // time, memory share, running / step seconds
};

}  // namespace

nlohmann::json run_serving_simulation(const Config& config,
                                      std::shared_ptr<const Registry> registry,
                                      const SimulationOptions& o) {
  // Compute runs on the simulated layers; memory is sized as for the whole model, so the number
  // of tokens that fit is the real one.
  Config simulated = config;
  // A hybrid model runs every layer: its groups are laid over the model's layers.
  const std::uint32_t layers = config.layer_groups.empty()
                                   ? std::clamp(o.simulated_layers, 1u, config.model.layers)
                                   : config.model.layers;
  simulated.model.layers = layers;
  simulated.cache.capacity_bytes = config.cache.capacity_bytes * layers / config.model.layers;
  const auto cache = Cache::open(simulated, registry);
  std::vector<Request> requests = o.trace.empty()
                                      ? synthetic_requests(o.requests, o.seed, o.arrival_rate)
                                      : read_trace(o.trace);
  std::vector<std::unique_ptr<AttentionMask>> masks;
  if (config.layer_groups.empty())
    masks.push_back(registry->create_mask(config.mask.name, config.mask.options));
  for (const LayerGroup& group : config.layer_groups)
    masks.push_back(registry->create_mask(group.mask.name, group.mask.options));
  Simulation simulation(*cache, std::move(masks), o, std::move(requests),
                        static_cast<double>(config.model.layers) / layers);
  nlohmann::json report = simulation.run();
  if (cache->remote_stats()) {  // a remote tier: its writes finish, and what it did is reported
    cache->flush_remote(std::chrono::seconds(60));
    const remote::TierStats t = *cache->remote_stats();
    report["remote"] = {{"pages_pulled", t.hit_pages},
                        {"prefill_tokens_pulled", t.hit_pages * config.cache.page_size},
                        {"pages_written", t.written_pages},
                        {"pages_present", t.present_pages},
                        {"dropped_writes", t.dropped_writes},
                        {"corrupt", t.corrupt},
                        {"failures", t.failures},
                        {"lookup_p50_us", t.lookup_p50_us},
                        {"lookup_p99_us", t.lookup_p99_us}};
  }
  try {
    report["quant_error"] = quantization_error(config, registry);
  } catch (const Error& e) {  // e.g. a third-party format: the run's results still count
    report["quant_error"] = nullptr;
    report["quant_error_unavailable"] = e.what();
  }
  report["backend"] = cache->backend();
  report["k_format"] = config.k_format.name;
  report["v_format"] = config.v_format.name;
  report["eviction"] = config.eviction.name;
  report["simulated_layers"] = layers;
  report["model_layers"] = config.model.layers;
  return report;
}

}  // namespace kvcache::tool
