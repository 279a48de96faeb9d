/* The kvcache plugin ABI: the only thing that crosses a shared-library boundary.
 *
 * Rules (they are what lets a plugin built today load into a host built next year):
 * - A plugin exports one function, KVC_ENTRY_SYMBOL, of type kvc_plugin_entry_fn. The host passes
 *   its ABI version; the plugin returns a descriptor that lives as long as the library.
 * - A different ABI major is refused by both sides. Minors only add: every struct that may grow
 *   starts with its own struct_size and only grows at the end, so a reader checks struct_size
 *   before reading a field that a newer minor added. Arrays of structs carry their element size;
 *   a struct embedded by value is frozen (kvc_format_desc_1_0).
 * - Errors cross as a status code plus a message written into a host-owned kvc_error, never as
 *   C++ exceptions. Every function returns the same code it wrote into err->code.
 * - Tensors cross as DLPack DLTensor. Component options cross as a JSON text.
 * - Instances are opaque void* made by a table's create and freed by its destroy.
 *
 * Plugin authors normally never write against this header: kvcache/sdk/plugin.hpp generates all
 * of it from C++ classes. docs/plugin-abi.md has the version rules and history.
 */
#ifndef KVCACHE_PLUGIN_ABI_H
#define KVCACHE_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVC_ABI_MAJOR 1
#define KVC_ABI_MINOR 10
#define KVC_ENTRY_SYMBOL "kvcache_plugin_entry"

/* ---- status ------------------------------------------------------------------------------- */

enum {
  KVC_OK = 0,
  KVC_INVALID_ARGUMENT = 1,
  KVC_NOT_FOUND = 2,
  KVC_OUT_OF_MEMORY = 3,
  KVC_UNSUPPORTED = 4,
  KVC_UNAVAILABLE = 5,
  KVC_INTERNAL = 6
};

#define KVC_MESSAGE_CAPACITY 1024

typedef struct kvc_error {
  uint32_t struct_size;
  int32_t code;
  char message[KVC_MESSAGE_CAPACITY]; /* NUL-terminated, truncated to fit */
} kvc_error;

/* ---- descriptor --------------------------------------------------------------------------- */

enum {
  KVC_KIND_BACKEND = 1,
  KVC_KIND_QUANTIZER = 2,
  KVC_KIND_MASK = 3,
  KVC_KIND_EVICTION = 4,
  KVC_KIND_TRANSPORT = 5 /* ABI 1.7 */
};

typedef struct kvc_host_info {
  uint32_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  const char* host_version;
} kvc_host_info;

/* What a component supports; an empty list means "any". */
typedef struct kvc_capabilities {
  uint32_t struct_size;
  uint32_t n_formats;
  const char* const* formats; /* storage format names */
  uint32_t n_head_dims;
  const uint32_t* head_dims;
  uint32_t n_page_sizes;
  const uint32_t* page_sizes;
  const char* device_kind; /* "cpu", "cuda", "hip", or NULL when device-independent */
  /* ABI 1.3 (a 1.2 struct ends before these). Backends only: */
  uint32_t foreign_formats; /* 1: runs any quantizer component through its own encode and tile
                               decode; `formats` lists those it runs fused. 0: only `formats`. */
  uint32_t reserved;
  /* The numeric contract of the backend's attention, a JSON object (docs/plugin-abi.md), from
     which conformance derives its error bounds; NULL or "{}": float arithmetic throughout. */
  const char* numerics_json;
  /* ABI 1.6 (a 1.5 struct ends before these). Backends only: 1 when the attention applies the
     query rotations of kvc_query_rotation; a host gives rotations to no other backend. */
  uint32_t query_rotation;
  /* ABI 1.10 (reserved, so 0, before). Backends only: 1 when the store's append_on and the
     attention's plan, run and finish enqueue a step's work on the engine's stream
     (kvc_step_args.stream); a host gives an engine stream to no other backend. */
  uint32_t engine_streams;
} kvc_capabilities;

typedef struct kvc_component {
  uint32_t struct_size;
  uint32_t kind; /* KVC_KIND_* */
  const char* name;
  const char* version;
  const kvc_capabilities* capabilities; /* may be NULL */
  /* KVC_OK when usable on this host, else KVC_UNAVAILABLE with the reason. NULL: always. */
  int32_t (*availability)(kvc_error* err);
  /* By kind: kvc_backend_table, kvc_quantizer_table, kvc_mask_table, kvc_eviction_table,
     kvc_transport_table. */
  const void* table;
} kvc_component;

typedef struct kvc_plugin_descriptor {
  uint32_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  const char* name;
  const char* version;
  uint32_t n_components;
  const kvc_component* components;
} kvc_plugin_descriptor;

typedef int32_t (*kvc_plugin_entry_fn)(const kvc_host_info* host,
                                       const kvc_plugin_descriptor** descriptor, kvc_error* err);

/* Every instance table starts with these fields. options_json is a JSON object (never NULL). */
#define KVC_INSTANCE_TABLE_HEADER                                               \
  uint32_t struct_size;                                                         \
  int32_t (*create)(const char* options_json, void** instance, kvc_error* err); \
  void (*destroy)(void* instance);

/* ---- attention masks ---------------------------------------------------------------------- */

typedef struct kvc_range {
  int64_t begin; /* half-open [begin, end) */
  int64_t end;
} kvc_range;

/* Declarative description so kernels can specialize; CUSTOM masks work through `visible`. */
enum {
  KVC_MASK_CUSTOM = 0,
  KVC_MASK_CAUSAL = 1,
  KVC_MASK_SLIDING_WINDOW = 2, /* window */
  KVC_MASK_SINK_WINDOW = 3,    /* sinks, window */
  KVC_MASK_CHUNKED = 4         /* chunk */
};

/* kvc_mask_desc flags (ABI 1.6; a mask of an older minor leaves them 0). */
#define KVC_MASK_POSITIONS_IN_CACHE 1u /* query_positions places queries elsewhere for ranges */

typedef struct kvc_mask_desc {
  uint32_t struct_size;
  uint32_t kind;       /* KVC_MASK_* */
  uint32_t max_ranges; /* most ranges `visible` returns for one query */
  uint32_t flags;      /* KVC_MASK_POSITIONS_IN_CACHE; `reserved` (0) before ABI 1.6 */
  int64_t window;
  int64_t sinks;
  int64_t chunk;
} kvc_mask_desc;

typedef struct kvc_mask_table {
  KVC_INSTANCE_TABLE_HEADER
  int32_t (*describe)(void* instance, kvc_mask_desc* out, kvc_error* err);
  /* For each of n query positions: at most max_ranges ascending, disjoint, non-empty ranges of
   * visible key positions, written at ranges[i * max_ranges], their number at counts[i]. */
  int32_t (*visible)(void* instance, const int64_t* query_positions, uint64_t n, kvc_range* ranges,
                     uint32_t* counts, kvc_error* err);
  /* ABI 1.6 (a 1.5 table ends before it; NULL is allowed, and then every range sees each query at
   * its own position): for the ranges `visible` answered, the position each query takes against
   * each, at positions[i * max_ranges + k] (RoPE positions within the cache, StreamingLLM). */
  int32_t (*query_positions)(void* instance, const int64_t* query_positions, uint64_t n,
                             const kvc_range* ranges, const uint32_t* counts, int64_t* positions,
                             kvc_error* err);
} kvc_mask_table;

/* ---- quantizers (storage formats) --------------------------------------------------------- */

enum {
  KVC_GRANULARITY_NONE = 0,       /* plain floats, no scale */
  KVC_GRANULARITY_TOKEN_HEAD = 1, /* one scale per token and head, over head_dim */
  KVC_GRANULARITY_GROUP = 2,      /* one scale (and zero) per group_size elements of head_dim */
  KVC_GRANULARITY_CHANNEL = 3     /* per channel over group_size tokens (KIVI keys) */
};

/* Layout of one tile: the page_size tokens of one page, one layer, one KV head. It may grow;
 * kvc_format_desc_1_0 is its ABI 1.0 part, frozen, which kvc_store_info embeds. */
typedef struct kvc_format_desc {
  uint32_t struct_size;
  uint32_t code_bits;   /* bits per stored element */
  uint32_t granularity; /* KVC_GRANULARITY_* */
  uint32_t group_size;
  uint32_t symmetric;       /* 1 when there is no zero point */
  DLDataType scale_dtype;   /* bits == 0 when there is no scale */
  uint64_t tile_bytes;      /* codes + scales (+ zeros) of one tile */
  uint64_t code_bytes;      /* the codes, first in the tile; scales and zeros follow */
  uint32_t slot_code_bytes; /* per slot, when slots are self-contained; else 0 */
  uint32_t slot_meta_bytes;
} kvc_format_desc;

/* The fields of kvc_format_desc in ABI 1.0, for structs that embed a description by value. */
typedef struct kvc_format_desc_1_0 {
  uint32_t struct_size;
  uint32_t code_bits;
  uint32_t granularity;
  uint32_t group_size;
  uint32_t symmetric;
  DLDataType scale_dtype;
  uint64_t tile_bytes;
  uint64_t code_bytes;
  uint32_t slot_code_bytes;
  uint32_t slot_meta_bytes;
} kvc_format_desc_1_0;

typedef struct kvc_quantizer_table {
  KVC_INSTANCE_TABLE_HEADER
  int32_t (*describe)(void* instance, uint32_t head_dim, uint32_t page_size, kvc_format_desc* out,
                      kvc_error* err);
  /* src: [count, head_dim] floats on the host; stored into slots [first_slot, first_slot+count).
   * encode and decode may be called from several threads at once, on different tiles. */
  int32_t (*encode)(void* instance, const DLTensor* src, uint32_t first_slot, uint32_t page_size,
                    void* tile, kvc_error* err);
  /* dst: [count, head_dim] float32 on the host; read from slots [first_slot, first_slot+count). */
  int32_t (*decode)(void* instance, const void* tile, uint32_t first_slot, uint32_t page_size,
                    DLTensor* dst, kvc_error* err);
} kvc_quantizer_table;

/* ---- eviction ----------------------------------------------------------------------------- */

typedef struct kvc_sequence_state {
  uint64_t id;
  uint64_t tokens;  /* tokens held now */
  uint64_t pages;   /* pages referenced, shared ones included */
  int32_t priority; /* 0..100, higher is kept longer */
  uint32_t reserved;
  uint64_t created_step;
  uint64_t last_used_step;
  int64_t next_position; /* logical position the next token will get */
} kvc_sequence_state;

typedef struct kvc_cache_state {
  uint32_t struct_size;
  uint32_t page_size;
  uint64_t step;
  uint64_t total_pages;
  uint64_t free_pages;
  uint64_t cached_pages; /* unreferenced prefix-cache pages, reclaimable */
  uint64_t n_sequences;
  const kvc_sequence_state* sequences;
  /* Per-token detail of one sequence, on demand: ascending logical positions and, when the
   * policy wants scores, the accumulated attention of each (else *scores is NULL). */
  void* context;
  int32_t (*tokens)(void* context, uint64_t sequence, const int64_t** positions,
                    const float** scores, uint64_t* count, kvc_error* err);
  /* ABI 1.3: bytes from one sequences[] entry to the next, so kvc_sequence_state may grow; a
     reader uses fields that lie within it. A state whose struct_size ends before this field has
     entries of the 1.2 kvc_sequence_state (56 bytes), and a host must give policies of a minor
     below 3 entries of that size. */
  uint32_t sequence_size;
  uint32_t reserved;
} kvc_cache_state;

/* A policy states its decision through these host callbacks; they return a KVC_* code. */
typedef struct kvc_plan_builder {
  uint32_t struct_size;
  void* context;
  int32_t (*free_cached_pages)(void* context, uint64_t count);
  int32_t (*preempt)(void* context, uint64_t sequence);
  int32_t (*drop)(void* context, uint64_t sequence, int64_t begin, int64_t end);
} kvc_plan_builder;

typedef struct kvc_eviction_table {
  KVC_INSTANCE_TABLE_HEADER
  int32_t (*wants_scores)(void* instance, uint32_t* out, kvc_error* err);
  /* Proactive, after each step (StreamingLLM windows, H2O budgets). */
  int32_t (*after_step)(void* instance, const kvc_cache_state* state, kvc_plan_builder* plan,
                        kvc_error* err);
  /* A reserve needs pages_needed more free pages than there are. */
  int32_t (*on_pressure)(void* instance, const kvc_cache_state* state, uint64_t pages_needed,
                         kvc_plan_builder* plan, kvc_error* err);
  /* ABI 1.2 (a 1.1 table ends before it; NULL is allowed): whether the plans may drop token
     ranges, not only preempt sequences or free cached pages: *out 1 if they may, 0 if never.
     KVC_UNSUPPORTED: the policy does not say. Formats whose scales span groups of tokens
     (kivi-k) cannot drop tokens, so a config pairing them with such a policy is refused. */
  int32_t (*drops_tokens)(void* instance, uint32_t* out, kvc_error* err);
} kvc_eviction_table;

/* ---- cache stores ------------------------------------------------------------------------- */

typedef struct kvc_store_info {
  uint32_t struct_size;
  uint32_t page_size;
  uint64_t total_pages;
  uint64_t page_bytes;          /* one page across all layers, K and V, scales included */
  kvc_format_desc_1_0 k_format; /* frozen: kvc_store_table::format gives the whole description */
  kvc_format_desc_1_0 v_format;
} kvc_store_info;

typedef struct kvc_store_stats {
  uint32_t struct_size;
  uint32_t reserved;
  uint64_t total_pages;
  uint64_t used_pages;
  uint64_t cached_pages;
  uint64_t free_pages;
  uint64_t sequences;
  uint64_t occupied_slots;
  uint64_t unused_slots;
  uint64_t page_bytes;
} kvc_store_stats;

/* See kvcache/cache_store.hpp for the meaning of each operation. */
typedef struct kvc_store_table {
  uint32_t struct_size;
  void (*destroy)(void* store);
  int32_t (*info)(void* store, kvc_store_info* out, kvc_error* err);
  int32_t (*stats)(void* store, kvc_store_stats* out, kvc_error* err);
  int32_t (*create_sequence)(void* store, uint64_t* sequence, kvc_error* err);
  int32_t (*release)(void* store, uint64_t sequence, kvc_error* err);
  int32_t (*fork)(void* store, uint64_t parent, uint64_t* child, kvc_error* err);
  int32_t (*reserve)(void* store, const uint64_t* sequences, const uint32_t* tokens, uint64_t n,
                     kvc_error* err);
  int32_t (*append)(void* store, uint32_t layer, const uint64_t* sequences, const uint32_t* counts,
                    uint64_t n, const DLTensor* k, const DLTensor* v, kvc_error* err);
  int32_t (*drop)(void* store, uint64_t sequence, const kvc_range* ranges, uint64_t n,
                  uint64_t* dropped, kvc_error* err);
  int32_t (*length)(void* store, uint64_t sequence, uint64_t* out, kvc_error* err);
  int32_t (*written)(void* store, uint64_t sequence, uint32_t layer, uint64_t* out, kvc_error* err);
  /* Writes min(capacity, length) positions; *count = the sequence's length. */
  int32_t (*positions)(void* store, uint64_t sequence, int64_t* out, uint64_t capacity,
                       uint64_t* count, kvc_error* err);
  int32_t (*publish_prefix)(void* store, uint64_t sequence, const int32_t* token_ids, uint64_t n,
                            kvc_error* err);
  int32_t (*match_prefix)(void* store, uint64_t sequence, const int32_t* token_ids, uint64_t n,
                          uint64_t* matched, kvc_error* err);
  int32_t (*evict_cached)(void* store, uint64_t count, uint64_t* evicted, kvc_error* err);
  /* indptr[n + 1] and last_page_len[n] are always written; indices only when capacity >=
   * indptr[n] (the caller retries with a larger buffer otherwise). */
  int32_t (*page_table)(void* store, const uint64_t* sequences, uint64_t n, int32_t* indptr,
                        int32_t* indices, uint64_t capacity, int32_t* last_page_len,
                        kvc_error* err);
  int32_t (*gather)(void* store, uint32_t layer, uint64_t sequence, DLTensor* k, DLTensor* v,
                    kvc_error* err);
  /* Copies the tile when capacity >= its size; *size = the tile's size. */
  int32_t (*read_tile)(void* store, uint32_t page, uint32_t layer, uint32_t kv_head, uint32_t value,
                       void* out, uint64_t capacity, uint64_t* size, kvc_error* err);
  /* Writes min(capacity, length) scores; *count = the sequence's length. */
  int32_t (*scores)(void* store, uint64_t sequence, float* out, uint64_t capacity, uint64_t* count,
                    kvc_error* err);
  /* ABI 1.3 (a 1.2 table ends before it; NULL is allowed): the tile layout of K (value 0) or V
     (value 1), as much of it as out->struct_size holds. */
  int32_t (*format)(void* store, uint32_t value, kvc_format_desc* out, kvc_error* err);
  /* ABI 1.5 (a 1.4 table ends before it; NULL is allowed): gives back the newest `tokens` reserved
     slots of the sequence, written or not, all or nothing (an unfinished step undone). */
  int32_t (*unreserve)(void* store, uint64_t sequence, uint64_t tokens, kvc_error* err);
  /* ABI 1.7 (a 1.6 table ends before these; NULL is allowed, and then the store has no shared
     tier; see kvcache/cache_store.hpp). lookup_prefix: *tokens = what match_prefix would reuse
     now, attaching nothing. export_page: copies the page's image into out (size bytes, exactly
     one image). import_page: the image becomes the cached published page of the tokens' last
     full page; *result = a kvc_page_import value. */
  int32_t (*lookup_prefix)(void* store, const int32_t* token_ids, uint64_t n, uint64_t* tokens,
                           kvc_error* err);
  int32_t (*export_page)(void* store, uint32_t page, void* out, uint64_t size, kvc_error* err);
  int32_t (*import_page)(void* store, const int32_t* token_ids, uint64_t n, const void* image,
                         uint64_t size, uint32_t* result, kvc_error* err);
  /* ABI 1.8 (a 1.7 table ends before it; NULL is allowed, and then the host truncates through
     unreserve): keeps the sequence's first `tokens` tokens, all or nothing (see
     CacheStore::truncate). */
  int32_t (*truncate)(void* store, uint64_t sequence, uint64_t tokens, kvc_error* err);
  /* ABI 1.9 (a 1.8 table ends before these; NULL is allowed, and then the host works from the
     contiguous prefix alone; see kvcache/cache_store.hpp). drop_unseen: drop of positions no later
     query sees, after which the sequence may still publish. prefix_pages: held[i] = 1 when the
     prefix cache holds page i of the tokens (n / page_size bytes written). attach_prefix: the
     cached pages listed (ascending page indices) become the empty sequence's, its next position
     n; *attached = 0, with nothing attached, when one is not cached. */
  int32_t (*drop_unseen)(void* store, uint64_t sequence, const kvc_range* ranges, uint64_t n,
                         uint64_t* dropped, kvc_error* err);
  int32_t (*prefix_pages)(void* store, const int32_t* token_ids, uint64_t n, uint8_t* held,
                          kvc_error* err);
  int32_t (*attach_prefix)(void* store, uint64_t sequence, const int32_t* token_ids, uint64_t n,
                           const uint64_t* pages, uint64_t count, uint32_t* attached,
                           kvc_error* err);
  /* ABI 1.10 (a 1.9 table ends before it; NULL is allowed for a backend that does not declare
     engine_streams): append, enqueued on the engine's stream (as kvc_step_args.stream), in order
     with the engine's work that made k and v; with device tensors it returns without waiting. */
  int32_t (*append_on)(void* store, uint32_t layer, const uint64_t* sequences,
                       const uint32_t* counts, uint64_t n, const DLTensor* k, const DLTensor* v,
                       void* stream, kvc_error* err);
} kvc_store_table;

/* What import_page did (ABI 1.7). */
enum { KVC_PAGE_IMPORTED = 0, KVC_PAGE_PRESENT = 1, KVC_PAGE_NO_ROOM = 2 };

/* ---- transports (ABI 1.7) ----------------------------------------------------------------- */

/* A batched byte store for the remote tier (docs/remote-tier.md): keys (NUL-terminated) and
 * opaque values, nothing of pages. create's options are the config's transport options plus
 * "endpoints", a list of strings. Any function may fail: the host takes a failure as a miss for
 * its reads and a drop for its writes. The host calls an instance from two threads at once. */

/* Takes the value of keys[index] (read during the call only); non-zero stops the get. */
typedef int32_t (*kvc_value_sink)(void* context, uint64_t index, const void* data, uint64_t size);

typedef struct kvc_transport_table {
  KVC_INSTANCE_TABLE_HEADER
  /* held[i] = 1 when keys[i] holds a value now, else 0. */
  int32_t (*probe)(void* instance, const char* const* keys, uint64_t n, uint8_t* held,
                   kvc_error* err);
  /* Calls sink(context, i, value, size) for each keys[i] that holds a value. */
  int32_t (*get)(void* instance, const char* const* keys, uint64_t n, kvc_value_sink sink,
                 void* context, kvc_error* err);
  /* Stores values[i] under keys[i] when the key holds nothing (stored[i] = 1), else leaves the
   * value there (stored[i] = 0). */
  int32_t (*put_if_absent)(void* instance, const char* const* keys, const void* const* values,
                           const uint64_t* sizes, uint64_t n, uint8_t* stored, kvc_error* err);
  /* Best effort. */
  int32_t (*remove)(void* instance, const char* const* keys, uint64_t n, kvc_error* err);
  /* A NUL-terminated description for logs, "resp 127.0.0.1:6379", within capacity bytes. */
  int32_t (*describe)(void* instance, char* out, uint64_t capacity, kvc_error* err);
} kvc_transport_table;

/* ---- attention ---------------------------------------------------------------------------- */

/* ABI 1.6: the query turned for some of its ranges (see kvcache/query_rotation.hpp): rotation r
 * turns the first rotary_dims elements of every head in pairs (style 0: i with i + rotary_dims/2;
 * 1: 2i with 2i + 1) by cos_sin[r * rotary_dims + j] and the sine rotary_dims / 2 later; range k
 * of query i takes rotation range_rotation[i * max_ranges + k] - 1, none where 0. */
typedef struct kvc_query_rotation {
  uint32_t struct_size;
  uint32_t style;
  uint32_t rotary_dims;
  uint32_t reserved;
  uint64_t n_rotations;
  const float* cos_sin;
  const uint32_t* range_rotation;
} kvc_query_rotation;

/* See kvcache/attention.hpp. query_counts is NULL for decode (one query per sequence). */
typedef struct kvc_attention_args {
  uint32_t struct_size;
  uint32_t layer;
  const uint64_t* sequences;
  uint64_t n_sequences;
  const uint32_t* query_counts;
  const DLTensor* q;
  DLTensor* out;
  const kvc_range* ranges;
  const uint32_t* range_counts;
  uint64_t n_queries;
  uint32_t max_ranges;
  float scale;
  uint32_t accumulate_scores;
  uint32_t reserved;
  /* ABI 1.6 (a 1.5 struct ends before it): NULL, or the query's rotations per range; given only to
     a backend that declares query_rotation. */
  const kvc_query_rotation* rotations;
} kvc_attention_args;

/* ABI 1.4: what a step's attention is planned from (see kvcache::StepRequest): the sequences,
 * their query counts (NULL for decode) and the mask's ranges, for every layer of the step. The
 * arrays are read during plan only: a plan copies what it keeps. */
typedef struct kvc_step_args {
  uint32_t struct_size;
  uint32_t accumulate_scores;
  const uint64_t* sequences;
  uint64_t n_sequences;
  const uint32_t* query_counts;
  const kvc_range* ranges;
  const uint32_t* range_counts;
  uint64_t n_queries;
  uint32_t max_ranges;
  float scale;
  /* ABI 1.6 (a 1.5 struct ends before it): as in kvc_attention_args. */
  const kvc_query_rotation* rotations;
  /* ABI 1.10 (a 1.9 struct ends before these; given only to a backend that declares
     engine_streams). on_stream 1: the plan's uploads, its runs and finish go on `stream`, the
     engine's cudaStream_t or hipStream_t (NULL: the vendor's default stream), in order with the
     engine's own work, and a run with device tensors returns without waiting. on_stream 0: the
     backend's own stream, and each call's work is done when it returns. */
  uint32_t on_stream;
  uint32_t reserved2;
  void* stream;
} kvc_step_args;

typedef struct kvc_attention_table {
  uint32_t struct_size;
  void (*destroy)(void* attention);
  /* store: a store made by the same plugin's backend. */
  int32_t (*decode)(void* attention, void* store, const kvc_attention_args* args, kvc_error* err);
  int32_t (*prefill)(void* attention, void* store, const kvc_attention_args* args, kvc_error* err);
  /* ABI 1.4 (a 1.3 table ends before them; all three or none): a step planned once and run per
     layer. The plan is the backend's, valid until destroy_plan, and run refuses it once the
     store's sequences changed shape. Without them the host runs decode or prefill per layer. */
  int32_t (*plan)(void* attention, void* store, const kvc_step_args* args, void** plan,
                  kvc_error* err);
  int32_t (*run)(void* attention, void* store, void* plan, uint32_t layer, const DLTensor* q,
                 DLTensor* out, kvc_error* err);
  void (*destroy_plan)(void* attention, void* plan);
  /* ABI 1.10 (a 1.9 table ends before it; NULL is allowed for a backend that does not declare
     engine_streams): the step's last call on a plan made on the engine's stream. event NULL: waits
     for the step's work on the stream; else records event (a cudaEvent_t or hipEvent_t) on it
     after that work and returns without waiting. */
  int32_t (*finish)(void* attention, void* store, void* plan, void* event, kvc_error* err);
} kvc_attention_table;

/* ---- backends ----------------------------------------------------------------------------- */

/* ABI 1.3: a storage format's codec lent to a store: the quantizer component's table and an
 * instance made by the host, both valid until the store is destroyed (this struct and `name`
 * only during create_store_with: a store copies what it keeps). A store runs the formats it
 * knows with its own kernels and any other through these encode and decode calls. The host owns
 * a lent instance: its table's create and destroy are NULL and never called by a store. */
typedef struct kvc_format_codec {
  uint32_t struct_size;
  uint32_t reserved;
  const char* name; /* the format's component name, as in the spec */
  const kvc_quantizer_table* table;
  void* instance;
} kvc_format_codec;

typedef struct kvc_store_args {
  uint32_t struct_size;
  uint32_t reserved;
  const char* spec_json;           /* see kvcache::StoreSpec */
  const kvc_format_codec* k_codec; /* NULL: the store must know the K format itself */
  const kvc_format_codec* v_codec;
} kvc_store_args;

typedef struct kvc_device_info {
  uint32_t struct_size;
  uint32_t index;
  uint32_t available;
  uint32_t reserved;
  uint64_t memory_bytes;
  char name[128];
  char reason[256]; /* why not available */
} kvc_device_info;

typedef struct kvc_backend_table {
  KVC_INSTANCE_TABLE_HEADER
  int32_t (*device_count)(void* instance, uint32_t* count, kvc_error* err);
  int32_t (*device_info)(void* instance, uint32_t index, kvc_device_info* out, kvc_error* err);
  /* spec_json: see kvcache::StoreSpec. The store is freed by (*table)->destroy. */
  int32_t (*create_store)(void* instance, const char* spec_json, const kvc_store_table** table,
                          void** store, kvc_error* err);
  /* The attention is freed by (*table)->destroy. */
  int32_t (*create_attention)(void* instance, const kvc_attention_table** table, void** attention,
                              kvc_error* err);
  /* ABI 1.1 (a 1.0 table ends before it): the bandwidth in GB/s of the memory the backend's
     stores live in, measured now by copying `bytes` within it (reads and writes both counted);
     0 when that memory is the host's, which the caller measures itself. */
  int32_t (*memory_bandwidth)(void* instance, uint64_t bytes, double* gbps, kvc_error* err);
  /* ABI 1.3 (a 1.2 table ends before it; NULL is allowed): create_store with the formats'
     codecs. Without it the host calls create_store, which knows only the backend's own formats. */
  int32_t (*create_store_with)(void* instance, const kvc_store_args* args,
                               const kvc_store_table** table, void** store, kvc_error* err);
} kvc_backend_table;

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_PLUGIN_ABI_H */
