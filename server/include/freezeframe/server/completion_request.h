#pragma once
// An OpenAI completion or chat-completion request body, read and checked: what the server
// needs to run it (messages or prompt, output length, sampling, stop strings and tokens,
// streaming), or an ApiError that says which field is wrong. Fields the server does not act
// on but clients send as a matter of course (user, presence_penalty at 0, ...) are ignored;
// what it cannot do (n > 1, tools, images, logprobs) is refused by name.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/engine/runtime/sampler.h"
#include "freezeframe/text/chat_format.h"

namespace freezeframe {

/// An error as OpenAI's API reports one: the HTTP status and the body's error object.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  ///< the field at fault, empty when none
  std::string code;   ///< a machine-readable reason, empty when none

  /// {"error": {"message", "type", "param", "code"}} (null for an empty param or code).
  [[nodiscard]] std::string body() const;
};

/// Thrown by the request readers and the server's checks; carries the ApiError.
class ApiException : public std::runtime_error {
 public:
  explicit ApiException(ApiError error)
      : std::runtime_error(error.message), error_(std::move(error)) {}
  [[nodiscard]] const ApiError& error() const { return error_; }

 private:
  ApiError error_;
};

enum class Endpoint {
  kCompletions,      ///< POST /v1/completions: a prompt to continue
  kChatCompletions,  ///< POST /v1/chat/completions: messages, rendered by the chat template
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::vector<ChatMessage> messages;        ///< chat
  std::string prompt;                       ///< completions, as text ...
  std::vector<std::int32_t> prompt_tokens;  ///< ... or as token ids (then `prompt` is empty)
  std::optional<std::int32_t> max_tokens;   ///< absent: to the end of the context
  /// OpenAI's defaults: temperature 1, top_p 1, every token (top_k 0); the seed is drawn per
  /// request unless given (`seeded`).
  SamplingParams sampling{1.0f, 0, 1.0f, 0};
  bool seeded = false;
  std::vector<std::string> stop;  ///< strings that end the text, never part of it
  std::vector<std::int32_t> stop_token_ids;
  bool ignore_eos = false;  ///< the model's own stop tokens do not end it (a load test's)
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage: a last chunk with the usage
};

/// Reads `body` as a request of `endpoint`. Throws ApiException (400) for JSON that is not an
/// object, a field of the wrong type or out of range, or something not supported.
[[nodiscard]] CompletionRequest parse_completion_request(std::string_view body, Endpoint endpoint);

/// The largest request body read (bigger ones get 413).
inline constexpr std::size_t kMaxRequestBytes = std::size_t(8) << 20;
/// At most this many stop strings, each at most kMaxStopBytes long.
inline constexpr std::size_t kMaxStopStrings = 16;
inline constexpr std::size_t kMaxStopBytes = 256;

}  // namespace freezeframe
