#include "kvcache/step.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <string>

#include "cache/cache_impl.hpp"

namespace kvcache {

struct Step::State {
  Cache::Impl* cache = nullptr;
  std::vector<SeqId> sequences;
  std::vector<std::uint32_t> new_tokens;
  std::uint64_t tokens = 0;
  bool one_each = true;  // one new token per sequence: decode may run
  StepOptions options;
  EvictionReport report;
  // One plan per layer group, made at begin_step under the group's mask, and the ids its
  // backend store knows the batch by.
  std::vector<std::unique_ptr<StepPlan>> plans;
  std::vector<std::vector<SeqId>> own;
  enum class Layer : std::uint8_t { untouched, appended, attended };
  std::vector<Layer> layers;
  bool finished = false;

  void check_open(const char* call) const {
    if (finished) throw Error(Code::invalid_argument, std::string(call) + ": the step is finished");
  }
  Layer& layer(const char* call, std::uint32_t index) {
    check_open(call);
    if (index >= layers.size())
      throw Error(Code::invalid_argument, std::string(call) + ": layer " + std::to_string(index) +
                                              " out of range (the model has " +
                                              std::to_string(layers.size()) + ")");
    return layers[index];
  }
  void attend(const char* call, std::uint32_t index, const DLTensor& q, DLTensor& out) {
    Layer& state = layer(call, index);
    if (state != Layer::appended)
      throw Error(Code::invalid_argument,
                  std::string(call) + ": layer " + std::to_string(index) +
                      (state == Layer::untouched ? " has not been appended in this step"
                                                 : " was already attended in this step"));
    const LayerPlace& at = cache->places[index];
    Cache::Impl::Group& group = cache->groups[at.group];
    group.attention->run(*group.kv, *plans[at.group], at.layer, q, out);
    state = Layer::attended;
  }
};

Step::Step(std::unique_ptr<State> state) : state_(std::move(state)) {}
Step::Step(Step&&) noexcept = default;
Step& Step::operator=(Step&& other) noexcept {
  if (this != &other) {
    Step dropped(std::move(*this));  // closes the step this one held
    state_ = std::move(other.state_);
  }
  return *this;
}
Step::~Step() {
  if (state_ && !state_->finished) {  // never finished: undone
    const std::lock_guard lock(state_->cache->mutex);
    state_->cache->undo_reserve(state_->sequences, state_->new_tokens);
    state_->cache->close_step();
  }
}

namespace {
Step::State& live(const std::unique_ptr<Step::State>& state) {
  if (!state) throw Error(Code::invalid_argument, "this Step was moved from");
  return *state;
}

}  // namespace

std::span<const SeqId> Step::sequences() const {
  return live(state_).sequences;
}
std::span<const std::uint32_t> Step::new_tokens() const {
  return live(state_).new_tokens;
}
std::uint64_t Step::tokens() const {
  return live(state_).tokens;
}
const EvictionReport& Step::report() const {
  return live(state_).report;
}

void Step::append(std::uint32_t layer, const DLTensor& k, const DLTensor& v) {
  State& s = live(state_);
  const std::lock_guard lock(s.cache->mutex);
  State::Layer& state = s.layer("append", layer);
  if (state != State::Layer::untouched)
    throw Error(Code::invalid_argument,
                "append: layer " + std::to_string(layer) + " was already appended in this step");
  const LayerPlace& at = s.cache->places[layer];
  CacheStore& store = *s.cache->groups[at.group].store;
  if (s.options.stream)
    store.append_on(*s.options.stream, at.layer, s.sequences, s.new_tokens, k, v);
  else
    store.append(at.layer, s.sequences, s.new_tokens, k, v);
  state = State::Layer::appended;
}

void Step::decode(std::uint32_t layer, const DLTensor& q, DLTensor& out) {
  State& s = live(state_);
  const std::lock_guard lock(s.cache->mutex);
  if (!s.one_each)
    throw Error(Code::invalid_argument,
                "decode: this step has more than one new token for a sequence; use prefill");
  s.attend("decode", layer, q, out);
}

void Step::prefill(std::uint32_t layer, const DLTensor& q, DLTensor& out) {
  State& s = live(state_);
  const std::lock_guard lock(s.cache->mutex);
  s.attend("prefill", layer, q, out);
}

EvictionReport Step::finish() {
  State& s = live(state_);
  const std::lock_guard lock(s.cache->mutex);
  s.check_open("finish");
  const auto missing = std::find(s.layers.begin(), s.layers.end(), State::Layer::untouched);
  if (missing != s.layers.end() && s.tokens > 0)
    throw Error(Code::invalid_argument,
                "finish: layer " + std::to_string(missing - s.layers.begin()) + " of " +
                    std::to_string(s.layers.size()) + " has not been appended in this step");
  if (s.options.stream) {
    // Every group's work went onto the one engine stream: one wait (or event) covers them all.
    Cache::Impl::Group& last = s.cache->groups.back();
    last.attention->finish(*last.kv, *s.plans.back(), s.options.event);
  }
  EvictionReport report = s.report;  // copied before the step counts as done
  s.finished = true;
  s.cache->close_step();
  // From here the step stands: a failure of the policy's hook arrives as an EvictionError (so the
  // caller can tell) that carries begin_step's evictions too.
  try {
    s.cache->after_step(report);
  } catch (...) {
    rethrow_with(std::move(report), true);
  }
  return report;
}

Step Cache::begin_step(std::span<const SeqId> ids, std::span<const std::uint32_t> new_tokens,
                       const StepOptions& options) {
  Impl& c = *impl_;
  std::unique_lock lock(c.mutex);
  c.wait_for_step(lock, "begin_step");
  if (ids.size() != new_tokens.size())
    throw Error(Code::invalid_argument, "begin_step: " + std::to_string(ids.size()) +
                                            " sequences but " + std::to_string(new_tokens.size()) +
                                            " token counts");
  if (options.event != nullptr && !options.stream)
    throw Error(Code::invalid_argument,
                "begin_step: an event is recorded on the engine's stream, and none was given");
  std::set<SeqId> seen;
  for (const SeqId id : ids) {
    c.steppable("begin_step", id);
    if (!seen.insert(id).second)
      throw Error(Code::invalid_argument,
                  "begin_step: sequence " + std::to_string(id) + " appears twice");
  }
  auto s = std::make_unique<Step::State>();
  s->cache = &c;
  s->sequences.assign(ids.begin(), ids.end());
  s->new_tokens.assign(new_tokens.begin(), new_tokens.end());
  s->options = options;
  s->report = c.reserve(s->sequences, s->new_tokens);
  s->tokens = std::accumulate(s->new_tokens.begin(), s->new_tokens.end(), std::uint64_t{0});
  s->one_each = std::all_of(s->new_tokens.begin(), s->new_tokens.end(),
                            [](std::uint32_t n) { return n == 1; });
  try {
    s->layers.assign(c.model.layers, Step::State::Layer::untouched);
    const std::span<const std::uint32_t> counts =
        s->one_each ? std::span<const std::uint32_t>{}
                    : std::span<const std::uint32_t>(s->new_tokens);
    c.mark_used(s->sequences);
    for (const Impl::Group& group : c.groups) {
      s->own.push_back(group.own(s->sequences));
      s->plans.push_back(c.plan_group(group, s->sequences, s->own.back(), counts, options.stream));
    }
  } catch (...) {  // the mask or the plan failed: the reserve is undone, its evictions reported
    c.undo_reserve(s->sequences, s->new_tokens);
    rethrow_with(std::move(s->report));
  }
  c.open_step(s->sequences);
  return Step(std::move(s));
}

Step Cache::begin_step(SeqId sequence, std::uint32_t new_tokens) {
  return begin_step(std::span<const SeqId>(&sequence, 1),
                    std::span<const std::uint32_t>(&new_tokens, 1));
}

}  // namespace kvcache
