#pragma once
// NcclCommunicator: the Communicator of one GPU rank over NCCL, one process or thread per GPU.
// The ranks of a group share a unique id that one of them creates: written to a file the others
// read, or passed in the environment (FREEZEFRAME_NCCL_ID, 256 hex digits). NVLink multicast
// (NVLS) is turned off unless the environment already says otherwise: its buffers are not
// what a static memory plan accounts for.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "freezeframe/engine/runtime/communicator.h"

namespace freezeframe {

/// The 128 bytes that name an NCCL group (ncclUniqueId), as a value.
struct NcclGroupId {
  std::array<std::uint8_t, 128> bytes{};

  /// A new id (ncclGetUniqueId): call on one rank, then hand it to the others.
  [[nodiscard]] static NcclGroupId create();
  /// 256 lowercase hex digits, and back (kInvalidArgument naming what is wrong).
  [[nodiscard]] std::string hex() const;
  [[nodiscard]] static NcclGroupId from_hex(std::string_view text);
  /// From the environment variable FREEZEFRAME_NCCL_ID; kNotFound when it is unset.
  [[nodiscard]] static NcclGroupId from_environment();
  /// Writes the id to `path` (as hex; atomically, so a reader never sees half of it) and reads
  /// it back from there.
  void write_file(const std::string& path) const;
  [[nodiscard]] static NcclGroupId read_file(const std::string& path);
};

class NcclCommunicator final : public Communicator {
 public:
  /// Joins group `id` as rank `rank` of `world_size` on the current CUDA device (every rank
  /// must call this; it returns when all have). kInvalidArgument for a rank outside
  /// [0, world_size); kUnsupported naming NCCL's error when the group cannot be formed.
  NcclCommunicator(const NcclGroupId& id, int rank, int world_size);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] int world_size() const override { return world_size_; }

  void all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                  cudaStream_t stream) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                      cudaStream_t stream) override;
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                  cudaStream_t stream) override;
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                  cudaStream_t stream) override;

 private:
  struct Handle;
  std::unique_ptr<Handle> handle_;
  int rank_ = 0;
  int world_size_ = 1;
};

}  // namespace freezeframe
