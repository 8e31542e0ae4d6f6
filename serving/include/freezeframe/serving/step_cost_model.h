#pragma once
// StepCostModel: how long a step takes, from what `freezeframe bench --json` measured, for
// serving runs that schedule without a GPU (serve-sim --schedule-only --cost-model FILE).
//
// The model: step ms = dense(T) + a_d · D + a_p · P, where
//   T  the tokens the step runs (padded to the graph that runs it),
//   D  Σ seq_len over its single-token requests (the context its decodes read),
//   P  Σ over its longer requests of the causal query-key pairs (step_work.h).
// Fitting, from the bench's decode rows ("results": batch × context) and prefill rows
// ("prefill": b × n after a context): each row's time is that of the mode the engine's
// dispatcher runs it in (full, else piecewise, else eager), split by its op breakdown into
// attention (ops named "*attention*") and the rest. a_d and a_p are the non-negative least
// squares fit of the rows' attention time on (D, P), through the origin. dense(T) is
// piecewise-linear through the rows' dense times at their token counts (rows of one count
// averaged): flat below the smallest count, along the last segment (never falling) above the
// largest.
//
// Limits: the breakdown is measured eagerly with events between ops and only its shares are
// used; a step mixing decodes and prefills is the sum of its parts (the bench measures each
// alone); attention is linear in the work (no per-request launch or tail effects, no sliding
// windows); dense(T) between two measured counts mixes their modes (graph replays at small
// counts, eager steps at large ones), whatever mode the dispatcher picks for the step.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/engine/runtime/step_batch.h"
#include "freezeframe/serving/step_work.h"

namespace freezeframe {

/// The largest cost model file read (a bench JSON is a few KiB).
inline constexpr std::int64_t kMaxCostModelBytes = std::int64_t(4) << 20;
/// The longest step time read, fitted or modelled, in ms: an hour. Measured steps take
/// milliseconds; past this a time is a mistake, and sums of such times overflow to inf.
inline constexpr double kMaxStepMs = 3'600'000.0;

/// One measured step: its work, the tokens it ran, its time and the part of it in attention.
struct StepSample {
  StepWork work;
  std::int64_t run_tokens = 0;
  double ms = 0.0;
  double attention_ms = 0.0;
};

class StepCostModel {
 public:
  struct DensePoint {
    std::int64_t tokens = 0;
    double ms = 0.0;
  };

  /// Fits the model to `samples` (see above). Throws kInvalidArgument when they cannot fix it:
  /// no sample with decode context, none with prefill pairs, a non-finite or negative time.
  [[nodiscard]] static StepCostModel fit(std::span<const StepSample> samples, std::string source);
  /// Reads and fits a `freezeframe bench --json` file. Throws kNotFound when it cannot be read
  /// and kInvalidArgument naming the file, line and field of what it lacks or holds wrong (no
  /// decode or prefill rows, a row without its counts, times or breakdown, a negative or
  /// non-finite time), or when it is not a regular file or holds more than 4 MiB.
  [[nodiscard]] static StepCostModel load(const std::string& path);
  /// The same from text; `source` names it in messages.
  [[nodiscard]] static StepCostModel parse(std::string_view json, std::string_view source);

  /// Modelled time of a step of `work` run as `run_tokens` tokens (its padded size; 0 =
  /// work.tokens).
  [[nodiscard]] double step_ms(const StepWork& work, std::int64_t run_tokens = 0) const;
  [[nodiscard]] double step_ms(std::span<const StepRequest> requests,
                               std::int64_t run_tokens = 0) const {
    return step_ms(step_work(requests), run_tokens);
  }
  /// dense(T).
  [[nodiscard]] double dense_ms(std::int64_t tokens) const;

  [[nodiscard]] std::span<const DensePoint> dense_points() const { return dense_; }
  [[nodiscard]] double decode_ms_per_context_token() const { return decode_ms_per_token_; }
  [[nodiscard]] double prefill_ms_per_pair() const { return prefill_ms_per_pair_; }
  /// Where it came from (the file), and what the bench measured when it says (may be empty).
  [[nodiscard]] const std::string& source() const { return source_; }
  [[nodiscard]] const std::string& model_name() const { return model_name_; }
  [[nodiscard]] const std::string& backend() const { return backend_; }
  /// One line for reports: the source, the dense range and the attention coefficients.
  [[nodiscard]] std::string describe() const;

 private:
  StepCostModel() = default;  // made by fit() only

  std::vector<DensePoint> dense_;  // ascending tokens
  double decode_ms_per_token_ = 0.0;
  double prefill_ms_per_pair_ = 0.0;
  std::string source_, model_name_, backend_;
};

}  // namespace freezeframe
