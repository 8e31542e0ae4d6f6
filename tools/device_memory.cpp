#include "device_memory.h"

#include <cuda_runtime_api.h>

#include "freezeframe/core/device.h"
#include "freezeframe/core/error.h"
#include "freezeframe/engine/byte_size.h"

namespace freezeframe::tools {

std::int64_t parse_size_arg(std::string_view flag, std::string_view text) {
  const auto bytes = parse_byte_size(text);
  FF_CHECK(bytes && *bytes > 0, ErrorCode::kInvalidArgument, flag, ": '", text,
           "' is not a size; write e.g. 141GiB, 80GB, 512MiB or a number of bytes");
  return *bytes;
}

DeviceMemory device_memory(std::optional<std::int64_t> given) {
  if (given) return {*given, "given"};
  std::size_t free = 0, total = 0;
  if (has_gpu() && cudaMemGetInfo(&free, &total) == cudaSuccess) {
    return {static_cast<std::int64_t>(free), "free memory of " + gpu_status()};
  }
  return {std::int64_t(141) << 30, "assumed: no GPU here, pass --device-memory"};
}

}  // namespace freezeframe::tools
