#include "freezeframe/server/server_metrics.h"

#include <cstdio>

namespace freezeframe {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void metric(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help) const {
  metric(out, name, "histogram", help);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  out += name + "_sum " + number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics()
    : ttft_({0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30}),
      tpot_({0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5}),
      e2e_({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300}) {}

void ServerMetrics::finished(RequestEnd end, std::int64_t prompt_tokens,
                             std::int64_t generated_tokens, double ttft, double tpot, double e2e) {
  std::lock_guard lock(mutex_);
  ++ended_[static_cast<std::size_t>(end)];
  prompt_tokens_ += static_cast<std::uint64_t>(prompt_tokens);
  generated_tokens_ += static_cast<std::uint64_t>(generated_tokens);
  if (ttft >= 0) ttft_.observe(ttft);
  if (tpot >= 0) tpot_.observe(tpot);
  e2e_.observe(e2e);
}

void ServerMetrics::refused(int status) {
  std::lock_guard lock(mutex_);
  switch (status) {
    case 400: ++refused_400_; break;
    case 401: ++refused_401_; break;
    case 413: ++refused_413_; break;
    case 429: ++refused_429_; break;
    case 503: ++refused_503_; break;
    default: ++refused_other_; break;
  }
}

std::string ServerMetrics::text(const WorkerSnapshot& w) const {
  std::lock_guard lock(mutex_);
  std::string out;
  const std::string p = "freezeframe_";
  metric(out, p + "requests_total", "counter", "Requests by how they ended.");
  const char* outcomes[] = {"stop", "length", "abort", "error"};
  for (std::size_t i = 0; i < ended_.size(); ++i) {
    out +=
        p + "requests_total{outcome=\"" + outcomes[i] + "\"} " + std::to_string(ended_[i]) + "\n";
  }
  const std::pair<const char*, std::uint64_t> refusals[] = {
      {"400", refused_400_}, {"401", refused_401_}, {"413", refused_413_},
      {"429", refused_429_}, {"503", refused_503_}, {"other", refused_other_}};
  for (const auto& [status, count] : refusals) {
    out += p + "requests_total{outcome=\"refused\",status=\"" + status + "\"} " +
           std::to_string(count) + "\n";
  }
  metric(out, p + "prompt_tokens_total", "counter", "Prompt tokens of the requests that ended.");
  out += p + "prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
  metric(out, p + "generation_tokens_total", "counter", "Tokens generated.");
  out += p + "generation_tokens_total " + std::to_string(generated_tokens_) + "\n";
  ttft_.write(out, p + "time_to_first_token_seconds", "From arrival to the first token.");
  tpot_.write(out, p + "time_per_output_token_seconds", "Between the tokens after the first.");
  e2e_.write(out, p + "e2e_request_latency_seconds", "From arrival to the end.");
  metric(out, p + "num_requests_running", "gauge", "Requests the batcher runs.");
  out += p + "num_requests_running " + std::to_string(w.running) + "\n";
  metric(out, p + "num_requests_waiting", "gauge", "Requests waiting to be admitted.");
  out += p + "num_requests_waiting " + std::to_string(w.waiting) + "\n";
  metric(out, p + "kv_blocks", "gauge",
         "KV cache blocks: used (held by requests), free (free or cached and unheld), cached "
         "(in the prefix cache, held or not).");
  out += p + "kv_blocks{state=\"used\"} " + std::to_string(w.blocks_total - w.blocks_free) + "\n";
  out += p + "kv_blocks{state=\"free\"} " + std::to_string(w.blocks_free) + "\n";
  out += p + "kv_blocks{state=\"cached\"} " + std::to_string(w.blocks_cached) + "\n";
  metric(out, p + "prefix_cache_queries_total", "counter",
         "Prompt tokens admitted requests looked up in the prefix cache.");
  out += p + "prefix_cache_queries_total " + std::to_string(w.prefix_queried_tokens) + "\n";
  metric(out, p + "prefix_cache_hits_total", "counter", "Of those, tokens found cached.");
  out += p + "prefix_cache_hits_total " + std::to_string(w.prefix_hit_tokens) + "\n";
  metric(out, p + "prefix_cache_hit_rate", "gauge", "hits / queries since the start.");
  out += p + "prefix_cache_hit_rate " +
         number(w.prefix_queried_tokens > 0
                    ? double(w.prefix_hit_tokens) / double(w.prefix_queried_tokens)
                    : 0.0) +
         "\n";
  metric(out, p + "steps_total", "counter", "Engine steps run.");
  out += p + "steps_total " + std::to_string(w.steps) + "\n";
  metric(out, p + "steps_by_mode_total", "counter",
         "Engine steps by how they ran: eager, piecewise or full CUDA graphs.");
  for (int m = 0; m < 3; ++m) {
    out += p + "steps_by_mode_total{mode=\"" + std::string(to_string(static_cast<RuntimeMode>(m))) +
           "\"} " + std::to_string(w.steps_by_mode[m]) + "\n";
  }
  metric(out, p + "preemptions_total", "counter", "Requests preempted to be recomputed.");
  out += p + "preemptions_total " + std::to_string(w.preemptions) + "\n";
  return out;
}

}  // namespace freezeframe
