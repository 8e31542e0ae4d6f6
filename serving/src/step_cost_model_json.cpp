// The cost model's input: the JSON `freezeframe bench --json` writes, read as JSON (see
// json_value.h). Only what the model needs is read, every count and time checked, each mistake
// named with the file, line, column and field; rows and breakdown entries are counted before use.

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/json_value.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/serving/step_cost_model.h"

namespace freezeframe {
namespace {

constexpr std::size_t kMaxRows = 4096;
constexpr std::size_t kMaxOps = 256;
// Bounds on counts that keep every product of the work within 64 bits (2^24 · 2^24 · ...).
constexpr std::int64_t kMaxTokens = std::int64_t(1) << 24;

using Kind = JsonValue::Kind;

class BenchJson {
 public:
  BenchJson(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  [[noreturn]] void fail(const JsonValue& at, std::string_view path,
                         const std::string& what) const {
    FF_THROW(ErrorCode::kInvalidArgument, source_, ":", json_position(text_, at.offset), ": ", path,
             ": ", what);
  }

  /// The value of `key`, which must be there and not null; `why` says what writes it.
  const JsonValue& need(const JsonValue& map, std::string_view key, const std::string& path,
                        std::string_view why = {}) const {
    const JsonValue* v = map.find(key);
    if (v == nullptr || v->is_null()) {
      fail(map, path, "has no '" + std::string(key) + "'" + std::string(why));
    }
    return *v;
  }

  std::int64_t count(const JsonValue& node, const std::string& path, std::int64_t min,
                     std::int64_t max) const {
    if (node.kind != Kind::kNumber || !node.integral || node.integer < min || node.integer > max) {
      fail(node, path,
           "must be a whole number from " + std::to_string(min) + " to " + std::to_string(max) +
               ", got " + shown(node));
    }
    return node.integer;
  }

  /// A time in ms: from 0 to kMaxStepMs.
  double time(const JsonValue& node, const std::string& path) const {
    if (node.kind != Kind::kNumber || !(node.number >= 0 && node.number <= kMaxStepMs)) {
      fail(node, path,
           "must be a number of ms from 0 to " + std::to_string(std::int64_t(kMaxStepMs)) +
               " (an hour), got " + shown(node));
    }
    return node.number;
  }

  static std::string text(const JsonValue& root, std::string_view key) {
    const JsonValue* v = root.find(key);
    return v != nullptr && v->kind == Kind::kString ? v->string : std::string();
  }

  /// The rows of `key`: a list of 1 to kMaxRows objects; `writer` says what writes them.
  const JsonValue& rows(const JsonValue& root, std::string_view key,
                        std::string_view writer) const {
    const std::string path(key);
    const JsonValue* list = root.find(key);
    if (list == nullptr || list->is_null()) {
      fail(root, "the top level", "has no '" + path + "' rows (" + std::string(writer) + ")");
    }
    if (list->kind != Kind::kArray) fail(*list, path, "must be a list of rows");
    if (list->items.empty()) fail(*list, path, "has no rows (" + std::string(writer) + ")");
    if (list->items.size() > kMaxRows) {
      fail(*list, path,
           "has " + std::to_string(list->items.size()) + " rows, more than the " +
               std::to_string(kMaxRows) + " read");
    }
    for (std::size_t i = 0; i < list->items.size(); ++i) {
      if (list->items[i].kind != Kind::kObject) {
        fail(list->items[i], path + "[" + std::to_string(i) + "]", "must be an object");
      }
    }
    return *list;
  }

  /// The row's time in the mode the dispatcher runs it in: full, else piecewise, else eager.
  double step_time(const JsonValue& row, const std::string& path) const {
    double ms = 0;
    for (const char* mode : {"full_ms", "piecewise_ms", "eager_ms"}) {
      const double t = time(need(row, mode, path), path + "." + mode);
      if (ms == 0) ms = t;
    }
    if (ms == 0) fail(row, path, "every mode's time is 0: nothing was measured");
    return ms;
  }

  /// The share of the row's time spent in ops named "*attention*", from its breakdown.
  double attention_share(const JsonValue& row, const std::string& path) const {
    const std::string at = path + ".breakdown";
    const JsonValue& ops = need(row, "breakdown", path, " (the time of each op kind)");
    if (ops.kind != Kind::kObject || ops.members.empty() || ops.members.size() > kMaxOps) {
      fail(
          ops, at,
          "must be an object of 1 to " + std::to_string(kMaxOps) + " op kinds to their time in ms");
    }
    double total = 0, attention = 0;
    for (const auto& [name, value] : ops.members) {
      const double ms = time(value, at + "." + printable(name, 40));
      total += ms;
      if (name.find("attention") != std::string::npos) attention += ms;
    }
    if (!(total > 0)) fail(ops, at, "its times add up to 0");
    return attention / total;
  }

 private:
  std::string shown(const JsonValue& node) const {
    switch (node.kind) {
      case Kind::kString: return "the string " + quote(node.string);
      case Kind::kArray: return "a list";
      case Kind::kObject: return "an object";
      case Kind::kNull: return "null";
      case Kind::kBool: return node.boolean ? "true" : "false";
      case Kind::kNumber: break;
    }
    std::size_t end = node.offset;
    while (end < text_.size() &&
           std::string_view("0123456789-+.eE").find(text_[end]) != std::string_view::npos) {
      ++end;
    }
    return quote(text_.substr(node.offset, end - node.offset));
  }

  std::string_view text_;
  std::string_view source_;
};

}  // namespace

StepCostModel StepCostModel::load(const std::string& path) {
  return parse(read_input_file(path, "cost model", kMaxCostModelBytes), path);
}

StepCostModel StepCostModel::parse(std::string_view json, std::string_view source) {
  const BenchJson in(json, source);
  const JsonValue root = parse_json(json, std::string(source));
  if (root.kind != Kind::kObject) {
    in.fail(root, "the top level", "must be a JSON object (freezeframe bench --json writes one)");
  }
  std::vector<StepSample> samples;

  const JsonValue& decodes =
      in.rows(root, "results", "`freezeframe bench --batches LIST --json FILE` writes them");
  for (std::size_t i = 0; i < decodes.items.size(); ++i) {
    const JsonValue& row = decodes.items[i];
    const std::string path = "results[" + std::to_string(i) + "]";
    const std::int64_t batch =
        in.count(in.need(row, "batch", path), path + ".batch", 1, kMaxTokens);
    const JsonValue* context_node = row.find("context");
    std::string context_path = path + ".context";
    if (context_node == nullptr) {
      context_node = &in.need(root, "context", "the top level", " (the decode rows' context)");
      context_path = "context";
    }
    const std::int64_t context = in.count(*context_node, context_path, 1, kMaxTokens);
    StepSample s;
    s.work.tokens = batch;
    s.work.decode_context = batch * context;
    const JsonValue* run = row.find("run_tokens");
    s.run_tokens = run != nullptr ? in.count(*run, path + ".run_tokens", batch, kMaxTokens) : batch;
    s.ms = in.step_time(row, path);
    s.attention_ms = s.ms * in.attention_share(row, path);
    samples.push_back(s);
  }

  const JsonValue& prefills =
      in.rows(root, "prefill", "`freezeframe bench --prefill LIST --json FILE` writes them");
  bool any_chunk = false;
  for (std::size_t i = 0; i < prefills.items.size(); ++i) {
    const JsonValue& row = prefills.items[i];
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
    const JsonValue* run = row.find("run_tokens");
    s.run_tokens = run != nullptr ? in.count(*run, path + ".run_tokens", b * n, kMaxTokens) : b * n;
    s.ms = in.step_time(row, path);
    s.attention_ms = s.ms * in.attention_share(row, path);
    samples.push_back(s);
  }
  if (!any_chunk) {
    in.fail(prefills, "prefill", "has no row of more than one new token (n > 1) to fit on");
  }

  StepCostModel model = fit(samples, std::string(source));
  model.model_name_ = BenchJson::text(root, "model");
  model.backend_ = BenchJson::text(root, "backend");
  return model;
}

}  // namespace freezeframe
