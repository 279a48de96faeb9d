// A transport plugin (kvc_transport_table) seen as a remote::ByteStore.
#include <cstdio>
#include <exception>

#include "kvcache/remote/byte_store.hpp"
#include "plugin/adapters.hpp"

namespace kvcache::plugin {
namespace {

class HostTransport final : public remote::ByteStore {
 public:
  explicit HostTransport(std::unique_ptr<PluginInstance<kvc_transport_table>> t)
      : t_(std::move(t)) {}

  std::vector<bool> probe(std::span<const std::string> keys) override {
    const std::vector<const char*> k = pointers(keys);
    std::vector<uint8_t> held(keys.size(), 0);
    t_->call(&kvc_transport_table::probe, k.data(), uint64_t{k.size()}, held.data());
    return {held.begin(), held.end()};
  }
  std::vector<std::optional<remote::Value>> get(std::span<const std::string> keys) override {
    return get_through_each(keys);
  }
  void get_each(std::span<const std::string> keys, const ValueSink& sink) override {
    const std::vector<const char*> k = pointers(keys);
    Forward forward{&sink, keys.size(), nullptr};
    try {
      t_->call(&kvc_transport_table::get, k.data(), uint64_t{k.size()}, &Forward::take,
               static_cast<void*>(&forward));
    } catch (...) {
      if (!forward.error) throw;
    }
    if (forward.error) std::rethrow_exception(forward.error);  // the sink's own, not the plugin's
  }
  std::vector<bool> put_if_absent(std::span<const std::string> keys,
                                  std::span<const remote::Value> values) override {
    if (keys.size() != values.size())
      throw Error(Code::invalid_argument, "put_if_absent: keys and values differ in number");
    const std::vector<const char*> k = pointers(keys);
    std::vector<const void*> data;
    std::vector<uint64_t> sizes;
    for (const remote::Value& v : values) {
      data.push_back(v.data());
      sizes.push_back(v.size());
    }
    std::vector<uint8_t> stored(keys.size(), 0);
    t_->call(&kvc_transport_table::put_if_absent, k.data(), data.data(), sizes.data(),
             uint64_t{k.size()}, stored.data());
    return {stored.begin(), stored.end()};
  }
  void remove(std::span<const std::string> keys) override {
    const std::vector<const char*> k = pointers(keys);
    t_->call(&kvc_transport_table::remove, k.data(), uint64_t{k.size()});
  }
  std::string describe() const override {
    char text[256] = {};
    try {
      t_->call(&kvc_transport_table::describe, text, uint64_t{sizeof text});
    } catch (const std::exception&) {
      return t_->who();
    }
    text[sizeof text - 1] = '\0';
    return text;
  }

 private:
  // Values arrive through the plugin's calls to take(), straight from its client's buffer to the
  // host's sink; the index is checked, and what the sink throws stops the call (the plugin sees a
  // refusal) and is thrown again once the call is back on the host's side of the ABI.
  struct Forward {
    const ValueSink* sink;
    std::size_t keys;
    std::exception_ptr error;
    static int32_t take(void* context, uint64_t index, const void* data, uint64_t size) {
      auto& self = *static_cast<Forward*>(context);
      if (index >= self.keys || (data == nullptr && size > 0)) return KVC_INVALID_ARGUMENT;
      try {
        (*self.sink)(index, {static_cast<const std::byte*>(data), size});
        return KVC_OK;
      } catch (...) {
        self.error = std::current_exception();
        return KVC_INTERNAL;
      }
    }
  };
  static std::vector<const char*> pointers(std::span<const std::string> keys) {
    std::vector<const char*> out;
    for (const std::string& k : keys) out.push_back(k.c_str());
    return out;
  }

  std::unique_ptr<PluginInstance<kvc_transport_table>> t_;
};

}  // namespace

std::unique_ptr<remote::ByteStore> make_transport(std::shared_ptr<const PluginLibrary> library,
                                                  const kvc_component& component,
                                                  const std::string& options_json,
                                                  const std::string& who) {
  return std::make_unique<HostTransport>(
      create_instance<kvc_transport_table>(std::move(library), component, options_json, who));
}

}  // namespace kvcache::plugin
