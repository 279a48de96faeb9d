// A storage format's codec lent across the boundary (ABI 1.3): the host lends any Quantizer to
// the store it asks a backend for (lend), and the store calls it back as a Quantizer
// (LentQuantizer). This is how a store runs a format it has no kernels of its own for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvcache/plugin_abi.h"
#include "kvcache/quantizer.hpp"
#include "kvcache/sdk/detail/c_types.hpp"
#include "kvcache/sdk/detail/guard.hpp"
#include "kvcache/status.hpp"

namespace kvcache::sdk {
namespace detail {

// The quantizer entries of a C table, over an instance that is a T (a Quantizer).
template <class T>
struct QuantizerCalls {
  static const T& quantizer(void* instance) { return *static_cast<const T*>(instance); }
  static int32_t describe(void* instance, uint32_t head_dim, uint32_t page_size,
                          kvc_format_desc* out, kvc_error* err) noexcept {
    return guard(err,
                 [&] { copy_out(to_c(quantizer(instance).describe(head_dim, page_size)), out); });
  }
  static int32_t encode(void* instance, const DLTensor* src, uint32_t first_slot,
                        uint32_t page_size, void* tile, kvc_error* err) noexcept {
    return guard(err, [&] { quantizer(instance).encode(*src, first_slot, page_size, tile); });
  }
  static int32_t decode(void* instance, const void* tile, uint32_t first_slot, uint32_t page_size,
                        DLTensor* dst, kvc_error* err) noexcept {
    return guard(err, [&] { quantizer(instance).decode(tile, first_slot, page_size, *dst); });
  }
};

// Lent instances are owned by the host: the table has no create or destroy.
inline constexpr kvc_quantizer_table lent_quantizer_table{sizeof(kvc_quantizer_table),
                                                          nullptr,
                                                          nullptr,
                                                          &QuantizerCalls<Quantizer>::describe,
                                                          &QuantizerCalls<Quantizer>::encode,
                                                          &QuantizerCalls<Quantizer>::decode};

}  // namespace detail

// `quantizer` lent under `name`; it must outlive every store made with the result.
inline kvc_format_codec lend(const std::string& name, const Quantizer& quantizer) {
  return {sizeof(kvc_format_codec), 0, name.c_str(), &detail::lent_quantizer_table,
          const_cast<Quantizer*>(&quantizer)};
}

// A lent codec called as a Quantizer; its failures come back as Error, the format named.
class LentQuantizer final : public Quantizer {
 public:
  explicit LentQuantizer(const kvc_format_codec& codec)
      : name_(codec.name != nullptr ? codec.name : "?"),
        table_(codec.table),
        instance_(codec.instance) {
    if (codec.struct_size < offsetof(kvc_format_codec, instance) + sizeof(codec.instance) ||
        table_ == nullptr || table_->struct_size < sizeof(kvc_quantizer_table) ||
        table_->describe == nullptr || table_->encode == nullptr || table_->decode == nullptr)
      throw Error(Code::invalid_argument, "format '" + name_ + "': the lent codec is incomplete");
  }
  const std::string& name() const { return name_; }

  TileLayout describe(std::uint32_t head_dim, std::uint32_t page_size) const override {
    kvc_format_desc d{};
    d.struct_size = sizeof(d);
    call("describe",
         [&](kvc_error* err) { return table_->describe(instance_, head_dim, page_size, &d, err); });
    return detail::from_c(d);
  }
  void encode(const DLTensor& src, std::uint32_t first_slot, std::uint32_t page_size,
              void* tile) const override {
    call("encode", [&](kvc_error* err) {
      return table_->encode(instance_, &src, first_slot, page_size, tile, err);
    });
  }
  void decode(const void* tile, std::uint32_t first_slot, std::uint32_t page_size,
              DLTensor& dst) const override {
    call("decode", [&](kvc_error* err) {
      return table_->decode(instance_, tile, first_slot, page_size, &dst, err);
    });
  }

 private:
  template <class Call>
  void call(const char* what, Call&& c) const {
    kvc_error err{sizeof(kvc_error), KVC_OK, {}};
    const int32_t rc = c(&err);
    if (rc == KVC_OK) return;
    err.message[KVC_MESSAGE_CAPACITY - 1] = '\0';
    throw Error(static_cast<Code>(rc), "format '" + name_ + "' " + what + ": " + err.message);
  }

  std::string name_;
  const kvc_quantizer_table* table_;
  void* instance_;
};

}  // namespace kvcache::sdk
