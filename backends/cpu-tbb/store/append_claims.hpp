// Which sequences an append is writing right now. The store lets appends share its lock, so that
// appends to different sequences run at once; two to the same sequence would race on its slots
// and counts. That misuse is refused, loudly, instead of corrupting the sequence: each append
// claims its sequences for as long as it runs.
#pragma once

#include <algorithm>
#include <mutex>
#include <span>
#include <string>
#include <unordered_set>

#include "kvcache/status.hpp"
#include "kvcache/types.hpp"

namespace kvcache::cpu {

class AppendClaims {
 public:
  // Holds the claim on `ids` until destroyed; Error(invalid_argument) when another append holds
  // one of them (nothing is claimed then).
  class Claim {
   public:
    Claim(AppendClaims& claims, std::span<const SeqId> ids) : claims_(claims), ids_(ids) {
      const std::lock_guard lock(claims_.mutex_);
      std::size_t held = 0;  // ids_[0, held) are claimed by this append
      try {
        for (; held < ids_.size(); ++held) {
          const SeqId id = ids_[held];
          if (claims_.busy_.insert(id).second) continue;
          // Named twice in this append: the store's own check refuses that, with its own words.
          if (std::find(ids_.begin(), ids_.begin() + held, id) != ids_.begin() + held) continue;
          throw Error(Code::invalid_argument,
                      "append: sequence " + std::to_string(id) +
                          " is being appended to by another thread; appends to one sequence "
                          "must not overlap (docs/cache.md, \"Threads\")");
        }
      } catch (...) {  // refused, or out of memory: nothing stays claimed
        for (std::size_t j = 0; j < held; ++j) claims_.busy_.erase(ids_[j]);
        throw;
      }
    }
    ~Claim() {
      const std::lock_guard lock(claims_.mutex_);
      for (const SeqId id : ids_) claims_.busy_.erase(id);
    }
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;

   private:
    AppendClaims& claims_;
    std::span<const SeqId> ids_;
  };

 private:
  std::mutex mutex_;
  std::unordered_set<SeqId> busy_;
};

}  // namespace kvcache::cpu
