// The runner's ops that run collectives: gather_logits over the tensor-parallel ranks, and DCP's
// query gather and partial-output merge over a rank's DCP group (model_runner.h).

#include <algorithm>

#include "freezeframe/backends/lse_merge.h"
#include "freezeframe/core/cuda_check.h"
#include "runtime/model_runner.h"

namespace freezeframe {

namespace {

/// Copies `rows` rows of `width` elements from `src` (row stride `src_stride` elements) to
/// `dst` (row stride `dst_stride`), on `stream`.
void copy_columns(void* dst, std::int64_t dst_stride, const void* src, std::int64_t src_stride,
                  std::int64_t width, int rows, DType dtype, cudaStream_t stream) {
  if (rows == 0 || width == 0) return;
  const auto elem = static_cast<std::size_t>(size_of(dtype));
  FF_CUDA_CHECK(cudaMemcpy2DAsync(
      dst, elem * static_cast<std::size_t>(dst_stride), src,
      elem * static_cast<std::size_t>(src_stride), elem * static_cast<std::size_t>(width),
      static_cast<std::size_t>(rows), cudaMemcpyDeviceToDevice, stream));
}

template <typename T>
T* at(const TensorView& t, std::int64_t elements) {
  return static_cast<T*>(t.data()) + elements;
}

}  // namespace

void ModelRunner::dcp_gather_queries(const ops::DcpGatherQueries& op, int rows,
                                     cudaStream_t stream) {
  // qkv holds this rank's query heads first.
  const TensorView qkv = views_.tensors[op.qkv];
  const TensorView q_group = views_.tensors[op.q_group];
  const TensorView send = views_.tensors[op.send];
  const TensorView recv = views_.tensors[op.recv];
  const DType dtype = qkv.dtype();
  const auto elem = static_cast<std::int64_t>(size_of(dtype));
  const std::int64_t width = std::int64_t(shard_.query_heads) * spec_.model.head_size;
  const std::int64_t count = std::int64_t(rows) * width;
  // Packed rows for the gather, then rank r's block into q_group's columns r · width ...
  copy_columns(send.data(), width, qkv.data(), qkv.stride(0), width, rows, dtype, stream);
  dcp_communicator_->all_gather(send.data(), recv.data(), static_cast<std::size_t>(count), dtype,
                                stream);
  for (int r = 0; r < dcp_size_; ++r) {
    copy_columns(static_cast<std::byte*>(q_group.data()) + r * width * elem, q_group.stride(0),
                 static_cast<const std::byte*>(recv.data()) + r * count * elem, width, width, rows,
                 dtype, stream);
  }
}

void ModelRunner::dcp_merge(const ops::DcpMerge& op, int rows, cudaStream_t stream) {
  // attn_partial [rows, G·d], attn_lse [rows, G] (G = D · this rank's heads, rank-major) into
  // attn_out [rows, heads·d] through the collectives' buffers.
  const TensorView partial = views_.tensors[op.partial];
  const TensorView lse = views_.tensors[op.lse];
  const TensorView out = views_.tensors[op.out];
  const TensorView out_send = views_.tensors[op.out_send];
  const TensorView lse_send = views_.tensors[op.lse_send];
  const TensorView out_recv = views_.tensors[op.out_recv];
  const TensorView lse_recv = views_.tensors[op.lse_recv];
  const DType dtype = partial.dtype();
  // A head's width: the model's head size, or an MLA model's value head size.
  const std::int64_t heads = shard_.query_heads, d = out.size(1) / heads;
  const std::int64_t width = heads * d, out_count = std::int64_t(rows) * width;
  const std::int64_t lse_count = std::int64_t(rows) * heads;
  const auto elem = static_cast<std::int64_t>(size_of(dtype));
  // Block r of the sends: rank r's heads of every row, which the all-to-all hands to rank r.
  for (int r = 0; r < dcp_size_; ++r) {
    copy_columns(static_cast<std::byte*>(out_send.data()) + r * out_count * elem, width,
                 static_cast<const std::byte*>(partial.data()) + r * width * elem,
                 partial.stride(0), width, rows, dtype, stream);
    copy_columns(at<float>(lse_send, r * lse_count), heads, at<const float>(lse, r * heads),
                 lse.stride(0), heads, rows, DType::kF32, stream);
  }
  dcp_communicator_->all_to_all(out_send.data(), out_recv.data(),
                                static_cast<std::size_t>(out_count), dtype, stream);
  dcp_communicator_->all_to_all(lse_send.data(), lse_recv.data(),
                                static_cast<std::size_t>(lse_count), DType::kF32, stream);
  // Block r of the receives: this rank's heads as rank r attended them to its shard.
  const std::int64_t partial_shape[] = {dcp_size_, rows, heads, d};
  const std::int64_t lse_shape[] = {dcp_size_, rows, heads};
  merge_attention_states(TensorView(out_recv.data(), dtype, partial_shape, out_recv.device()),
                         TensorView(lse_recv.data(), DType::kF32, lse_shape, lse_recv.device()),
                         rows_of(op.out, rows).unflatten(1, heads), TensorView(), stream);
}

void ModelRunner::gather_logits(const ops::GatherLogits& op, int reqs, cudaStream_t stream) {
  const TensorView& shard = views_.tensors[op.shard];
  const TensorView& gathered = views_.tensors[op.gathered];
  const TensorView& logits = views_.tensors[op.logits];
  const std::int64_t rows_per_rank = shard_.vocab_rows, vocab = logits.size(1);
  const std::size_t count = static_cast<std::size_t>(reqs) * rows_per_rank;
  communicator_->all_gather(shard.data(), gathered.data(), count, DType::kF32, stream);
  // Rank r's block is [reqs, rows_per_rank] at r · count; its columns go to logits[:, r · rows
  // per rank ...], the last rank's cut at the vocabulary's end.
  for (int r = 0; r < shard_.world; ++r) {
    const std::int64_t first = r * rows_per_rank;
    const std::int64_t width = std::min(rows_per_rank, vocab - first);
    if (width <= 0 || reqs == 0) continue;
    FF_CUDA_CHECK(cudaMemcpy2DAsync(
        logits.data_as<float>() + first, sizeof(float) * logits.stride(0),
        gathered.data_as<const float>() + r * count, sizeof(float) * rows_per_rank,
        sizeof(float) * width, static_cast<std::size_t>(reqs), cudaMemcpyDeviceToDevice, stream));
  }
}

}  // namespace freezeframe
