#pragma once
// A checkpoint's tensors against the model program, before anything is read: every weight
// present, in the program's shape, of a type the source reads. Every problem is reported at
// once, naming the file, the tensor and what was expected.

#include <span>
#include <string>
#include <vector>

#include "freezeframe/checkpoints/weight_source.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/spec/tensor_parallel.h"

namespace freezeframe {

/// The Hugging Face name of a program weight: "model." + its name + ".weight" ("lm_head.weight"
/// for the LM head; biases keep their ".bias").
[[nodiscard]] std::string hf_weight_name(const ProgramWeight& weight);

/// The checkpoint tensor of each of the program's weights, in program order, after checking
/// all of them: present, of the program's shape, of a type read_rows reads. Throws
/// kInvalidArgument listing every problem (file, tensor, what the program expects) otherwise,
/// so nothing is uploaded from a checkpoint that cannot be read whole. With `shards` (one per
/// weight: a tensor-parallel rank's program) each tensor must have the whole weight's shape.
/// An fp8 weight's scales (ProgramWeight::scales_of) are computed at upload: null for them.
[[nodiscard]] std::vector<const WeightTensor*> match_weights(
    const WeightSource& source, const ModelProgram& program,
    std::span<const WeightShard> shards = {});

/// A layer's fp8 KV cache scales (value = stored × scale).
struct KvCacheScales {
  float k = 1.0f;
  float v = 1.0f;
};

/// The KV cache scales an fp8 checkpoint calibrated (compressed-tensors' kv_cache_scheme:
/// model.layers.N.self_attn.k_scale and v_scale, one value each), one per layer of
/// `num_layers`; empty when `config` states none. Throws kInvalidArgument naming the tensor
/// when one is missing, not a single value, or not finite and positive.
[[nodiscard]] std::vector<KvCacheScales> checkpoint_kv_cache_scales(const WeightSource& source,
                                                                    const CheckpointConfig& config,
                                                                    int num_layers);

}  // namespace freezeframe
