#pragma once
// spec_for_checkpoint: the spec of a deployment that runs a checkpoint's model on its own
// weights, for tools and embedders that start from a checkpoint rather than a spec file
// (freezeframe generate): the model section is the checkpoint's (model.checkpoint with
// model.builtin_weights false), the rest what the options say, written as a spec and
// validated like any other.

#include <cstdint>
#include <string>

#include "freezeframe/engine/spec/spec.h"

namespace freezeframe {

struct CheckpointSpecOptions {
  /// scheduler.max_model_len; 0: the checkpoint's max_position_embeddings.
  std::int64_t max_model_len = 0;
  int max_num_seqs = 8;
  int max_num_batched_tokens = 2048;
  /// Every layer's attention backend; empty: paged_decode where it runs the checkpoint's head
  /// size, else reference.
  std::string backend;
  /// cache.memory_budget: a fraction of the device's memory ("0.9") or a size ("8GiB").
  std::string memory_budget = "0.9";
  /// model.quantization: "none" or "fp8" (W8A8 projections); empty: the spec's default.
  std::string quantization;
};

/// The validated spec; throws as parse_spec does (a checkpoint that cannot be read or run is
/// refused at model.checkpoint, naming its file and field). A relative `checkpoint` is taken
/// from the working directory.
[[nodiscard]] EngineSpec spec_for_checkpoint(const std::string& checkpoint,
                                             const CheckpointSpecOptions& options = {});

/// The spec's text (YAML) that spec_for_checkpoint validates.
[[nodiscard]] std::string checkpoint_spec_text(const std::string& checkpoint,
                                               const CheckpointSpecOptions& options = {});

}  // namespace freezeframe
