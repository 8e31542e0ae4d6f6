// The collective kernels of a LocalGroup: each rank's kernel reads and writes the other ranks'
// buffers directly (one GPU), its blocks meeting the same blocks of the other ranks through
// epoch flags in device memory before they touch a buffer (so every rank's inputs are written
// and its outputs free) and after (so no rank overwrites a buffer another still reads).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>

#include "freezeframe/core/convert.cuh"
#include "freezeframe/core/error.h"
#include "runtime/local_collective.h"

namespace freezeframe::local_group {
namespace {

using kernels::from_float;
using kernels::to_float;

constexpr int kThreads = 256;

__device__ std::uint32_t load_acquire(const std::uint32_t* flag) {
  std::uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  return v;
}

__device__ void store_release(std::uint32_t* flag, std::uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(v) : "memory");
}

__device__ std::uint64_t nanoseconds() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// A rank that waits this long for the others has been left alone (a rank that called another
/// collective, or kernels run one at a time, as under compute-sanitizer): it stops the context
/// with a message rather than spin for ever.
constexpr std::uint64_t kGiveUpNs = 20'000'000'000;

/// This block publishes `epoch` in `flags` and waits until the same block of every rank has.
__device__ void meet(std::uint32_t* flags, const Collective& c, std::uint32_t epoch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    store_release(flags + c.rank * kMaxBlocks + blockIdx.x, epoch);
    const std::uint64_t start = nanoseconds();
    for (int r = 0; r < c.world; ++r) {
      while (load_acquire(flags + r * kMaxBlocks + blockIdx.x) < epoch) {
        if (nanoseconds() - start > kGiveUpNs) {
          printf("freezeframe local group: rank %d, block %d waited 20 s for rank %d at epoch %u\n",
                 c.rank, blockIdx.x, r, epoch);
          __trap();
        }
      }
    }
  }
  __syncthreads();
}

/// Copies `bytes` from `src` to `dst` over the grid (16 bytes at a time when both allow it).
__device__ void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (dst == src) return;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t first = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto aligned = [](const void* a) { return reinterpret_cast<std::uintptr_t>(a) % 16 == 0; };
  if (aligned(dst) && aligned(src) && bytes % 16 == 0) {
    for (std::size_t i = first; i < bytes / 16; i += stride) {
      static_cast<uint4*>(dst)[i] = static_cast<const uint4*>(src)[i];
    }
  } else {
    for (std::size_t i = first; i < bytes; i += stride) {
      static_cast<std::uint8_t*>(dst)[i] = static_cast<const std::uint8_t*>(src)[i];
    }
  }
}

/// Σ over ranks of element `i` of their sends, in f32.
template <typename T>
__device__ float sum_of(const Collective& c, std::size_t i) {
  float sum = 0.0f;
  for (int r = 0; r < c.world; ++r) sum += to_float(static_cast<const T*>(c.send[r])[i]);
  return sum;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    collective_kernel(const __grid_constant__ Collective c) {
  __shared__ std::uint32_t epoch;
  if (c.meet) {
    if (threadIdx.x == 0) epoch = c.epochs[c.rank * kMaxBlocks + blockIdx.x] + 1;
    __syncthreads();
    meet(c.arrived, c, epoch);  // every rank's inputs are written and its outputs free
  }

  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t first = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t bytes = c.block_bytes;
  auto* mine = static_cast<std::uint8_t*>(c.recv[c.rank]);
  switch (c.kind) {
    case Kind::kAllGather:  // block r of my receive is rank r's send
      for (int r = 0; r < c.world; ++r) copy_bytes(mine + r * bytes, c.send[r], bytes);
      break;
    case Kind::kAllToAll:  // block r of my receive is block `rank` of rank r's send
      for (int r = 0; r < c.world; ++r) {
        copy_bytes(mine + r * bytes, static_cast<const std::uint8_t*>(c.send[r]) + c.rank * bytes,
                   bytes);
      }
      break;
    case Kind::kReduceScatter:  // my receive sums block `rank` of every send
      for (std::size_t i = first; i < c.count; i += stride) {
        static_cast<T*>(c.recv[c.rank])[i] = from_float<T>(sum_of<T>(c, c.rank * c.count + i));
      }
      break;
    case Kind::kAllReduce: {
      // Each rank sums its own slice of the elements and writes it to every rank's receive:
      // only it reads or writes that slice of any buffer, so a receive may be its send.
      const std::size_t slice = (c.count + c.world - 1) / c.world;
      const std::size_t begin = slice * c.rank < c.count ? slice * c.rank : c.count;
      const std::size_t end = begin + slice < c.count ? begin + slice : c.count;
      for (std::size_t i = begin + first; i < end; i += stride) {
        const T value = from_float<T>(sum_of<T>(c, i));
        for (int r = 0; r < c.world; ++r) static_cast<T*>(c.recv[r])[i] = value;
      }
      break;
    }
  }
  if (c.meet) {
    meet(c.left, c, epoch);  // no rank overwrites a buffer before every rank is done with it
    if (threadIdx.x == 0) c.epochs[c.rank * kMaxBlocks + blockIdx.x] = epoch;
  }
}

struct Sum {
  const void* sends[kMaxRanks] = {};
  int world = 1;
  std::size_t offset = 0, count = 0;
  void* out = nullptr;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) sum_kernel(const __grid_constant__ Sum s) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < s.count;
       i += stride) {
    float sum = 0.0f;
    for (int r = 0; r < s.world; ++r)
      sum += to_float(static_cast<const T*>(s.sends[r])[s.offset + i]);
    static_cast<T*>(s.out)[i] = from_float<T>(sum);
  }
}

}  // namespace

void load_kernels() {
  cudaFuncAttributes attributes{};
  FF_CUDA_CHECK(cudaFuncGetAttributes(&attributes, collective_kernel<__nv_bfloat16>));
  FF_CUDA_CHECK(cudaFuncGetAttributes(&attributes, collective_kernel<__half>));
  FF_CUDA_CHECK(cudaFuncGetAttributes(&attributes, collective_kernel<float>));
  FF_CUDA_CHECK(cudaFuncGetAttributes(&attributes, sum_kernel<__nv_bfloat16>));
  FF_CUDA_CHECK(cudaFuncGetAttributes(&attributes, sum_kernel<__half>));
  FF_CUDA_CHECK(cudaFuncGetAttributes(&attributes, sum_kernel<float>));
}

void launch_sum(const void* const* sends, int world, std::size_t offset, std::size_t count,
                DType dtype, void* out, cudaStream_t stream) {
  if (count == 0) return;
  Sum s;
  std::copy(sends, sends + world, s.sends);
  s.world = world;
  s.offset = offset;
  s.count = count;
  s.out = out;
  const int blocks =
      static_cast<int>(std::min<std::size_t>(1024, (count + kThreads - 1) / kThreads));
  switch (dtype) {
    case DType::kBF16: sum_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(s); break;
    case DType::kF16: sum_kernel<__half><<<blocks, kThreads, 0, stream>>>(s); break;
    case DType::kF32: sum_kernel<float><<<blocks, kThreads, 0, stream>>>(s); break;
    default:
      FF_THROW(ErrorCode::kUnsupported, "local group: sums of ", name_of(dtype),
               " (f32, bf16 or f16 only)");
  }
  FF_CHECK_LAUNCH();
}

void launch(const Collective& collective, cudaStream_t stream) {
  if (collective.count == 0) return;
  Collective c = collective;
  c.block_bytes = c.count * size_of(c.dtype);
  const bool reduces = c.kind == Kind::kReduceScatter || c.kind == Kind::kAllReduce;
  // The same grid on every rank (the count decides it), so block b of each meets block b of
  // the others: a block a 1024 elements or 16-byte pieces, at most kMaxBlocks.
  const std::size_t work = reduces ? c.count : (c.count * size_of(c.dtype) + 15) / 16;
  const std::size_t per_block = kThreads * 4;
  const int blocks =
      static_cast<int>(std::min<std::size_t>(kMaxBlocks, (work + per_block - 1) / per_block));
  switch (c.dtype) {
    case DType::kBF16: collective_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(c); break;
    case DType::kF16: collective_kernel<__half><<<blocks, kThreads, 0, stream>>>(c); break;
    default:
      FF_CHECK(!reduces || c.dtype == DType::kF32, ErrorCode::kUnsupported, "local group: sums of ",
               name_of(c.dtype), " (f32, bf16 or f16 only)");
      collective_kernel<float><<<blocks, kThreads, 0, stream>>>(c);  // copies move any dtype
      break;
  }
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe::local_group
