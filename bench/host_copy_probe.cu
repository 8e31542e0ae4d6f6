// host_copy_probe: what a host-to-device copy of a step's inputs costs the device, by size
// (1 KiB, 8 KiB, 70 KiB: a 256-request decode step's image, 512 KiB): a DMA copy
// (cudaMemcpyAsync from pinned memory) against kernels that read the pinned memory directly
// and take the length from pinned memory, as HostCopy does, in one block or in several (every
// block then reads the length). Median of 300 runs between CUDA events. Then the host cost of
// one cudaMemcpyAsync, one kernel launch and one event record with the stream idle.
//
// usage: host_copy_probe

#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
template <int kMode>
__global__ void copyk(const uint4* __restrict__ src, uint4* __restrict__ dst,
                      const unsigned long long* length) {
  __shared__ unsigned long long bytes;
  if (threadIdx.x == 0) bytes = __ldcv(length);
  __syncthreads();
  const unsigned long long n = bytes / 16;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (kMode == 0)
      dst[i] = __ldcv(src + i);
    else if (kMode == 1)
      dst[i] = src[i];
    else
      dst[i] = __ldg(src + i);
  }
}
template <int kThreads, int kUnroll>
__global__ void one_block(const uint4* __restrict__ src, uint4* __restrict__ dst,
                          const unsigned long long* length) {
  __shared__ unsigned long long bytes;
  if (threadIdx.x == 0) bytes = __ldcv(length);
  __syncthreads();
  const unsigned long long n = bytes / 16;
  for (unsigned long long base = 0; base < n; base += kThreads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      auto i = base + k * kThreads + threadIdx.x;
      if (i < n) v[k] = __ldcv(src + i);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      auto i = base + k * kThreads + threadIdx.x;
      if (i < n) dst[i] = v[k];
    }
  }
}
int main() {
  const size_t cap = 1 << 20;
  char* h;
  cudaMallocHost(&h, cap);
  memset(h, 1, cap);
  unsigned long long* len;
  cudaMallocHost(&len, 8);
  char* d;
  cudaMalloc(&d, cap);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  auto time = [&](auto&& f) {
    std::vector<float> v;
    for (int i = 0; i < 300; ++i) {
      cudaEventRecord(a, s);
      f();
      cudaEventRecord(b, s);
      cudaEventSynchronize(b);
      float ms;
      cudaEventElapsedTime(&ms, a, b);
      v.push_back(ms * 1000);
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  printf("%-28s %8s %8s %8s %8s\n", "variant (us, median)", "1KiB", "8KiB", "70KiB", "512KiB");
  auto row = [&](const char* name, auto&& launch) {
    printf("%-28s", name);
    for (size_t bytes : {size_t(1024), size_t(8192), size_t(71680), size_t(524288)}) {
      *len = bytes;
      printf(" %8.2f", time([&] { launch(bytes); }));
    }
    printf("\n");
  };
  row("one block 1024 x8",
      [&](size_t) { one_block<1024, 8><<<1, 1024, 0, s>>>((const uint4*)h, (uint4*)d, len); });
  row("one block 512 x8",
      [&](size_t) { one_block<512, 8><<<1, 512, 0, s>>>((const uint4*)h, (uint4*)d, len); });
  row("one block 1024 x2",
      [&](size_t) { one_block<1024, 2><<<1, 1024, 0, s>>>((const uint4*)h, (uint4*)d, len); });
  row("one warp, 16B each",
      [&](size_t) { copyk<0><<<1, 32, 0, s>>>((const uint4*)h, (uint4*)d, len); });
  row("dma memcpyAsync", [&](size_t n) { cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s); });
  for (int blocks : {2, 32}) {
    char name[64];
    snprintf(name, 64, "ldcv %d x256", blocks);
    row(name, [&](size_t) { copyk<0><<<blocks, 256, 0, s>>>((const uint4*)h, (uint4*)d, len); });
    snprintf(name, 64, "plain %d x256", blocks);
    row(name, [&](size_t) { copyk<1><<<blocks, 256, 0, s>>>((const uint4*)h, (uint4*)d, len); });
    snprintf(name, 64, "ldg %d x256", blocks);
    row(name, [&](size_t) { copyk<2><<<blocks, 256, 0, s>>>((const uint4*)h, (uint4*)d, len); });
  }
  // host cost of one memcpyAsync vs one kernel launch, GPU idle
  auto host = [&](auto&& f) {
    std::vector<double> v;
    for (int i = 0; i < 300; ++i) {
      cudaStreamSynchronize(s);
      auto t0 = std::chrono::steady_clock::now();
      f();
      v.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  *len = 71680;
  printf("host us: memcpyAsync %.2f, kernel launch %.2f, event record %.2f\n",
         host([&] { cudaMemcpyAsync(d, h, 71680, cudaMemcpyHostToDevice, s); }),
         host([&] { copyk<0><<<32, 256, 0, s>>>((const uint4*)h, (uint4*)d, len); }),
         host([&] { cudaEventRecord(a, s); }));
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
