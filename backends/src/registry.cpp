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
    r->add(make_paged_backend());
    r->add(make_mla_backend());
    r->add_alias("paged_decode", "paged");  // its name before it ran prefill rows too
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

void BackendRegistry::add_alias(std::string alias, std::string_view name) {
  FF_CHECK(!contains(alias), ErrorCode::kInvalidArgument, "a backend named ", quote(alias),
           " is already registered");
  FF_CHECK(find(name) != nullptr && find(name)->name() == name, ErrorCode::kInvalidArgument,
           "cannot make ", quote(alias), " an alias of ", quote(name),
           ", which is no registered backend");
  aliases_.emplace_back(std::move(alias), std::string(name));
}

const AttentionBackend* BackendRegistry::find(std::string_view name) const {
  for (const auto& [alias, target] : aliases_) {
    if (alias == name) return find(target);
  }
  for (const auto& backend : backends_) {
    if (backend->name() == name) return backend.get();
  }
  return nullptr;
}

bool BackendRegistry::contains(std::string_view name) const { return find(name) != nullptr; }

const AttentionBackend& BackendRegistry::get(std::string_view name) const {
  if (const AttentionBackend* backend = find(name)) return *backend;
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

std::vector<std::pair<std::string, std::string>> BackendRegistry::aliases() const {
  auto out = aliases_;
  std::sort(out.begin(), out.end());
  return out;
}

const AttentionBackend& find_backend(std::string_view name) {
  return BackendRegistry::global().get(name);
}

}  // namespace freezeframe
