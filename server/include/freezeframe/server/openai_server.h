#pragma once
// OpenAiServer: an HTTP/1.1 server (cpp-httplib) with OpenAI's endpoints over an EngineWorker:
// POST /v1/completions and /v1/chat/completions, streamed as server-sent events ending in
// `data: [DONE]` or whole; GET /v1/models, /health and /metrics (Prometheus). Each request is
// read and checked (completion_request.h), tokenised (a chat by the model's template), checked
// against the context and the cache, and submitted; its tokens come back on its channel and go
// out as text (text_stream.h). A client that goes away is noticed when a write to it fails
// (while a whole response is prepared, a space, which JSON allows before the object, is written
// every second for that) and its request is aborted.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "freezeframe/server/engine_worker.h"
#include "freezeframe/server/server_metrics.h"
#include "freezeframe/text/tokenizer.h"

namespace freezeframe {

/// The model as the server presents it.
struct ServedModel {
  std::string name;                      ///< the id clients name it by (GET /v1/models)
  const Tokenizer* tokenizer = nullptr;  ///< must outlive the server
  std::int64_t max_model_len = 0;        ///< prompt and output together
  std::int32_t vocab_size = 0;
  std::vector<std::int32_t> stop_token_ids;       ///< a completion ends at these
  std::vector<std::int32_t> chat_stop_token_ids;  ///< a chat ends at these (end of turn too)
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                    ///< 0: any free port (bind() says which)
  std::string api_key;                ///< non-empty: /v1/* need "Authorization: Bearer KEY"
  int max_concurrent_requests = 256;  ///< more at once get 503
  int read_timeout_seconds = 30;      ///< a client slower than this to send is dropped
  int write_timeout_seconds = 30;     ///< ... or to read
};

class OpenAiServer {
 public:
  /// `worker` and `metrics` must outlive the server.
  OpenAiServer(EngineWorker& worker, ServerMetrics& metrics, ServedModel model,
               ServerOptions options);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  /// Binds the address; returns the port. Throws kInvalidArgument naming the address when it
  /// cannot (in use, not this machine's).
  int bind();
  /// Serves until stop() (from another thread). Writes to a closed connection fail instead of
  /// raising SIGPIPE: the process ignores that signal from here on.
  void serve();
  /// Stops accepting connections and returns serve(); requests in progress end on their own.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace freezeframe
