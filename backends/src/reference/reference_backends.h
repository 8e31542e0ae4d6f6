#pragma once
// The built-in backends: "reference" (standard attention, every attention type and feature),
// "reference_mla" (multi-head latent attention) — correct first and simple — "paged" (the
// fast one: split-KV decode at the memory-bandwidth limit and tensor-core prefill, over a
// paged cache; "paged_decode" names it too) and "mla" (reference_mla with its decode
// attention and projections on tensor cores).

#include <memory>

#include "freezeframe/backends/backend.h"

namespace freezeframe {

[[nodiscard]] std::unique_ptr<AttentionBackend> make_reference_backend();
[[nodiscard]] std::unique_ptr<AttentionBackend> make_reference_mla_backend();
[[nodiscard]] std::unique_ptr<AttentionBackend> make_paged_backend();
[[nodiscard]] std::unique_ptr<AttentionBackend> make_mla_backend();

}  // namespace freezeframe
