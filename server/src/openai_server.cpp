#include "freezeframe/server/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "freezeframe/base/error.h"
#include "freezeframe/memory/block_pool.h"
#include "freezeframe/server/completion_request.h"
#include "freezeframe/server/text_stream.h"

namespace freezeframe {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string dump(const json& j) {
  // Text from the model is made whole-character UTF-8 by TextStream; replace stays a guard.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiError api_error(int status, std::string message, std::string type = "invalid_request_error",
                   std::string param = {}, std::string code = {}) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

const char* finish_reason(RequestEnd end) {
  switch (end) {
    case RequestEnd::kStop: return "stop";
    case RequestEnd::kLength: return "length";
    case RequestEnd::kAbort: return "abort";
    case RequestEnd::kError: return "error";
  }
  return "error";
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

/// One admitted request as the HTTP thread follows it.
struct Generation {
  CompletionRequest request;
  std::shared_ptr<RequestChannel> channel;
  std::unique_ptr<TextStream> text;
  std::string id;
  std::int64_t created = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::optional<RequestEnd> end;
  std::string error;
  Clock::time_point start = Clock::now(), first{}, last{};

  [[nodiscard]] bool chat() const { return request.endpoint == Endpoint::kChatCompletions; }
  /// Waits up to `timeout` for tokens; the text they complete (maybe empty).
  std::string advance(std::chrono::milliseconds timeout) {
    RequestChannel::Batch batch = channel->take(timeout);
    std::string piece;
    for (const std::int32_t token : batch.tokens) {
      if (text->stopped()) break;
      ++completion_tokens;
      if (completion_tokens == 1) first = Clock::now();
      last = Clock::now();
      piece += text->push(token);
      if (text->stopped()) {
        channel->cancel();  // the engine drops it at its next step
        end = RequestEnd::kStop;
      }
    }
    if (batch.end && !end) {
      end = *batch.end;
      error = std::move(batch.error);
      piece += text->finish();
    }
    return piece;
  }
  [[nodiscard]] json usage() const {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
  }
  /// A streamed chunk: `delta` text, and the finish reason in the last.
  [[nodiscard]] json chunk(const std::string& delta, const char* reason, bool role) const {
    json choice = {{"index", 0},
                   {"logprobs", nullptr},
                   {"finish_reason", reason ? json(reason) : json(nullptr)}};
    if (chat()) {
      json d = json::object();
      if (role) d["role"] = "assistant";
      if (!delta.empty() || role) d["content"] = delta;
      choice["delta"] = d;
    } else {
      choice["text"] = delta;
    }
    return {{"id", id},
            {"object", chat() ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", request.model},
            {"choices", json::array({choice})}};
  }
  /// The whole response.
  [[nodiscard]] json whole() const {
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason(*end)}};
    if (chat()) {
      choice["message"] = {{"role", "assistant"}, {"content", text->text()}};
    } else {
      choice["text"] = text->text();
    }
    return {{"id", id},
            {"object", chat() ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", request.model},
            {"choices", json::array({choice})},
            {"usage", usage()}};
  }
};

struct OpenAiServer::Impl {
  EngineWorker& worker;
  ServerMetrics& metrics;
  ServedModel model;
  ServerOptions options;
  httplib::Server http;
  std::atomic<int> active{0};
  std::mutex seed_mutex;
  std::mt19937_64 seeds{std::random_device{}()};
  std::atomic<std::uint64_t> next_id{0};

  Impl(EngineWorker& w, ServerMetrics& m, ServedModel sm, ServerOptions o)
      : worker(w), metrics(m), model(std::move(sm)), options(std::move(o)) {
    routes();
  }

  void reply_error(httplib::Response& res, const ApiError& e) {
    metrics.refused(e.status);
    res.status = e.status;
    res.set_content(e.body(), "application/json");
  }

  [[nodiscard]] bool authorised(const httplib::Request& req) const {
    if (options.api_key.empty()) return true;
    return req.get_header_value("Authorization") == "Bearer " + options.api_key;
  }

  void routes() {
    http.new_task_queue = [n = options.max_concurrent_requests + 16] {
      return new httplib::ThreadPool(static_cast<std::size_t>(n));
    };
    http.set_read_timeout(options.read_timeout_seconds, 0);
    http.set_write_timeout(options.write_timeout_seconds, 0);
    http.set_payload_max_length(kMaxRequestBytes);
    // Errors the library answers itself (413, 404, 400 on a malformed request line), with
    // OpenAI's error body.
    http.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      const ApiError e = api_error(
          res.status,
          res.status == 413
              ? "the request body is larger than " + std::to_string(kMaxRequestBytes) + " bytes"
          : res.status == 404 ? "no such endpoint"
                              : "the request could not be read",
          res.status == 404 ? "not_found_error" : "invalid_request_error");
      res.set_content(e.body(), "application/json");
      metrics.refused(res.status);
    });
    http.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "internal error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          reply_error(res, api_error(500, what, "server_error"));
        });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const WorkerSnapshot s = worker.snapshot();
      const bool ok = s.failure.empty() && s.accepting;
      res.status = ok ? 200 : 503;
      res.set_content(dump({{"status", ok                  ? "ok"
                                       : s.failure.empty() ? "shutting down"
                                                           : s.failure}}),
                      "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.text(worker.snapshot()), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!authorised(req)) {
        return reply_error(res,
                           api_error(401, "a valid API key is required (Authorization: Bearer KEY)",
                                     "authentication_error", "", "invalid_api_key"));
      }
      json entry = {{"id", model.name},
                    {"object", "model"},
                    {"created", std::time(nullptr)},
                    {"owned_by", "freezeframe"},
                    {"max_model_len", model.max_model_len}};
      res.set_content(dump({{"object", "list"}, {"data", json::array({entry})}}),
                      "application/json");
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      completion(req, res, Endpoint::kCompletions);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      completion(req, res, Endpoint::kChatCompletions);
    });
  }

  /// The request's prompt tokens, its output length and stop tokens; throws ApiException.
  void prepare(CompletionRequest& r, GenerationRequest& g) {
    const Tokenizer& tokenizer = *model.tokenizer;
    if (r.endpoint == Endpoint::kChatCompletions) {
      if (tokenizer.chat_template().empty()) {
        throw ApiException(api_error(400, "this model has no chat template: use /v1/completions",
                                     "invalid_request_error", "messages"));
      }
      g.prompt = tokenizer.encode(tokenizer.chat_format().render(r.messages, true));
    } else if (!r.prompt_tokens.empty()) {
      g.prompt = r.prompt_tokens;
      for (const std::int32_t t : g.prompt) {
        if (t >= model.vocab_size) {
          throw ApiException(api_error(400,
                                       "prompt token " + std::to_string(t) +
                                           " is outside the vocabulary of " +
                                           std::to_string(model.vocab_size),
                                       "invalid_request_error", "prompt"));
        }
      }
    } else {
      g.prompt = tokenizer.encode(r.prompt, /*add_special=*/true);
    }
    if (g.prompt.empty()) {
      throw ApiException(
          api_error(400, "the prompt is empty", "invalid_request_error",
                    r.endpoint == Endpoint::kChatCompletions ? "messages" : "prompt"));
    }
    const std::int64_t prompt = static_cast<std::int64_t>(g.prompt.size());
    const std::int64_t room = model.max_model_len - prompt;
    const std::int64_t max_tokens = r.max_tokens.value_or(room);
    if (room < 1 || max_tokens > room) {
      throw ApiException(
          api_error(400,
                    "this model's context is " + std::to_string(model.max_model_len) +
                        " tokens; the request asks for " + std::to_string(prompt + max_tokens) +
                        " (" + std::to_string(prompt) + " in the prompt, " +
                        std::to_string(max_tokens) + " to generate)",
                    "invalid_request_error", room >= 1 && r.max_tokens ? "max_tokens" : "prompt",
                    "context_length_exceeded"));
    }
    const DeploymentLimits& limits = worker.limits();
    // The last token drawn is never fed back: it takes no cache slot.
    if (blocks_for(prompt + max_tokens - 1, limits.block_size) > limits.num_blocks) {
      throw ApiException(api_error(400,
                                   "the request needs more KV cache than the server has (" +
                                       std::to_string(limits.num_blocks) + " blocks of " +
                                       std::to_string(limits.block_size) + " tokens)",
                                   "invalid_request_error", "max_tokens"));
    }
    g.max_tokens = static_cast<std::int32_t>(max_tokens);
    for (const std::int32_t t : r.stop_token_ids) {
      if (t >= model.vocab_size) {
        throw ApiException(
            api_error(400, "stop token " + std::to_string(t) + " is outside the vocabulary",
                      "invalid_request_error", "stop_token_ids"));
      }
    }
    g.stop_token_ids = r.stop_token_ids;
    const auto& own =
        r.endpoint == Endpoint::kChatCompletions ? model.chat_stop_token_ids : model.stop_token_ids;
    if (!r.ignore_eos) g.stop_token_ids.insert(g.stop_token_ids.end(), own.begin(), own.end());
    g.sampling = r.sampling;
    if (!r.seeded) {
      std::lock_guard lock(seed_mutex);
      g.sampling.seed = seeds();
    }
  }

  void completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    if (!authorised(req)) {
      return reply_error(res,
                         api_error(401, "a valid API key is required (Authorization: Bearer KEY)",
                                   "authentication_error", "", "invalid_api_key"));
    }
    if (active.fetch_add(1) >= options.max_concurrent_requests) {
      active.fetch_sub(1);
      return reply_error(res, api_error(503,
                                        "the server is at its limit of " +
                                            std::to_string(options.max_concurrent_requests) +
                                            " requests at once; try again",
                                        "server_error", "", "overloaded"));
    }
    // Held until the response is written out, streamed or not.
    struct Release {
      explicit Release(std::atomic<int>& c) : count(c) {}
      Release(const Release&) = delete;
      Release& operator=(const Release&) = delete;
      ~Release() { count.fetch_sub(1); }
      std::atomic<int>& count;
    };
    auto release = std::make_shared<Release>(active);
    auto g = std::make_shared<Generation>();
    GenerationRequest request;
    try {
      g->request = parse_completion_request(req.body, endpoint);
      if (!g->request.model.empty() && g->request.model != model.name) {
        throw ApiException(api_error(
            404, "model '" + g->request.model + "' is not served here; '" + model.name + "' is",
            "not_found_error", "model", "model_not_found"));
      }
      prepare(g->request, request);
    } catch (const ApiException& e) {
      return reply_error(res, e.error());
    } catch (const Error& e) {
      return reply_error(res, api_error(400, e.message()));
    }
    g->request.model = model.name;
    g->prompt_tokens = static_cast<std::int64_t>(request.prompt.size());
    g->id = std::string(g->chat() ? "chatcmpl-" : "cmpl-") + std::to_string(next_id.fetch_add(1));
    g->created = std::time(nullptr);
    g->text = std::make_unique<TextStream>(*model.tokenizer, g->request.stop);
    const WorkerSnapshot state = worker.snapshot();
    if (!state.accepting) {
      return reply_error(
          res, api_error(503, state.failure.empty() ? "the server is shutting down" : state.failure,
                         "server_error"));
    }
    g->channel = worker.submit(std::move(request));
    if (g->request.stream) {
      stream(res, g, release);
    } else {
      whole(res, g, release);
    }
  }

  void record(const Generation& g) {
    const double ttft = g.completion_tokens > 0 ? seconds(g.first - g.start) : -1.0;
    const double tpot = g.completion_tokens > 1
                            ? seconds(g.last - g.first) / double(g.completion_tokens - 1)
                            : -1.0;
    metrics.finished(g.end.value_or(RequestEnd::kAbort), g.prompt_tokens, g.completion_tokens, ttft,
                     tpot, seconds(Clock::now() - g.start));
  }

  void stream(httplib::Response& res, std::shared_ptr<Generation> g,
              std::shared_ptr<void> release) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, g, release, role = true](std::size_t, httplib::DataSink& sink) mutable {
          auto send = [&](const json& j) {
            const std::string event = "data: " + dump(j) + "\n\n";
            return sink.write(event.data(), event.size());
          };
          if (role && g->chat() && !send(g->chunk("", nullptr, true))) return gone(*g);
          role = false;
          while (!g->end) {
            const std::string piece = g->advance(std::chrono::milliseconds(1000));
            if (!piece.empty() && !send(g->chunk(piece, nullptr, false))) return gone(*g);
            // A quiet stretch (a long prefill, a queue): a comment line, which clients ignore,
            // finds a client that has gone.
            if (piece.empty() && !g->end && !sink.write(":\n\n", 3)) return gone(*g);
          }
          if (*g->end == RequestEnd::kError) {
            send({{"error", {{"message", g->error}, {"type", "server_error"}}}});
          } else if (!send(g->chunk("", finish_reason(*g->end), false))) {
            return gone(*g);
          }
          if (g->request.include_usage) {
            json last = g->chunk("", nullptr, false);
            last["choices"] = json::array();
            last["usage"] = g->usage();
            send(last);
          }
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          sink.done();
          record(*g);
          return true;
        });
  }

  void whole(httplib::Response& res, std::shared_ptr<Generation> g, std::shared_ptr<void> release) {
    // Chunked, so that a space can be written while the text is made (JSON allows whitespace
    // before the object): a client that went away fails the write and the request ends.
    res.set_chunked_content_provider("application/json",
                                     [this, g, release](std::size_t, httplib::DataSink& sink) {
                                       while (!g->end) {
                                         (void)g->advance(std::chrono::milliseconds(1000));
                                         if (!g->end && !sink.write(" ", 1)) return gone(*g);
                                       }
                                       std::string body;
                                       if (*g->end == RequestEnd::kError) {
                                         body = api_error(500, g->error, "server_error").body();
                                       } else {
                                         body = dump(g->whole());
                                       }
                                       sink.write(body.data(), body.size());
                                       sink.done();
                                       record(*g);
                                       return true;
                                     });
  }

  /// The client is gone: its request ends now.
  bool gone(Generation& g) {
    g.channel->cancel();
    g.end = RequestEnd::kAbort;
    record(g);
    return false;
  }
};

OpenAiServer::OpenAiServer(EngineWorker& worker, ServerMetrics& metrics, ServedModel model,
                           ServerOptions options)
    : impl_(std::make_unique<Impl>(worker, metrics, std::move(model), std::move(options))) {}

OpenAiServer::~OpenAiServer() { stop(); }

int OpenAiServer::bind() {
  const ServerOptions& o = impl_->options;
  int port = o.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
    FF_CHECK(port > 0, ErrorCode::kInvalidArgument, "cannot listen on ", o.host, " (any port)");
  } else {
    FF_CHECK(impl_->http.bind_to_port(o.host, port), ErrorCode::kInvalidArgument,
             "cannot listen on ", o.host, ":", port,
             " (in use, or not an address of this machine)");
  }
  return port;
}

void OpenAiServer::serve() {
  std::signal(SIGPIPE, SIG_IGN);
  impl_->http.listen_after_bind();
}

void OpenAiServer::stop() {
  if (impl_ && impl_->http.is_running()) impl_->http.stop();
}

}  // namespace freezeframe
