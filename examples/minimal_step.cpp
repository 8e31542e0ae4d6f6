// The smallest embedding of the engine: build it from a spec, then run a greedy generation
// of one request: a prefill step over the prompt, then one decode step per new token, each
// reading the last token's logits back. The built-in model has random weights, so the text is
// noise; the mechanics are those of a real server.
//
// usage: minimal_step SPEC.yaml [NEW_TOKENS]

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/engine.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: minimal_step SPEC.yaml [NEW_TOKENS]\n");
    return 2;
  }
  const int new_tokens = argc > 2 ? std::atoi(argv[2]) : 8;
  try {
    freezeframe::Engine engine(freezeframe::load_spec(argv[1]));
    const auto& report = engine.capture_report();
    std::printf("engine ready: %d graphs captured in %.0f ms\n", engine.num_graphs(),
                report.total_ms);

    // One request: its KV blocks (any free ids of the pool; a server's block pool hands them
    // out) and its tokens so far.
    const int block_size = engine.limits().block_size;
    std::vector<std::int32_t> tokens = {1, 15043, 29892, 920, 526, 366};  // a prompt
    for (auto& t : tokens) t %= engine.limits().vocab_size;
    const int max_len = static_cast<int>(tokens.size()) + new_tokens;
    std::vector<std::int32_t> blocks((max_len + block_size - 1) / block_size);
    for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<std::int32_t>(i);

    std::vector<float> logits(engine.limits().vocab_size);
    for (int step = 0; step < new_tokens; ++step) {
      const bool prefill = step == 0;
      const int seq_len = static_cast<int>(tokens.size());
      const int query_len = prefill ? seq_len : 1;
      freezeframe::StepBatch batch;
      batch.requests = {{query_len, seq_len, blocks}};
      batch.token_ids = std::span<const std::int32_t>(tokens).last(query_len);
      const freezeframe::StepResult result = engine.step(batch);

      // The logits are a view into the engine's output buffer: wait for the step, copy them.
      engine.synchronize();
      FF_CUDA_CHECK(cudaMemcpy(logits.data(), result.logits.data(), logits.size() * sizeof(float),
                               cudaMemcpyDeviceToHost));
      const auto next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) -
                                                  logits.begin());
      std::printf("step %d: %s of %d tokens ran %s (%s), next token %d\n", step,
                  prefill ? "prefill" : "decode", query_len,
                  std::string(freezeframe::to_string(result.mode)).c_str(),
                  result.descriptor.describe().c_str(), next);
      tokens.push_back(next);
    }
    return 0;
  } catch (const freezeframe::Error& e) {
    std::fprintf(stderr, "minimal_step: %s\n", e.what());
    return 1;
  }
}
