#pragma once
// The decode kernel policy: rows of single-token requests through the split-KV paged decode
// kernel (and its combine when a row is split).

#include <cuda_runtime_api.h>

#include <optional>
#include <string>

#include "attention_call.h"
#include "freezeframe/backends/attention_params.h"
#include "freezeframe/core/device_properties.h"
#include "paged_decode/split_policy.h"

namespace freezeframe {

class DecodePolicy {
 public:
  /// Why the policy cannot run `params`, or nothing when it can.
  [[nodiscard]] static std::optional<std::string> cannot_implement(const AttentionParams& params);
  /// Workspace for any batch within `limits` on `device`.
  [[nodiscard]] static std::size_t workspace_bytes(const AttentionParams& params,
                                                   const BatchLimits& limits,
                                                   const DeviceProperties& device);

  /// Reads the kernel's occupancy on the current GPU, if there is one.
  explicit DecodePolicy(const AttentionParams& params);

  [[nodiscard]] std::size_t workspace_bytes(const BatchLimits& limits) const;
  /// Attends the single-token rows of `call` (paged only); other rows are left alone.
  void run(const AttentionCall& call, cudaStream_t stream) const;

 private:
  AttentionParams params_;
  int heads_per_cta_;
  DecodeSplitPolicy split_;
};

}  // namespace freezeframe
