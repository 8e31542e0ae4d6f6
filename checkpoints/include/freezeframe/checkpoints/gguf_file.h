#pragma once
// GgufFile: a GGUF (version 2 or 3) checkpoint, memory-mapped and read with every count,
// length and offset checked against the file, so a truncated or inconsistent file is refused
// naming the file, the field or tensor, and what was expected, before anything reads past it.
//
// Layout (little-endian): "GGUF", version u32, tensor count u64, metadata count u64; the
// metadata as (key string, value type u32, value); the tensor infos as (name string, n_dims
// u32, dims u64[n_dims] innermost first, type u32, offset u64); then, at the next multiple of
// general.alignment (default 32), the data, each tensor at its offset. Strings are a u64
// length and the bytes; arrays an element type u32, a count u64 and the elements.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace freezeframe {

/// GGML tensor types by their GGUF number (those a checkpoint may hold; not all are read).
enum class GgufType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kBF16 = 30,
};
/// "F32", "Q4_K", ... for any GGML type number ("type 99" for an unknown one).
[[nodiscard]] std::string gguf_type_name(std::uint32_t type);

struct GgufTensor {
  std::string name;
  std::uint32_t type = 0;          ///< a GgufType number, or another GGML type
  std::vector<std::int64_t> dims;  ///< as stored: innermost first (ne0, ne1, ...)
  std::uint64_t offset = 0;        ///< from the start of the file
  std::uint64_t bytes = 0;

  [[nodiscard]] std::int64_t elements() const;
  /// Row-major shape, outermost first (a [out, in] weight is dims {in, out}).
  [[nodiscard]] std::vector<std::int64_t> shape() const;
};

/// Metadata arrays under this prefix are the tokenizer's (tokens, merges, token_type, scores):
/// as long as the vocabulary, read whole up to kMaxGgufVocabulary elements, refused past it.
inline constexpr std::string_view kGgufVocabularyPrefix = "tokenizer.ggml.";
/// The most elements a tokenizer array may hold: four times the largest real vocabularies
/// (about 256k tokens; their merges are about as many), so a declared count is refused before
/// millions of elements are read.
inline constexpr std::uint64_t kMaxGgufVocabulary = std::uint64_t(1) << 20;
/// Other arrays (per-layer values, tags) are read up to this many elements; a longer one,
/// which no reader uses, is stepped over and keeps only its array_length.
inline constexpr std::uint64_t kMaxGgufArrayRead = 65536;

/// One metadata value: a scalar, a string, or an array of one of them.
struct GgufValue {
  enum class Kind { kInt, kFloat, kBool, kString, kArray };
  Kind kind = Kind::kInt;
  std::uint32_t gguf_type = 0;  ///< the value type as stored (for arrays: the elements')
  std::int64_t int_value = 0;   ///< kInt and kBool (unsigned 64-bit values above 2^63 refused)
  double float_value = 0.0;
  std::string string_value;
  std::vector<std::int64_t> ints;    ///< arrays of integers or bools
  std::vector<double> floats;        ///< arrays of floats
  std::vector<std::string> strings;  ///< arrays of strings
  std::uint64_t array_length = 0;    ///< arrays: the elements stored (read or stepped over)
};

class GgufFile {
 public:
  /// Maps and validates `path`. Throws kNotFound when it cannot be opened and
  /// kInvalidArgument naming the file and what is wrong (bad magic or version, a count or
  /// length past the end, a tokenizer array longer than any vocabulary, a tensor outside the
  /// data, two tensors sharing bytes, ...).
  [[nodiscard]] static GgufFile open(const std::string& path);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::uint32_t version() const { return version_; }
  [[nodiscard]] std::span<const GgufTensor> tensors() const { return tensors_; }
  [[nodiscard]] const GgufTensor* find_tensor(std::string_view name) const;
  /// The tensor called `name`; throws kNotFound naming the file and the tensor.
  [[nodiscard]] const GgufTensor& tensor(std::string_view name) const;
  [[nodiscard]] const std::map<std::string, GgufValue, std::less<>>& metadata() const {
    return metadata_;
  }
  [[nodiscard]] const GgufValue* find(std::string_view key) const;
  /// Typed reads of a metadata key; nullopt when it is absent, kInvalidArgument when it has
  /// another kind.
  [[nodiscard]] std::optional<std::int64_t> get_int(std::string_view key) const;
  [[nodiscard]] std::optional<double> get_float(std::string_view key) const;
  [[nodiscard]] std::optional<std::string> get_string(std::string_view key) const;

  /// The tensor's bytes in the mapped file.
  [[nodiscard]] std::span<const std::byte> bytes(const GgufTensor& tensor) const;
  /// The tensor's values as f32, dequantised (F32, F16, BF16, Q8_0, Q4_0, Q4_1); `out` holds
  /// tensor.elements() values. Any other type is refused with its name.
  void read_f32(const GgufTensor& tensor, std::span<float> out) const;

 private:
  GgufFile() = default;
  struct Mapping;

  std::string path_;
  std::unique_ptr<Mapping> mapping_;
  std::uint32_t version_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
};

/// Dequantises `count` values of GGML type `type` from `src` into `out` (F32, F16, BF16,
/// Q8_0, Q4_0, Q4_1; block types need whole blocks). Throws kUnsupported naming the type.
void dequantize_to_f32(std::uint32_t type, std::span<const std::byte> src, std::span<float> out);

/// Bytes `count` values of GGML type `type` take; throws kUnsupported for a type whose block
/// size is unknown, kInvalidArgument when `count` is not whole blocks.
[[nodiscard]] std::uint64_t gguf_tensor_bytes(std::uint32_t type, std::int64_t count);

}  // namespace freezeframe
