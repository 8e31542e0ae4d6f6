#pragma once
// GgufBuilder: GGUF files written byte by byte for tests of the reader's refusals: metadata of
// any kind (arrays with any declared length, their elements given or zero-filled) and F32
// tensors at chosen data offsets, so a test can make a file a writer would not.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/scratch_files.h"

namespace freezeframe::testing {

class GgufBuilder {
 public:
  GgufBuilder& u32(const std::string& key, std::uint32_t v) {
    this->key(key, 4);
    put(meta_, v);
    return *this;
  }
  GgufBuilder& f32(const std::string& key, float v) {
    this->key(key, 6);
    put(meta_, v);
    return *this;
  }
  GgufBuilder& str(const std::string& key, const std::string& v) {
    this->key(key, 8);
    put_string(meta_, v);
    return *this;
  }
  /// An array of strings.
  GgufBuilder& strings(const std::string& key, const std::vector<std::string>& items) {
    array_header(key, 8, items.size());
    for (const std::string& s : items) put_string(meta_, s);
    return *this;
  }
  /// An array of `length` elements of value type `element`, each `element_bytes` zero bytes
  /// (an empty string, for strings), of which only the first `written` are in the file.
  GgufBuilder& zeros(const std::string& key, std::uint32_t element, std::size_t element_bytes,
                     std::uint64_t length, std::uint64_t written) {
    array_header(key, element, length);
    meta_.resize(meta_.size() + element_bytes * written, 0);
    return *this;
  }
  GgufBuilder& zeros(const std::string& key, std::uint32_t element, std::size_t element_bytes,
                     std::uint64_t length) {
    return zeros(key, element, element_bytes, length, length);
  }
  /// An F32 tensor of `dims` (innermost first) at `offset` in the data.
  GgufBuilder& f32_tensor(const std::string& name, const std::vector<std::uint64_t>& dims,
                          std::uint64_t offset) {
    put_string(tensors_, name);
    put(tensors_, static_cast<std::uint32_t>(dims.size()));
    std::uint64_t bytes = 4;
    for (const std::uint64_t d : dims) {
      put(tensors_, d);
      bytes *= d;
    }
    put(tensors_, std::uint32_t{0});
    put(tensors_, offset);
    ++tensor_count_;
    data_bytes_ = std::max(data_bytes_, offset + bytes);
    return *this;
  }

  [[nodiscard]] std::vector<char> bytes() const {
    std::vector<char> out = {'G', 'G', 'U', 'F'};
    put(out, std::uint32_t{3});
    put(out, tensor_count_);
    put(out, meta_count_);
    out.insert(out.end(), meta_.begin(), meta_.end());
    out.insert(out.end(), tensors_.begin(), tensors_.end());
    while (out.size() % 32 != 0) out.push_back(0);
    out.resize(out.size() + data_bytes_, 0);
    return out;
  }
  /// Writes the file to the scratch folder as `name` and returns its path.
  [[nodiscard]] std::string write(const std::string& name) const { return scratch(bytes(), name); }

 private:
  template <typename T>
  static void put(std::vector<char>& out, T v) {
    const char* p = reinterpret_cast<const char*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  static void put_string(std::vector<char>& out, const std::string& s) {
    put(out, std::uint64_t{s.size()});
    out.insert(out.end(), s.begin(), s.end());
  }
  void key(const std::string& key, std::uint32_t type) {
    put_string(meta_, key);
    put(meta_, type);
    ++meta_count_;
  }
  void array_header(const std::string& key, std::uint32_t element, std::uint64_t length) {
    this->key(key, 9);
    put(meta_, element);
    put(meta_, length);
  }

  std::vector<char> meta_, tensors_;
  std::uint64_t meta_count_ = 0, tensor_count_ = 0, data_bytes_ = 0;
};

}  // namespace freezeframe::testing
