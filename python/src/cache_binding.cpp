// kvcache._Cache: the facade (python/kvcache/cache.py wraps it with keyword configs), its
// sequences, prefix cache and steps, and read-only views of its store copied out as numpy.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
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

nb::dict stats_of(const StoreStats& s) {
  nb::dict d;
  d["total_pages"] = s.total_pages;
  d["used_pages"] = s.used_pages;
  d["cached_pages"] = s.cached_pages;
  d["free_pages"] = s.free_pages;
  d["sequences"] = s.sequences;
  d["occupied_slots"] = s.occupied_slots;
  d["unused_slots"] = s.unused_slots;
  d["page_bytes"] = s.page_bytes;
  d["used_bytes"] = s.used_bytes();
  d["total_bytes"] = s.total_bytes();
  d["utilization"] = s.utilization();
  return d;
}

const char* mask_kind_name(MaskKind kind) {
  switch (kind) {
    case MaskKind::causal:
      return "causal";
    case MaskKind::sliding_window:
      return "sliding_window";
    case MaskKind::sink_window:
      return "sink_window";
    case MaskKind::chunked:
      return "chunked";
    default:
      return "custom";
  }
}

// The store of `layer`'s group, or with no layer the cache's one store (a hybrid cache refuses,
// naming the way to each group's).
const CacheStore& store_of(CacheHandle& c, std::optional<std::uint32_t> layer) {
  if (layer) return c.cache->group_store(c.cache->place(*layer).group);
  if (const std::size_t groups = c.cache->groups().size(); groups > 1)
    throw Error(Code::invalid_argument, "this cache keeps " + std::to_string(groups) +
                                            " layer groups, one store each: pass layer= to read "
                                            "that layer's group");
  return c.cache->store();
}

// stream and event: the engine's cudaStream_t / hipStream_t and cudaEvent_t / hipEvent_t as
// integers (torch's Stream.cuda_stream, Event.cuda_event).
StepHandle* begin(CacheHandle& c, const std::vector<SeqId>& ids,
                  const std::vector<std::uint32_t>& new_tokens,
                  std::optional<std::uintptr_t> stream, std::optional<std::uintptr_t> event) {
  StepOptions options;
  if (stream) options.stream = EngineStream{reinterpret_cast<void*>(*stream)};
  if (event) options.event = reinterpret_cast<void*>(*event);
  return new StepHandle(&c,
                        locked(c, [&] { return c.cache->begin_step(ids, new_tokens, options); }));
}

void bind_model_shape(nb::module_& m) {
  nb::class_<ModelShape>(m, "ModelShape")
      .def_ro("layers", &ModelShape::layers)
      .def_ro("q_heads", &ModelShape::q_heads)
      .def_ro("kv_heads", &ModelShape::kv_heads)
      .def_ro("head_dim", &ModelShape::head_dim)
      .def("__repr__", [](const ModelShape& s) {
        return "ModelShape(layers=" + std::to_string(s.layers) +
               ", q_heads=" + std::to_string(s.q_heads) +
               ", kv_heads=" + std::to_string(s.kv_heads) +
               ", head_dim=" + std::to_string(s.head_dim) + ")";
      });
}

// Opening, and what the cache is: backend, model, stats, store info, layer groups.
void bind_open(nb::class_<CacheHandle>& cache) {
  cache
      .def(
          "__init__",
          [](CacheHandle* self, const std::string& path_or_yaml) {
            new (self) CacheHandle();
            nb::gil_scoped_release release;
            self->cache = Cache::open(path_or_yaml);
          },
          nb::arg("path_or_yaml") = "")
      .def_prop_ro("backend", [](CacheHandle& c) { return c.cache->backend(); })
      .def_prop_ro("model", [](CacheHandle& c) { return c.cache->model(); })
      .def(
          "stats",
          [](CacheHandle& c, std::optional<std::uint32_t> layer) {
            return stats_of(
                locked(c, [&] { return layer ? store_of(c, layer).stats() : c.cache->stats(); }));
          },
          nb::arg("layer") = nb::none(),
          "Pages and bytes: every group's together, or of `layer`'s group")
      .def(
          "info",
          [](CacheHandle& c, std::optional<std::uint32_t> layer) {
            const StoreInfo i = locked(c, [&] { return store_of(c, layer).info(); });
            nb::dict d;
            d["page_size"] = i.page_size;
            d["total_pages"] = i.total_pages;
            d["page_bytes"] = i.page_bytes;
            return d;
          },
          nb::arg("layer") = nb::none(),
          "The store's page size, pages and page bytes (of `layer`'s group in a hybrid cache)")
      .def("groups", [](CacheHandle& c) {
        nb::list out;
        for (const LayerGroupInfo& g : c.cache->groups()) {
          nb::dict d;
          d["name"] = g.name;
          d["layers"] = g.layers;
          d["frees_pages"] = g.frees_pages;
          d["kind"] = mask_kind_name(g.mask.kind);
          d["window"] = g.mask.window;
          d["sinks"] = g.mask.sinks;
          d["chunk"] = g.mask.chunk;
          out.append(d);
        }
        return out;
      });
}

// Sequences and steps.
void bind_sequences(nb::class_<CacheHandle>& cache) {
  cache
      .def("sequences",
           [](CacheHandle& c) { return locked(c, [&] { return c.cache->sequences(); }); })
      .def(
          "add_sequence",
          [](CacheHandle& c, std::int32_t priority) {
            return locked(c, [&] { return c.cache->add_sequence(priority); });
          },
          nb::arg("priority") = 50)
      .def("release", [](CacheHandle& c, SeqId id) { locked(c, [&] { c.cache->release(id); }); })
      .def("fork",
           [](CacheHandle& c, SeqId id) { return locked(c, [&] { return c.cache->fork(id); }); })
      .def(
          "truncate",
          [](CacheHandle& c, SeqId id, std::uint64_t tokens) {
            locked(c, [&] { c.cache->truncate(id, tokens); });
          },
          nb::arg("sequence"), nb::arg("tokens"))
      .def("begin_step", &begin, nb::arg("sequences"), nb::arg("new_tokens"),
           nb::arg("stream").none() = nb::none(), nb::arg("event").none() = nb::none(),
           nb::rv_policy::take_ownership, nb::keep_alive<0, 1>());
}

// Prefix reuse and the remote tier.
void bind_prefixes(nb::class_<CacheHandle>& cache) {
  cache
      .def("match_prefix",
           [](CacheHandle& c, SeqId id, nb::handle tokens) {
             const std::vector<std::int32_t> ids = token_ids(tokens);
             return locked(c, [&] { return c.cache->match_prefix(id, ids); });
           })
      .def("publish_prefix",
           [](CacheHandle& c, SeqId id, nb::handle tokens) {
             const std::vector<std::int32_t> ids = token_ids(tokens);
             locked(c, [&] { c.cache->publish_prefix(id, ids); });
           })
      .def("lookup_prefix",
           [](CacheHandle& c, nb::handle tokens) {
             const std::vector<std::int32_t> ids = token_ids(tokens);
             return locked(c, [&] { return c.cache->lookup_prefix(ids); });
           })
      .def(
          "flush_remote",
          [](CacheHandle& c, double seconds) {
            nb::gil_scoped_release release;  // the writer needs neither the GIL nor the lock
            return c.cache->flush_remote(
                std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000)));
          },
          nb::arg("timeout") = 10.0,
          "Waits until the pages published so far are in the shared store; False on timeout")
      .def("remote_stats", [](CacheHandle& c) -> nb::object {
        const auto s = locked(c, [&] { return c.cache->remote_stats(); });
        if (!s) return nb::none();
        nb::dict d;
        d["lookups"] = s->lookups;
        d["hit_pages"] = s->hit_pages;
        d["miss_pages"] = s->miss_pages;
        d["corrupt"] = s->corrupt;
        d["no_room"] = s->no_room;
        d["failures"] = s->failures;
        d["skipped"] = s->skipped;
        d["queued_pages"] = s->queued_pages;
        d["written_pages"] = s->written_pages;
        d["present_pages"] = s->present_pages;
        d["dropped_writes"] = s->dropped_writes;
        d["bytes_read"] = s->bytes_read;
        d["bytes_written"] = s->bytes_written;
        d["lookup_p50_us"] = s->lookup_p50_us;
        d["lookup_p99_us"] = s->lookup_p99_us;
        return d;
      });
}

// What a group's store holds, read-only.
void bind_store_reads(nb::class_<CacheHandle>& cache) {
  cache
      .def(
          "length",
          [](CacheHandle& c, SeqId id, std::optional<std::uint32_t> layer) {
            return locked(c, [&] { return store_of(c, layer).length(id); });
          },
          nb::arg("sequence"), nb::arg("layer") = nb::none())
      .def("written",
           [](CacheHandle& c, SeqId id, std::uint32_t layer) {
             return locked(c, [&] {
               const LayerPlace at = c.cache->place(layer);
               return c.cache->group_store(at.group).written(id, at.layer);
             });
           })
      .def(
          "positions",
          [](CacheHandle& c, SeqId id, std::optional<std::uint32_t> layer) {
            return to_numpy(locked(c, [&] { return store_of(c, layer).positions(id); }));
          },
          nb::arg("sequence"), nb::arg("layer") = nb::none())
      .def(
          "scores",
          [](CacheHandle& c, SeqId id, std::optional<std::uint32_t> layer) {
            return to_numpy(locked(c, [&] { return store_of(c, layer).scores(id); }));
          },
          nb::arg("sequence"), nb::arg("layer") = nb::none())
      .def(
          "gather",
          [](CacheHandle& c, std::uint32_t layer, SeqId id) {
            const ModelShape& m = c.cache->model();
            std::uint64_t n = 0;
            std::unique_ptr<float[]> k, v;
            locked(c, [&] {  // one locked call: no append comes between the count and the copy
              const LayerPlace at = c.cache->place(layer);
              const CacheStore& store = c.cache->group_store(at.group);
              n = store.written(id, at.layer);
              const std::size_t floats = n * m.kv_heads * m.head_dim;
              k.reset(new float[floats]);
              v.reset(new float[floats]);
              std::int64_t shape[3] = {static_cast<std::int64_t>(n), m.kv_heads, m.head_dim};
              DLTensor kt{k.get(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
              DLTensor vt{v.get(), {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, shape, nullptr, 0};
              store.gather(at.layer, id, kt, vt);
            });
            return nb::make_tuple(numpy_of(std::move(k), {n, m.kv_heads, m.head_dim}),
                                  numpy_of(std::move(v), {n, m.kv_heads, m.head_dim}));
          },
          nb::arg("layer"), nb::arg("sequence"),
          "A copy of a sequence's K and V of one layer as float32 [tokens, kv_heads, head_dim]")
      .def(
          "page_table",
          [](CacheHandle& c, const std::vector<SeqId>& ids, std::optional<std::uint32_t> layer) {
            const PageTable t = locked(c, [&] { return store_of(c, layer).page_table(ids); });
            nb::dict d;
            d["indptr"] = to_numpy(t.indptr);
            d["indices"] = to_numpy(t.indices);
            d["last_page_len"] = to_numpy(t.last_page_len);
            return d;
          },
          nb::arg("sequences"), nb::arg("layer") = nb::none());
}

}  // namespace

void bind_cache(nb::module_& m) {
  bind_model_shape(m);
  nb::class_<CacheHandle> cache(m, "_Cache");
  bind_open(cache);
  bind_sequences(cache);
  bind_prefixes(cache);
  bind_store_reads(cache);
}

}  // namespace kvcache::python
