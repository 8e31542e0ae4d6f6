#include "runtime/host_copy.h"

#include <cstddef>

#include "freezeframe/core/cuda_check.h"

namespace freezeframe {
namespace {

// One block: every block would read the length from host memory, and the H200 serves such
// reads of one address one after another (about 1 us each: 32 blocks took 40 us to copy
// 1 KiB). Each thread keeps kUnroll loads in flight, so a decode step's 70 KiB is one round
// trip of 4,480 loads.
constexpr int kThreads = 1024;
constexpr int kUnroll = 8;

struct CopyParams {
  const uint4* src;
  uint4* dst;
  const unsigned long long* length;  // pinned
  unsigned long long capacity;
  // The table (stride 0: none): rows × width int32 back to back at src_table, the two counts
  // at shape (pinned), spread to dst_table at `stride` per row.
  const int* shape;
  const int* src_table;
  int* dst_table;
  int stride;
  int max_rows;
};

__global__ void __launch_bounds__(kThreads) copy_from_host(const __grid_constant__ CopyParams p) {
  // Host memory is read with ld.global.cv: fetched afresh, never from a cache.
  __shared__ unsigned long long bytes;
  __shared__ int rows, width;
  if (threadIdx.x == 0) {
    bytes = min(__ldcv(p.length), p.capacity);
    rows = p.stride > 0 ? min(__ldcv(p.shape), p.max_rows) : 0;
    width = p.stride > 0 ? min(__ldcv(p.shape + 1), p.stride) : 0;
  }
  __syncthreads();
  const unsigned long long vectors = bytes / sizeof(uint4);
  for (unsigned long long base = 0; base < vectors; base += kThreads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const unsigned long long i = base + k * kThreads + threadIdx.x;
      if (i < vectors) v[k] = __ldcv(p.src + i);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const unsigned long long i = base + k * kThreads + threadIdx.x;
      if (i < vectors) p.dst[i] = v[k];
    }
  }
  const unsigned long long tail = bytes % sizeof(uint4);
  if (threadIdx.x < tail) {
    const unsigned long long at = vectors * sizeof(uint4) + threadIdx.x;
    reinterpret_cast<unsigned char*>(p.dst)[at] =
        __ldcv(reinterpret_cast<const unsigned char*>(p.src) + at);
  }
  if (rows == 0 || width == 0) return;
  // The table, 16 bytes at a time when rows allow it (widths and stride multiples of 4).
  const bool vector = width % 4 == 0 && p.stride % 4 == 0;
  const int unit = vector ? 4 : 1;
  const int row_units = width / unit, stride_units = p.stride / unit;
  const long long units = static_cast<long long>(rows) * row_units;
  for (long long base = 0; base < units; base += kThreads * kUnroll) {
    if (vector) {
      uint4 v[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const long long i = base + k * kThreads + threadIdx.x;
        if (i < units) v[k] = __ldcv(reinterpret_cast<const uint4*>(p.src_table) + i);
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const long long i = base + k * kThreads + threadIdx.x;
        if (i < units) {
          const long long row = i / row_units;
          reinterpret_cast<uint4*>(p.dst_table)[row * stride_units + (i - row * row_units)] = v[k];
        }
      }
    } else {
      int v[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const long long i = base + k * kThreads + threadIdx.x;
        if (i < units) v[k] = __ldcv(p.src_table + i);
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const long long i = base + k * kThreads + threadIdx.x;
        if (i < units) {
          const long long row = i / row_units;
          p.dst_table[row * stride_units + (i - row * row_units)] = v[k];
        }
      }
    }
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

void HostCopy::spread_table(std::size_t shape_offset, std::size_t table_offset, int stride,
                            int max_rows) {
  FF_CHECK(stride > 0 && max_rows > 0 && shape_offset % sizeof(int) == 0 &&
               table_offset % sizeof(uint4) == 0 && shape_offset + 2 * sizeof(int) <= capacity_ &&
               table_offset + std::size_t(max_rows) * stride * sizeof(int) <= capacity_,
           ErrorCode::kInvalidArgument, "HostCopy: a table of ", max_rows, " rows of ", stride,
           " at ", table_offset, " (shape at ", shape_offset, ") does not fit a source of ",
           capacity_, " bytes");
  shape_offset_ = shape_offset;
  table_offset_ = table_offset;
  table_stride_ = stride;
  table_rows_ = max_rows;
}

void HostCopy::enqueue(cudaStream_t stream) const {
  CopyParams p{};
  p.src = static_cast<const uint4*>(src_);
  p.dst = static_cast<uint4*>(dst_);
  p.length = static_cast<const unsigned long long*>(length_src_);
  p.capacity = capacity_;
  if (table_stride_ > 0) {
    const auto* src = static_cast<const std::byte*>(src_);
    auto* dst = static_cast<std::byte*>(dst_);
    p.shape = reinterpret_cast<const int*>(src + shape_offset_);
    p.src_table = reinterpret_cast<const int*>(src + table_offset_);
    p.dst_table = reinterpret_cast<int*>(dst + table_offset_);
    p.stride = table_stride_;
    p.max_rows = table_rows_;
  }
  copy_from_host<<<1, kThreads, 0, stream>>>(p);
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe
