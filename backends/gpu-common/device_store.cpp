#include "device_store.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "device_format.hpp"
#include "kvcache/nearest_name.hpp"
#include "kvcache/numeric.hpp"
#include "kvcache/sdk/row_tensor.hpp"
#include "staging_layout.hpp"

namespace kvcache::gpu {
namespace {

constexpr bool host_type(DLDeviceType t) {
  return t == kDLCPU || t == kHostDeviceType;
}

DeviceFormat format_on_device(const std::string& name, const nlohmann::json& options,
                              std::uint32_t head_dim, std::uint32_t page_size) {
  if (head_dim > kMaxHeadDim || head_dim % kHeadDimStep != 0)
    throw Error(Code::unsupported, std::string(kVendor) + " backend: head_dim " +
                                       std::to_string(head_dim) + " is not a multiple of " +
                                       std::to_string(kHeadDimStep) + " up to " +
                                       std::to_string(kMaxHeadDim));
  if (page_size > kMaxPageSize)
    throw Error(Code::unsupported, std::string(kVendor) + " backend: page_size " +
                                       std::to_string(page_size) + " exceeds " +
                                       std::to_string(kMaxPageSize));
  if (!is_built_in_format(name))
    throw Error(Code::unsupported, std::string(kVendor) + " backend runs only its own formats (" +
                                       name_list(format_names()) + "), not '" + name + "'");
  return device_format(parse_format(name, options), head_dim, page_size, kVendor);
}

// Element i of a host row in `dtype`, as fp16 bits.
std::uint16_t fp16_of(const std::byte* row, Dtype dtype, std::uint64_t i) {
  std::uint16_t half;
  float x;
  switch (dtype) {
    case Dtype::f16:
      std::memcpy(&half, row + 2 * i, 2);
      return half;
    case Dtype::bf16:
      std::memcpy(&half, row + 2 * i, 2);
      return fp16_from_float(float_from_bf16(half));
    default:
      std::memcpy(&x, row + 4 * i, 4);
      return fp16_from_float(x);
  }
}

std::uint64_t elements(const DLTensor& t) {
  std::uint64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<std::uint64_t>(t.shape[i]);
  return n;
}

}  // namespace

TensorView view_of(const DLTensor& t, std::uint64_t rows, std::uint32_t heads, std::uint32_t dim,
                   int device, const char* name) {
  TensorView v;
  switch (read_rows(t, {rows, heads, dim}, name)) {
    case RowType::float32:
      v.dtype = Dtype::f32;
      break;
    case RowType::float16:
      v.dtype = Dtype::f16;
      break;
    case RowType::bfloat16:
      v.dtype = Dtype::bf16;
      break;
  }
  v.on_device = t.device.device_type == kDeviceType && t.device.device_id == device;
  if (!v.on_device && !host_type(t.device.device_type))
    throw Error(Code::invalid_argument, std::string(name) + " must be on the host or on " +
                                            kVendor + " device " + std::to_string(device));
  v.pageable = t.device.device_type == kDLCPU;
  v.data = static_cast<const std::byte*>(t.data) + t.byte_offset;
  v.bytes = elements(t) * (t.dtype.bits / 8);
  return v;
}

DeviceStore::DeviceStore(const StoreSpec& spec, int device)
    : PagedStoreBase(spec), stream_(device) {
  const ModelShape& m = spec.model;
  pools_.kv_heads = m.kv_heads;
  pools_.head_dim = m.head_dim;
  pools_.k = format_on_device(spec.k_format, spec.k_options, m.head_dim, spec.page_size);
  pools_.v = format_on_device(spec.v_format, spec.v_options, m.head_dim, spec.page_size);
  const std::uint64_t pages = book_.total_pages();
  pools_.k_pool_bytes = pages * m.kv_heads * pools_.k.tile_stride();
  pools_.layer_stride = pools_.k_pool_bytes + pages * m.kv_heads * pools_.v.tile_stride();
  const std::uint64_t total = pools_.layer_stride * m.layers;
  pools_.pools = static_cast<std::uint8_t*>(memory_.reserve(total));
  stream_.fill(pools_.pools, spec.poison_unused ? 0xFF : 0, total);
  stream_.synchronize();
}

DeviceStore::~DeviceStore() = default;

void DeviceStore::append(std::uint32_t layer, std::span<const SeqId> ids,
                         std::span<const std::uint32_t> counts, const DLTensor& k,
                         const DLTensor& v) {
  std::unique_lock lock(mutex_);
  enqueue_append(enter({}), false, layer, ids, counts, k, v);
}

void DeviceStore::append_on(EngineStream engine, std::uint32_t layer, std::span<const SeqId> ids,
                            std::span<const std::uint32_t> counts, const DLTensor& k,
                            const DLTensor& v) {
  std::unique_lock lock(mutex_);
  enqueue_append(enter(engine), true, layer, ids, counts, k, v);
}

void DeviceStore::enqueue_append(const StreamView& stream, bool engine, std::uint32_t layer,
                                 std::span<const SeqId> ids, std::span<const std::uint32_t> counts,
                                 const DLTensor& k, const DLTensor& v) {
  const std::vector<paging::PageBook::Sequence*> seqs = book_.check_append(layer, ids, counts);
  std::vector<std::uint64_t> first_row;
  std::uint64_t rows = 0;
  for (const std::uint32_t c : counts) {
    first_row.push_back(rows);
    rows += c;
  }
  const std::uint32_t heads = pools_.kv_heads, dim = pools_.head_dim;
  const TensorView kt = view_of(k, rows, heads, dim, stream.device(), "k");
  const TensorView vt = view_of(v, rows, heads, dim, stream.device(), "v");
  if (rows == 0) return;
  std::vector<std::uint32_t> where(2 * rows);  // pages, then slots
  const std::uint32_t page_size = book_.page_size();
  std::uint64_t r = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    for (std::uint64_t slot = seqs[i]->written[layer]; slot < seqs[i]->written[layer] + counts[i];
         ++slot, ++r) {
      where[r] = seqs[i]->pages[slot / page_size];
      where[rows + r] = static_cast<std::uint32_t>(slot % page_size);
    }
  }
  const GroupPlan groups[2] = {plan_groups(seqs, counts, first_row, layer, false),
                               plan_groups(seqs, counts, first_row, layer, true)};
  StagingLayout staging;
  const std::uint64_t where_at = staging.reserve(where.size() * 4);
  const std::uint64_t k_at = kt.on_device ? 0 : staging.reserve(kt.bytes);
  const std::uint64_t v_at = vt.on_device ? 0 : staging.reserve(vt.bytes);
  std::uint64_t group_at[2][5] = {};  // source, residual, page, slot, scratch
  for (const bool value : {false, true}) {
    const GroupPlan& g = groups[value];
    const std::uint64_t group = book_.token_group(value);
    group_at[value][0] = staging.reserve(g.source.size() * 8);
    group_at[value][1] = staging.reserve(g.residual.size() * 2);
    group_at[value][2] = staging.reserve(g.page.size() * 4);
    group_at[value][3] = staging.reserve(g.slot.size() * 4);
    group_at[value][4] = staging.reserve(g.page.size() * heads * group * dim * 4);
  }
  auto* base = static_cast<std::uint8_t*>(staging_.reserve(staging.size()));
  stream.activate();
  stream.upload(base + where_at, where.data(), where.size() * 4);
  if (!kt.on_device) stream.upload(base + k_at, kt.data, kt.bytes);
  if (!vt.on_device) stream.upload(base + v_at, vt.data, vt.bytes);
  EncodeArgs a;
  a.pools = pools_;
  a.layer = layer;
  a.rows = rows;
  a.k = kt.on_device ? kt.data : base + k_at;
  a.v = vt.on_device ? vt.data : base + v_at;
  a.k_dtype = kt.dtype;
  a.v_dtype = vt.dtype;
  a.row_page = reinterpret_cast<const std::uint32_t*>(base + where_at);
  a.row_slot = a.row_page + rows;
  launch_encode(a, stream.get());
  for (const bool value : {false, true}) {
    const GroupPlan& g = groups[value];
    if (g.page.empty()) continue;
    const std::uint64_t* at = group_at[value];
    stream.upload(base + at[0], g.source.data(), g.source.size() * 8);
    stream.upload(base + at[1], g.residual.data(), g.residual.size() * 2);
    stream.upload(base + at[2], g.page.data(), g.page.size() * 4);
    stream.upload(base + at[3], g.slot.data(), g.slot.size() * 4);
    GroupEncodeArgs e;
    e.pools = pools_;
    e.layer = layer;
    e.value = value;
    e.groups = static_cast<std::uint32_t>(g.page.size());
    e.input = value ? a.v : a.k;
    e.dtype = value ? vt.dtype : kt.dtype;
    e.source = reinterpret_cast<const std::int64_t*>(base + at[0]);
    e.residual = reinterpret_cast<const std::uint16_t*>(base + at[1]);
    e.group_page = reinterpret_cast<const std::uint32_t*>(base + at[2]);
    e.group_slot = reinterpret_cast<const std::uint32_t*>(base + at[3]);
    e.scratch = reinterpret_cast<float*>(base + at[4]);
    launch_group_encode(e, stream.get());
  }
  // Host tensors may be page-locked, and so still being read: the caller may reuse them on return.
  if (!engine || !kt.on_device || !vt.on_device) stream.synchronize();
  for (const bool value : {false, true})
    if (book_.token_group(value) != 0)
      hold_tail_rows(seqs, counts, first_row, layer, value, value ? vt : kt, stream);
  for (std::size_t i = 0; i < seqs.size(); ++i) seqs[i]->written[layer] += counts[i];
}

DeviceStore::GroupPlan DeviceStore::plan_groups(
    const std::vector<paging::PageBook::Sequence*>& seqs, std::span<const std::uint32_t> counts,
    const std::vector<std::uint64_t>& first_row, std::uint32_t layer, bool value) const {
  GroupPlan plan;
  const std::uint64_t group = book_.token_group(value);
  if (group == 0) return plan;
  const std::uint32_t heads = pools_.kv_heads, dim = pools_.head_dim;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::uint64_t begin = seqs[i]->written[layer], end = begin + counts[i];
    for (std::uint64_t start = begin / group * group; start + group <= end; start += group) {
      plan.page.push_back(seqs[i]->pages[start / book_.page_size()]);
      plan.slot.push_back(static_cast<std::uint32_t>(start % book_.page_size()));
      for (std::uint64_t slot = start; slot < start + group; ++slot) {
        if (slot >= begin) {
          plan.source.push_back(static_cast<std::int64_t>(first_row[i] + (slot - begin)));
          continue;
        }
        plan.source.push_back(-static_cast<std::int64_t>(plan.residual.size() / heads / dim) - 1);
        for (std::uint32_t h = 0; h < heads; ++h) {
          const std::uint16_t* held = book_.residual_row(*seqs[i], layer, h, value, slot);
          plan.residual.insert(plan.residual.end(), held, held + dim);
        }
      }
    }
  }
  return plan;
}

void DeviceStore::hold_tail_rows(const std::vector<paging::PageBook::Sequence*>& seqs,
                                 std::span<const std::uint32_t> counts,
                                 const std::vector<std::uint64_t>& first_row, std::uint32_t layer,
                                 bool value, const TensorView& input, const StreamView& stream) {
  const std::uint32_t heads = pools_.kv_heads, dim = pools_.head_dim;
  const std::uint64_t row_bytes = std::uint64_t{heads} * dim * (input.dtype == Dtype::f32 ? 4 : 2);
  std::vector<std::byte> row(row_bytes);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::uint64_t begin = seqs[i]->written[layer], end = begin + counts[i];
    for (std::uint64_t slot = std::max(begin, book_.kept_rows_from(end, value)); slot < end;
         ++slot) {
      const std::byte* in =
          static_cast<const std::byte*>(input.data) + (first_row[i] + slot - begin) * row_bytes;
      if (input.on_device) {  // the residual's rows wait on the host: a wait per row
        stream.download(row.data(), in, row_bytes);
        stream.synchronize();
        in = row.data();
      }
      for (std::uint32_t h = 0; h < heads; ++h) {
        std::uint16_t* held = book_.residual_row(*seqs[i], layer, h, value, slot);
        for (std::uint32_t d = 0; d < dim; ++d)
          held[d] = fp16_of(in, input.dtype, std::uint64_t{h} * dim + d);
      }
    }
  }
}

void DeviceStore::gather(std::uint32_t layer, SeqId id, DLTensor& k, DLTensor& v) const {
  std::unique_lock lock(mutex_);
  enter({});  // the engine's work on these pages first
  book_.check_layer(layer);
  const paging::PageBook::Sequence& s = book_.find(id);
  const std::uint64_t n = s.written[layer];
  const std::uint32_t heads = pools_.kv_heads, dim = pools_.head_dim;
  for (DLTensor* t : {&k, &v}) {
    const TensorView out = view_of(*t, n, heads, dim, stream_.device(), t == &k ? "k" : "v");
    if (out.dtype != Dtype::f32 || out.on_device)
      throw Error(Code::invalid_argument, "gather writes host float32 tensors");
  }
  if (n == 0) return;
  std::vector<std::uint32_t> where(2 * n);
  for (std::uint64_t slot = 0; slot < n; ++slot) {
    where[slot] = s.pages[slot / book_.page_size()];
    where[n + slot] = static_cast<std::uint32_t>(slot % book_.page_size());
  }
  const std::uint64_t floats = n * heads * dim;
  StagingLayout staging;
  const std::uint64_t where_at = staging.reserve(where.size() * 4);
  const std::uint64_t k_at = staging.reserve(floats * 4), v_at = staging.reserve(floats * 4);
  auto* base = static_cast<std::uint8_t*>(staging_.reserve(staging.size()));
  stream_.activate();
  stream_.upload(base + where_at, where.data(), where.size() * 4);
  DecodeArgs a;
  a.pools = pools_;
  a.layer = layer;
  a.rows = n;
  a.k = reinterpret_cast<float*>(base + k_at);
  a.v = reinterpret_cast<float*>(base + v_at);
  a.row_page = reinterpret_cast<const std::uint32_t*>(base + where_at);
  a.row_slot = a.row_page + n;
  launch_decode(a, stream_.get());
  float* out[2] = {reinterpret_cast<float*>(static_cast<std::byte*>(k.data) + k.byte_offset),
                   reinterpret_cast<float*>(static_cast<std::byte*>(v.data) + v.byte_offset)};
  stream_.download(out[0], a.k, floats * 4);
  stream_.download(out[1], a.v, floats * 4);
  stream_.synchronize();
  for (const bool value : {false, true})  // rows of a group still being filled
    for (std::uint64_t slot = book_.held_from(s, layer, value); slot < n; ++slot)
      for (std::uint32_t h = 0; h < heads; ++h) {
        const std::uint16_t* held = book_.residual_row(s, layer, h, value, slot);
        for (std::uint32_t d = 0; d < dim; ++d)
          out[value][(slot * heads + h) * dim + d] = float_from_fp16(held[d]);
      }
}

std::vector<std::byte> DeviceStore::read_tile(std::uint32_t page, std::uint32_t layer,
                                              std::uint32_t head, bool value) const {
  book_.check_tile(page, layer, head);
  std::unique_lock lock(mutex_);
  enter({});
  const DeviceFormat& f = value ? pools_.v : pools_.k;
  std::vector<std::byte> out(f.tile_bytes);
  const std::uint8_t* tile = pools_.tile(layer, page, head, value);
  stream_.activate();
  stream_.download(out.data(), tile, out.size());
  stream_.synchronize();
  return out;
}

void DeviceStore::poison(paging::PageId page, std::uint32_t from_slot) {
  enter({});
  stream_.activate();
  launch_poison(pools_, book_.spec().model.layers, book_.page_size(), page, from_slot,
                stream_.get());
  stream_.synchronize();
}

void DeviceStore::copy_page(paging::PageId from, paging::PageId to) {
  enter({});
  stream_.activate();
  for (std::uint32_t layer = 0; layer < book_.spec().model.layers; ++layer) {
    for (const bool value : {false, true}) {
      // A page's tiles of one layer and side are adjacent: [page][kv_head].
      const std::uint64_t bytes = pools_.kv_heads * (value ? pools_.v : pools_.k).tile_stride();
      stream_.copy(pools_.tile(layer, to, 0, value), pools_.tile(layer, from, 0, value), bytes);
    }
  }
  stream_.synchronize();
}

// Tile by tile: a tile's stride may pad it, and the image does not.
void DeviceStore::read_page(paging::PageId page, std::span<std::byte> image) const {
  enter({});
  stream_.activate();
  std::byte* out = image.data();
  for (std::uint32_t layer = 0; layer < book_.spec().model.layers; ++layer)
    for (const bool value : {false, true}) {
      const DeviceFormat& f = value ? pools_.v : pools_.k;
      for (std::uint32_t h = 0; h < pools_.kv_heads; ++h, out += f.tile_bytes)
        stream_.download(out, pools_.tile(layer, page, h, value), f.tile_bytes);
    }
  stream_.synchronize();
}

void DeviceStore::write_page(paging::PageId page, std::span<const std::byte> image) {
  enter({});
  stream_.activate();
  const std::byte* in = image.data();
  for (std::uint32_t layer = 0; layer < book_.spec().model.layers; ++layer)
    for (const bool value : {false, true}) {
      const DeviceFormat& f = value ? pools_.v : pools_.k;
      for (std::uint32_t h = 0; h < pools_.kv_heads; ++h, in += f.tile_bytes)
        stream_.upload(pools_.tile(layer, page, h, value), in, f.tile_bytes);
    }
  stream_.synchronize();
}

void DeviceStore::move_slots(std::span<const paging::SlotMove> moves) {
  if (moves.empty()) return;
  enter({});
  const std::uint64_t n = moves.size();
  std::vector<std::uint32_t> lists(4 * n);
  for (std::uint64_t i = 0; i < n; ++i) {
    lists[i] = moves[i].from_page;
    lists[n + i] = moves[i].from_slot;
    lists[2 * n + i] = moves[i].to_page;
    lists[3 * n + i] = moves[i].to_slot;
  }
  StagingLayout staging;
  const std::uint64_t lists_at = staging.reserve(lists.size() * 4);
  const std::uint64_t scratch_at =
      staging.reserve(n * slot_bytes(pools_, book_.spec().model.layers));
  auto* base = static_cast<std::uint8_t*>(staging_.reserve(staging.size()));
  stream_.activate();
  stream_.upload(base + lists_at, lists.data(), lists.size() * 4);
  SlotMoveArgs a;
  a.pools = pools_;
  a.layers = book_.spec().model.layers;
  a.moves = static_cast<std::uint32_t>(n);
  a.from_page = reinterpret_cast<const std::uint32_t*>(base + lists_at);
  a.from_slot = a.from_page + n;
  a.to_page = a.from_page + 2 * n;
  a.to_slot = a.from_page + 3 * n;
  a.scratch = base + scratch_at;
  launch_move_slots(a, stream_.get());
  // The host list must outlive the asynchronous upload.
  stream_.synchronize();
}

}  // namespace kvcache::gpu
