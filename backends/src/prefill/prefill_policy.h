#pragma once
// The prefill kernel policy: rows of requests with several new tokens (prefills, chunked
// prefills over a cached prefix, encoder sequences) through the tensor-core prefill kernel on
// the schedule the plan hook staged; it also zeroes the step's padding rows.

#include <cuda_runtime_api.h>

#include <optional>
#include <span>
#include <string>

#include "attention_call.h"
#include "freezeframe/backends/attention_params.h"

namespace freezeframe {

/// Which prefill kernel runs: the Hopper kernel (wgmma, TMA) where the GPU, the build and the
/// call allow it, else the portable mma.sync kernel. FREEZEFRAME_PREFILL_KERNEL=mma_sync or
/// =sm90 picks one (sm90 then refuses a call it cannot run, saying why), e.g. to compare them.
enum class PrefillKernelChoice { kAuto, kMmaSync, kSm90 };
/// The choice FREEZEFRAME_PREFILL_KERNEL names (auto when unset); kInvalidArgument otherwise.
[[nodiscard]] PrefillKernelChoice prefill_kernel_choice_from_environment();

class PrefillPolicy {
 public:
  /// Why the policy cannot run `params`, or nothing when it can.
  [[nodiscard]] static std::optional<std::string> cannot_implement(const AttentionParams& params);
  /// The plan hook's slice for any batch within `limits`, and the hook.
  [[nodiscard]] static std::size_t plan_bytes(const BatchLimits& limits);
  static void plan(const CommonAttentionMetadata& common, std::span<std::byte> slice);

  /// Reads the kernel's occupancy on the current GPU, if there is one. Under DCP (`dcp` of
  /// more than one rank) the keys are the rank's shard and prefill rows are masked by their
  /// positions in the sequence (the plan's tiles carry them).
  explicit PrefillPolicy(const AttentionParams& params, DcpGroup dcp = {});

  /// Attends every row of `call` but those of single-token requests when `single_token_rows`
  /// is false (a decode policy has them), and zeroes the padding rows.
  void run(const AttentionCall& call, bool single_token_rows, cudaStream_t stream) const;

 private:
  AttentionParams params_;
  DcpGroup dcp_;
  int heads_per_tile_;
  PrefillKernelChoice choice_;
  int resident_ctas_ = 1;       // the persistent grid: resident CTAs × SMs (mma.sync kernel)
  int sm90_resident_ctas_ = 0;  // ... of the Hopper kernel; 0 where it does not run
};

}  // namespace freezeframe
