#include "freezeframe/engine/runtime/nccl_communicator.h"

#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "freezeframe/base/error.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/printable.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

constexpr const char* kIdVariable = "FREEZEFRAME_NCCL_ID";

void check_nccl(ncclResult_t r, const char* what) {
  FF_CHECK(
      r == ncclSuccess, E::kUnsupported, "NCCL ", what, ": ", ncclGetErrorString(r),
      r == ncclSystemError || r == ncclRemoteError ? " (see NCCL_DEBUG=WARN for details)" : "");
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU8: return ncclUint8;
    default: break;
  }
  FF_THROW(E::kUnsupported, "NCCL collectives of ", name_of(dtype), " are not supported");
}

}  // namespace

NcclGroupId NcclGroupId::create() {
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclGroupId::bytes));
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "could not create a group id");
  NcclGroupId out;
  std::memcpy(out.bytes.data(), &id, sizeof id);
  return out;
}

std::string NcclGroupId::hex() const {
  std::string text;
  text.reserve(2 * bytes.size());
  char digits[3];
  for (const std::uint8_t b : bytes) {
    std::snprintf(digits, sizeof digits, "%02x", b);
    text += digits;
  }
  return text;
}

NcclGroupId NcclGroupId::from_hex(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  FF_CHECK(text.size() == 256, E::kInvalidArgument, "an NCCL group id is 256 hex digits; got ",
           text.size(), " characters");
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    FF_THROW(E::kInvalidArgument, "an NCCL group id holds ", quote(std::string_view(&c, 1)),
             ", which is not a hex digit");
  };
  NcclGroupId id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) {
    id.bytes[i] = static_cast<std::uint8_t>(nibble(text[2 * i]) * 16 + nibble(text[2 * i + 1]));
  }
  return id;
}

NcclGroupId NcclGroupId::from_environment() {
  const char* value = std::getenv(kIdVariable);
  FF_CHECK(value != nullptr, E::kNotFound, kIdVariable, " is not set");
  try {
    return from_hex(value);
  } catch (const Error& e) {
    FF_THROW(e.code(), kIdVariable, ": ", e.message());
  }
}

void NcclGroupId::write_file(const std::string& path) const {
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << hex() << '\n';
    FF_CHECK(out.good(), E::kInvalidArgument, "cannot write the NCCL group id to '",
             printable(partial), "'");
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  FF_CHECK(!ec, E::kInvalidArgument, "cannot move the NCCL group id to '", printable(path),
           "': ", ec.message());
}

NcclGroupId NcclGroupId::read_file(const std::string& path) {
  // 256 hex digits and a line end; anything much longer is not an id file.
  const std::string text = read_input_file(path, "NCCL group id", 4096);
  try {
    return from_hex(text);
  } catch (const Error& e) {
    FF_THROW(e.code(), printable(path), ": ", e.message());
  }
}

struct NcclCommunicator::Handle {
  ncclComm_t comm = nullptr;
};

NcclCommunicator::NcclCommunicator(const NcclGroupId& id, int rank, int world_size)
    : handle_(std::make_unique<Handle>()), rank_(rank), world_size_(world_size) {
  FF_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, E::kInvalidArgument, "NCCL rank ",
           rank, " of ", world_size, ": the rank must lie in [0, world size)");
  // NVLink SHARP (multicast) allocates buffers of its own; the plan accounts for none.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  ncclUniqueId unique;
  std::memcpy(&unique, id.bytes.data(), sizeof unique);
  check_nccl(ncclCommInitRank(&handle_->comm, world_size, unique, rank),
             "could not form the group");
}

NcclCommunicator::~NcclCommunicator() {
  if (handle_ && handle_->comm != nullptr) ncclCommDestroy(handle_->comm);
}

void NcclCommunicator::all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                                  cudaStream_t stream) {
  check_nccl(ncclAllGather(send, recv, count, nccl_type(dtype), handle_->comm, stream),
             "all-gather");
}

void NcclCommunicator::reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                                      cudaStream_t stream) {
  check_nccl(ncclReduceScatter(send, recv, count, nccl_type(dtype), ncclSum, handle_->comm, stream),
             "reduce-scatter");
}

void NcclCommunicator::all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                                  cudaStream_t stream) {
  check_nccl(ncclAllReduce(send, recv, count, nccl_type(dtype), ncclSum, handle_->comm, stream),
             "all-reduce");
}

void NcclCommunicator::all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                                  cudaStream_t stream) {
  const ncclDataType_t type = nccl_type(dtype);
  const std::size_t block = count * size_of(dtype);
  check_nccl(ncclGroupStart(), "all-to-all");
  for (int peer = 0; peer < world_size_; ++peer) {
    check_nccl(ncclSend(static_cast<const std::uint8_t*>(send) + peer * block, count, type, peer,
                        handle_->comm, stream),
               "all-to-all send");
    check_nccl(ncclRecv(static_cast<std::uint8_t*>(recv) + peer * block, count, type, peer,
                        handle_->comm, stream),
               "all-to-all receive");
  }
  check_nccl(ncclGroupEnd(), "all-to-all");
}

}  // namespace freezeframe
