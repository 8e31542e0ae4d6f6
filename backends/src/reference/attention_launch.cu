// Dtype dispatch and launch of the reference attention kernel.

#include <algorithm>

#include "freezeframe/core/cuda_check.h"
#include "reference/attention_kernel.cuh"
#include "reference/launch.h"

namespace freezeframe::reference {
namespace {

using kernels::AttentionKernelParams;
using kernels::ContiguousKv;
using kernels::kAttentionThreads;
using kernels::PagedKv;

template <typename QT, typename OT, typename Kv>
AttentionKernelParams<QT, OT, Kv> common_params(const AttentionLaunch& l, const Kv& kv) {
  AttentionKernelParams<QT, OT, Kv> p;
  p.q = static_cast<const QT*>(l.query.data());
  p.q_stride_token = l.query.stride(0);
  p.q_stride_head = l.query.stride(1);
  p.out = static_cast<OT*>(l.output.data());
  p.out_stride_token = l.output.stride(0);
  p.out_stride_head = l.output.stride(1);
  if (l.lse_ln.defined()) {
    p.lse = static_cast<float*>(l.lse_ln.data());
    p.lse_stride_token = l.lse_ln.stride(0);
  }
  p.kv = kv;
  p.query_start_loc = l.query_start_loc;
  p.seq_lens = l.seq_lens;
  p.row_begin = l.row_begin;
  p.req_begin = l.req_begin;
  p.req_end = l.req_end;
  p.num_heads = l.num_heads;
  p.num_kv_heads = l.num_kv_heads;
  p.head_size_qk = l.head_size_qk;
  p.head_size_v = l.head_size_v;
  p.scale = l.scale;
  p.softcap = l.softcap;
  p.sliding_window = l.sliding_window;
  p.causal = l.causal;
  p.skip_single_token_queries = l.skip_single_token_queries;
  p.use_alibi = !l.alibi_slopes.empty();
  std::copy(l.alibi_slopes.begin(), l.alibi_slopes.end(), p.alibi);
  if (l.dcp.world_size > 1) {
    FF_CHECK(l.first_positions != nullptr, ErrorCode::kInternal,
             "reference attention over a DCP shard needs the requests' positions");
    p.first_positions = l.first_positions;
    p.dcp_world = l.dcp.world_size;
    p.dcp_rank = l.dcp.rank;
    p.dcp_interleave_size = l.dcp.interleave_size;
  }
  return p;
}

template <typename QT, typename OT, typename Kv>
void run(const AttentionLaunch& l, const Kv& kv, cudaStream_t stream) {
  FF_CHECK(l.head_size_qk <= kernels::kMaxQkHeadSize, ErrorCode::kUnsupported,
           "query/key head size ", l.head_size_qk, " exceeds the reference kernel's ",
           kernels::kMaxQkHeadSize);
  FF_CHECK(static_cast<int>(l.alibi_slopes.size()) <= kernels::kMaxHeads &&
               l.num_heads <= kernels::kMaxHeads,
           ErrorCode::kUnsupported, "the reference kernel supports at most ", kernels::kMaxHeads,
           " heads");
  if (l.num_rows == 0 || l.num_heads == 0) return;
  const auto p = common_params<QT, OT>(l, kv);
  const dim3 grid(l.num_rows, l.num_heads);
  if (l.head_size_v <= 2 * kAttentionThreads) {
    kernels::reference_attention_kernel<QT, OT, Kv, 2><<<grid, kAttentionThreads, 0, stream>>>(p);
  } else if (l.head_size_v <= 4 * kAttentionThreads) {
    kernels::reference_attention_kernel<QT, OT, Kv, 4><<<grid, kAttentionThreads, 0, stream>>>(p);
  } else {
    FF_THROW(ErrorCode::kUnsupported, "value head size ", l.head_size_v,
             " exceeds the reference kernel's ", 4 * kAttentionThreads);
  }
  FF_CHECK_LAUNCH();
}

template <typename CacheT>
PagedKv<CacheT> paged(const PagedSource& s) {
  PagedKv<CacheT> kv;
  kv.k = static_cast<const CacheT*>(s.k);
  kv.v = static_cast<const CacheT*>(s.v);
  kv.stride_block = s.stride_block;
  kv.stride_token = s.stride_token;
  kv.stride_head = s.stride_head;
  kv.block_table = s.block_table;
  kv.block_table_stride = s.block_table_stride;
  kv.block_size = s.block_size;
  kv.k_scale = s.k_scale;
  kv.v_scale = s.v_scale;
  return kv;
}

template <typename T>
ContiguousKv<T> contiguous(const ContiguousSource& s) {
  ContiguousKv<T> kv;
  kv.k = static_cast<const T*>(s.key.data());
  kv.v = static_cast<const T*>(s.value.data());
  kv.k_stride_token = s.key.stride(0);
  kv.k_stride_head = s.key.stride(1);
  kv.v_stride_token = s.value.stride(0);
  kv.v_stride_head = s.value.stride(1);
  kv.start = s.start;
  kv.base_req = s.base_req;
  return kv;
}

[[noreturn]] void unsupported(const AttentionLaunch& l, DType kv, const char* source) {
  FF_THROW(ErrorCode::kUnsupported, "reference attention has no kernel for query ",
           name_of(l.query.dtype()), ", output ", name_of(l.output.dtype()), " and ", source, " ",
           name_of(kv));
}

}  // namespace

void launch_attention(const AttentionLaunch& l, const PagedSource& s, cudaStream_t stream) {
  const DType q = l.query.dtype(), o = l.output.dtype(), c = s.dtype;
  using bf16 = __nv_bfloat16;
  using fp8 = __nv_fp8_e4m3;
  if (q == DType::kBF16 && o == DType::kBF16 && c == DType::kBF16)
    return run<bf16, bf16>(l, paged<bf16>(s), stream);
  if (q == DType::kBF16 && o == DType::kBF16 && c == DType::kFp8E4M3)
    return run<bf16, bf16>(l, paged<fp8>(s), stream);
  if (q == DType::kF16 && o == DType::kF16 && c == DType::kF16)
    return run<__half, __half>(l, paged<__half>(s), stream);
  if (q == DType::kF16 && o == DType::kF16 && c == DType::kFp8E4M3)
    return run<__half, __half>(l, paged<fp8>(s), stream);
  // MLA decode: f32 absorbed query and f32 latent output over a bf16/f16 latent cache.
  if (q == DType::kF32 && o == DType::kF32 && c == DType::kBF16)
    return run<float, float>(l, paged<bf16>(s), stream);
  if (q == DType::kF32 && o == DType::kF32 && c == DType::kF16)
    return run<float, float>(l, paged<__half>(s), stream);
  unsupported(l, c, "paged cache");
}

void launch_attention(const AttentionLaunch& l, const ContiguousSource& s, cudaStream_t stream) {
  const DType q = l.query.dtype(), o = l.output.dtype(), k = s.key.dtype();
  using bf16 = __nv_bfloat16;
  if (q == DType::kBF16 && o == DType::kBF16 && k == DType::kBF16)
    return run<bf16, bf16>(l, contiguous<bf16>(s), stream);
  if (q == DType::kF16 && o == DType::kF16 && k == DType::kF16)
    return run<__half, __half>(l, contiguous<__half>(s), stream);
  // MLA prefill: f32 query and expanded f32 keys/values, output in the model dtype.
  if (q == DType::kF32 && o == DType::kBF16 && k == DType::kF32)
    return run<float, bf16>(l, contiguous<float>(s), stream);
  if (q == DType::kF32 && o == DType::kF16 && k == DType::kF32)
    return run<float, __half>(l, contiguous<float>(s), stream);
  unsupported(l, k, "keys");
}

PagedSource paged_source(const TensorView& k_cache, const TensorView& v_cache, DType dtype,
                         const AttentionMetadata& md, float k_scale, float v_scale) {
  PagedSource source;
  source.k = k_cache.data();
  source.v = v_cache.data();
  source.dtype = dtype;
  source.stride_block = k_cache.stride(0);
  source.stride_token = k_cache.stride(1);
  source.stride_head = k_cache.stride(2);
  source.block_table = md.block_table;
  source.block_table_stride = md.block_table_stride;
  source.block_size = static_cast<int>(k_cache.size(1));
  source.k_scale = is_fp8(dtype) ? k_scale : 1.0f;
  source.v_scale = is_fp8(dtype) ? v_scale : 1.0f;
  return source;
}

}  // namespace freezeframe::reference
