#include "prefill/prefill_policy.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "freezeframe/base/error.h"
#include "freezeframe/core/device.h"
#include "freezeframe/core/device_properties.h"
#include "prefill/prefill_launch.h"
#include "prefill/prefill_plan.h"
#include "prefill/sm90/prefill_sm90_launch.h"

namespace freezeframe {

using E = ErrorCode;

PrefillKernelChoice prefill_kernel_choice_from_environment() {
  const char* value = std::getenv("FREEZEFRAME_PREFILL_KERNEL");
  const std::string_view v = value == nullptr ? "" : value;
  if (v.empty() || v == "auto") return PrefillKernelChoice::kAuto;
  if (v == "mma_sync") return PrefillKernelChoice::kMmaSync;
  if (v == "sm90") return PrefillKernelChoice::kSm90;
  FF_THROW(E::kInvalidArgument, "FREEZEFRAME_PREFILL_KERNEL is '", v,
           "'; expected auto, mma_sync or sm90");
}

std::optional<std::string> PrefillPolicy::cannot_implement(const AttentionParams& p) {
  if (p.num_heads > prefill::kMaxHeads) {
    return "the prefill kernel supports at most " + std::to_string(prefill::kMaxHeads) + " heads";
  }
  return std::nullopt;
}

std::size_t PrefillPolicy::plan_bytes(const BatchLimits& limits) {
  return prefill::plan_bytes(limits);
}

void PrefillPolicy::plan(const CommonAttentionMetadata& common, std::span<std::byte> slice) {
  prefill::write_plan(common, slice);
}

PrefillPolicy::PrefillPolicy(const AttentionParams& params, DcpGroup dcp)
    : params_(params),
      dcp_(dcp),
      heads_per_tile_(prefill::heads_per_tile(params.num_heads / params.num_kv_heads)),
      choice_(prefill_kernel_choice_from_environment()) {
  if (has_gpu()) {
    const DType kv = params.kv_cache_dtype;
    try {
      resident_ctas_ = prefill::resident_ctas_per_sm(kv == DType::kF16 ? DType::kF16 : DType::kBF16,
                                                     kv, params.head_size) *
                       current_device_properties().sm_count;
    } catch (const Error&) {
      (void)cudaGetLastError();
    }
    const DType dtype = kv == DType::kF16 ? DType::kF16 : DType::kBF16;
    if (choice_ != PrefillKernelChoice::kMmaSync && prefill::sm90_available() && !is_fp8(kv)) {
      sm90_resident_ctas_ = prefill::sm90_resident_ctas_per_sm(dtype, params.head_size) *
                            current_device_properties().sm_count;
    }
  }
}

void PrefillPolicy::run(const AttentionCall& call, bool single_token_rows,
                        cudaStream_t stream) const {
  const AttentionParams& p = params_;
  const AttentionMetadata& md = *call.md;
  FF_CHECK(md.plan != nullptr, E::kInvalidArgument, "layer '", call.layer->name,
           "': the step's metadata carries no prefill plan (stage it with the backend's plan "
           "hook: an engine, or the backend's own metadata builder)");
  prefill::PrefillParams f;
  fill_attention_io(call, p, f);
  // Self-attention without a cache: a request's keys are its own rows.
  if (!call.paged) f.kv_start = md.query_start_loc;
  f.plan = md.plan;
  while ((1 << f.heads_per_tile_shift) < heads_per_tile_) ++f.heads_per_tile_shift;
  f.dcp_world = dcp_.world_size;
  f.dcp_interleave_size = dcp_.interleave_size;
  f.dcp_rank = dcp_.rank;
  f.causal = call.causal;
  f.single_token_rows = single_token_rows;
  if (choice_ != PrefillKernelChoice::kMmaSync) {
    const std::optional<std::string> why_not = prefill::sm90_cannot_run(
        call.query.dtype(), p.head_size, call.query, call.k, call.paged, call.output);
    FF_CHECK(!why_not || choice_ == PrefillKernelChoice::kAuto, E::kUnsupported, "layer '",
             call.layer->name,
             "': FREEZEFRAME_PREFILL_KERNEL=sm90, but the Hopper prefill kernel "
             "cannot run it: ",
             why_not.value_or(""));
    if (!why_not && sm90_resident_ctas_ > 0) {
      const int grid = prefill::grid_size(md.num_tokens, p.num_heads, heads_per_tile_,
                                          prefill::sm90_tile_rows(), sm90_resident_ctas_);
      prefill::launch_prefill_sm90(f, call.query, call.k, call.v, call.paged, call.query.dtype(),
                                   p.head_size, grid, stream);
      return;
    }
  }
  const int grid = prefill::grid_size(md.num_tokens, p.num_heads, heads_per_tile_,
                                      prefill::tile_rows(p.head_size), resident_ctas_);
  prefill::launch_prefill(f, call.query.dtype(), call.k.dtype(), p.head_size, grid, stream);
}

}  // namespace freezeframe
