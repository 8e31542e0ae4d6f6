// freezeframe inspect CHECKPOINT [--tensors] [--verify]
// What a checkpoint holds, as the engine reads it: the model its config describes, its tensors
// under the model program's names (type, shape, whether they are read), whether they are the
// weights the model program of that config needs, and with --verify every readable tensor read
// whole, counting values that are not finite. No GPU.

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "arguments.h"
#include "commands.h"
#include "freezeframe/base/dtype.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/engine/model/checkpoint_weights.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe::tools {

const std::string_view kInspectUsage =
    "usage: freezeframe inspect CHECKPOINT [--tensors] [--verify]\n"
    "  CHECKPOINT  a GGUF file, or a Hugging Face folder (config.json and its safetensors)\n"
    "  --tensors   list every tensor: the model program's name, the name in the file, type,\n"
    "              shape\n"
    "  --verify    read every tensor the engine reads, whole, as f32, and count the values that\n"
    "              are not finite\n"
    "  exit status 1 when the engine could not run the checkpoint's weights (a tensor missing,\n"
    "  misshaped or of a type it does not read) or --verify found a value that is not finite\n";

namespace {

/// 1234 → "1234", 12345678 → "12.3 M", 3.2e9 → "3.20 G".
std::string count_text(double n) {
  char text[32];
  if (n < 1e6) {
    std::snprintf(text, sizeof text, "%.0f", n);
  } else if (n < 1e9) {
    std::snprintf(text, sizeof text, "%.1f M", n / 1e6);
  } else {
    std::snprintf(text, sizeof text, "%.2f G", n / 1e9);
  }
  return text;
}

/// The model program a spec naming `path` as its checkpoint (with its own weights) builds, on
/// the reference backends (whose checks are the model's, not a kernel's).
ModelProgram program_of(const std::string& path, const CheckpointConfig& config) {
  std::string quoted = "'";  // a YAML single-quoted scalar: a quote is written twice
  for (const char c : std::filesystem::absolute(path).string()) {
    quoted += c == '\'' ? std::string("''") : std::string(1, c);
  }
  quoted += "'";
  const EngineSpec spec =
      parse_written_spec("model:\n  checkpoint: " + quoted +
                             "\n  builtin_weights: false\n  attention:\n    backend: " +
                             (config.mla ? "reference_mla" : "reference") + "\n",
                         path);
  return build_model_program(spec);
}

/// Values of `tensor` that are not finite, reading it as f32 in slices of at most 64 MiB.
std::int64_t non_finite_values(const WeightSource& source, const WeightTensor& tensor) {
  constexpr std::int64_t kBudget = 64 << 20;
  const std::int64_t per_row = tensor.row_elements();
  const std::int64_t rows_per_slice =
      std::max<std::int64_t>(1, kBudget / std::max<std::int64_t>(1, per_row * 4));
  std::vector<float> buffer;
  std::int64_t bad = 0;
  for (std::int64_t first = 0; first < tensor.rows(); first += rows_per_slice) {
    const std::int64_t count = std::min(rows_per_slice, tensor.rows() - first);
    buffer.resize(static_cast<std::size_t>(count * per_row));
    source.read_rows(tensor, first, count, DType::kF32, std::as_writable_bytes(std::span(buffer)));
    for (const float x : buffer) bad += !std::isfinite(x);
  }
  return bad;
}

}  // namespace

int run_inspect(Args args) {
  std::string path;
  bool list = false, verify = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (is_help(a)) {
      std::printf("%.*s", int(kInspectUsage.size()), kInspectUsage.data());
      return 0;
    } else if (a == "--tensors") {
      list = true;
    } else if (a == "--verify") {
      verify = true;
    } else if (a.empty() || a[0] == '-') {
      refuse(a);
    } else {
      if (!path.empty()) refuse(a, "one checkpoint at a time");
      path = std::string(a);
    }
  }
  if (path.empty()) throw UsageError("no checkpoint given");

  const CheckpointConfig config = read_checkpoint_config(path);
  // The config's file only where it is another than the checkpoint named (a folder's
  // config.json; a GGUF file is its own config).
  if (config.config_file == config.path) {
    std::printf("checkpoint: %s\n", printable(config.path, 200).c_str());
  } else {
    std::printf("checkpoint: %s (config %s)\n", printable(config.path, 200).c_str(),
                printable(config.config_file, 200).c_str());
  }
  std::printf("model: %s, %s: %d layers, hidden %d, heads %d/%d of %d, MLP %d, vocabulary %d\n",
              printable(config.name).c_str(), printable(config.architecture).c_str(),
              config.num_layers, config.hidden_size, config.num_heads, config.num_kv_heads,
              config.head_size, config.intermediate_size, config.vocab_size);
  std::printf("rope theta %g%s, rms_norm_eps %g, tied embeddings %s, QKV bias %s\n",
              config.rope_theta, config.rope_scaling ? " (Llama 3 scaling)" : "",
              config.rms_norm_eps, config.tie_word_embeddings ? "yes" : "no",
              config.qkv_bias ? "yes" : "no");

  if (config.mla) {
    const CheckpointMla& m = *config.mla;
    std::printf(
        "latent attention: kv_lora_rank %d, q_lora_rank %d, head parts %d + %d (rope), "
        "v %d\n",
        m.kv_lora_rank, m.q_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim);
  }
  if (config.moe) {
    const CheckpointMoe& e = *config.moe;
    std::printf("experts: %d of %d, %d a token, %d shared, from layer %d on; weights x %g",
                e.num_experts, e.intermediate_size, e.experts_per_token, e.num_shared_experts,
                e.first_dense_layers, e.routed_scaling_factor);
    if (e.num_groups > 1)
      std::printf(", from the best %d of %d groups", e.top_groups, e.num_groups);
    std::printf("\n");
  }
  if (config.yarn_rope_scaling) {
    const YarnRopeScaling& y = *config.yarn_rope_scaling;
    std::printf("rope scaling: YaRN, factor %g over %lld positions (beta %g/%g, mscale %g/%g)\n",
                y.factor, static_cast<long long>(y.original_max_position_embeddings), y.beta_fast,
                y.beta_slow, y.mscale, y.mscale_all_dim);
  }
  if (config.fp8) {
    std::printf("quantization: %s; read dequantised to the model's dtype\n",
                describe(*config.fp8).c_str());
  }

  const std::unique_ptr<WeightSource> source = WeightSource::open(config);
  std::map<std::string, std::pair<int, double>> by_type;  // type → tensors, values
  int unreadable = 0;
  for (const WeightTensor& t : source->tensors()) {
    auto& [count, elements] = by_type[t.type];
    ++count;
    elements += double(t.rows()) * double(t.row_elements());
    unreadable += !t.unreadable.empty();
  }
  std::printf("%s: %zu tensors under the model's names;", std::string(source->format()).c_str(),
              source->tensors().size());
  for (const auto& [type, entry] : by_type) {
    std::printf(" %s %d (%s values)", type.c_str(), entry.first, count_text(entry.second).c_str());
  }
  std::printf("\n");
  if (list) {
    for (const WeightTensor& t : source->tensors()) {
      std::printf("  %-60s %-7s %s%s%s%s%s\n", t.describe().c_str(), t.type.c_str(),
                  shape_text(t.shape).c_str(), t.scale.empty() ? "" : " x ", t.scale.c_str(),
                  t.unreadable.empty() ? "" : "; not read: ", t.unreadable.c_str());
    }
  }
  if (unreadable > 0) {
    std::printf("%d %s of a type the engine does not read (--tensors lists them)\n", unreadable,
                unreadable == 1 ? "tensor is" : "tensors are");
  }
  // Would the engine run these weights? The program of this config against the tensors.
  int failures = 0;
  try {
    const ModelProgram program = program_of(path, config);
    const std::size_t matched = match_weights(*source, program).size();
    std::printf("the model program's %zu weights: all present, shaped as it needs, read\n",
                matched);
  } catch (const Error& e) {
    std::printf("the engine would not run these weights: %s\n", e.message().c_str());
    ++failures;
  }
  if (!verify) return failures == 0 ? 0 : 1;

  for (const WeightTensor& t : source->tensors()) {
    if (!t.unreadable.empty()) continue;
    const std::int64_t bad = non_finite_values(*source, t);
    if (bad > 0) {
      std::printf("  %s: %lld values are not finite\n", t.describe().c_str(),
                  static_cast<long long>(bad));
      ++failures;
    }
  }
  std::printf("verify: %zu tensors read whole; %d problems in all\n",
              source->tensors().size() - static_cast<std::size_t>(unreadable), failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace freezeframe::tools
