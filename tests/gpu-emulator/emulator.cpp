#include <algorithm>
#include <boost/context/fiber.hpp>
#include <boost/context/pooled_fixedsize_stack.hpp>
#include <cstddef>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "emulated_device.hpp"
#include "emulated_runtime.hpp"

emuActivity kvcache_emulator_activity{};

namespace kvcache::gpu {

thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {
namespace {

namespace ctx = boost::context;
#ifndef KVC_WARP
#define KVC_WARP 32
#endif
constexpr unsigned kWarp = KVC_WARP;  // the lanes a shuffle spans, as the kernels are built

enum class State { ready, at_block_barrier, at_warp_barrier, done };

struct Lane {
  ctx::fiber fiber;
  ctx::fiber scheduler;  // where this lane returns when it waits or ends
  State state = State::ready;
};

struct Block {
  std::vector<Lane> lanes;
  std::vector<std::uint32_t> exchange;  // one value per lane, for shuffles
  std::vector<unsigned> warp_waiting, warp_done;
  unsigned block_waiting = 0, done = 0;
};

thread_local Block* current_block = nullptr;
// Blocks run one after another on the launching thread: one buffer serves them all.
thread_local std::vector<std::max_align_t> dynamic_memory;
thread_local unsigned current_lane = 0;

void wait(State at) {
  Lane& lane = current_block->lanes[current_lane];
  lane.state = at;
  if (at == State::at_block_barrier)
    ++current_block->block_waiting;
  else
    ++current_block->warp_waiting[current_lane / kWarp];
  lane.scheduler = std::move(lane.scheduler).resume();
}

unsigned warp_size(const Block& b, unsigned w) {
  const auto n = static_cast<unsigned>(b.lanes.size());
  return std::min(kWarp, n - w * kWarp);
}

void run_block(const dim3& block, const std::function<void()>& body) {
  static thread_local ctx::pooled_fixedsize_stack stacks(64 * 1024);
  const unsigned n = block.x * block.y * block.z, warps = (n + kWarp - 1) / kWarp;
  Block b;
  b.lanes.resize(n);
  b.exchange.resize(n);
  b.warp_waiting.assign(warps, 0);
  b.warp_done.assign(warps, 0);
  for (unsigned i = 0; i < n; ++i) {
    b.lanes[i].fiber = ctx::fiber(std::allocator_arg, stacks, [&b, &body, i](ctx::fiber&& from) {
      b.lanes[i].scheduler = std::move(from);
      body();
      b.lanes[i].state = State::done;
      return std::move(b.lanes[i].scheduler);
    });
  }
  current_block = &b;
  while (b.done < n) {
    bool ran = false;
    for (unsigned i = 0; i < n; ++i) {
      Lane& lane = b.lanes[i];
      if (lane.state != State::ready) continue;
      threadIdx = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
      current_lane = i;
      lane.fiber = std::move(lane.fiber).resume();
      ran = true;
      if (lane.state == State::done) {
        ++b.done;
        ++b.warp_done[i / kWarp];
      }
    }
    if (b.block_waiting > 0 && b.block_waiting + b.done == n) {
      for (Lane& lane : b.lanes)
        if (lane.state == State::at_block_barrier) lane.state = State::ready;
      b.block_waiting = 0;
      ran = true;
    }
    for (unsigned w = 0; w < warps; ++w) {
      if (b.warp_waiting[w] == 0 || b.warp_waiting[w] + b.warp_done[w] != warp_size(b, w)) continue;
      for (unsigned i = w * kWarp; i < w * kWarp + warp_size(b, w); ++i)
        if (b.lanes[i].state == State::at_warp_barrier) b.lanes[i].state = State::ready;
      b.warp_waiting[w] = 0;
      ran = true;
    }
    if (!ran) throw std::logic_error("GPU emulator: threads wait at barriers that can never open");
  }
  current_block = nullptr;
}

}  // namespace

void sync_block() {
  wait(State::at_block_barrier);
}

std::uint32_t shfl_bits(std::uint32_t bits, unsigned source) {
  const unsigned lane = current_lane;
  current_block->exchange[lane] = bits;
  wait(State::at_warp_barrier);
  const std::uint32_t r = current_block->exchange[(lane & ~(kWarp - 1)) | (source % kWarp)];
  wait(State::at_warp_barrier);  // nobody writes the next value before all have read
  return r;
}

unsigned lane_in_warp() {
  return current_lane % kWarp;
}

std::uint8_t* dynamic_shared() {
  return reinterpret_cast<std::uint8_t*>(dynamic_memory.data());
}

void run(dim3 grid, dim3 block, std::size_t shared_bytes, void* stream,
         const std::function<void()>& body) {
  ++kvcache_emulator_activity.launches;
  kvcache_emulator_activity.launch_stream = stream;
  dynamic_memory.assign((shared_bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t),
                        std::max_align_t{});
  gridDim = grid;
  blockDim = block;
  // A device runs blocks in no set order: here each launch takes them in a shuffled one (the
  // same in every run of a test), so that code which depends on which block finishes last, such
  // as the merge of split work items, meets more than the highest index.
  static thread_local std::minstd_rand order(1);
  std::vector<unsigned> blocks(std::size_t{grid.x} * grid.y * grid.z);
  std::iota(blocks.begin(), blocks.end(), 0u);
  std::shuffle(blocks.begin(), blocks.end(), order);
  for (const unsigned b : blocks) {
    blockIdx = dim3(b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y));
    run_block(block, body);
  }
}

}  // namespace emu
}  // namespace kvcache::gpu
