// freezeframe serve CHECKPOINT|SPEC.yaml [--host H] [--port P] [--api-key KEY] [--served-model-name
// N]
//                   [--max-num-seqs N] [--max-model-len N] [--max-num-batched-tokens N]
//                   [--device-memory SIZE] [--token-source engine|hash]
// An OpenAI-compatible server over the checkpoint's model: an engine made for it (as generate
// makes one, with room for --max-num-seqs requests at once), or the engine of a spec (its
// checkpoint's tokenizer, or --tokenizer's for a spec of random weights), one thread running the
// continuous-batching loop on it, and HTTP threads handing requests to that thread (see
// docs/DESIGN.md, "The server"). SIGINT or SIGTERM stops accepting, lets what runs finish (30 s
// at most, then aborts it) and exits 0. With --token-source hash no GPU is used: tokens are
// drawn by a hash (serving/hash_token_source.h), for running the server and its clients on a
// machine without one; the text means nothing.

#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "arguments.h"
#include "commands.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/core/device.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/spec/checkpoint_spec.h"
#include "freezeframe/server/engine_worker.h"
#include "freezeframe/server/openai_server.h"
#include "freezeframe/server/server_metrics.h"
#include "freezeframe/serving/hash_token_source.h"
#include "freezeframe/serving/stop_tokens.h"
#include "freezeframe/serving/token_source.h"
#include "freezeframe/text/tokenizer.h"

namespace freezeframe::tools {
namespace {

constexpr const char* kUsage =
    "usage: freezeframe serve CHECKPOINT|SPEC.yaml [--host H] [--port P] [--api-key KEY]\n"
    "                         [--served-model-name NAME] [--max-num-seqs N]\n"
    "                         [--max-model-len N] [--max-num-batched-tokens N]\n"
    "                         [--device-memory SIZE] [--quantization none|fp8]\n"
    "                         [--token-source engine|hash]\n"
    "  CHECKPOINT                 a GGUF file, or a Hugging Face checkpoint (its folder or\n"
    "                             config.json, with the safetensors and tokenizer.json beside it)\n"
    "  SPEC.yaml                  a deployment spec: its engine as the spec says (limits, graphs,\n"
    "                             weights); the flags below that size a checkpoint's engine are\n"
    "                             refused with it\n"
    "  --tokenizer FILE           the tokenizer (a tokenizer.json or a GGUF) of a spec whose "
    "model\n"
    "                             names no checkpoint (random weights: the text means nothing)\n"
    "  --host H                   the address to listen on (default 127.0.0.1; 0.0.0.0: every\n"
    "                             interface)\n"
    "  --port P                   the port (default 8000; 0: any free one, printed)\n"
    "  --api-key KEY              require \"Authorization: Bearer KEY\" on /v1/*\n"
    "  --served-model-name NAME   the model's id for clients (default: the checkpoint's name)\n"
    "  --max-num-seqs N           requests run at once (default 64); more wait\n"
    "  --max-model-len N          context of a request, prompt and output (default: the model's)\n"
    "  --max-num-batched-tokens N tokens in one step (default 2048)\n"
    "  --device-memory SIZE       device memory the plan assumes (default: the GPU's free memory)\n"
    "  --quantization none|fp8    fp8: W8A8 projections (fp8 weights with a scale per channel,\n"
    "                             inputs quantised per token); none (default): the model's dtype\n"
    "  --max-concurrent-requests N  requests in progress at once, more get 503 (default 256)\n"
    "  --timeout SECONDS          a client this slow to send or to read is dropped (default 30)\n"
    "  --no-prefix-cache          compute every prompt whole (default: requests reuse the KV\n"
    "                             blocks of prefixes other requests computed)\n"
    "  --token-source hash        no GPU: tokens drawn by a hash, not the model (for testing)\n"
    "  --num-blocks N             with --token-source hash: KV blocks of the pool (default 4096)\n"
    "  --step-us N                with --token-source hash: time a step takes (default 0)\n"
    "endpoints: POST /v1/completions, POST /v1/chat/completions (streamed or whole),\n"
    "           GET /v1/models, GET /health, GET /metrics\n";

struct ServeArgs {
  std::string checkpoint;  ///< or a spec, when it ends in .yaml or .yml
  std::string tokenizer;
  bool sized = false;  ///< a flag that sizes a checkpoint's engine was given
  ServerOptions server;
  std::string model_name;
  int max_num_seqs = 64;
  std::int64_t max_model_len = 0;
  int max_num_batched_tokens = 2048;
  std::optional<std::int64_t> device_bytes;
  std::string quantization;  ///< --quantization, for a checkpoint
  bool hash = false;
  std::int32_t num_blocks = 4096;
  int step_us = 0;
  bool prefix_cache = true;
};

bool is_spec(std::string_view path) { return path.ends_with(".yaml") || path.ends_with(".yml"); }

std::optional<ServeArgs> parse_args(Args args) {
  ServeArgs s;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&] { return take_value(args, i); };
    if (is_help(a)) {
      std::printf("%s", kUsage);
      return std::nullopt;
    } else if (a == "--host") {
      s.server.host = std::string(value());
    } else if (a == "--port") {
      s.server.port = static_cast<int>(parse_whole(a, value(), 0, 65535));
    } else if (a == "--api-key") {
      s.server.api_key = std::string(value());
      if (s.server.api_key.empty()) throw UsageError("--api-key: empty");
    } else if (a == "--served-model-name") {
      s.model_name = std::string(value());
      if (s.model_name.empty()) throw UsageError("--served-model-name: empty");
    } else if (a == "--max-num-seqs") {
      s.max_num_seqs = static_cast<int>(parse_count(a, value(), 4096));
      s.sized = true;
    } else if (a == "--max-model-len") {
      s.max_model_len = parse_count(a, value(), std::int64_t(1) << 24);
      s.sized = true;
    } else if (a == "--max-num-batched-tokens") {
      s.max_num_batched_tokens = static_cast<int>(parse_count(a, value(), 1 << 20));
      s.sized = true;
    } else if (a == "--tokenizer") {
      s.tokenizer = std::string(value());
    } else if (a == "--device-memory") {
      s.device_bytes = parse_size_arg(a, value());
    } else if (a == "--quantization") {
      s.quantization = parse_quantization(a, value());
      s.sized = true;
    } else if (a == "--token-source") {
      const std::string_view v = value();
      if (v != "engine" && v != "hash") {
        throw UsageError(detail::concat("--token-source: ", quote(v), " is not engine or hash"));
      }
      s.hash = v == "hash";
    } else if (a == "--max-concurrent-requests") {
      s.server.max_concurrent_requests = static_cast<int>(parse_count(a, value(), 100000));
    } else if (a == "--timeout") {
      const int t = static_cast<int>(parse_count(a, value(), 3600));
      s.server.read_timeout_seconds = t;
      s.server.write_timeout_seconds = t;
    } else if (a == "--no-prefix-cache") {
      s.prefix_cache = false;
    } else if (a == "--step-us") {
      s.step_us = static_cast<int>(parse_whole(a, value(), 0, 10000000));
    } else if (a == "--num-blocks") {
      s.num_blocks = static_cast<std::int32_t>(parse_count(a, value(), INT32_MAX));
    } else if (a.empty() || a[0] == '-') {
      refuse(a);
    } else {
      if (!s.checkpoint.empty()) refuse(a, "one checkpoint at a time");
      s.checkpoint = std::string(a);
    }
  }
  if (s.checkpoint.empty()) throw UsageError("no checkpoint or spec given");
  if (is_spec(s.checkpoint) && s.sized) {
    throw UsageError(
        "--max-num-seqs, --max-model-len, --max-num-batched-tokens and --quantization make a "
        "checkpoint's engine; a spec says them itself (scheduler.*, model.quantization)");
  }
  if (!is_spec(s.checkpoint) && !s.tokenizer.empty()) {
    throw UsageError("--tokenizer is for a spec; a checkpoint brings its own");
  }
  if (s.max_num_batched_tokens < s.max_num_seqs) {
    throw UsageError("--max-num-batched-tokens must be at least --max-num-seqs");
  }
  return s;
}

/// The tokens a hash source draws from: the vocabulary's, without special ones.
std::vector<std::int32_t> ordinary_tokens(const Tokenizer& tokenizer, std::int32_t vocab) {
  std::vector<std::int32_t> out;
  for (std::int32_t t = 0; t < std::min(vocab, tokenizer.vocab_size()); ++t) {
    if (!tokenizer.is_special(t)) out.push_back(t);
  }
  return out;
}

}  // namespace

const std::string_view kServeUsage = kUsage;

int run_serve(Args args) {
  const std::optional<ServeArgs> parsed = parse_args(args);
  if (!parsed) return 0;
  const ServeArgs& s = *parsed;

  // The model: a checkpoint, or a spec (with its checkpoint's tokenizer or --tokenizer's).
  std::optional<EngineSpec> spec;
  std::optional<CheckpointConfig> config;
  std::string model_name;
  std::int64_t context = 0;
  std::int32_t vocab = 0;
  std::optional<Tokenizer> tokenizer_read;
  if (is_spec(s.checkpoint)) {
    spec = load_spec(s.checkpoint);
    config = spec->model.checkpoint;
    FF_CHECK(config || !s.tokenizer.empty(), ErrorCode::kInvalidArgument, s.checkpoint,
             ": the model names no checkpoint (model.checkpoint), so it has no tokenizer: give "
             "--tokenizer FILE (a tokenizer.json or a GGUF)");
    tokenizer_read.emplace(s.tokenizer.empty() ? Tokenizer::of_checkpoint(config->path)
                                               : Tokenizer::open(s.tokenizer));
    model_name = spec->model.name;
    context = spec->scheduler.max_model_len;
    vocab = spec->model.vocab_size;
  } else {
    config = read_checkpoint_config(s.checkpoint);
    tokenizer_read.emplace(Tokenizer::of_checkpoint(s.checkpoint));
    model_name = config->name;
    context = config->max_position_embeddings;
    vocab = config->vocab_size;
    if (s.max_model_len > context) {
      throw UsageError(detail::concat("--max-model-len ", s.max_model_len, " is past the model's ",
                                      context, " positions (", config->config_file, ")"));
    }
  }
  const Tokenizer& tokenizer = *tokenizer_read;
  const std::int64_t max_model_len = s.max_model_len > 0 ? s.max_model_len : context;

  // Signals go to the thread that waits for them, not to a worker or an HTTP thread: blocked
  // here, before any thread starts, so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGUSR1);  // serve() returned on its own: the waiting thread ends
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::unique_ptr<Engine> engine;
  std::unique_ptr<TokenSource> source;
  DeploymentLimits limits;
  if (s.hash) {
    limits.max_num_seqs = spec ? spec->scheduler.max_num_seqs : s.max_num_seqs;
    limits.max_num_batched_tokens =
        spec ? spec->scheduler.max_num_batched_tokens : s.max_num_batched_tokens;
    limits.max_model_len = max_model_len;
    limits.block_size = spec ? spec->cache.block_size : 16;
    limits.num_blocks = s.num_blocks;
    limits.vocab_size = vocab;
    source = std::make_unique<HashTokenSource>(ordinary_tokens(tokenizer, vocab), s.step_us);
  } else {
    FF_CHECK(has_gpu(), ErrorCode::kUnsupported, "no GPU to run the model on: ", gpu_status(),
             " (--token-source hash serves without one, its text meaningless)");
    require_usable_gpu();
    CheckpointSpecOptions spec_options;
    spec_options.max_model_len = max_model_len;
    spec_options.max_num_seqs = s.max_num_seqs;
    spec_options.max_num_batched_tokens = s.max_num_batched_tokens;
    spec_options.quantization = s.quantization;
    EngineOptions options;
    options.device_memory = device_memory(s.device_bytes).bytes;
    options.sample_tokens = true;
    std::fprintf(stderr, "loading %s: ", printable(model_name).c_str());
    engine = std::make_unique<Engine>(
        spec ? *spec : spec_for_checkpoint(s.checkpoint, spec_options), options);
    std::fprintf(stderr, "engine ready (%d graphs, %d KV blocks)\n", engine->num_graphs(),
                 engine->limits().num_blocks);
    limits = engine->limits();
    source = std::make_unique<EngineTokenSource>(*engine);
  }

  ServedModel model;
  model.name = s.model_name.empty() ? model_name : s.model_name;
  model.tokenizer = &tokenizer;
  model.max_model_len = limits.max_model_len;
  model.vocab_size = vocab;
  // A spec of random weights has no config: the tokenizer's end of sequence ends a request.
  const CheckpointConfig stated = config.value_or(CheckpointConfig{});
  model.stop_token_ids = stop_tokens(stated, tokenizer, false);
  model.chat_stop_token_ids = stop_tokens(stated, tokenizer, !tokenizer.chat_template().empty());

  EngineWorker worker(limits, *source, s.prefix_cache);
  ServerMetrics metrics;
  OpenAiServer server(worker, metrics, model, s.server);
  const int port = server.bind();
  std::fprintf(stderr, "serving %s on http://%s:%d (%s; %d requests at once, context %lld)\n",
               printable(model.name).c_str(), s.server.host.c_str(), port,
               s.hash ? "tokens by hash, no GPU" : "on the GPU", limits.max_num_seqs,
               static_cast<long long>(limits.max_model_len));
  std::fflush(stderr);

  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    if (signal == SIGUSR1) return;  // serve() returned on its own
    std::fprintf(stderr, "%s: no new requests; finishing those that run\n",
                 signal == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
    worker.shutdown(/*finish=*/true);
  });
  server.serve();
  worker.shutdown(/*finish=*/true);
  // serve() can return without a signal (the socket failed): wake the waiting thread.
  pthread_kill(stopper.native_handle(), SIGUSR1);
  stopper.join();
  std::fprintf(stderr, "stopped\n");
  return 0;
}

}  // namespace freezeframe::tools
