// A serving loop over a request trace: the engine built from a spec, continuous batching
// (admission while KV blocks last, chunked prefill under the batched-token limit, decodes,
// completion) and every step run on the GPU; then the figures a server cares about. The same
// loop runs as `freezeframe serve-sim SPEC.yaml --trace FILE`.
//
// usage: serving_loop SPEC.yaml TRACE.csv [TIME_SCALE] [MAX_REQUESTS]
// (the Azure LLM inference traces: TIMESTAMP,ContextTokens,GeneratedTokens, or Mooncake's JSON
// Lines)

#include <cstdio>
#include <cstdlib>

#include "freezeframe/base/error.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/serving/request_trace.h"
#include "freezeframe/serving/serving_loop.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: serving_loop SPEC.yaml TRACE.csv [TIME_SCALE] [MAX_REQUESTS]\n");
    return 2;
  }
  try {
    freezeframe::TraceOptions trace_options;
    if (argc > 3) trace_options.time_scale = std::atof(argv[3]);
    if (argc > 4) trace_options.max_requests = static_cast<std::size_t>(std::atol(argv[4]));
    const auto trace = freezeframe::load_trace(argv[2], trace_options);

    freezeframe::Engine engine(freezeframe::load_spec(argv[1]));
    const freezeframe::ServingReport r = freezeframe::run_serving_loop(
        engine.spec(), static_cast<std::int32_t>(engine.plan().kv_cache.num_blocks),
        engine.dispatcher(), trace, &engine);

    std::printf("%zu of %zu requests in %ld steps; %.0f tokens/s while stepping\n", r.finished,
                r.requests, r.steps, r.tokens_per_second());
    std::printf("graph hit rate: full %ld, piecewise %ld, eager %ld steps; padding waste %.1f%%\n",
                r.steps_by_mode[2], r.steps_by_mode[1], r.steps_by_mode[0],
                100.0 * r.padding_waste());
    std::printf("step time: p50 %.2f ms, p99 %.2f ms\n", r.step_ms_p50, r.step_ms_p99);
    return r.finished == r.requests ? 0 : 1;
  } catch (const freezeframe::Error& e) {
    std::fprintf(stderr, "serving_loop: %s\n", e.what());
    return 1;
  }
}
