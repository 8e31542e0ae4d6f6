#pragma once
// The on-device sampler (the model program's `sample` op): one CTA per request draws its next
// token from its logits row, as sampler.h defines it and sample_reference computes it on the
// host. Its per-request parameters are read from device memory (the step's staged
// "sampling_params"), so a graph that holds the launch samples each replay's requests anew.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "freezeframe/core/tensor.h"

namespace freezeframe {

/// One request's sampling as staged for the kernel: 32 bytes.
struct SampleRow {
  float temperature = 0.0f;  ///< 0: greedy
  std::int32_t top_k = 0;
  float top_p = 1.0f;
  std::int32_t active = 0;  ///< 0: a padded request, whose token is −1
  std::uint64_t seed = 0;
  std::int64_t position = 0;  ///< where the drawn token goes: the request's seq_len
};
static_assert(sizeof(SampleRow) == 32, "the staged slice is sized as 32 bytes per request");

namespace model_kernels {

/// token_ids[r] = the token drawn from logits[r, :] under rows[r], for r < reqs; −1 where the
/// row is not active. logits: f32 [≥ reqs, vocab] on the device, unit column stride, vocab <
/// 2^21 (so a row's total weight stays below 2^53); rows and token_ids: device memory of reqs
/// entries. The launch depends on reqs and the logits' shape only.
void sample(const TensorView& logits, const SampleRow* rows, int reqs, std::int32_t* token_ids,
            cudaStream_t stream);

}  // namespace model_kernels
}  // namespace freezeframe
