#pragma once
// The reference backends: "reference" (standard attention, every attention type and feature)
// and "reference_mla" (multi-head latent attention). Correct first and simple; graph-capturable.

#include <memory>

#include "freezeframe/backends/backend.h"

namespace freezeframe {

[[nodiscard]] std::unique_ptr<AttentionBackend> make_reference_backend();
[[nodiscard]] std::unique_ptr<AttentionBackend> make_reference_mla_backend();

}  // namespace freezeframe
