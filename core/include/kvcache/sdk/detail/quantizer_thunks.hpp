// The C table of a Quantizer component: the calls a lent codec makes too (format_codec.hpp).
#pragma once

#include "kvcache/plugin_abi.h"
#include "kvcache/sdk/detail/instance.hpp"
#include "kvcache/sdk/format_codec.hpp"

namespace kvcache::sdk::detail {

template <class T>
struct QuantizerThunks {
  static constexpr kvc_quantizer_table table{sizeof(kvc_quantizer_table),
                                             &create<T>,
                                             &destroy<T>,
                                             &QuantizerCalls<T>::describe,
                                             &QuantizerCalls<T>::encode,
                                             &QuantizerCalls<T>::decode};
};

}  // namespace kvcache::sdk::detail
