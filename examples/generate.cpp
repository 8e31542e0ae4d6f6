// Text from a checkpoint, as `freezeframe generate` makes it: the checkpoint's tokenizer and
// chat template turn a message into a prompt, an engine runs the checkpoint's own weights with
// every token drawn on the GPU inside the step's graph, and the generation loop feeds each
// token back until the model ends its turn or the output reaches its length. The text streams
// as it is drawn.
//
// usage: generate CHECKPOINT MESSAGE [MAX_TOKENS]
//   e.g. generate .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf "What is a GPU?" 64

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/engine.h"
#include "freezeframe/engine/spec/checkpoint_spec.h"
#include "freezeframe/serving/generation_loop.h"
#include "freezeframe/serving/stop_tokens.h"
#include "freezeframe/serving/token_source.h"
#include "freezeframe/text/chat_format.h"
#include "freezeframe/text/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: generate CHECKPOINT MESSAGE [MAX_TOKENS]\n");
    return 2;
  }
  const std::string checkpoint = argv[1];
  const int max_tokens = argc > 3 ? std::atoi(argv[3]) : 64;
  try {
    // The prompt: the message as the chat template renders it, with the generation prompt.
    const freezeframe::CheckpointConfig config = freezeframe::read_checkpoint_config(checkpoint);
    const auto tokenizer = freezeframe::Tokenizer::of_checkpoint(checkpoint);
    const std::vector<freezeframe::ChatMessage> chat = {{"user", argv[2]}};
    const std::vector<freezeframe::TokenId> prompt =
        tokenizer.encode(tokenizer.chat_format().render(chat, /*add_generation_prompt=*/true));

    // An engine made for the checkpoint: its model and weights, one sequence, the context the
    // prompt and the output need, and sampling inside the step.
    freezeframe::CheckpointSpecOptions spec;
    spec.max_model_len = std::min<std::int64_t>(
        config.max_position_embeddings, static_cast<std::int64_t>(prompt.size()) + max_tokens);
    spec.max_num_seqs = 1;
    freezeframe::EngineOptions options;
    options.sample_tokens = true;
    freezeframe::Engine engine(freezeframe::spec_for_checkpoint(checkpoint, spec), options);

    // One request through the loop: prefill, then a decode per token, each drawn token fed
    // back, until an end-of-turn token or max_tokens.
    freezeframe::EngineTokenSource source(engine);
    freezeframe::GenerationLoop loop(engine.limits(), source);
    freezeframe::GenerationRequest request;
    request.prompt = prompt;
    request.max_tokens = max_tokens;
    request.stop_token_ids = freezeframe::stop_tokens(config, tokenizer, /*chat=*/true);
    request.sampling = {/*temperature=*/0.7f, /*top_k=*/40, /*top_p=*/0.9f, /*seed=*/1};
    (void)loop.add(request);
    while (const auto* events = loop.step()) {
      for (const std::int32_t token : events->tokens) {
        if (std::find(request.stop_token_ids.begin(), request.stop_token_ids.end(), token) !=
            request.stop_token_ids.end()) {
          continue;  // the end of the turn is not part of the text
        }
        const std::string piece =
            tokenizer.decode(std::span<const freezeframe::TokenId>(&token, 1));
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
    }
    std::printf("\n(%ld steps)\n", loop.steps());
    return 0;
  } catch (const freezeframe::Error& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
}
