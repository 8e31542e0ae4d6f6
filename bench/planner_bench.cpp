// planner_bench: how close the lifetime packer gets to the lower bound (max live bytes) and how
// long it takes, on the model programs of the specs in configs/ and on random interval sets of
// 100, 1,000 and 10,000 tensors. Prints a table, then all rows as one JSON line.
//
//   planner_bench [--repeats N] [--seeds N] [SPEC.yaml ...]   (default: every configs/*.yaml)
//
// Random sets: n tensors over n program steps; each starts at a uniform step, lives for a
// geometric number of steps (mean 16, at least one), and has a log-uniform size between 1 KiB
// and 16 MiB. The figure per size is over several seeds (median ratio, worst ratio, median
// time; peak and lower bound are seed 1's). Times are the median of repeated runs of pack_lifetimes
// alone (the lower bound included, the program and the random set excluded).

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/memory/lifetime_packer.h"

namespace ff = freezeframe;

namespace {

std::vector<ff::TensorLifetime> random_set(int n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> start(0, n - 1);
  std::geometric_distribution<int> extra(1.0 / 16.0);
  std::uniform_real_distribution<double> log2_size(10.0, 24.0);
  std::vector<ff::TensorLifetime> set(n);
  for (ff::TensorLifetime& t : set) {
    t.first_step = start(rng);
    t.last_step = std::min(n - 1, t.first_step + extra(rng));
    t.bytes = static_cast<std::int64_t>(std::exp2(log2_size(rng)));
  }
  return set;
}

std::string g_json;  // the rows, printed as one JSON line at the end

struct Result {
  double ratio = 0;
  double millis = 0;
  ff::PackedLayout layout;
};

Result measure(const std::vector<ff::TensorLifetime>& set, int repeats) {
  std::vector<double> times;
  Result r;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    r.layout = ff::pack_lifetimes(set, 256);
    const auto end = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(times.begin(), times.end());
  r.millis = times[times.size() / 2];
  r.ratio = r.layout.lower_bound_bytes > 0
                ? double(r.layout.peak_bytes) / double(r.layout.lower_bound_bytes)
                : 1.0;
  return r;
}

void row(const std::string& name, int tensors, double ratio, double worst, double millis,
         std::int64_t peak, std::int64_t bound) {
  std::printf("%-26s %8d %14lld %14lld %8.4f %8.4f %10.3f\n", name.c_str(), tensors,
              static_cast<long long>(peak), static_cast<long long>(bound), ratio, worst, millis);
  char json[512];
  std::snprintf(json, sizeof json,
                "{\"set\": \"%s\", \"tensors\": %d, \"peak_bytes\": %lld, "
                "\"lower_bound_bytes\": %lld, \"ratio\": %.6f, \"worst_ratio\": %.6f, "
                "\"median_ms\": %.4f}",
                name.c_str(), tensors, static_cast<long long>(peak), static_cast<long long>(bound),
                ratio, worst, millis);
  (g_json += g_json.empty() ? "" : ", ") += std::string(json);
}

}  // namespace

constexpr const char* kUsage =
    "usage: planner_bench [--repeats N] [--seeds N] [SPEC.yaml ...]\n"
    "  how close the lifetime packer gets to the lower bound, and how long it takes, on the\n"
    "  specs' model programs (default: every configs/*.yaml) and on random interval sets\n";

/// A count argument in [1, 1000000], or nothing.
std::optional<int> parse_count(const std::string& text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 1 || value > 1'000'000) {
    return std::nullopt;
  }
  return value;
}

int run(int argc, char** argv) {
  int repeats = 11, seeds = 5;
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else if (a == "--repeats" || a == "--seeds") {
      const std::optional<int> n = i + 1 < argc ? parse_count(argv[i + 1]) : std::nullopt;
      if (!n) {
        std::fprintf(stderr, "planner_bench: %s takes a count from 1 to 1000000\n\n%s", a.c_str(),
                     kUsage);
        return 2;
      }
      (a == "--repeats" ? repeats : seeds) = *n;
      ++i;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "planner_bench: unknown option %s\n\n%s", ff::quote(a).c_str(), kUsage);
      return 2;
    } else {
      specs.push_back(a);
    }
  }
  if (specs.empty()) {
    for (const auto& entry :
         std::filesystem::directory_iterator(FREEZEFRAME_SOURCE_DIR "/configs")) {
      if (entry.path().extension() == ".yaml") specs.push_back(entry.path().string());
    }
    std::sort(specs.begin(), specs.end());
  }

  std::vector<std::pair<std::string, double>> plan_ms;
  std::printf("%-26s %8s %14s %14s %8s %8s %10s\n", "set", "tensors", "peak bytes", "lower bound",
              "peak/lb", "worst", "median ms");
  for (const std::string& path : specs) {
    const ff::EngineSpec spec = ff::load_spec(path);
    const ff::ModelProgram program = ff::build_model_program(spec);
    const auto set = ff::activation_lifetimes(program, spec.scheduler.max_num_batched_tokens,
                                              spec.scheduler.max_num_seqs);
    const Result r = measure(set, repeats);
    // The whole plan as well: program, packing, regions and KV blocks.
    std::vector<double> plan_times;
    for (int i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const ff::MemoryPlan plan = ff::plan_memory(spec, std::int64_t(141) << 30);
      const auto end = std::chrono::steady_clock::now();
      plan_times.push_back(std::chrono::duration<double, std::milli>(end - start).count());
      if (plan.kv_cache.num_blocks <= 0)
        std::printf("warning: %s plans no KV blocks\n", path.c_str());
    }
    std::sort(plan_times.begin(), plan_times.end());
    plan_ms.emplace_back(spec.model.name, plan_times[plan_times.size() / 2]);
    row("program " + spec.model.name, static_cast<int>(set.size()), r.ratio, r.ratio, r.millis,
        r.layout.peak_bytes, r.layout.lower_bound_bytes);
  }
  for (const int n : {100, 1000, 10000}) {
    std::vector<double> ratios, times;
    std::int64_t peak = 0, bound = 0;
    for (int s = 1; s <= seeds; ++s) {
      const Result r = measure(random_set(n, static_cast<std::uint32_t>(s)), repeats);
      ratios.push_back(r.ratio);
      times.push_back(r.millis);
      if (s == 1) {
        peak = r.layout.peak_bytes;
        bound = r.layout.lower_bound_bytes;
      }
    }
    std::sort(ratios.begin(), ratios.end());
    std::sort(times.begin(), times.end());
    row("random " + std::to_string(n) + " (" + std::to_string(seeds) + " seeds)", n,
        ratios[ratios.size() / 2], ratios.back(), times[times.size() / 2], peak, bound);
  }
  std::printf("\nwhole plan_memory at 141 GiB (median ms):");
  for (const auto& [name, ms] : plan_ms) std::printf(" %s %.3f;", name.c_str(), ms);
  std::printf("\nJSON {\"planner_bench\": [%s]}\n", g_json.c_str());
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ff::Error& e) {
    std::fprintf(stderr, "planner_bench: %s\n", e.message().c_str());
    return 1;
  }
}
