#include "policies.hpp"

namespace kvcache::eviction {

OldestFirst::OldestFirst(const sdk::Options& options) {
  options.only({});
}

}  // namespace kvcache::eviction
