#pragma once
// MappedFile: a checkpoint file mapped read-only, for the readers that check it before they
// read it (GGUF, safetensors). Private to model/.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace freezeframe {

class MappedFile {
 public:
  /// Maps the regular file at `path`; throws kNotFound when it cannot be opened ("cannot open
  /// `kind` file ...") and kInvalidArgument when it is not a regular file or cannot be mapped.
  [[nodiscard]] static MappedFile open(const std::string& path, std::string_view kind);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  [[nodiscard]] const std::byte* data() const { return static_cast<const std::byte*>(base_); }
  [[nodiscard]] std::uint64_t size() const { return size_; }

 private:
  void* base_ = nullptr;  // null for an empty file
  std::uint64_t size_ = 0;
};

}  // namespace freezeframe
