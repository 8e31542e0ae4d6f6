// freezeframe demo: one forward of the reference backend on a small mixed batch (three decodes
// and a chunked prefill, GQA 8:2, head size 128, bf16, block size 16). On a GPU it runs the
// kernels and reports their error against the double-precision host reference; without one
// it runs the host reference alone.

#include <cmath>
#include <cstdio>
#include <random>

#include "arguments.h"
#include "commands.h"
#include "freezeframe/backends/host_reference.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/backends/synthetic_batch.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/device.h"
#include "freezeframe/core/host_tensor.h"

namespace freezeframe::tools {
namespace {

void fill_random(HostTensor& t, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, normal(rng));
}

struct DeviceCopy {
  DeviceBuffer buffer;
  TensorView view;
};
DeviceCopy to_device(const HostTensor& t, cudaStream_t stream) {
  DeviceCopy copy{DeviceBuffer(t.bytes()), {}};
  FF_CUDA_CHECK(
      cudaMemcpyAsync(copy.buffer.data(), t.data(), t.bytes(), cudaMemcpyHostToDevice, stream));
  copy.view = TensorView(copy.buffer.data(), t.dtype(), t.shape(), Device::cuda());
  return copy;
}

}  // namespace

const std::string_view kDemoUsage =
    "usage: freezeframe demo\n"
    "  one forward of the reference backend on a small mixed batch (three decodes and a\n"
    "  chunked prefill), checked against the double-precision host reference; without a GPU,\n"
    "  the host reference alone\n";

int run_demo(Args args) {
  for (const std::string_view a : args) {
    if (is_help(a)) {
      std::printf("%.*s", int(kDemoUsage.size()), kDemoUsage.data());
      return 0;
    }
    refuse(a);
  }
  const AttentionBackend& backend = find_backend("reference");
  AttentionParams params;
  params.num_heads = 8;
  params.num_kv_heads = 2;
  params.head_size = 128;
  params.scale = 1.0f / std::sqrt(128.0f);
  params.kv_cache_dtype = DType::kBF16;

  SyntheticBatchSpec spec;
  spec.decode_seq_lens = {37, 100, 260};
  spec.prefills = {{.seq_len = 36, .query_len = 21}};
  const SyntheticBatch batch = make_synthetic_batch(spec);
  const CommonAttentionMetadata common = batch.metadata();
  const int rows = batch.num_tokens, h = params.num_heads, kvh = params.num_kv_heads,
            d = params.head_size;

  std::mt19937 rng(7);
  HostTensor query(DType::kBF16, {rows, h, d}), key(DType::kBF16, {rows, kvh, d}),
      value(DType::kBF16, {rows, kvh, d});
  fill_random(query, rng);
  fill_random(key, rng);
  fill_random(value, rng);
  // The context already in the cache: random keys and values written at their slots.
  const auto context_rows = static_cast<std::int64_t>(batch.context_slot_mapping.size());
  HostTensor ctx_key(DType::kBF16, {context_rows, kvh, d}),
      ctx_value(DType::kBF16, {context_rows, kvh, d});
  fill_random(ctx_key, rng);
  fill_random(ctx_value, rng);
  const auto shape =
      backend.kv_cache_shape(batch.num_blocks, batch.block_size, kvh, d, DType::kBF16);
  HostTensor cache(DType::kBF16, shape);
  cache.fill_bytes(0);
  host_reference::reshape_and_cache(ctx_key.view(), ctx_value.view(), cache.view(),
                                    batch.context_slot_mapping, 1.0f, 1.0f);
  HostTensor cache_before = cache;  // the GPU writes this step's rows itself
  host_reference::reshape_and_cache(key.view(), value.view(), cache.view(), batch.slot_mapping,
                                    1.0f, 1.0f);
  const auto expected = host_reference::attention(params, query.view(), key.view(), value.view(),
                                                  cache.view(), common, 1.0f, 1.0f);

  std::printf("batch: %d requests (%d decodes), %d query rows, %d cache blocks of %d\n",
              batch.num_reqs(), batch.num_decodes, rows, batch.num_blocks, batch.block_size);
  if (!has_gpu()) {
    double norm = 0;
    for (double x : expected.out) norm += x * x;
    std::printf("no GPU: %s\nran the host reference only\n", gpu_status().c_str());
    std::printf("host reference: output L2 norm %.4f, LSE of row 0 head 0 %.4f\n", std::sqrt(norm),
                expected.lse_ln[0]);
    return 0;
  }

  require_usable_gpu();
  std::printf("GPU: %s\n", gpu_status().c_str());
  Stream stream = Stream::create();
  auto impl = backend.make_impl(params);
  auto builder = backend.make_builder(batch.limits(), nullptr);
  DeviceCopy q = to_device(query, stream.get()), k = to_device(key, stream.get()),
             v = to_device(value, stream.get()), kv = to_device(cache_before, stream.get());
  HostTensor out_host(DType::kBF16, {rows, h, d});
  out_host.fill_bytes(0xFF);  // poison: NaN in bf16
  DeviceCopy out = to_device(out_host, stream.get());
  HostTensor lse_host(DType::kF32, {rows, h});
  DeviceCopy lse = to_device(lse_host, stream.get());

  const AttentionMetadata& md = builder->build(common, stream.get());
  AttentionLayer layer;
  layer.name = "demo";
  impl->forward(layer, q.view, k.view, v.view, kv.view, md, out.view, stream.get(), lse.view);
  FF_CUDA_CHECK(cudaMemcpyAsync(out_host.data(), out.buffer.data(), out_host.bytes(),
                                cudaMemcpyDeviceToHost, stream.get()));
  stream.synchronize();

  double err = 0, ref = 0;
  for (std::int64_t i = 0; i < out_host.numel(); ++i) {
    const double diff = out_host.get(i) - expected.out[i];
    err += diff * diff;
    ref += expected.out[i] * expected.out[i];
  }
  const double rel = std::sqrt(err / ref);
  std::printf(
      "reference backend on the GPU vs double-precision host reference: relative L2 error %.3e "
      "(%s)\n",
      rel, rel <= 1e-2 ? "ok" : "TOO LARGE");
  return rel <= 1e-2 ? 0 : 1;
}

}  // namespace freezeframe::tools
