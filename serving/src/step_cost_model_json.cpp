// The cost model's input: the JSON `freezeframe bench --json` writes, read with yaml-cpp (JSON is
// YAML). Only what the model needs is read, every count and time checked, each mistake named
// with the file, line, column and field; rows and breakdown entries are counted before use.

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/serving/step_cost_model.h"

namespace freezeframe {
namespace {

constexpr std::size_t kMaxRows = 4096;
constexpr std::size_t kMaxOps = 256;
// Bounds on counts that keep every product of the work within 64 bits (2^24 · 2^24 · ...).
constexpr std::int64_t kMaxTokens = std::int64_t(1) << 24;

class BenchJson {
 public:
  explicit BenchJson(std::string_view source) : source_(source) {}

  [[noreturn]] void fail(const YAML::Node& at, std::string_view path,
                         const std::string& what) const {
    const YAML::Mark mark = at.IsDefined() ? at.Mark() : YAML::Mark::null_mark();
    if (mark.is_null()) FF_THROW(ErrorCode::kInvalidArgument, source_, ": ", path, ": ", what);
    FF_THROW(ErrorCode::kInvalidArgument, source_, ":", mark.line + 1, ":", mark.column + 1, ": ",
             path, ": ", what);
  }

  /// The value of `key` in `map`, or an undefined node.
  static YAML::Node child(const YAML::Node& map, std::string_view key) {
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
    }
    return YAML::Node(YAML::NodeType::Undefined);
  }
  /// The value of `key`, which must be there; `why` says what writes it.
  YAML::Node need(const YAML::Node& map, std::string_view key, const std::string& path,
                  std::string_view why = {}) const {
    YAML::Node v = child(map, key);
    if (!v.IsDefined() || v.IsNull()) {
      fail(map, path, "has no '" + std::string(key) + "'" + std::string(why));
    }
    return v;
  }

  std::int64_t count(const YAML::Node& node, const std::string& path, std::int64_t min,
                     std::int64_t max) const {
    std::int64_t v = 0;
    bool ok = node.IsScalar();
    if (ok) {
      try {
        v = node.as<std::int64_t>();
      } catch (const YAML::Exception&) {
        ok = false;
      }
    }
    if (!ok || v < min || v > max) {
      fail(node, path,
           "must be a whole number from " + std::to_string(min) + " to " + std::to_string(max) +
               ", got " + shown(node));
    }
    return v;
  }

  /// A time in ms: from 0 to kMaxStepMs.
  double time(const YAML::Node& node, const std::string& path) const {
    double v = 0;
    bool ok = node.IsScalar();
    if (ok) {
      try {
        v = node.as<double>();
      } catch (const YAML::Exception&) {
        ok = false;
      }
    }
    if (!ok || !(v >= 0 && v <= kMaxStepMs)) {
      fail(node, path,
           "must be a number of ms from 0 to " + std::to_string(std::int64_t(kMaxStepMs)) +
               " (an hour), got " + shown(node));
    }
    return v;
  }

  std::string text(const YAML::Node& root, std::string_view key) const {
    const YAML::Node v = child(root, key);
    return v.IsDefined() && v.IsScalar() ? v.Scalar() : std::string();
  }

  /// The rows of `key`: a list of 1 to kMaxRows maps; `writer` says what writes them.
  YAML::Node rows(const YAML::Node& root, std::string_view key, std::string_view writer) const {
    const std::string path(key);
    const YAML::Node list = child(root, key);
    if (!list.IsDefined() || list.IsNull()) {
      fail(root, "the top level", "has no '" + path + "' rows (" + std::string(writer) + ")");
    }
    if (!list.IsSequence()) fail(list, path, "must be a list of rows");
    if (list.size() == 0) fail(list, path, "has no rows (" + std::string(writer) + ")");
    if (list.size() > kMaxRows) {
      fail(list, path,
           "has " + std::to_string(list.size()) + " rows, more than the " +
               std::to_string(kMaxRows) + " read");
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].IsMap()) fail(list[i], path + "[" + std::to_string(i) + "]", "must be a map");
    }
    return list;
  }

  /// The row's time in the mode the dispatcher runs it in: full, else piecewise, else eager.
  double step_time(const YAML::Node& row, const std::string& path) const {
    double ms = 0;
    for (const char* mode : {"full_ms", "piecewise_ms", "eager_ms"}) {
      const double t = time(need(row, mode, path), path + "." + mode);
      if (ms == 0) ms = t;
    }
    if (ms == 0) fail(row, path, "every mode's time is 0: nothing was measured");
    return ms;
  }

  /// The share of the row's time spent in ops named "*attention*", from its breakdown.
  double attention_share(const YAML::Node& row, const std::string& path) const {
    const std::string at = path + ".breakdown";
    const YAML::Node ops = need(row, "breakdown", path, " (the time of each op kind)");
    if (!ops.IsMap() || ops.size() == 0 || ops.size() > kMaxOps) {
      fail(ops, at,
           "must be a map of 1 to " + std::to_string(kMaxOps) + " op kinds to their time in ms");
    }
    double total = 0, attention = 0;
    for (auto it = ops.begin(); it != ops.end(); ++it) {
      const std::string name = it->first.IsScalar() ? it->first.Scalar() : std::string();
      const double ms = time(it->second, at + "." + printable(name, 40));
      total += ms;
      if (name.find("attention") != std::string::npos) attention += ms;
    }
    if (!(total > 0)) fail(ops, at, "its times add up to 0");
    return attention / total;
  }

 private:
  static std::string shown(const YAML::Node& node) {
    if (node.IsScalar()) return quote(node.Scalar());
    return node.IsSequence() ? "a list" : node.IsMap() ? "a map" : "nothing";
  }
  std::string_view source_;
};

YAML::Node load_json(const std::string& json, std::string_view source) {
  try {
    return YAML::Load(json);
  } catch (const YAML::DeepRecursion& e) {
    FF_THROW(ErrorCode::kInvalidArgument, source, ":", e.mark.line + 1, ":", e.mark.column + 1,
             ": JSON syntax error: nested too deeply");
  } catch (const YAML::Exception& e) {
    FF_THROW(ErrorCode::kInvalidArgument, source, ":", e.mark.line + 1, ":", e.mark.column + 1,
             ": JSON syntax error: ", printable(e.msg));
  }
}

}  // namespace

StepCostModel StepCostModel::load(const std::string& path) {
  return parse(read_input_file(path, "cost model", kMaxCostModelBytes), path);
}

StepCostModel StepCostModel::parse(std::string_view json, std::string_view source) {
  try {
    return parse_rows(json, source);
  } catch (const YAML::Exception& e) {
    // A shape the checks above did not foresee: still a refusal of the file, not a crash.
    if (e.mark.is_null()) {
      FF_THROW(ErrorCode::kInvalidArgument, source, ": unexpected JSON: ", printable(e.msg));
    }
    FF_THROW(ErrorCode::kInvalidArgument, source, ":", e.mark.line + 1, ":", e.mark.column + 1,
             ": unexpected JSON: ", printable(e.msg));
  }
}

StepCostModel StepCostModel::parse_rows(std::string_view json, std::string_view source) {
  const BenchJson in(source);
  const YAML::Node root = load_json(std::string(json), source);
  if (!root.IsMap()) {
    in.fail(root, "the top level", "must be a JSON object (freezeframe bench --json writes one)");
  }
  std::vector<StepSample> samples;

  const YAML::Node decodes =
      in.rows(root, "results", "`freezeframe bench --batches LIST --json FILE` writes them");
  for (std::size_t i = 0; i < decodes.size(); ++i) {
    const YAML::Node row = decodes[i];
    const std::string path = "results[" + std::to_string(i) + "]";
    const std::int64_t batch =
        in.count(in.need(row, "batch", path), path + ".batch", 1, kMaxTokens);
    YAML::Node context_node = BenchJson::child(row, "context");
    std::string context_path = path + ".context";
    if (!context_node.IsDefined()) {
      context_node = in.need(root, "context", "the top level", " (the decode rows' context)");
      context_path = "context";
    }
    const std::int64_t context = in.count(context_node, context_path, 1, kMaxTokens);
    StepSample s;
    s.work.tokens = batch;
    s.work.decode_context = batch * context;
    const YAML::Node run = BenchJson::child(row, "run_tokens");
    s.run_tokens = run.IsDefined() ? in.count(run, path + ".run_tokens", batch, kMaxTokens) : batch;
    s.ms = in.step_time(row, path);
    s.attention_ms = s.ms * in.attention_share(row, path);
    samples.push_back(s);
  }

  const YAML::Node prefills =
      in.rows(root, "prefill", "`freezeframe bench --prefill LIST --json FILE` writes them");
  bool any_chunk = false;
  for (std::size_t i = 0; i < prefills.size(); ++i) {
    const YAML::Node row = prefills[i];
    const std::string path = "prefill[" + std::to_string(i) + "]";
    const std::int64_t b = in.count(in.need(row, "b", path), path + ".b", 1, kMaxTokens);
    const std::int64_t n = in.count(in.need(row, "n", path), path + ".n", 1, kMaxTokens / b);
    const std::int64_t context =
        in.count(in.need(row, "context", path), path + ".context", 0, kMaxTokens - n);
    StepSample s;
    s.work.tokens = b * n;
    // A one-token chunk runs as a decode (step_work).
    if (n == 1) {
      s.work.decode_context = b * (context + 1);
    } else {
      s.work.prefill_pairs = b * causal_pairs(context, n);
      any_chunk = true;
    }
    const YAML::Node run = BenchJson::child(row, "run_tokens");
    s.run_tokens = run.IsDefined() ? in.count(run, path + ".run_tokens", b * n, kMaxTokens) : b * n;
    s.ms = in.step_time(row, path);
    s.attention_ms = s.ms * in.attention_share(row, path);
    samples.push_back(s);
  }
  if (!any_chunk) {
    in.fail(prefills, "prefill", "has no row of more than one new token (n > 1) to fit on");
  }

  StepCostModel model = fit(samples, std::string(source));
  model.model_name_ = in.text(root, "model");
  model.backend_ = in.text(root, "backend");
  return model;
}

}  // namespace freezeframe
