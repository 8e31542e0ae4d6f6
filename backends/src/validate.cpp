#include "validate.h"

#include <cmath>

#include "freezeframe/base/error.h"

namespace freezeframe {

using E = ErrorCode;

void check_common_params(const AttentionBackend& backend, const AttentionParams& p) {
  FF_CHECK(p.num_heads > 0, E::kInvalidArgument, "num_heads must be positive, got ", p.num_heads);
  FF_CHECK(p.num_kv_heads > 0, E::kInvalidArgument, "num_kv_heads must be positive, got ",
           p.num_kv_heads);
  FF_CHECK(p.num_heads % p.num_kv_heads == 0, E::kInvalidArgument, "num_heads (", p.num_heads,
           ") must be a multiple of num_kv_heads (", p.num_kv_heads, ")");
  if (!backend.supports_head_size(p.head_size)) {
    std::string sizes;
    for (int s : backend.supported_head_sizes())
      sizes += (sizes.empty() ? "" : ", ") + std::to_string(s);
    FF_THROW(E::kUnsupported, "backend '", backend.name(), "' does not support head_size ",
             p.head_size, "; supported: ", sizes);
  }
  if (!backend.supports_kv_cache_dtype(p.kv_cache_dtype)) {
    std::string dtypes;
    for (DType d : backend.supported_kv_cache_dtypes()) {
      dtypes += (dtypes.empty() ? "" : ", ") + std::string(name_of(d));
    }
    FF_THROW(E::kUnsupported, "backend '", backend.name(), "' does not support kv_cache_dtype ",
             name_of(p.kv_cache_dtype), "; supported: ", dtypes);
  }
  FF_CHECK(std::isfinite(p.scale) && p.scale > 0.0f, E::kInvalidArgument,
           "scale must be positive and finite, got ", p.scale);
  FF_CHECK(p.alibi_slopes.empty() || static_cast<int>(p.alibi_slopes.size()) == p.num_heads,
           E::kInvalidArgument, "alibi_slopes has ", p.alibi_slopes.size(),
           " entries, expected one per query head (", p.num_heads, ")");
  FF_CHECK(!p.sliding_window || *p.sliding_window > 0, E::kInvalidArgument,
           "sliding_window must be positive when set, got ", p.sliding_window.value_or(0));
  FF_CHECK(std::isfinite(p.logits_soft_cap) && p.logits_soft_cap >= 0.0f, E::kInvalidArgument,
           "logits_soft_cap must be >= 0 (0 = off), got ", p.logits_soft_cap);
}

void check_dcp(const DcpGroup& dcp, bool can_return_lse, std::string_view backend) {
  FF_CHECK(dcp.world_size >= 1 && dcp.rank >= 0 && dcp.rank < dcp.world_size, E::kInvalidArgument,
           "DCP rank ", dcp.rank, " is not in a group of world size ", dcp.world_size);
  FF_CHECK(dcp.interleave_size >= 1, E::kInvalidArgument, "DCP interleave size ",
           dcp.interleave_size, " is not positive");
  FF_CHECK(dcp.world_size == 1 || can_return_lse, E::kUnsupported, "backend '", backend,
           "' cannot return LSE, so it cannot run with decode context parallelism (world size ",
           dcp.world_size, ")");
}

void check_positional_features(const AttentionParams& p, const DcpGroup& dcp,
                               std::string_view backend) {
  if (p.attn_type == AttentionType::kEncoderDecoder) {
    FF_CHECK(p.alibi_slopes.empty() && !p.sliding_window, E::kUnsupported,
             "encoder_decoder (cross) attention supports neither alibi_slopes nor "
             "sliding_window: key positions are the encoder's, not the query's");
  }
  // The spec refuses them too.
  FF_CHECK(dcp.world_size == 1 || (p.alibi_slopes.empty() && !p.sliding_window), E::kUnsupported,
           "backend '", backend, "' under decode context parallelism (", dcp.world_size,
           " ranks) supports neither alibi_slopes nor sliding_window");
}

namespace {
void check_cuda_tensor(const TensorView& t, std::string_view what) {
  FF_CHECK(t.defined(), E::kInvalidArgument, what, " is missing");
  FF_CHECK(t.is_cuda(), E::kInvalidArgument, what, " must be in device memory");
}
void check_shape(const TensorView& t, std::string_view what,
                 std::initializer_list<std::int64_t> shape) {
  bool ok = t.dim() == static_cast<int>(shape.size());
  int d = 0;
  for (std::int64_t s : shape) {
    if (ok && t.size(d) != s) ok = false;
    ++d;
  }
  if (!ok) {
    std::string expected = "[";
    d = 0;
    for (std::int64_t s : shape) expected += (d++ ? ", " : "") + std::to_string(s);
    FF_THROW(E::kInvalidArgument, what, " has shape ", t.describe(), ", expected ", expected, "]");
  }
}
}  // namespace

void check_query(const TensorView& q, std::string_view what, int rows, int heads, int head_size) {
  check_cuda_tensor(q, what);
  FF_CHECK(q.dtype() == DType::kBF16 || q.dtype() == DType::kF16, E::kInvalidArgument, what,
           " must be bf16 or f16, got ", name_of(q.dtype()));
  check_shape(q, what, {rows, heads, head_size});
  FF_CHECK(q.stride(2) == 1, E::kInvalidArgument, what, " needs unit stride in its last dimension");
}

TensorView output_as_3d(const TensorView& out, DType dtype, int rows, int heads, int head_size) {
  check_cuda_tensor(out, "output");
  FF_CHECK(out.dtype() == dtype, E::kInvalidArgument, "output is ", name_of(out.dtype()),
           " but the query is ", name_of(dtype));
  FF_CHECK(out.is_contiguous(), E::kInvalidArgument, "output must be contiguous, got ",
           out.describe());
  const bool flat =
      out.dim() == 2 && out.size(0) == rows && out.size(1) == std::int64_t(heads) * head_size;
  const bool full =
      out.dim() == 3 && out.size(0) == rows && out.size(1) == heads && out.size(2) == head_size;
  FF_CHECK(flat || full, E::kInvalidArgument, "output has shape ", out.describe(), ", expected [",
           rows, ", ", heads, ", ", head_size, "] or [", rows, ", ",
           std::int64_t(heads) * head_size, "]");
  return out.reshape({rows, heads, head_size});
}

void check_lse(const TensorView& lse, int rows, int heads) {
  if (!lse.defined()) return;
  check_cuda_tensor(lse, "lse_ln");
  FF_CHECK(lse.dtype() == DType::kF32, E::kInvalidArgument, "lse_ln must be f32, got ",
           name_of(lse.dtype()));
  check_shape(lse, "lse_ln", {rows, heads});
  FF_CHECK(lse.stride(1) == 1, E::kInvalidArgument, "lse_ln needs unit stride over heads");
}

void check_kv_rows(const TensorView& t, std::string_view what, DType dtype, int rows, int kv_heads,
                   int head_size) {
  check_cuda_tensor(t, what);
  FF_CHECK(t.dtype() == dtype, E::kInvalidArgument, what, " is ", name_of(t.dtype()),
           " but the query is ", name_of(dtype));
  check_shape(t, what, {rows, kv_heads, head_size});
  FF_CHECK(t.stride(2) == 1, E::kInvalidArgument, what, " needs unit stride in its last dimension");
}

void check_kv_cache(const TensorView& c, DType dtype, int kv_heads, int head_size) {
  check_cuda_tensor(c, "kv_cache");
  FF_CHECK(c.dtype() == dtype, E::kInvalidArgument, "kv_cache is ", name_of(c.dtype()),
           " but the layer's kv_cache_dtype is ", name_of(dtype));
  FF_CHECK(c.dim() == 5 && c.size(0) == 2 && c.size(3) == kv_heads && c.size(4) == head_size,
           E::kInvalidArgument, "kv_cache has shape ", c.describe(),
           ", expected [2, num_blocks, block_size, ", kv_heads, ", ", head_size, "]");
  FF_CHECK(c.stride(4) == 1, E::kInvalidArgument, "kv_cache needs unit stride over head_size");
}

}  // namespace freezeframe
