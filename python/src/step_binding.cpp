// kvcache.Step (a step of the engine: append, decode or prefill per layer, then finish) and
// kvcache.EvictionReport.
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "bindings.hpp"
#include "cache_handle.hpp"
#include "step_handle.hpp"

namespace nb = nanobind;

namespace kvcache::python {
namespace {

std::vector<std::tuple<SeqId, Position, Position>> dropped(const EvictionReport& r) {
  std::vector<std::tuple<SeqId, Position, Position>> out;
  for (const DroppedRange& d : r.dropped) out.emplace_back(d.sequence, d.range.begin, d.range.end);
  return out;
}

// q (and out) of decode or prefill: [rows, q_heads, head_dim]; out allocated when not given.
nb::object attend(StepHandle& s, std::uint32_t layer, const InputArray& q,
                  const std::optional<OutputArray>& out, bool prefill) {
  const ModelShape& m = s.cache->cache->model();
  const Step& step = s.get();
  const auto rows = static_cast<std::int64_t>(prefill ? step.tokens() : step.sequences().size());
  const char* axes = prefill ? "tokens, q_heads, head_dim" : "sequences, q_heads, head_dim";
  const DLTensor q_view = float_rows(q, "q", {rows, m.q_heads, m.head_dim}, axes);
  std::int64_t shape[3] = {rows, m.q_heads, m.head_dim};
  DLTensor out_view;
  NewArray fresh{};
  if (out) {
    out_view = float_rows(*out, "out", {rows, m.q_heads, m.head_dim}, axes);
  } else {
    fresh = new_float32({static_cast<std::size_t>(rows), m.q_heads, m.head_dim});
    out_view = DLTensor{fresh.data, {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
  }
  locked(*s.cache, [&] {
    prefill ? s.get().prefill(layer, q_view, out_view) : s.get().decode(layer, q_view, out_view);
  });
  return out ? nb::cast(*out) : fresh.array;
}

}  // namespace

void bind_step(nb::module_& m) {
  nb::class_<EvictionReport>(m, "EvictionReport",
                             "What left the cache, so that the engine can recompute it.")
      .def_ro("preempted", &EvictionReport::preempted, "whole sequences, released")
      .def_prop_ro("dropped", &dropped,
                   "(sequence, begin, end): the positions removed from live sequences")
      .def_ro("cached_pages_freed", &EvictionReport::cached_pages_freed)
      .def("__bool__", [](const EvictionReport& r) { return !r.empty(); })
      .def("__repr__", [](const EvictionReport& r) {
        return "EvictionReport(preempted=" + std::to_string(r.preempted.size()) +
               " sequences, dropped=" + std::to_string(r.dropped.size()) +
               " ranges, cached_pages_freed=" + std::to_string(r.cached_pages_freed) + ")";
      });

  nb::class_<StepHandle>(m, "Step",
                         "One engine step, planned once: append, then decode or prefill, for "
                         "every layer; then finish().")
      .def_prop_ro(
          "sequences",
          [](StepHandle& s) {
            const auto ids = s.get().sequences();
            return std::vector<SeqId>(ids.begin(), ids.end());
          },
          "the batch in the order of the tensors' rows (preempted members left it)")
      .def_prop_ro("new_tokens",
                   [](StepHandle& s) {
                     const auto n = s.get().new_tokens();
                     return std::vector<std::uint32_t>(n.begin(), n.end());
                   })
      .def_prop_ro(
          "tokens", [](StepHandle& s) { return s.get().tokens(); },
          "rows of append's k and v and of prefill's q and out")
      .def_prop_ro(
          "report", [](StepHandle& s) { return s.get().report(); },
          "what begin_step's reserve evicted")
      .def(
          "append",
          [](StepHandle& s, std::uint32_t layer, const InputArray& k, const InputArray& v) {
            const ModelShape& m = s.cache->cache->model();
            const auto rows = static_cast<std::int64_t>(s.get().tokens());
            const char* axes = "tokens, kv_heads, head_dim";
            const DLTensor kt = float_rows(k, "k", {rows, m.kv_heads, m.head_dim}, axes);
            const DLTensor vt = float_rows(v, "v", {rows, m.kv_heads, m.head_dim}, axes);
            locked(*s.cache, [&] { s.get().append(layer, kt, vt); });
          },
          nb::arg("layer"), nb::arg("k"), nb::arg("v"),
          "K and V of `layer` for the step's new tokens: [tokens, kv_heads, head_dim]")
      .def(
          "decode",
          [](StepHandle& s, std::uint32_t layer, const InputArray& q,
             std::optional<OutputArray> out) { return attend(s, layer, q, out, false); },
          nb::arg("layer"), nb::arg("q"), nb::arg("out") = nb::none(),
          "One query per sequence, its newest token: q [sequences, q_heads, head_dim]; returns "
          "out (float32 when not given)")
      .def(
          "prefill",
          [](StepHandle& s, std::uint32_t layer, const InputArray& q,
             std::optional<OutputArray> out) { return attend(s, layer, q, out, true); },
          nb::arg("layer"), nb::arg("q"), nb::arg("out") = nb::none(),
          "The queries of every new token: q [tokens, q_heads, head_dim]; returns out")
      .def(
          "finish",
          [](StepHandle& s) { return locked(*s.cache, [&] { return s.get().finish(); }); },
          "Ends the step (every layer appended): the policy's hook; all the step evicted");
}

}  // namespace kvcache::python
