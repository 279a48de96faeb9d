#include "tensor_file.hpp"

#include <cstring>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "kvcache/numeric.hpp"
#include "kvcache/status.hpp"

namespace kvcache::tool {
namespace {

std::size_t dtype_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8") return 1;
  return 0;
}

std::vector<std::byte> read_all(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw Error(Code::not_found,
                "cannot read '" + file.string() + "': no such file or not readable");
  in.seekg(0, std::ios::end);
  std::vector<std::byte> bytes(static_cast<std::size_t>(in.tellg()));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

[[noreturn]] void bad(const std::filesystem::path& file, const std::string& why) {
  throw Error(Code::invalid_argument, "'" + file.string() + "': " + why);
}

Tensor read_npy(const std::filesystem::path& file) {
  const std::vector<std::byte> bytes = read_all(file);
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    bad(file, "not a .npy file");
  const auto major = static_cast<int>(bytes[6]);
  std::size_t header_length = 0, offset = 0;
  if (major == 1) {
    header_length = static_cast<std::size_t>(bytes[8]) | static_cast<std::size_t>(bytes[9]) << 8;
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) bad(file, "truncated header");
    for (int i = 0; i < 4; ++i) header_length |= static_cast<std::size_t>(bytes[8 + i]) << (8 * i);
    offset = 12;
  } else {
    bad(file, ".npy version " + std::to_string(major) + " is not supported");
  }
  if (offset + header_length > bytes.size()) bad(file, "truncated header");
  const std::string header(reinterpret_cast<const char*>(bytes.data() + offset), header_length);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']*)'")))
    bad(file, "no dtype in header");
  const std::string descr = m[1];
  static const std::map<std::string, std::string> dtypes = {
      {"<f4", "F32"}, {"<f2", "F16"}, {"|i1", "I8"}, {"|u1", "U8"}, {"<u2", "U16"}, {"<i4", "I32"}};
  const auto dtype = dtypes.find(descr);
  if (dtype == dtypes.end())
    bad(file,
        "dtype '" + descr + "' is not supported (expected float32 or float16, little-endian)");
  if (std::regex_search(header, std::regex("'fortran_order':\\s*True")))
    bad(file, "Fortran order is not supported (use C order)");
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    bad(file, "no shape in header");
  Tensor t;
  t.dtype = dtype->second;
  const std::string dims = m[1];
  const std::regex number("\\d+");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    if (it->str().size() > 10 || std::stoll(it->str()) > kMaxDimension)
      bad(file, "dimension " + it->str() + " is larger than " + std::to_string(kMaxDimension));
    t.shape.push_back(std::stoll(it->str()));
  }
  t.check_size(file);
  const std::size_t data_bytes = t.elements() * dtype_size(t.dtype);
  const std::size_t start = offset + header_length;
  if (bytes.size() - start < data_bytes)
    bad(file, "holds " + std::to_string(bytes.size() - start) + " data bytes, shape " +
                  shape_text(t.shape) + " needs " + std::to_string(data_bytes));
  t.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(start),
                bytes.begin() + static_cast<std::ptrdiff_t>(start + data_bytes));
  return t;
}

std::map<std::string, Tensor> read_safetensors(const std::filesystem::path& file) {
  const std::vector<std::byte> bytes = read_all(file);
  if (bytes.size() < 8) bad(file, "not a .safetensors file (too short)");
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  if (header_length > bytes.size() - 8)
    bad(file, "not a .safetensors file (header length " + std::to_string(header_length) + ")");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes.data() + 8),
                                   reinterpret_cast<const char*>(bytes.data() + 8 + header_length));
  } catch (const nlohmann::json::exception& e) {
    bad(file, std::string("header is not JSON: ") + e.what());
  }
  std::map<std::string, Tensor> tensors;
  const std::size_t base = 8 + header_length;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    Tensor t;
    try {
      t.dtype = entry.at("dtype").get<std::string>();
      t.shape = entry.at("shape").get<std::vector<std::int64_t>>();
      t.check_size(file);
      const auto offsets = entry.at("data_offsets").get<std::vector<std::uint64_t>>();
      if (dtype_size(t.dtype) == 0)
        bad(file, "tensor '" + name + "' has unsupported dtype " + t.dtype);
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > bytes.size() - base ||
          offsets[1] - offsets[0] != t.elements() * dtype_size(t.dtype))
        bad(file, "tensor '" + name + "' has data offsets that do not match its shape " +
                      shape_text(t.shape));
      t.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(base + offsets[0]),
                    bytes.begin() + static_cast<std::ptrdiff_t>(base + offsets[1]));
    } catch (const nlohmann::json::exception& e) {
      bad(file, "tensor '" + name + "': " + e.what());
    }
    tensors.emplace(name, std::move(t));
  }
  return tensors;
}

}  // namespace

void Tensor::check_size(const std::filesystem::path& file) const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0 || d > kMaxDimension ||
        __builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n) || n > kMaxElements)
      bad(file, "shape " + shape_text(shape) + " is negative or too large (at most " +
                    std::to_string(kMaxElements) + " elements)");
  }
}

std::size_t Tensor::elements() const {
  std::size_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

std::vector<float> Tensor::to_float(const std::string& what) const {
  std::vector<float> out(elements());
  if (dtype == "F32") {
    // memcpy with the null pointers of an empty tensor is undefined, even for 0 bytes.
    if (!out.empty()) std::memcpy(out.data(), data.data(), out.size() * 4);
  } else if (dtype == "F16" || dtype == "BF16") {
    for (std::size_t i = 0; i < out.size(); ++i) {
      std::uint16_t h;
      std::memcpy(&h, data.data() + 2 * i, 2);
      out[i] = dtype == "F16" ? float_from_fp16(h) : float_from_bf16(h);
    }
  } else {
    throw Error(Code::invalid_argument,
                what + " must be float32, float16 or bfloat16, not " + dtype);
  }
  return out;
}

Tensor Tensor::of_floats(std::vector<std::int64_t> shape, const std::vector<float>& values) {
  Tensor t{"F32", std::move(shape), std::vector<std::byte>(values.size() * 4)};
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

std::map<std::string, Tensor> read_tensors(const std::filesystem::path& file) {
  const std::string ext = file.extension().string();
  if (ext == ".npy") return {{file.stem().string(), read_npy(file)}};
  if (ext == ".safetensors") return read_safetensors(file);
  throw Error(Code::invalid_argument,
              "'" + file.string() + "': expected a .npy or .safetensors file");
}

void write_safetensors(const std::filesystem::path& file,
                       const std::map<std::string, Tensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::ofstream out(file, std::ios::binary);
  if (!out) throw Error(Code::invalid_argument, "cannot write '" + file.string() + "'");
  const std::uint64_t length = text.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors)
    out.write(reinterpret_cast<const char*>(t.data.data()),
              static_cast<std::streamsize>(t.data.size()));
  if (!out) throw Error(Code::invalid_argument, "cannot write '" + file.string() + "'");
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace kvcache::tool
