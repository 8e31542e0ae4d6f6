#include "freezeframe/checkpoints/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>

#include "freezeframe/base/error.h"
#include "freezeframe/base/host_half.h"
#include "freezeframe/base/printable.h"
#include "mapped_file.h"

namespace freezeframe {
namespace {

using E = ErrorCode;
using host_half::bf16_to_f32;
using host_half::f16_to_f32;

struct TypeInfo {
  std::uint32_t type;
  const char* name;
  int block;        // values per block
  int block_bytes;  // bytes per block
};

// GGML's types: values per block and bytes per block (ggml.h / the gguf package's
// GGML_QUANT_SIZES).
constexpr TypeInfo kTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 40},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
};

const TypeInfo* type_info(std::uint32_t type) {
  for (const TypeInfo& t : kTypes) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Reads the header and metadata with every length checked against the end.
class Reader {
 public:
  Reader(const std::string& path, const std::byte* data, std::uint64_t size)
      : path_(path), data_(data), size_(size) {}

  [[nodiscard]] std::uint64_t at() const { return at_; }
  void need(std::uint64_t bytes, std::string_view what) const {
    FF_CHECK(bytes <= size_ - at_, E::kInvalidArgument, path_, ": ", what, " needs ", bytes,
             " bytes at offset ", at_, " but the file ends at ", size_,
             " (truncated or not a GGUF file)");
  }
  template <typename T>
  T scalar(std::string_view what) {
    need(sizeof(T), what);
    const T v = load<T>(data_ + at_);
    at_ += sizeof(T);
    return v;
  }
  std::string string(std::string_view what) {
    const auto length = scalar<std::uint64_t>(what);
    need(length, what);
    std::string s(reinterpret_cast<const char*>(data_ + at_), length);
    at_ += length;
    return s;
  }
  /// A count of items of at least `min_item_bytes` each, which the rest of the file can hold.
  std::uint64_t count(std::string_view what, std::uint64_t min_item_bytes) {
    const auto n = scalar<std::uint64_t>(what);
    FF_CHECK(n <= (size_ - at_) / std::max<std::uint64_t>(min_item_bytes, 1), E::kInvalidArgument,
             path_, ": ", what, " is ", n, ", more than the ", size_ - at_,
             " bytes left in the file can hold");
    return n;
  }
  GgufValue value(std::uint32_t type, const std::string& key);

 private:
  void scalar_into(std::uint32_t type, GgufValue& v, const std::string& what, bool in_array);
  void array_into(GgufValue& v, const std::string& key);
  void skip_array(std::uint32_t element, std::uint64_t n, const std::string& what);

  const std::string& path_;
  const std::byte* data_;
  std::uint64_t size_;
  std::uint64_t at_ = 0;
};

constexpr std::uint32_t kString = 8, kArray = 9;

/// Bytes one element of value type `type` takes; 8 for a string (its length, the least it
/// takes), 0 for an unknown type.
std::uint64_t element_bytes(std::uint32_t type) {
  constexpr std::uint64_t kBytes[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 0, 8, 8, 8};
  return type < std::size(kBytes) ? kBytes[type] : 0;
}

void Reader::scalar_into(std::uint32_t type, GgufValue& v, const std::string& what, bool in_array) {
  auto put_int = [&](std::int64_t x) {
    if (in_array) {
      v.ints.push_back(x);
    } else {
      v.kind = GgufValue::Kind::kInt;
      v.int_value = x;
    }
  };
  auto put_float = [&](double x) {
    if (in_array) {
      v.floats.push_back(x);
    } else {
      v.kind = GgufValue::Kind::kFloat;
      v.float_value = x;
    }
  };
  switch (type) {
    case 0: put_int(scalar<std::uint8_t>(what)); return;
    case 1: put_int(scalar<std::int8_t>(what)); return;
    case 2: put_int(scalar<std::uint16_t>(what)); return;
    case 3: put_int(scalar<std::int16_t>(what)); return;
    case 4: put_int(scalar<std::uint32_t>(what)); return;
    case 5: put_int(scalar<std::int32_t>(what)); return;
    case 6: put_float(scalar<float>(what)); return;
    case 7: {
      const auto b = scalar<std::uint8_t>(what);
      FF_CHECK(b <= 1, E::kInvalidArgument, path_, ": ", what, " is a bool of value ", int(b));
      put_int(b);
      if (!in_array) v.kind = GgufValue::Kind::kBool;
      return;
    }
    case kString:
      if (in_array) {
        v.strings.push_back(string(what));
      } else {
        v.kind = GgufValue::Kind::kString;
        v.string_value = string(what);
      }
      return;
    case 10: {
      const auto u = scalar<std::uint64_t>(what);
      FF_CHECK(u <= std::uint64_t(std::numeric_limits<std::int64_t>::max()), E::kInvalidArgument,
               path_, ": ", what, " is ", u, ", above what a signed 64-bit value holds");
      put_int(static_cast<std::int64_t>(u));
      return;
    }
    case 11: put_int(scalar<std::int64_t>(what)); return;
    case 12: put_float(scalar<double>(what)); return;
    default: break;
  }
  FF_THROW(E::kInvalidArgument, path_, ": ", what, " has value type ", type,
           in_array ? " inside an array" : "", "; GGUF knows 0 to 12");
}

/// Steps over `n` elements without keeping them: strings are walked (each length checked),
/// fixed-size elements skipped at once.
void Reader::skip_array(std::uint32_t element, std::uint64_t n, const std::string& what) {
  if (element != kString) {
    at_ += n * element_bytes(element);  // count() checked that the file holds them
    return;
  }
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto length = scalar<std::uint64_t>(what);
    need(length, what);
    at_ += length;
  }
}

void Reader::array_into(GgufValue& v, const std::string& key) {
  const std::string what = "metadata '" + printable(key) + "'";
  const auto element = scalar<std::uint32_t>(what + " array type");
  FF_CHECK(element != kArray, E::kInvalidArgument, path_, ": ", what,
           " is an array of arrays, which no checkpoint this reads holds");
  FF_CHECK(element_bytes(element) > 0, E::kInvalidArgument, path_, ": ", what, " has value type ",
           element, " inside an array; GGUF knows 0 to 12");
  v.gguf_type = element;
  // Bounded before any element is read: a count the file can hold may still be far more than
  // any reader uses.
  const std::uint64_t n = count(what + " array length", element_bytes(element));
  v.array_length = n;
  if (key.starts_with(kGgufVocabularyPrefix)) {
    FF_CHECK(n <= kMaxGgufVocabulary, E::kInvalidArgument, path_, ": ", what, " holds ", n,
             " elements, more than the ", kMaxGgufVocabulary,
             " a vocabulary may have (the largest are about 256k tokens)");
  } else if (n > kMaxGgufArrayRead) {
    skip_array(element, n, what);  // no reader uses it: its length is kept, not its elements
    return;
  }
  for (std::uint64_t i = 0; i < n; ++i) scalar_into(element, v, what, true);
}

GgufValue Reader::value(std::uint32_t type, const std::string& key) {
  GgufValue v;
  v.gguf_type = type;
  if (type != kArray) {
    scalar_into(type, v, "metadata '" + printable(key) + "'", false);
    return v;
  }
  v.kind = GgufValue::Kind::kArray;
  array_into(v, key);
  return v;
}

/// Refuses tensors that share bytes (they may leave gaps): a weight read through one would be
/// another's. `tensors` have their offsets from the start of the file.
void refuse_overlaps(const std::string& path, const std::vector<GgufTensor>& tensors) {
  std::vector<const GgufTensor*> order;
  order.reserve(tensors.size());
  for (const GgufTensor& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const GgufTensor& a = *order[i - 1];
    const GgufTensor& b = *order[i];
    FF_CHECK(a.offset + a.bytes <= b.offset, E::kInvalidArgument, path, ": tensors '",
             printable(a.name), "' (bytes ", a.offset, " to ", a.offset + a.bytes, ") and '",
             printable(b.name), "' (bytes ", b.offset, " to ", b.offset + b.bytes, ") overlap");
  }
}

}  // namespace

std::string gguf_type_name(std::uint32_t type) {
  const TypeInfo* t = type_info(type);
  return t != nullptr ? t->name : "type " + std::to_string(type);
}

std::uint64_t gguf_tensor_bytes(std::uint32_t type, std::int64_t count) {
  const TypeInfo* t = type_info(type);
  FF_CHECK(t != nullptr, E::kUnsupported, "GGML type ", type, " has no known block size");
  FF_CHECK(count >= 0 && count % t->block == 0, E::kInvalidArgument, count, " values of ", t->name,
           " are not whole blocks of ", t->block);
  return static_cast<std::uint64_t>(count / t->block) * t->block_bytes;
}

std::int64_t GgufTensor::elements() const {
  std::int64_t n = 1;
  for (const std::int64_t d : dims) n *= d;
  return n;
}

std::vector<std::int64_t> GgufTensor::shape() const { return {dims.rbegin(), dims.rend()}; }

struct GgufFile::Mapping {
  MappedFile file;
};

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::string& path) {
  GgufFile file;
  file.path_ = path;
  file.mapping_ = std::make_unique<Mapping>(Mapping{MappedFile::open(path, "GGUF")});
  const std::uint64_t size = file.mapping_->file.size();
  const std::byte* data = file.mapping_->file.data();
  Reader r(file.path_, data, size);

  // The fixed header: magic, version, tensor count, metadata count.
  constexpr std::uint64_t kHeaderBytes = 4 + 4 + 8 + 8;
  FF_CHECK(size >= kHeaderBytes, E::kInvalidArgument, path, ": ",
           size == 0 ? std::string("an empty file") : std::to_string(size) + " bytes",
           ", shorter than a GGUF header (", kHeaderBytes,
           " bytes): not a GGUF file, or one cut short (copy or fetch it again)");
  const auto magic = r.scalar<std::uint32_t>("the magic");
  FF_CHECK(magic == 0x46554747, E::kInvalidArgument, path, ": not a GGUF file (magic 0x", std::hex,
           magic, ", expected 0x46554747, \"GGUF\")");
  file.version_ = r.scalar<std::uint32_t>("the version");
  FF_CHECK(file.version_ == 2 || file.version_ == 3, E::kInvalidArgument, path, ": GGUF version ",
           file.version_, "; this reads versions 2 and 3");
  // A tensor info takes at least 8 (name) + 4 + 4 + 8 bytes, a metadata entry 8 + 4 + 1.
  const std::uint64_t tensor_count = r.count("the tensor count", 24);
  const std::uint64_t kv_count = r.count("the metadata count", 13);
  for (std::uint64_t i = 0; i < kv_count; ++i) {
    std::string key = r.string("metadata key " + std::to_string(i));
    const auto type = r.scalar<std::uint32_t>("metadata '" + printable(key) + "' type");
    GgufValue v = r.value(type, key);
    FF_CHECK(file.metadata_.find(key) == file.metadata_.end(), E::kInvalidArgument, path,
             ": metadata '", printable(key), "' is given twice");
    file.metadata_.emplace(std::move(key), std::move(v));
  }
  for (std::uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor t;
    t.name = r.string("tensor name " + std::to_string(i));
    const auto n_dims = r.scalar<std::uint32_t>("tensor '" + printable(t.name) + "' dimensions");
    FF_CHECK(n_dims >= 1 && n_dims <= 4, E::kInvalidArgument, path, ": tensor '", printable(t.name),
             "' has ", n_dims, " dimensions; GGUF allows 1 to 4");
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = r.scalar<std::uint64_t>("tensor '" + printable(t.name) + "' shape");
      FF_CHECK(
          dim >= 1 && dim <= (std::uint64_t(1) << 40) && elements <= (std::uint64_t(1) << 50) / dim,
          E::kInvalidArgument, path, ": tensor '", printable(t.name), "' has dimension ", d, " = ",
          dim, ", outside what any checkpoint holds");
      elements *= dim;
      t.dims.push_back(static_cast<std::int64_t>(dim));
    }
    t.type = r.scalar<std::uint32_t>("tensor '" + printable(t.name) + "' type");
    t.offset = r.scalar<std::uint64_t>("tensor '" + printable(t.name) + "' offset");
    const TypeInfo* info = type_info(t.type);
    FF_CHECK(info != nullptr, E::kInvalidArgument, path, ": tensor '", printable(t.name),
             "' has GGML type ", t.type, ", which has no known size");
    FF_CHECK(t.dims[0] % info->block == 0, E::kInvalidArgument, path, ": tensor '",
             printable(t.name), "' rows of ", t.dims[0], " values are not whole ", info->name,
             " blocks of ", info->block);
    t.bytes = gguf_tensor_bytes(t.type, static_cast<std::int64_t>(elements));
    FF_CHECK(file.find_tensor(t.name) == nullptr, E::kInvalidArgument, path, ": tensor '",
             printable(t.name), "' is listed twice");
    file.tensors_.push_back(std::move(t));
  }
  std::int64_t alignment = 32;
  if (const GgufValue* a = file.find("general.alignment")) {
    FF_CHECK(a->kind == GgufValue::Kind::kInt && a->int_value > 0 &&
                 (a->int_value & (a->int_value - 1)) == 0 && a->int_value <= 65536,
             E::kInvalidArgument, path, ": general.alignment must be a power of two up to 65536");
    alignment = a->int_value;
  }
  const std::uint64_t data_start =
      (r.at() + static_cast<std::uint64_t>(alignment) - 1) / alignment * alignment;
  for (GgufTensor& t : file.tensors_) {
    FF_CHECK(t.offset % static_cast<std::uint64_t>(alignment) == 0, E::kInvalidArgument, path,
             ": tensor '", printable(t.name), "' at data offset ", t.offset, " is not aligned to ",
             alignment);
    FF_CHECK(data_start <= size && t.offset <= size - data_start &&
                 t.bytes <= size - data_start - t.offset,
             E::kInvalidArgument, path, ": tensor '", printable(t.name), "' (",
             gguf_type_name(t.type), ", ", t.bytes, " bytes at data offset ", t.offset,
             ") runs past the end of the file (", size, " bytes, data from ", data_start,
             "): the file is truncated");
    t.offset += data_start;
  }
  refuse_overlaps(path, file.tensors_);
  return file;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  for (const GgufTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  FF_CHECK(t != nullptr, E::kNotFound, path_, ": no tensor '", printable(name), "'");
  return *t;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

std::optional<std::int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  FF_CHECK(v->kind == GgufValue::Kind::kInt, E::kInvalidArgument, path_, ": metadata '",
           printable(key), "' is not an integer");
  return v->int_value;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  FF_CHECK(v->kind == GgufValue::Kind::kFloat || v->kind == GgufValue::Kind::kInt,
           E::kInvalidArgument, path_, ": metadata '", printable(key), "' is not a number");
  return v->kind == GgufValue::Kind::kFloat ? v->float_value : double(v->int_value);
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  FF_CHECK(v->kind == GgufValue::Kind::kString, E::kInvalidArgument, path_, ": metadata '",
           printable(key), "' is not a string");
  return v->string_value;
}

std::span<const std::byte> GgufFile::bytes(const GgufTensor& t) const {
  return {mapping_->file.data() + t.offset, t.bytes};
}

void GgufFile::read_f32(const GgufTensor& t, std::span<float> out) const {
  FF_CHECK(static_cast<std::int64_t>(out.size()) == t.elements(), E::kInvalidArgument, path_,
           ": tensor '", printable(t.name), "' has ", t.elements(), " values; the output holds ",
           out.size());
  try {
    dequantize_to_f32(t.type, bytes(t), out);
  } catch (const Error& e) {
    FF_THROW(e.code(), path_, ": tensor '", printable(t.name), "': ", e.message());
  }
}

void dequantize_to_f32(std::uint32_t type, std::span<const std::byte> src, std::span<float> out) {
  const auto count = static_cast<std::int64_t>(out.size());
  const TypeInfo* info = type_info(type);
  const bool readable = type == 0 || type == 1 || type == 2 || type == 3 || type == 8 || type == 30;
  FF_CHECK(readable, E::kUnsupported, "GGML type ", gguf_type_name(type),
           " is not read; F32, F16, BF16, Q8_0, Q4_0 and Q4_1 are");
  FF_CHECK(src.size() == gguf_tensor_bytes(type, count), E::kInvalidArgument, count, " values of ",
           info->name, " take ", gguf_tensor_bytes(type, count), " bytes, got ", src.size());
  const std::byte* p = src.data();
  switch (static_cast<GgufType>(type)) {
    case GgufType::kF32: std::memcpy(out.data(), p, src.size()); return;
    case GgufType::kF16:
      for (std::int64_t i = 0; i < count; ++i) out[i] = f16_to_f32(load<std::uint16_t>(p + 2 * i));
      return;
    case GgufType::kBF16:
      for (std::int64_t i = 0; i < count; ++i) {
        out[i] = bf16_to_f32(load<std::uint16_t>(p + 2 * i));
      }
      return;
    case GgufType::kQ8_0:  // f16 scale d, 32 int8: x = d · q
      for (std::int64_t b = 0; b < count / 32; ++b, p += 34) {
        const float d = f16_to_f32(load<std::uint16_t>(p));
        for (int j = 0; j < 32; ++j)
          out[b * 32 + j] = d * float(static_cast<std::int8_t>(p[2 + j]));
      }
      return;
    case GgufType::kQ4_0:  // f16 d, 16 bytes: low nibbles are values 0..15, high 16..31; x = d·(q −
                           // 8)
      for (std::int64_t b = 0; b < count / 32; ++b, p += 18) {
        const float d = f16_to_f32(load<std::uint16_t>(p));
        for (int j = 0; j < 16; ++j) {
          const auto q = static_cast<std::uint8_t>(p[2 + j]);
          out[b * 32 + j] = d * float(int(q & 0xF) - 8);
          out[b * 32 + j + 16] = d * float(int(q >> 4) - 8);
        }
      }
      return;
    case GgufType::kQ4_1:  // f16 d, f16 m, 16 bytes as Q4_0: x = d·q + m
      for (std::int64_t b = 0; b < count / 32; ++b, p += 20) {
        const float d = f16_to_f32(load<std::uint16_t>(p));
        const float m = f16_to_f32(load<std::uint16_t>(p + 2));
        for (int j = 0; j < 16; ++j) {
          const auto q = static_cast<std::uint8_t>(p[4 + j]);
          out[b * 32 + j] = d * float(q & 0xF) + m;
          out[b * 32 + j + 16] = d * float(q >> 4) + m;
        }
      }
      return;
  }
}

}  // namespace freezeframe
