// An NVTX injection library for tests: loaded by the NVTX runtime when NVTX_INJECTION64_PATH
// names it, it records every range pushed and popped in any domain, so tests can check the
// ranges the engine emits without a profiler. Tests read the record through the two C
// functions at the end (dlsym on the already-loaded library).

#include <nvtx3/nvToolsExt.h>

#include <mutex>
#include <string>
#include <vector>

namespace {

std::mutex g_mutex;
std::vector<std::string> g_events;  // "push <domain> <message>" / "pop <domain>"
std::vector<std::string*> g_domains;

std::string domain_name(nvtxDomainHandle_t domain) {
  return domain == nullptr ? std::string("<default>") : *reinterpret_cast<std::string*>(domain);
}

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_domains.push_back(new std::string(name));
  return reinterpret_cast<nvtxDomainHandle_t>(g_domains.back());
}

int NVTX_API domain_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string message;
  if (attributes != nullptr && attributes->messageType == NVTX_MESSAGE_TYPE_ASCII) {
    message = attributes->message.ascii;
  }
  g_events.push_back("push " + domain_name(domain) + " " + message);
  return 0;
}

int NVTX_API domain_pop(nvtxDomainHandle_t domain) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events.push_back("pop " + domain_name(domain));
  return 0;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || table == nullptr) {
    return 0;
  }
  if (size <= NVTX_CBID_CORE2_DomainCreateA) return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&domain_create);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&domain_push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&domain_pop);
  return 1;
}

__attribute__((visibility("default"))) std::size_t freezeframe_nvtx_event_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_events.size();
}

__attribute__((visibility("default"))) const char* freezeframe_nvtx_event(std::size_t i) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return i < g_events.size() ? g_events[i].c_str() : nullptr;
}

}  // extern "C"
