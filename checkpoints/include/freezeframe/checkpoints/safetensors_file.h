#pragma once
// Safetensors checkpoints: one file (SafetensorsFile) or several with the Hugging Face index
// (SafetensorsCheckpoint, model.safetensors.index.json). Files are memory-mapped and checked
// before anything is read: the header's length and JSON, every tensor's dtype, shape and byte
// range (inside the data, matching its shape, not overlapping another), so a truncated or
// inconsistent file is refused naming the file, the tensor and what was expected.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON
// {"NAME": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}, then the data; offsets count from the data's start.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace freezeframe {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  ///< as stored: "BF16", "F16", "F32", "I64", ...
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  ///< from the start of the file
  std::uint64_t bytes = 0;

  [[nodiscard]] std::int64_t elements() const;
};

class SafetensorsFile {
 public:
  /// Maps and validates `path`; throws kNotFound when it cannot be opened and
  /// kInvalidArgument naming the file (and the tensor) for anything inconsistent.
  [[nodiscard]] static SafetensorsFile open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::span<const SafetensorsTensor> tensors() const { return tensors_; }
  [[nodiscard]] const SafetensorsTensor* find_tensor(std::string_view name) const;
  /// The tensor called `name`; throws kNotFound naming the file and the tensor.
  [[nodiscard]] const SafetensorsTensor& tensor(std::string_view name) const;
  /// The header's __metadata__ (string values).
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const { return metadata_; }

  [[nodiscard]] std::span<const std::byte> bytes(const SafetensorsTensor& tensor) const;
  /// The tensor's values as f32 (F32, F16, BF16, F8_E4M3 unscaled; others refused with their
  /// dtype); `out` holds tensor.elements() values.
  void read_f32(const SafetensorsTensor& tensor, std::span<float> out) const;

 private:
  SafetensorsFile() = default;
  struct Mapping;

  std::string path_;
  std::unique_ptr<Mapping> mapping_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// A checkpoint directory or file: `model.safetensors`, or the shards that
/// `model.safetensors.index.json` names (its weight_map: tensor name → shard file).
class SafetensorsCheckpoint {
 public:
  /// `path`: a .safetensors file, an index .json, or a directory holding one of them. Every
  /// shard is opened and validated; a tensor the index names but its shard lacks (or that
  /// two shards hold) is refused naming both.
  [[nodiscard]] static SafetensorsCheckpoint open(const std::string& path);

  [[nodiscard]] std::span<const SafetensorsFile> files() const { return files_; }
  /// The file holding `name` and its entry, or {nullptr, nullptr}.
  struct Found {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensor* tensor = nullptr;
  };
  [[nodiscard]] Found find(std::string_view name) const;
  /// Throws kNotFound naming the checkpoint and the tensor.
  [[nodiscard]] Found get(std::string_view name) const;
  [[nodiscard]] std::size_t num_tensors() const { return where_.size(); }

 private:
  std::string path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::size_t, std::less<>> where_;  // tensor → index into files_
};

/// f32 values of `count` elements of safetensors dtype `dtype` (F32, F16, BF16, F8_E4M3: the
/// stored values, unscaled).
void safetensors_to_f32(std::string_view dtype, std::span<const std::byte> src,
                        std::span<float> out);

}  // namespace freezeframe
