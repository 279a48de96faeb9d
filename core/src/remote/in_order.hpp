// The values of a run of keys, handed over in any order (a transport over several servers answers
// in their order), passed on in the run's order: a value ahead of its turn waits, copied, until
// those before it have been passed on. The run stops at the first value the consumer refuses;
// values after it, repeats, and indexes outside the run are only read past.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <vector>

namespace kvcache::remote {

class InOrder {
 public:
  // consume(value) takes the next value of the run; false stops the run there.
  using Consume = std::function<bool(std::span<const std::byte> value)>;
  InOrder(std::size_t count, Consume consume);

  // Value `index` of the run, its bytes borrowed for the call.
  void take(std::size_t index, std::span<const std::byte> value);
  // How many values, from the first, the consumer has taken.
  std::size_t passed() const { return passed_; }
  bool stopped() const { return stopped_; }

 private:
  // Passes `value` on as the next one; false once the run has stopped.
  bool pass(std::span<const std::byte> value);

  std::size_t count_;
  Consume consume_;
  std::size_t passed_ = 0;
  bool stopped_ = false;
  std::map<std::size_t, std::vector<std::byte>> early_;
};

}  // namespace kvcache::remote
