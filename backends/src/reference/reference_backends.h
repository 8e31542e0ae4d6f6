#pragma once
// The built-in backends: "reference" (standard attention, every attention type and feature),
// "reference_mla" (multi-head latent attention) — correct first and simple — and
// "paged_decode" (split-KV decode at the memory-bandwidth limit).

#include <memory>

#include "freezeframe/backends/backend.h"

namespace freezeframe {

[[nodiscard]] std::unique_ptr<AttentionBackend> make_reference_backend();
[[nodiscard]] std::unique_ptr<AttentionBackend> make_reference_mla_backend();
[[nodiscard]] std::unique_ptr<AttentionBackend> make_paged_decode_backend();

}  // namespace freezeframe
