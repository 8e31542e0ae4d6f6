#include "freezeframe/core/nvtx.h"

namespace freezeframe {

nvtxDomainHandle_t nvtx_domain() {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("freezeframe");
  return domain;
}

NvtxRange::NvtxRange(const char* name) {
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = name;
  nvtxDomainRangePushEx(nvtx_domain(), &attributes);
}

NvtxRange::~NvtxRange() { nvtxDomainRangePop(nvtx_domain()); }

}  // namespace freezeframe
