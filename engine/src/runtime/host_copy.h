#pragma once
// HostCopy: a host-to-device copy done by a kernel that reads pinned host memory directly
// (zero-copy) and takes its length from pinned memory at run time. A graph can then hold the
// step's input upload while the length changes from replay to replay (a captured memcpy's
// length is fixed at capture), and a replay needs no copy call of its own. The same kernel can
// spread a table whose rows lie back to back in the source to a fixed row stride on the
// device, its row count and width read from the source at run time too. The source must stay
// unchanged until the kernel has run.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "freezeframe/core/cuda_handles.h"

namespace freezeframe {

class HostCopy {
 public:
  HostCopy() = default;
  /// Copies from `src` (pinned, 16-byte aligned) to `dst` (device, 16-byte aligned), up to
  /// src.bytes().
  HostCopy(const PinnedBuffer& src, void* dst);

  /// The bytes the next run of the kernel copies (host side; the kernel reads it when it runs).
  void set_length(std::size_t bytes);
  /// Each run then also copies an int32 table: its rows and width are the two int32 at
  /// src + shape_offset, its rows lie back to back from src + table_offset, and they go to
  /// dst + table_offset at `stride` int32 per row (up to `max_rows` rows of `stride`).
  void spread_table(std::size_t shape_offset, std::size_t table_offset, int stride, int max_rows);
  /// Enqueues the kernel; its launch depends on the addresses only.
  void enqueue(cudaStream_t stream) const;

 private:
  PinnedBuffer length_;        // one std::uint64_t
  const void* src_ = nullptr;  // device addresses of the pinned memory
  const void* length_src_ = nullptr;
  void* dst_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t shape_offset_ = 0, table_offset_ = 0;
  int table_stride_ = 0;  // 0: no table
  int table_rows_ = 0;
};

}  // namespace freezeframe
