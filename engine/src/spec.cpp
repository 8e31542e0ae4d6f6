// Reading a spec: the YAML text, then the sections (SpecParser: structure and types first,
// then defaults, then the checks that need several fields or the backend registry). Every
// problem is collected; the spec is returned only when there are none.

#include "freezeframe/engine/spec.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <sstream>

#include "freezeframe/core/error.h"
#include "input_file.h"
#include "printable.h"
#include "spec_parser.h"

namespace freezeframe {

std::int64_t MemoryBudget::resolve(std::int64_t device_bytes) const {
  if (bytes > 0) return bytes;
  return static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(device_bytes)));
}

std::string EngineSpec::where(std::string_view path) const {
  std::string key(path);
  while (true) {
    if (auto it = locations.find(key); it != locations.end()) {
      const SpecLocation& at = it->second;
      if (at.line > 0) {
        return at.file + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": " +
               std::string(path);
      }
      // A value set outside the file (a command-line override) names where it came from.
      if (!at.file.empty() && at.file != source) return at.file + ": " + std::string(path);
    }
    const std::size_t dot = key.rfind('.');
    if (dot == std::string::npos) break;
    key.resize(dot);
  }
  return source + ": " + std::string(path);
}

namespace spec_detail {

void SpecParser::parse(const YAML::Node& root) {
  root_location_ = r_.location(root);
  if (!root.IsMap()) {
    r_.problem(root, "", "a spec is a mapping with the sections model, cache, scheduler, "
                         "cuda_graphs and dcp");
    return;
  }
  r_.check_keys(root, "", {"model", "cache", "scheduler", "cuda_graphs", "dcp"});
  const YAML::Node model = SpecReader::child(root, "model");
  if (!model.IsDefined()) {
    r_.problem(root, "model", "is required but missing");
    return;
  }
  if (!r_.expect_map(model, "model")) return;
  parse_model(model);
  const YAML::Node cache = SpecReader::child(root, "cache");
  if (r_.expect_map(cache, "cache")) parse_cache(cache);
  const YAML::Node scheduler = SpecReader::child(root, "scheduler");
  if (r_.expect_map(scheduler, "scheduler")) parse_scheduler(scheduler);
  const YAML::Node graphs = SpecReader::child(root, "cuda_graphs");
  if (r_.expect_map(graphs, "cuda_graphs")) parse_cuda_graphs(graphs);
  const YAML::Node dcp = SpecReader::child(root, "dcp");
  if (r_.expect_map(dcp, "dcp")) parse_dcp(dcp);

  // Defaults and checks that depend on other fields.
  resolve_scheduler();
  resolve_capture_sizes();
  if (model_ok_) check_layers();
  check_dcp();
}

}  // namespace spec_detail

EngineSpec parse_spec(std::string_view yaml, std::string_view source_name,
                      const BackendRegistry& registry) {
  EngineSpec spec;
  spec.source = std::string(source_name);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::ParserException& e) {
    FF_THROW(ErrorCode::kInvalidArgument, spec.source, ":", e.mark.line + 1, ":",
             e.mark.column + 1, ": YAML syntax error: ", printable(e.msg));
  }
  spec_detail::SpecParser parser(spec, spec.source, registry);
  parser.parse(root);
  const std::vector<std::string>& problems = parser.problems();
  const std::size_t count = parser.problem_count();
  if (count > 0) {
    std::string text = "spec " + spec.source + " has " + std::to_string(count) +
                       (count == 1 ? " problem:" : " problems:");
    for (const std::string& p : problems) text += "\n  " + p;
    if (count > problems.size()) {
      text += "\n  (" + std::to_string(count - problems.size()) + " more not shown)";
    }
    FF_THROW(ErrorCode::kInvalidArgument, text);
  }
  return spec;
}

EngineSpec load_spec(const std::string& path, const BackendRegistry& registry) {
  return parse_spec(read_input_file(path, "spec", kMaxSpecBytes), path, registry);
}

}  // namespace freezeframe
