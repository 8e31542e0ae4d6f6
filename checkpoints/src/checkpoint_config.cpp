// read_checkpoint_config: which file holds the config (a folder's config.json, a GGUF file known
// by its magic, else JSON), the supported architectures, and the checks both formats share.

#include "freezeframe/checkpoints/checkpoint_config.h"

#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "checkpoint_config_reader.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"

namespace freezeframe {
namespace checkpoint_detail {
namespace {

struct Architecture {
  std::string_view hf;          // config.json "architectures"
  std::string_view model_type;  // config.json "model_type"
  std::string_view gguf;        // GGUF general.architecture; empty: GGUF files name it otherwise
  ModelFamily family;
};

// Mistral in GGUF is written as "llama" (same tensors; a window, if any, in its own key).
constexpr std::array kArchitectures = {
    Architecture{"LlamaForCausalLM", "llama", "llama", ModelFamily::kLlama},
    Architecture{"MistralForCausalLM", "mistral", "", ModelFamily::kMistral},
    Architecture{"Qwen2ForCausalLM", "qwen2", "qwen2", ModelFamily::kQwen2},
    Architecture{"DeepseekV2ForCausalLM", "deepseek_v2", "", ModelFamily::kDeepseekV2},
};

}  // namespace

std::optional<ModelFamily> hf_family(std::string_view architecture) {
  for (const Architecture& a : kArchitectures) {
    if (architecture == a.hf || architecture == a.model_type) return a.family;
  }
  return std::nullopt;
}

std::optional<ModelFamily> gguf_family(std::string_view architecture) {
  for (const Architecture& a : kArchitectures) {
    if (!a.gguf.empty() && architecture == a.gguf) return a.family;
  }
  return std::nullopt;
}

std::string supported_architectures(CheckpointFormat format) {
  std::string list;
  for (const Architecture& a : kArchitectures) {
    const std::string_view name = format == CheckpointFormat::kGguf ? a.gguf : a.hf;
    if (!name.empty()) (list += list.empty() ? "" : ", ") += name;
  }
  return list;
}

std::string problem_text(std::string_view where, std::string_view field, std::string_view message) {
  std::string text(where);
  if (!field.empty()) (text += ": ") += field;
  return (text += ": ") += message;
}

namespace {

/// Checks that hold for every family, whichever file the values came from.
void check_shape(const CheckpointConfig& c, std::vector<std::string>& problems) {
  const auto origin = [&](std::string_view field) {
    const auto it = c.origins.find(field);
    return it != c.origins.end() ? it->second : c.config_file + ": " + std::string(field);
  };
  if (c.num_heads > 0 && c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads != 0) {
    problems.push_back(origin("num_kv_heads") + ": " + std::to_string(c.num_kv_heads) +
                       " key/value heads do not divide the " + std::to_string(c.num_heads) +
                       " query heads");
  }
  for (const int w : c.sliding_windows) {
    if (w < 0) {
      problems.push_back(origin("sliding_window") + ": must not be negative, got " +
                         std::to_string(w));
      break;
    }
  }
}

/// Whether the file name says GGUF (".gguf", any case): such a file is read as one even when
/// its magic is missing (empty, or cut short by an interrupted copy), so it is refused as a
/// GGUF rather than as a config.
bool named_gguf(const std::string& file) {
  std::string extension = std::filesystem::path(file).extension().string();
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return extension == ".gguf";
}

bool starts_with_gguf_magic(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

}  // namespace
}  // namespace checkpoint_detail

std::string_view to_string(ModelFamily family) {
  switch (family) {
    case ModelFamily::kLlama: return "llama";
    case ModelFamily::kMistral: return "mistral";
    case ModelFamily::kQwen2: return "qwen2";
    case ModelFamily::kDeepseekV2: return "deepseek_v2";
  }
  return "unknown";
}

namespace checkpoint_detail {
namespace {

/// The name shown in reports when the file gives none: a folder's name, the folder of a
/// config.json, else the file's name without its extension.
std::string default_name(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "folder/" → "folder"
  std::error_code ec;
  if (fs::is_directory(p, ec)) return p.filename().string();
  if (p.filename() == "config.json" && p.has_parent_path()) {
    return p.parent_path().filename().string();
  }
  return p.stem().string();
}

/// Reads the config; `code` is the kind of the error that made the file unreadable, if any.
std::optional<CheckpointConfig> read_config(const std::string& path,
                                            std::vector<std::string>& problems,
                                            std::optional<ErrorCode>& code) {
  namespace fs = std::filesystem;
  const std::size_t before = problems.size();
  CheckpointConfig config;
  config.path = path;
  try {
    FF_CHECK(!path.empty(), ErrorCode::kInvalidArgument, "the checkpoint path is empty");
    // The file system would stop at a NUL and open another file than the one named.
    FF_CHECK(path.find('\0') == std::string::npos, ErrorCode::kInvalidArgument, "checkpoint ",
             quote(path, 200), " holds a NUL byte");
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    FF_CHECK(!ec && fs::exists(status), ErrorCode::kNotFound, "cannot read checkpoint ",
             quote(path, 200), ec ? ": " + ec.message() : std::string(": no such file or folder"));
    config.config_file =
        fs::is_directory(status) ? (fs::path(path) / "config.json").string() : path;
    // Only a regular file is opened to look for the magic: a FIFO or a device would block or
    // never end (read_input_file refuses them by name).
    if (fs::is_regular_file(fs::status(config.config_file, ec)) &&
        (starts_with_gguf_magic(config.config_file) || named_gguf(config.config_file))) {
      config.format = CheckpointFormat::kGguf;
      read_gguf_config(config.config_file, config, problems);
    } else {
      config.format = CheckpointFormat::kHuggingFace;
      read_hf_config(config.config_file, config, problems);
      // A folder's generation_config.json, when there is one, adds its stop tokens.
      const fs::path generation = fs::path(path) / "generation_config.json";
      if (fs::is_directory(status) && problems.size() == before &&
          fs::exists(fs::status(generation, ec))) {
        read_hf_generation_config(generation.string(), config, problems);
      }
    }
  } catch (const Error& e) {
    code = e.code();
    problems.push_back(e.message());
  }
  if (problems.size() == before) check_shape(config, problems);
  if (problems.size() != before) return std::nullopt;
  if (config.name.empty()) config.name = default_name(path);
  return config;
}

}  // namespace
}  // namespace checkpoint_detail

std::optional<CheckpointConfig> read_checkpoint_config(const std::string& path,
                                                       std::vector<std::string>& problems) {
  std::optional<ErrorCode> code;
  return checkpoint_detail::read_config(path, problems, code);
}

CheckpointConfig read_checkpoint_config(const std::string& path) {
  std::vector<std::string> problems;
  std::optional<ErrorCode> code;
  std::optional<CheckpointConfig> config = checkpoint_detail::read_config(path, problems, code);
  if (config) return *std::move(config);
  // A file that cannot be read is kNotFound, as for a spec; anything else is its content.
  if (code == ErrorCode::kNotFound) FF_THROW(ErrorCode::kNotFound, problems.front());
  if (problems.size() == 1) FF_THROW(ErrorCode::kInvalidArgument, problems.front());
  std::string text =
      "checkpoint " + quote(path, 200) + " has " + std::to_string(problems.size()) + " problems:";
  for (const std::string& p : problems) text += "\n  " + p;
  FF_THROW(ErrorCode::kInvalidArgument, text);
}

}  // namespace freezeframe
