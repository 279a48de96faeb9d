// The GPU CacheStore: the core's PagedStoreBase (a PageBook) for bookkeeping, exactly as cpu-tbb,
// so a page means the same on every backend, with per-layer K and V pools in one device allocation
// made at creation. Appends encode on the device; K/V and outputs on the device are used in place,
// host tensors are copied because the caller handed them over on the host. A call on the store's
// own stream has finished on the device when it returns; an append on the engine's stream with
// device tensors returns without waiting (docs/engine-step.md, "Streams").
//
// kivi-k (scales over groups of tokens): the rows of a group still being filled wait in fp16 in
// the book's residual on the host (attention uploads them); complete groups are encoded here.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "gpu_runtime.hpp"
#include "kernels.hpp"
#include "kvcache/cache_store.hpp"
#include "kvcache/paging/paged_store_base.hpp"

namespace kvcache::gpu {

// A device tensor's data as this backend sees it: on `device`, or on the host (then copied).
// Throws unless the tensor is [rows, heads, dim] row-major float32/float16/bfloat16.
struct TensorView {
  const void* data = nullptr;
  Dtype dtype = Dtype::f32;
  std::uint64_t bytes = 0;
  bool on_device = false;
  bool pageable = false;  // host memory that is not page-locked (kDLCPU)
};
TensorView view_of(const DLTensor& t, std::uint64_t rows, std::uint32_t heads, std::uint32_t dim,
                   int device, const char* name);

class DeviceStore final : public paging::PagedStoreBase {
 public:
  DeviceStore(const StoreSpec& spec, int device);
  ~DeviceStore() override;

  void append(std::uint32_t layer, std::span<const SeqId> sequences,
              std::span<const std::uint32_t> counts, const DLTensor& k, const DLTensor& v) override;
  void append_on(EngineStream stream, std::uint32_t layer, std::span<const SeqId> sequences,
                 std::span<const std::uint32_t> counts, const DLTensor& k,
                 const DLTensor& v) override;
  void gather(std::uint32_t layer, SeqId sequence, DLTensor& k, DLTensor& v) const override;
  std::vector<std::byte> read_tile(std::uint32_t page, std::uint32_t layer, std::uint32_t kv_head,
                                   bool value) const override;

  // For the attention of this backend. It holds the lock exclusively: the store's stream and
  // staging buffers are shared by every call.
  std::unique_lock<std::shared_mutex> lock() const { return std::unique_lock(mutex_); }
  const PoolLayout& pools() const { return pools_; }
  const Stream& stream() const { return stream_; }
  // Under the lock: the stream a call enqueues on (see StreamOrder), and that one was waited for.
  StreamView enter(std::optional<EngineStream> engine) const {
    return order_.enter(stream_, engine);
  }
  void waited(const StreamView& stream) const { order_.waited(stream.get()); }
  // The attention's scratch (q, partial states, logits, outputs, scores) and page-locked staging
  // (small host queries and outputs on their way) are the store's, so that the one StreamOrder
  // covers every buffer a call on the store uses.
  DeviceBuffer& scratch() const { return scratch_; }
  PinnedBuffer& pinned() const { return pinned_; }

 private:
  // For a side that groups tokens: the groups an append completes and where their rows come
  // from (input rows, or residual rows copied out now, before the tail overwrites them).
  struct GroupPlan {
    std::vector<std::int64_t> source;     // per group row: input row, or -(residual row + 1)
    std::vector<std::uint16_t> residual;  // [rows][kv_heads][head_dim]
    std::vector<std::uint32_t> page, slot;
  };
  // append on `stream`, under the lock; it waits for the stream unless `engine` and both tensors
  // are on the device.
  void enqueue_append(const StreamView& stream, bool engine, std::uint32_t layer,
                      std::span<const SeqId> sequences, std::span<const std::uint32_t> counts,
                      const DLTensor& k, const DLTensor& v);
  GroupPlan plan_groups(const std::vector<paging::PageBook::Sequence*>& seqs,
                        std::span<const std::uint32_t> counts,
                        const std::vector<std::uint64_t>& first_row, std::uint32_t layer,
                        bool value) const;
  // The rows of each sequence's last, incomplete group and of the group before it (kept for
  // truncate), into its residual.
  void hold_tail_rows(const std::vector<paging::PageBook::Sequence*>& seqs,
                      std::span<const std::uint32_t> counts,
                      const std::vector<std::uint64_t>& first_row, std::uint32_t layer, bool value,
                      const TensorView& input, const StreamView& stream);

  // PageMemory: what the book asks of the device pools, finished on the device on return.
  void poison(paging::PageId page, std::uint32_t from_slot) override;
  void copy_page(paging::PageId from, paging::PageId to) override;
  void move_slots(std::span<const paging::SlotMove> moves) override;
  void read_page(paging::PageId page, std::span<std::byte> image) const override;
  void write_page(paging::PageId page, std::span<const std::byte> image) override;

  Stream stream_;
  mutable StreamOrder order_;
  DeviceBuffer memory_;
  PoolLayout pools_;
  mutable DeviceBuffer staging_;  // inputs, page/slot lists, outputs of gather
  mutable DeviceBuffer scratch_;
  mutable PinnedBuffer pinned_;
};

}  // namespace kvcache::gpu
