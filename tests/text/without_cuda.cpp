// A program that links the tokenizer and the checkpoint readers alone (freezeframe::text, and
// through it freezeframe::checkpoints and freezeframe::base), none of them CUDA: it reads a
// GGUF checkpoint's config and tokenizer and round-trips a text through it. The test
// `text_links_no_cuda` checks its dynamic dependencies hold no CUDA library.
// Usage: without_cuda CHECKPOINT.gguf

#include <cstdio>
#include <string>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/text/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: without_cuda CHECKPOINT TOKENIZER\n");
    return 2;
  }
  try {
    const freezeframe::CheckpointConfig config = freezeframe::read_checkpoint_config(argv[1]);
    const freezeframe::Tokenizer tokenizer = freezeframe::Tokenizer::open(argv[2]);
    const std::string text = "Hello, world: tokens without CUDA.";
    const auto ids = tokenizer.encode(text);
    const std::string back = tokenizer.decode(ids);
    std::printf("%s: %d layers, %zu tokens, round trip %s\n", config.name.c_str(),
                config.num_layers, ids.size(), back == text ? "exact" : "DIFFERENT");
    return back == text && !ids.empty() ? 0 : 1;
  } catch (const freezeframe::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
