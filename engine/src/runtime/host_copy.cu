#include "runtime/host_copy.h"

#include "freezeframe/core/error.h"

namespace freezeframe {
namespace {

// One block: every block would read the length from host memory, and the H200 serves such
// reads of one address one after another (about 1 us each: 32 blocks took 40 us to copy
// 1 KiB). Each thread keeps kUnroll loads in flight, so a decode step's 70 KiB is one round
// trip of 4,480 loads.
constexpr int kThreads = 1024;
constexpr int kUnroll = 8;

__global__ void __launch_bounds__(kThreads)
    copy_from_host(const uint4* __restrict__ src, uint4* __restrict__ dst,
                   const unsigned long long* length, unsigned long long capacity) {
  // Host memory is read with ld.global.cv: fetched afresh, never from a cache.
  __shared__ unsigned long long bytes;
  if (threadIdx.x == 0) bytes = min(__ldcv(length), capacity);
  __syncthreads();
  const unsigned long long vectors = bytes / sizeof(uint4);
  for (unsigned long long base = 0; base < vectors; base += kThreads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const unsigned long long i = base + k * kThreads + threadIdx.x;
      if (i < vectors) v[k] = __ldcv(src + i);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const unsigned long long i = base + k * kThreads + threadIdx.x;
      if (i < vectors) dst[i] = v[k];
    }
  }
  const unsigned long long tail = bytes % sizeof(uint4);
  if (threadIdx.x < tail) {
    const unsigned long long at = vectors * sizeof(uint4) + threadIdx.x;
    reinterpret_cast<unsigned char*>(dst)[at] =
        __ldcv(reinterpret_cast<const unsigned char*>(src) + at);
  }
}

const void* device_address(const void* pinned) {
  void* device = nullptr;
  FF_CUDA_CHECK(cudaHostGetDevicePointer(&device, const_cast<void*>(pinned), 0));
  return device;
}

}  // namespace

HostCopy::HostCopy(const PinnedBuffer& src, void* dst)
    : length_(sizeof(std::uint64_t)), dst_(dst), capacity_(src.bytes()) {
  FF_CHECK(reinterpret_cast<std::uintptr_t>(src.data()) % sizeof(uint4) == 0 &&
               reinterpret_cast<std::uintptr_t>(dst) % sizeof(uint4) == 0,
           ErrorCode::kInvalidArgument, "HostCopy needs 16-byte aligned source and destination");
  src_ = device_address(src.data());
  length_src_ = device_address(length_.data());
}

void HostCopy::set_length(std::size_t bytes) {
  FF_CHECK(bytes <= capacity_, ErrorCode::kInvalidArgument, "HostCopy of ", bytes,
           " bytes from a source of ", capacity_);
  *static_cast<std::uint64_t*>(length_.data()) = bytes;
}

void HostCopy::enqueue(cudaStream_t stream) const {
  copy_from_host<<<1, kThreads, 0, stream>>>(
      static_cast<const uint4*>(src_), static_cast<uint4*>(dst_),
      static_cast<const unsigned long long*>(length_src_), capacity_);
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe
