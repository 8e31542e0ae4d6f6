// freezeframe generate CHECKPOINT --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K]
//                      [--top-p P] [--seed S] [--chat on|off] [--device-memory SIZE]
// Text from a checkpoint on the GPU: the prompt through the checkpoint's tokenizer (rendered by
// its chat template with --chat on), an engine made for the checkpoint (spec_for_checkpoint:
// its own weights, the context the prompt and the output need), then one request through the
// generation loop: prefill, decodes, every token drawn on the device inside the step's graph
// and fed back, until a stop token or --max-tokens. The text streams to stdout as it is drawn;
// the time to first token and the decode rate go to stderr. Everything that needs no GPU (the
// arguments, the checkpoint's config and tokenizer, the prompt) is checked before the GPU is.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "arguments.h"
#include "commands.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/core/device.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/spec/checkpoint_spec.h"
#include "freezeframe/serving/generation_loop.h"
#include "freezeframe/serving/stop_tokens.h"
#include "freezeframe/serving/token_source.h"
#include "freezeframe/text/chat_format.h"
#include "freezeframe/text/tokenizer.h"

namespace freezeframe::tools {
namespace {

constexpr const char* kUsage =
    "usage: freezeframe generate CHECKPOINT --prompt TEXT [--max-tokens N] [--temperature T]\n"
    "                            [--top-k K] [--top-p P] [--seed S] [--chat on|off]\n"
    "                            [--device-memory SIZE] [--quantization none|fp8]\n"
    "  CHECKPOINT        a GGUF file, or a Hugging Face checkpoint (its folder or config.json,\n"
    "                    with the safetensors and tokenizer.json beside it)\n"
    "  --prompt TEXT     the text to continue; with --chat on, the user's message\n"
    "  --max-tokens N    tokens to generate at most (default 128), fewer where the model's\n"
    "                    context ends\n"
    "  --temperature T   0 draws the most likely token every time (default 0.8)\n"
    "  --top-k K         draw from the K most likely tokens only; 0 = all (default 40)\n"
    "  --top-p P         ... then from the fewest whose probability reaches P, in (0, 1]\n"
    "                    (default 0.95)\n"
    "  --seed S          the draws' seed, 0 to 2^63 - 1 (default 0): the same seed, the same text\n"
    "  --chat on|off     render the prompt as a user message by the model's chat template and\n"
    "                    stop at the end of the turn (default: on when the model has one)\n"
    "  --device-memory   device memory the plan assumes (default: the GPU's free memory)\n"
    "  --quantization    fp8: the projections' weights in fp8 with a scale per channel, their\n"
    "                    inputs quantised per token (W8A8); none (default): the model's dtype\n"
    "  needs a GPU; streams the text to stdout, the timings to stderr\n";

struct GenerateArgs {
  std::string checkpoint;
  std::optional<std::string> prompt;
  std::int32_t max_tokens = 128;
  SamplingParams sampling = kDefaultSampling;
  std::optional<bool> chat;
  std::optional<std::int64_t> device_bytes;
  std::string quantization;
};

/// Throws UsageError for any mistake on the command line; nullopt after --help.
std::optional<GenerateArgs> parse_args(Args args) {
  GenerateArgs g;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&] { return take_value(args, i); };
    if (is_help(a)) {
      std::printf("%s", kUsage);
      return std::nullopt;
    } else if (a == "--prompt") {
      g.prompt = std::string(value());
    } else if (a == "--max-tokens") {
      g.max_tokens = static_cast<std::int32_t>(parse_count(a, value()));
    } else if (a == "--temperature") {
      g.sampling.temperature =
          static_cast<float>(parse_number(a, value(), 0.0, 1e6, false, "from 0 to 1e6"));
    } else if (a == "--top-k") {
      g.sampling.top_k = static_cast<std::int32_t>(parse_whole(a, value(), 0, INT32_MAX));
    } else if (a == "--top-p") {
      g.sampling.top_p = static_cast<float>(parse_number(a, value(), 0.0, 1.0, true, "in (0, 1]"));
    } else if (a == "--seed") {
      g.sampling.seed = static_cast<std::uint64_t>(parse_whole(a, value(), 0, INT64_MAX));
    } else if (a == "--chat") {
      const std::string_view v = value();
      if (v != "on" && v != "off") {
        throw UsageError(detail::concat("--chat: ", quote(v), " is not on or off"));
      }
      g.chat = v == "on";
    } else if (a == "--device-memory") {
      g.device_bytes = parse_size_arg(a, value());
    } else if (a == "--quantization") {
      g.quantization = parse_quantization(a, value());
    } else if (a.empty() || a[0] == '-') {
      refuse(a);
    } else {
      if (!g.checkpoint.empty()) refuse(a, "one checkpoint at a time");
      g.checkpoint = std::string(a);
    }
  }
  if (g.checkpoint.empty()) throw UsageError("no checkpoint given");
  if (!g.prompt) throw UsageError("--prompt TEXT is required");
  // A top_p below the smallest positive float is 0 as a float.
  if (!(g.sampling.top_p > 0.0f)) throw UsageError("--top-p: too small to be above 0 as a float");
  return g;
}

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

const std::string_view kGenerateUsage = kUsage;

int run_generate(Args args) {
  const std::optional<GenerateArgs> parsed = parse_args(args);
  if (!parsed) return 0;
  const GenerateArgs& g = *parsed;

  // The checkpoint, its tokenizer and the prompt, before any GPU.
  const CheckpointConfig config = read_checkpoint_config(g.checkpoint);
  const Tokenizer tokenizer = Tokenizer::of_checkpoint(g.checkpoint);
  const bool chat = g.chat.value_or(!tokenizer.chat_template().empty());
  std::vector<TokenId> prompt;
  if (chat) {
    const std::vector<ChatMessage> messages = {{"user", *g.prompt}};
    // As apply_chat_template: the rendered text, its special tokens matched, none added.
    prompt = tokenizer.encode(tokenizer.chat_format().render(messages, true));
  } else {
    prompt = tokenizer.encode(*g.prompt, /*add_special=*/true);
  }
  FF_CHECK(!prompt.empty(), ErrorCode::kInvalidArgument,
           "--prompt: the prompt encodes to no tokens; give some text");
  const std::int64_t context = config.max_position_embeddings;
  FF_CHECK(static_cast<std::int64_t>(prompt.size()) < context, ErrorCode::kInvalidArgument,
           "--prompt: ", prompt.size(),
           " tokens leave no room for output in the model's context of ", context, " (",
           config.config_file, ")");
  for (const TokenId id : prompt) {
    FF_CHECK(id < config.vocab_size, ErrorCode::kInvalidArgument, "--prompt: token ", id, " of ",
             tokenizer.source(), " is outside the model's vocabulary of ", config.vocab_size,
             " tokens (", config.config_file, "): the tokenizer is not the model's");
  }
  const std::vector<std::int32_t> stop = stop_tokens(config, tokenizer, chat);

  FF_CHECK(has_gpu(), ErrorCode::kUnsupported, "no GPU to run the model on: ", gpu_status());
  require_usable_gpu();
  CheckpointSpecOptions spec_options;
  // The context this generation needs, within the model's: the last token drawn is never fed
  // back.
  spec_options.max_model_len = std::min<std::int64_t>(
      context, std::max<std::int64_t>(2, static_cast<std::int64_t>(prompt.size()) + g.max_tokens));
  spec_options.max_num_seqs = 1;
  spec_options.max_num_batched_tokens = 2048;
  spec_options.quantization = g.quantization;
  EngineOptions options;
  options.device_memory = device_memory(g.device_bytes).bytes;
  options.sample_tokens = true;
  std::fprintf(stderr, "loading %s (%s, %s): ", printable(config.name).c_str(),
               printable(config.architecture).c_str(),
               config.format == CheckpointFormat::kGguf ? "GGUF" : "safetensors");
  const auto load_start = Clock::now();
  Engine engine(spec_for_checkpoint(g.checkpoint, spec_options), options);
  std::fprintf(stderr, "engine ready in %.1f s (%d graphs)%s\n", seconds(Clock::now() - load_start),
               engine.num_graphs(),
               engine.capture_report().failure.empty() ? "" : ", running eagerly: capture failed");

  EngineTokenSource source(engine);
  GenerationLoop loop(engine.limits(), source);
  GenerationRequest request;
  request.id = 0;
  request.prompt = prompt;
  request.max_tokens = g.max_tokens;
  request.stop_token_ids = stop;
  request.sampling = g.sampling;
  const Admission admission = loop.add(std::move(request));
  FF_CHECK(admission == Admission::kQueued || admission == Admission::kOutputCut,
           ErrorCode::kInvalidArgument, "the request was refused: ", to_string(admission));
  if (admission == Admission::kOutputCut) {
    std::fprintf(stderr, "note: the model's context of %lld tokens ends the output early\n",
                 static_cast<long long>(context));
  }
  std::fprintf(stderr, "%zu prompt tokens%s; temperature %g, top-k %d, top-p %g, seed %llu\n",
               prompt.size(), chat ? " (chat)" : "", g.sampling.temperature, g.sampling.top_k,
               g.sampling.top_p, static_cast<unsigned long long>(g.sampling.seed));

  const auto start = Clock::now();
  Clock::time_point first{}, last{};
  std::int64_t tokens = 0;
  FinishReason reason = FinishReason::kLength;
  while (const ContinuousBatcher::StepEvents* events = loop.step()) {
    for (const std::int32_t token : events->tokens) {
      if (tokens++ == 0) first = Clock::now();
      last = Clock::now();
      // The stop token ends the text; it is not part of it.
      if (std::find(stop.begin(), stop.end(), token) != stop.end()) continue;
      const std::string piece = tokenizer.decode(std::span<const TokenId>(&token, 1));
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (!events->reasons.empty()) reason = events->reasons.front();
  }
  // The text's end before the timings: stdout is buffered, stderr is not.
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double ttft = tokens > 0 ? seconds(first - start) : 0.0;
  const double decode = tokens > 1 ? seconds(last - first) : 0.0;
  std::fprintf(stderr,
               "%lld tokens (%s); time to first token %.1f ms; %.1f tokens/s after it "
               "(%lld decode steps)\n",
               static_cast<long long>(tokens),
               reason == FinishReason::kStop ? "ended by a stop token" : "ended by length",
               ttft * 1e3, decode > 0 ? static_cast<double>(tokens - 1) / decode : 0.0,
               static_cast<long long>(std::max<std::int64_t>(0, tokens - 1)));
  return 0;
}

}  // namespace freezeframe::tools
