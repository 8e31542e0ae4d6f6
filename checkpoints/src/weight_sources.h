#pragma once
// The two weight sources behind WeightSource::open. Private to model/.

#include <memory>
#include <string>

#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/checkpoints/weight_source.h"

namespace freezeframe {

/// The tensors of a safetensors checkpoint: `path` is a .safetensors file, an index .json, or
/// a folder holding one (SafetensorsCheckpoint::open), the names already Hugging Face's. With
/// `fp8` (the config's scheme), each F8_E4M3 weight is read times the scale stored beside it.
[[nodiscard]] std::unique_ptr<WeightSource> open_safetensors_weights(
    const std::string& path, const Fp8Scheme* fp8 = nullptr);

/// The tensors of the GGUF file `config` was read from, under Hugging Face names; q and k rows
/// back in Hugging Face's order unless the family is stored unpermuted (Qwen2).
[[nodiscard]] std::unique_ptr<WeightSource> open_gguf_weights(const CheckpointConfig& config);

}  // namespace freezeframe
