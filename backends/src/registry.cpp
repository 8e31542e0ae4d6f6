#include "freezeframe/backends/registry.h"

#include <algorithm>

#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "reference/reference_backends.h"

namespace freezeframe {

BackendRegistry& BackendRegistry::global() {
  // Built-ins are added here, explicitly, rather than by static registration objects, which a
  // static library's linker would drop.
  static BackendRegistry* registry = [] {
    auto* r = new BackendRegistry();
    r->add(make_reference_backend());
    r->add(make_reference_mla_backend());
    r->add(make_paged_decode_backend());
    return r;
  }();
  return *registry;
}

void BackendRegistry::add(std::unique_ptr<AttentionBackend> backend) {
  FF_CHECK(backend != nullptr, ErrorCode::kInvalidArgument, "cannot register a null backend");
  FF_CHECK(!contains(backend->name()), ErrorCode::kInvalidArgument, "a backend named ",
           quote(backend->name()), " is already registered");
  backends_.push_back(std::move(backend));
}

bool BackendRegistry::contains(std::string_view name) const {
  return std::any_of(backends_.begin(), backends_.end(),
                     [&](const auto& b) { return b->name() == name; });
}

const AttentionBackend& BackendRegistry::get(std::string_view name) const {
  for (const auto& backend : backends_) {
    if (backend->name() == name) return *backend;
  }
  std::string known;
  for (const std::string& n : names()) known += (known.empty() ? "" : ", ") + n;
  FF_THROW(ErrorCode::kNotFound, "unknown attention backend ", quote(name),
           "; known backends: ", known);
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& backend : backends_) out.emplace_back(backend->name());
  std::sort(out.begin(), out.end());
  return out;
}

const AttentionBackend& find_backend(std::string_view name) {
  return BackendRegistry::global().get(name);
}

}  // namespace freezeframe
