#pragma once
// NVTX ranges in the one `freezeframe` domain, so Nsight shows every plan, capture, step,
// replay and attention forward by name. Ranges cost nothing when no tool is attached.

#include <nvtx3/nvToolsExt.h>

#include <string>

namespace freezeframe {

/// The `freezeframe` NVTX domain (created once).
nvtxDomainHandle_t nvtx_domain();

/// Pushes a named range on construction and pops it on destruction.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  explicit NvtxRange(const std::string& name) : NvtxRange(name.c_str()) {}
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
  ~NvtxRange();
};

}  // namespace freezeframe
