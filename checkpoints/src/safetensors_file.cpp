#include "freezeframe/checkpoints/safetensors_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "freezeframe/base/error.h"
#include "freezeframe/base/host_half.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/json_value.h"
#include "freezeframe/base/printable.h"
#include "mapped_file.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

// The header and the index are JSON, read by the strict reader (model/json_value.h): fast on
// large or hostile text and exact about what is wrong. Headers are small; a larger length is a
// corrupt file, not a checkpoint (the safetensors library caps it too).
constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t(100) << 20;
// An index names each tensor once (about 100 bytes a tensor: DeepSeek-V3's 91k tensors take
// 9 MB); a larger file is not one.
constexpr std::int64_t kMaxIndexBytes = std::int64_t(64) << 20;

std::uint64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2") {
    return 1;
  }
  return 0;
}

/// `value` as a string, or a refusal naming `who` and `field`.
const std::string& json_string(const JsonValue& value, const std::string& who,
                               std::string_view field) {
  FF_CHECK(value.kind == JsonValue::Kind::kString, E::kInvalidArgument, who, ": ", field, " is ",
           json_kind_name(value.kind), "; expected a string");
  return value.string;
}

/// `value` as a whole number in [0, 2^53] (what a double holds exactly; sizes and offsets of
/// any real file are far below), or a refusal naming `who` and `field`.
std::uint64_t json_count(const JsonValue& value, const std::string& who, std::string_view field) {
  constexpr double kMax = 9007199254740992.0;  // 2^53
  const bool whole = value.kind == JsonValue::Kind::kNumber && value.number >= 0 &&
                     value.number <= kMax && value.number == std::floor(value.number);
  FF_CHECK(whole, E::kInvalidArgument, who, ": ", field, " is ",
           value.kind == JsonValue::Kind::kNumber ? std::to_string(value.number)
                                                  : std::string(json_kind_name(value.kind)),
           "; expected a whole number from 0 to 2^53");
  return static_cast<std::uint64_t>(value.number);
}

}  // namespace

std::int64_t SafetensorsTensor::elements() const {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

struct SafetensorsFile::Mapping {
  MappedFile file;
};

SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  file.mapping_ = std::make_unique<Mapping>(Mapping{MappedFile::open(path, "safetensors")});
  const std::uint64_t size = file.mapping_->file.size();
  const std::byte* data = file.mapping_->file.data();

  FF_CHECK(size >= 8, E::kInvalidArgument, path, ": ", size,
           " bytes, too short for a safetensors header length (8)");
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, data, 8);
  FF_CHECK(header_bytes >= 2 && header_bytes <= kMaxHeaderBytes && header_bytes <= size - 8,
           E::kInvalidArgument, path, ": a header of ", header_bytes, " bytes in a file of ", size,
           " (not a safetensors file, or truncated)");
  const std::string_view header(reinterpret_cast<const char*>(data + 8), header_bytes);
  const JsonValue root = parse_json(header, path + " (header)");
  FF_CHECK(root.kind == JsonValue::Kind::kObject, E::kInvalidArgument, path,
           ": the header is not a JSON object");
  const std::uint64_t data_start = 8 + header_bytes;
  const std::uint64_t data_bytes = size - data_start;
  for (const auto& [name, v] : root.members) {
    if (name == "__metadata__") {
      FF_CHECK(v.kind == JsonValue::Kind::kObject, E::kInvalidArgument, path,
               ": __metadata__ is not an object");
      for (const auto& [key, value] : v.members) {
        file.metadata_[key] = json_string(value, path, "__metadata__ '" + printable(key) + "'");
      }
      continue;
    }
    const std::string who = path + ": tensor '" + printable(name) + "'";
    const JsonValue* dtype = v.find("dtype");
    const JsonValue* shape = v.find("shape");
    const JsonValue* offsets = v.find("data_offsets");
    FF_CHECK(v.kind == JsonValue::Kind::kObject && dtype != nullptr && shape != nullptr &&
                 shape->kind == JsonValue::Kind::kArray && offsets != nullptr &&
                 offsets->kind == JsonValue::Kind::kArray && offsets->items.size() == 2,
             E::kInvalidArgument, who, ": needs dtype, shape and data_offsets [begin, end]");
    SafetensorsTensor t;
    t.name = name;
    t.dtype = json_string(*dtype, who, "dtype");
    const std::uint64_t element_bytes = dtype_bytes(t.dtype);
    FF_CHECK(element_bytes > 0, E::kInvalidArgument, who, ": unknown dtype '", printable(t.dtype),
             "'");
    std::uint64_t elements = 1;
    for (const JsonValue& d : shape->items) {
      const std::uint64_t dim = json_count(d, who, "a shape dimension");
      FF_CHECK(dim == 0 || elements <= (std::uint64_t(1) << 50) / dim, E::kInvalidArgument, who,
               ": shape dimension ", dim, " makes more than 2^50 values");
      elements *= dim;
      t.shape.push_back(static_cast<std::int64_t>(dim));
    }
    const std::uint64_t begin = json_count(offsets->items[0], who, "data_offsets[0]");
    const std::uint64_t end = json_count(offsets->items[1], who, "data_offsets[1]");
    FF_CHECK(begin <= end && end <= data_bytes, E::kInvalidArgument, who, ": bytes [", begin, ", ",
             end, ") lie outside the ", data_bytes, " bytes of data (truncated file?)");
    FF_CHECK(end - begin == elements * element_bytes, E::kInvalidArgument, who, ": ", end - begin,
             " bytes for a ", t.dtype, " tensor of ", elements, " values, which takes ",
             elements * element_bytes);
    t.offset = data_start + begin;
    t.bytes = end - begin;
    file.tensors_.push_back(std::move(t));
  }
  // Tensors may not overlap (they may leave gaps).
  std::vector<const SafetensorsTensor*> order;
  for (const SafetensorsTensor& t : file.tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    FF_CHECK(order[i - 1]->offset + order[i - 1]->bytes <= order[i]->offset, E::kInvalidArgument,
             path, ": tensors '", printable(order[i - 1]->name), "' and '",
             printable(order[i]->name), "' overlap");
  }
  return file;
}

const SafetensorsTensor* SafetensorsFile::find_tensor(std::string_view name) const {
  for (const SafetensorsTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const SafetensorsTensor& SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsTensor* t = find_tensor(name);
  FF_CHECK(t != nullptr, E::kNotFound, path_, ": no tensor '", printable(name), "'");
  return *t;
}

std::span<const std::byte> SafetensorsFile::bytes(const SafetensorsTensor& t) const {
  return {mapping_->file.data() + t.offset, t.bytes};
}

void SafetensorsFile::read_f32(const SafetensorsTensor& t, std::span<float> out) const {
  FF_CHECK(static_cast<std::int64_t>(out.size()) == t.elements(), E::kInvalidArgument, path_,
           ": tensor '", t.name, "' has ", t.elements(), " values; the output holds ", out.size());
  try {
    safetensors_to_f32(t.dtype, bytes(t), out);
  } catch (const Error& e) {
    FF_THROW(e.code(), path_, ": tensor '", t.name, "': ", e.message());
  }
}

void safetensors_to_f32(std::string_view dtype, std::span<const std::byte> src,
                        std::span<float> out) {
  const std::size_t n = out.size();
  auto half = [&](std::size_t i) {
    std::uint16_t h;
    std::memcpy(&h, src.data() + 2 * i, 2);
    return h;
  };
  if (dtype == "F32") {
    FF_CHECK(src.size() == 4 * n, E::kInvalidArgument, n, " f32 values need ", 4 * n, " bytes");
    std::memcpy(out.data(), src.data(), src.size());
  } else if (dtype == "F16" || dtype == "BF16") {
    FF_CHECK(src.size() == 2 * n, E::kInvalidArgument, n, " values need ", 2 * n, " bytes");
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = dtype == "F16" ? host_half::f16_to_f32(half(i)) : host_half::bf16_to_f32(half(i));
    }
  } else if (dtype == "F8_E4M3") {
    // The stored values alone: a weight's scale is applied by its reader (WeightSource).
    FF_CHECK(src.size() == n, E::kInvalidArgument, n, " fp8 values need ", n, " bytes");
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = host_half::e4m3_to_f32(static_cast<std::uint8_t>(src[i]));
    }
  } else {
    FF_THROW(E::kUnsupported, "dtype ", dtype,
             " is not read as weights; F32, F16, BF16 and F8_E4M3 are");
  }
}

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
  namespace fs = std::filesystem;
  SafetensorsCheckpoint c;
  c.path_ = path;
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "model.safetensors.index.json")) {
      p /= "model.safetensors.index.json";
    } else if (fs::exists(p / "model.safetensors")) {
      p /= "model.safetensors";
    } else {
      FF_THROW(E::kNotFound, path,
               ": holds neither model.safetensors nor "
               "model.safetensors.index.json");
    }
  }
  if (p.extension() != ".json") {
    c.files_.push_back(SafetensorsFile::open(p.string()));
    for (const SafetensorsTensor& t : c.files_[0].tensors()) c.where_[t.name] = 0;
    return c;
  }
  // An index: {"metadata": {...}, "weight_map": {"tensor": "shard file", ...}}.
  const JsonValue index =
      parse_json(read_input_file(p.string(), "safetensors index", kMaxIndexBytes), p.string());
  const JsonValue* weight_map = index.find("weight_map");
  FF_CHECK(weight_map != nullptr && weight_map->kind == JsonValue::Kind::kObject,
           E::kInvalidArgument, p.string(), ": needs a weight_map object (tensor → shard file)");
  std::map<std::string, std::size_t> shard_index;
  std::map<std::string, std::string> wanted;  // tensor → shard
  for (const auto& [tensor, shard] : weight_map->members) {
    wanted[tensor] = json_string(shard, p.string(), "weight_map '" + printable(tensor) + "'");
  }
  for (const auto& [tensor, shard] : wanted) {
    const bool plain = std::none_of(shard.begin(), shard.end(), [](char ch) {
      return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f;
    });
    FF_CHECK(plain && shard.find('/') == std::string::npos && shard != ".." && !shard.empty(),
             E::kInvalidArgument, p.string(), ": tensor '", printable(tensor), "' names shard '",
             printable(shard), "', not a file beside the index");
    if (shard_index.emplace(shard, c.files_.size()).second) {
      c.files_.push_back(SafetensorsFile::open((p.parent_path() / shard).string()));
    }
  }
  for (std::size_t f = 0; f < c.files_.size(); ++f) {
    for (const SafetensorsTensor& t : c.files_[f].tensors()) {
      const auto [it, added] = c.where_.emplace(t.name, f);
      FF_CHECK(added, E::kInvalidArgument, p.string(), ": tensor '", printable(t.name),
               "' is in both ", printable(c.files_[it->second].path(), 200), " and ",
               printable(c.files_[f].path(), 200));
    }
  }
  for (const auto& [tensor, shard] : wanted) {
    const auto it = c.where_.find(tensor);
    FF_CHECK(
        it != c.where_.end() && c.files_[it->second].path() == (p.parent_path() / shard).string(),
        E::kInvalidArgument, p.string(), ": the index puts tensor '", printable(tensor), "' in ",
        printable(shard), ", which does not hold it");
  }
  return c;
}

SafetensorsCheckpoint::Found SafetensorsCheckpoint::find(std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) return {};
  const SafetensorsFile& f = files_[it->second];
  return {&f, f.find_tensor(name)};
}

SafetensorsCheckpoint::Found SafetensorsCheckpoint::get(std::string_view name) const {
  const Found found = find(name);
  FF_CHECK(found.file != nullptr, E::kNotFound, path_, ": no tensor '", printable(name), "'");
  return found;
}

}  // namespace freezeframe
