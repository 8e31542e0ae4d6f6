// An OpenAI-compatible server in one's own program: the pieces `freezeframe serve` puts
// together, put together here. An engine for a checkpoint (its own weights, sampling on the
// GPU), the one thread that runs it (EngineWorker: continuous batching with prefix caching),
// and the HTTP server in front (OpenAiServer). Swap any piece: a TokenSource of your own in
// place of the engine, your own routes beside the server's, your own shutdown.
//
// usage: openai_server CHECKPOINT [PORT]      (Ctrl-C to stop)
//   then: curl localhost:PORT/v1/chat/completions
//           -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32}'

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/engine.h"
#include "freezeframe/engine/spec/checkpoint_spec.h"
#include "freezeframe/server/engine_worker.h"
#include "freezeframe/server/openai_server.h"
#include "freezeframe/server/server_metrics.h"
#include "freezeframe/serving/stop_tokens.h"
#include "freezeframe/serving/token_source.h"
#include "freezeframe/text/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: openai_server CHECKPOINT [PORT]\n");
    return 2;
  }
  const std::string checkpoint = argv[1];
  try {
    namespace ff = freezeframe;
    const ff::CheckpointConfig config = ff::read_checkpoint_config(checkpoint);
    const ff::Tokenizer tokenizer = ff::Tokenizer::of_checkpoint(checkpoint);

    // The engine: the checkpoint's weights, 16 requests at once, tokens drawn on the GPU.
    ff::CheckpointSpecOptions spec;
    spec.max_num_seqs = 16;
    spec.max_model_len = 4096;
    ff::EngineOptions options;
    options.sample_tokens = true;
    ff::Engine engine(ff::spec_for_checkpoint(checkpoint, spec), options);
    ff::EngineTokenSource source(engine);

    // Signals to one thread that waits for them, blocked before any other thread starts.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    // The engine's thread, and the server in front of it.
    ff::EngineWorker worker(engine.limits(), source);
    ff::ServerMetrics metrics;
    ff::ServedModel model;
    model.name = config.name;
    model.tokenizer = &tokenizer;
    model.max_model_len = engine.limits().max_model_len;
    model.vocab_size = config.vocab_size;
    model.stop_token_ids = ff::stop_tokens(config, tokenizer, /*chat=*/false);
    model.chat_stop_token_ids = ff::stop_tokens(config, tokenizer, /*chat=*/true);
    ff::ServerOptions server_options;
    server_options.port = argc > 2 ? std::atoi(argv[2]) : 8000;
    ff::OpenAiServer server(worker, metrics, model, server_options);
    const int port = server.bind();
    std::printf("serving %s on http://127.0.0.1:%d\n", model.name.c_str(), port);
    std::fflush(stdout);

    std::thread stopper([&] {
      int signal = 0;
      sigwait(&signals, &signal);
      server.stop();                     // no new connections
      worker.shutdown(/*finish=*/true);  // what runs finishes
    });
    server.serve();
    stopper.join();
  } catch (const freezeframe::Error& e) {
    std::fprintf(stderr, "openai_server: %s\n", e.what());
    return 1;
  }
  return 0;
}
