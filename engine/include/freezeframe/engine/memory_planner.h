#pragma once
// plan_memory: the engine's whole memory as one arena, from the spec and the device memory
// size alone (pure host arithmetic; no GPU needed). Regions, in arena order:
//   weights              the built-in model's parameters (model.builtin_weights)
//   activations          the model program's tensors, packed by lifetime (greedy by size)
//   inputs               per-step token ids and positions at fixed addresses
//   metadata.<backend>   persistent metadata of each backend's builder (MetadataBuilder),
//                        right after the inputs so that one copy uploads a step
//   outputs              the logits
//   attention_outputs    one buffer per layer whose backend accepts an output buffer
//   attention_workspace  the largest per-layer impl workspace (layers run one at a time;
//                        split-KV decode keeps its partial outputs there)
//   cublas_workspace     for the GEMMs (cuBLAS recommends 32 MiB on Hopper)
//   dcp_lse, dcp_gather  DCP only: per-layer LSE, and the gathered LSE + partial outputs
//   kv_cache             what is left, in whole blocks; one placement per layer
// A budget that cannot hold everything plus one max-length sequence of KV cache is refused
// with the numbers.

#include <cstdint>

#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/engine/model_program.h"
#include "freezeframe/engine/spec.h"
#include "freezeframe/memory/memory_plan.h"

namespace freezeframe {

/// cuBLAS's recommended workspace on Hopper (cuBLAS docs, "cublasSetWorkspace").
inline constexpr std::int64_t kCublasWorkspaceBytes = std::int64_t(32) << 20;

/// The plan for `spec` on a device with `device_bytes` of memory. Throws kOutOfMemory (naming
/// the spec's memory_budget with file:line:column and how much is missing) when the budget
/// cannot hold the fixed regions plus one max-length sequence of KV cache, and
/// kInvalidArgument when a byte budget exceeds the device.
[[nodiscard]] MemoryPlan plan_memory(const EngineSpec& spec, std::int64_t device_bytes);

/// The limits the persistent metadata buffers are sized for: max_num_seqs requests,
/// max_num_batched_tokens tokens (eager steps can be that large; captured ones are smaller),
/// block-table rows of ceil(tokens per rank of max_model_len / block_size).
[[nodiscard]] BatchLimits batch_limits(const EngineSpec& spec);

/// Workspace one layer's impl needs for `limits` (AttentionImpl::workspace_bytes; for the
/// reference MLA backend, whose impl needs weights to exist, the same layout computed here).
[[nodiscard]] std::int64_t attention_workspace_bytes(const EngineSpec& spec, int layer,
                                                     const BatchLimits& limits);

/// Tokens of a sequence of `length` that DCP rank `rank` holds (DESIGN.md, "Decode context
/// parallelism"): base + clamp(rem − rank·I, 0, I), base = (L div (I·W))·I, rem = L − base·W.
[[nodiscard]] std::int64_t dcp_rank_tokens(std::int64_t length, int world_size,
                                           int interleave_size, int rank);

}  // namespace freezeframe
