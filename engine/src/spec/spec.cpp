// Reading a spec: the file (bounded), its one YAML document, then the sections (SpecParser:
// structure and types first, then defaults, then the checks that need several fields or the
// backend registry). Every problem is collected; the spec is returned only when there are none.

#include "freezeframe/engine/spec/spec.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "freezeframe/base/error.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/printable.h"
#include "spec/spec_parser.h"

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
    r_.problem(root, "",
               "a spec is a mapping with the sections model, cache, scheduler, "
               "cuda_graphs, tp and dcp");
    return;
  }
  r_.check_keys(root, "", {"model", "cache", "scheduler", "cuda_graphs", "tp", "dcp"});
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
  const YAML::Node tp = SpecReader::child(root, "tp");
  if (r_.expect_map(tp, "tp")) parse_tp(tp);
  const YAML::Node dcp = SpecReader::child(root, "dcp");
  if (r_.expect_map(dcp, "dcp")) parse_dcp(dcp);

  // Defaults and checks that depend on other fields.
  resolve_scheduler();
  resolve_capture_sizes();
  if (model_ok_) check_layers();
  if (model_ok_) check_tp();
  check_dcp();
}

}  // namespace spec_detail

namespace {

/// Where each document of a YAML text starts (its "---", or its first line).
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;

  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

/// The root of the one document of `yaml`; a syntax error or a second document is refused.
YAML::Node load_document(const std::string& yaml, const std::string& source) {
  try {
    // The documents are counted first, stopping at the second. Not with YAML::LoadAll: on
    // text that cannot start a node (a ',' at the top) each document it reads is empty and
    // ends where it began, so it reads documents without end.
    DocumentStarts starts;
    std::istringstream in(yaml);
    YAML::Parser parser(in);
    while (starts.marks.size() < 2 && parser.HandleNextDocument(starts)) {
    }
    if (starts.marks.size() == 2) {
      const YAML::Mark& at = starts.marks[1];
      if (at.pos == starts.marks[0].pos) {
        // Positions count from after a byte order mark.
        const std::size_t bom = yaml.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
        const std::size_t pos = std::min(bom + std::max(at.pos, 0), yaml.size());
        FF_THROW(ErrorCode::kInvalidArgument, source, ":", at.line + 1, ":", at.column + 1,
                 ": YAML syntax error: no value can start with ",
                 quote(std::string_view(yaml).substr(pos, 1)));
      }
      FF_THROW(ErrorCode::kInvalidArgument, source, ":", at.line + 1, ":", at.column + 1,
               ": a second YAML document starts here; a spec is one document (remove the '---' "
               "and what follows, or merge it into the first)");
    }
    return YAML::Load(yaml);
  } catch (const YAML::DeepRecursion& e) {
    FF_THROW(ErrorCode::kInvalidArgument, source, ":", e.mark.line + 1, ":", e.mark.column + 1,
             ": YAML syntax error: nested too deeply");
  } catch (const YAML::Exception& e) {
    FF_THROW(ErrorCode::kInvalidArgument, source, ":", e.mark.line + 1, ":", e.mark.column + 1,
             ": YAML syntax error: ", printable(e.msg));
  }
}

}  // namespace

namespace {

/// The spec of `yaml`; `heading` opens the message listing its problems ("spec x.yaml").
EngineSpec parse(std::string_view yaml, std::string source_name, const std::string& heading,
                 const BackendRegistry& registry, bool written) {
  EngineSpec spec;
  spec.source = std::move(source_name);
  spec.registry = &registry;
  const YAML::Node root = load_document(std::string(yaml), spec.source);
  spec_detail::SpecParser parser(spec, spec.source, registry, written);
  parser.parse(root);
  const std::vector<std::string>& problems = parser.problems();
  const std::size_t count = parser.problem_count();
  if (count > 0) {
    std::string text =
        heading + " has " + std::to_string(count) + (count == 1 ? " problem:" : " problems:");
    for (const std::string& p : problems) text += "\n  " + p;
    if (count > problems.size()) {
      text += "\n  (" + std::to_string(count - problems.size()) + " more not shown)";
    }
    FF_THROW(ErrorCode::kInvalidArgument, text);
  }
  return spec;
}

}  // namespace

EngineSpec parse_spec(std::string_view yaml, std::string_view source_name,
                      const BackendRegistry& registry) {
  const std::string source(source_name);
  return parse(yaml, source, "spec " + source, registry, false);
}

EngineSpec parse_written_spec(std::string_view yaml, std::string_view checkpoint,
                              const BackendRegistry& registry) {
  const std::string name = printable(checkpoint, 200);
  return parse(yaml, "<spec for " + name + ">", "the spec written for " + name, registry, true);
}

EngineSpec load_spec(const std::string& path, const BackendRegistry& registry) {
  return parse_spec(read_input_file(path, "spec", kMaxSpecBytes), path, registry);
}

std::optional<ParallelSizes> read_parallel_sizes(const std::string& path) {
  try {
    const YAML::Node root = YAML::Load(read_input_file(path, "spec", kMaxSpecBytes));
    ParallelSizes sizes;
    if (!root.IsMap()) return std::nullopt;
    if (const YAML::Node tp = root["tp"]; tp && tp.IsMap() && tp["world_size"]) {
      sizes.tp = tp["world_size"].as<int>();
    }
    if (const YAML::Node dcp = root["dcp"]; dcp && dcp.IsMap() && dcp["world_size"]) {
      sizes.dcp = dcp["world_size"].as<int>();
    }
    return sizes;
  } catch (const std::exception&) {  // Error from the file, YAML::Exception from its text
    return std::nullopt;
  }
}

}  // namespace freezeframe
