#include "freezeframe/server/completion_request.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <limits>

#include "freezeframe/base/error.h"
#include "freezeframe/base/json_value.h"

namespace freezeframe {
namespace {

using Kind = JsonValue::Kind;

[[noreturn]] void refuse(std::string param, std::string message) {
  ApiError e;
  e.param = std::move(param);
  e.message = std::move(message);
  throw ApiException(std::move(e));
}

std::string got(const JsonValue& v) { return std::string(json_kind_name(v.kind)); }

std::string shown(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// The value of `key`, or nullptr when absent or null (null means "the default").
const JsonValue* field(const JsonValue& body, std::string_view key) {
  const JsonValue* v = body.find(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

double number(const JsonValue& v, const std::string& name, double lo, double hi) {
  if (v.kind != Kind::kNumber) refuse(name, name + " must be a number, got " + got(v));
  if (!(v.number >= lo && v.number <= hi)) {
    refuse(name,
           name + " must be from " + shown(lo) + " to " + shown(hi) + ", got " + shown(v.number));
  }
  return v.number;
}

std::int64_t integer(const JsonValue& v, const std::string& name, std::int64_t lo,
                     std::int64_t hi) {
  if (v.kind != Kind::kNumber || !v.integral) {
    refuse(name, name + " must be an integer, got " +
                     (v.kind == Kind::kNumber ? shown(v.number) : got(v)));
  }
  if (v.integer < lo || v.integer > hi) {
    refuse(name, name + " must be from " + std::to_string(lo) + " to " + std::to_string(hi) +
                     ", got " + std::to_string(v.integer));
  }
  return v.integer;
}

bool boolean(const JsonValue& v, const std::string& name) {
  if (v.kind != Kind::kBool) refuse(name, name + " must be true or false, got " + got(v));
  return v.boolean;
}

const std::string& string(const JsonValue& v, const std::string& name) {
  if (v.kind != Kind::kString) refuse(name, name + " must be a string, got " + got(v));
  return v.string;
}

std::vector<std::int32_t> token_ids(const JsonValue& v, const std::string& name) {
  if (v.kind != Kind::kArray) refuse(name, name + " must be a list of token ids, got " + got(v));
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < v.items.size(); ++i) {
    ids.push_back(
        static_cast<std::int32_t>(integer(v.items[i], name + "[" + std::to_string(i) + "]", 0,
                                          std::numeric_limits<std::int32_t>::max())));
  }
  return ids;
}

/// A message's content: a string, or a list of text parts (images are refused).
std::string content(const JsonValue& v, const std::string& name) {
  if (v.kind == Kind::kString) return v.string;
  if (v.kind != Kind::kArray)
    refuse(name, name + " must be a string or a list of parts, got " + got(v));
  std::string text;
  for (std::size_t i = 0; i < v.items.size(); ++i) {
    const std::string part = name + "[" + std::to_string(i) + "]";
    const JsonValue& p = v.items[i];
    if (p.kind != Kind::kObject) refuse(part, part + " must be an object, got " + got(p));
    const JsonValue* type = field(p, "type");
    if (type == nullptr) refuse(part + ".type", part + ".type is required");
    const std::string& t = string(*type, part + ".type");
    if (t != "text") {
      refuse(part + ".type",
             part + ".type '" + t + "' is not supported: this server takes text only");
    }
    const JsonValue* value = field(p, "text");
    if (value == nullptr) refuse(part + ".text", part + ".text is required");
    text += string(*value, part + ".text");
  }
  return text;
}

void read_messages(const JsonValue& body, CompletionRequest& r) {
  const JsonValue* list = field(body, "messages");
  if (list == nullptr) refuse("messages", "messages is required");
  if (list->kind != Kind::kArray || list->items.empty()) {
    refuse("messages", "messages must be a non-empty list of messages");
  }
  for (std::size_t i = 0; i < list->items.size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    const JsonValue& m = list->items[i];
    if (m.kind != Kind::kObject) refuse(name, name + " must be an object, got " + got(m));
    const JsonValue* role = field(m, "role");
    if (role == nullptr) refuse(name + ".role", name + ".role is required");
    ChatMessage message;
    message.role = string(*role, name + ".role");
    if (message.role != "system" && message.role != "user" && message.role != "assistant" &&
        message.role != "developer") {
      refuse(name + ".role", name + ".role '" + message.role +
                                 "' is not supported: system, developer, user or assistant");
    }
    if (message.role == "developer") message.role = "system";  // OpenAI's newer name for it
    for (const char* key : {"tool_calls", "function_call"}) {
      if (field(m, key) != nullptr) {
        refuse(name + "." + key, name + "." + key + " is not supported: this server has no tools");
      }
    }
    const JsonValue* text = field(m, "content");
    if (text == nullptr) refuse(name + ".content", name + ".content is required");
    message.content = content(*text, name + ".content");
    r.messages.push_back(std::move(message));
  }
}

void read_prompt(const JsonValue& body, CompletionRequest& r) {
  const JsonValue* prompt = field(body, "prompt");
  if (prompt == nullptr) refuse("prompt", "prompt is required");
  if (prompt->kind == Kind::kString) {
    r.prompt = prompt->string;
  } else if (prompt->kind == Kind::kArray && !prompt->items.empty() &&
             prompt->items[0].kind == Kind::kNumber) {
    r.prompt_tokens = token_ids(*prompt, "prompt");
  } else if (prompt->kind == Kind::kArray && prompt->items.size() == 1) {
    // A list of one prompt, as clients often send.
    const JsonValue& only = prompt->items[0];
    if (only.kind == Kind::kString) {
      r.prompt = only.string;
    } else {
      r.prompt_tokens = token_ids(only, "prompt[0]");
    }
  } else if (prompt->kind == Kind::kArray) {
    refuse("prompt", "prompt: one prompt a request (a batch of " +
                         std::to_string(prompt->items.size()) + " is not supported)");
  } else {
    refuse("prompt", "prompt must be a string or a list of token ids, got " + got(*prompt));
  }
}

void read_stop(const JsonValue& body, CompletionRequest& r) {
  const JsonValue* stop = field(body, "stop");
  if (stop == nullptr) return;
  auto add = [&](const JsonValue& v, const std::string& name) {
    const std::string& s = string(v, name);
    if (s.empty()) refuse(name, name + " must not be empty");
    if (s.size() > kMaxStopBytes) {
      refuse(name, name + " is longer than " + std::to_string(kMaxStopBytes) + " bytes");
    }
    r.stop.push_back(s);
  };
  if (stop->kind == Kind::kString) {
    add(*stop, "stop");
    return;
  }
  if (stop->kind != Kind::kArray) refuse("stop", "stop must be a string or a list of strings");
  if (stop->items.size() > kMaxStopStrings) {
    refuse("stop", "stop: at most " + std::to_string(kMaxStopStrings) + " strings");
  }
  for (std::size_t i = 0; i < stop->items.size(); ++i) {
    add(stop->items[i], "stop[" + std::to_string(i) + "]");
  }
}

void read_sampling(const JsonValue& body, CompletionRequest& r) {
  if (const JsonValue* v = field(body, "temperature")) {
    r.sampling.temperature = static_cast<float>(number(*v, "temperature", 0.0, 2.0));
  }
  if (const JsonValue* v = field(body, "top_p")) {
    const double p = number(*v, "top_p", 0.0, 1.0);
    if (!(static_cast<float>(p) > 0.0f)) refuse("top_p", "top_p must be above 0");
    r.sampling.top_p = static_cast<float>(p);
  }
  if (const JsonValue* v = field(body, "top_k")) {
    // -1 is vLLM's spelling of "every token".
    const std::int64_t k = integer(*v, "top_k", -1, std::numeric_limits<std::int32_t>::max());
    r.sampling.top_k = k < 0 ? 0 : static_cast<std::int32_t>(k);
  }
  if (const JsonValue* v = field(body, "seed")) {
    // Negative seeds are a client's right; the draw's key is their two's-complement bits.
    r.sampling.seed =
        static_cast<std::uint64_t>(integer(*v, "seed", std::numeric_limits<std::int64_t>::min(),
                                           std::numeric_limits<std::int64_t>::max()));
    r.seeded = true;
  }
}

void refuse_unsupported(const JsonValue& body) {
  if (const JsonValue* n = field(body, "n"); n != nullptr && integer(*n, "n", 1, 128) != 1) {
    refuse("n", "n: one choice a request (n > 1 is not supported)");
  }
  if (const JsonValue* b = field(body, "best_of");
      b != nullptr && integer(*b, "best_of", 1, 128) != 1) {
    refuse("best_of", "best_of > 1 is not supported");
  }
  for (const char* key : {"tools", "tool_choice", "functions", "function_call"}) {
    if (field(body, key) != nullptr) {
      refuse(key, std::string(key) + " is not supported: this server has no tools");
    }
  }
  for (const char* key : {"logprobs", "top_logprobs"}) {
    const JsonValue* v = field(body, key);
    const bool off = v == nullptr || (v->kind == Kind::kBool && !v->boolean);
    if (!off) refuse(key, std::string(key) + " is not supported");
  }
  if (const JsonValue* v = field(body, "echo"); v != nullptr && boolean(*v, "echo")) {
    refuse("echo", "echo is not supported");
  }
  if (const JsonValue* v = field(body, "suffix"); v != nullptr) {
    refuse("suffix", "suffix is not supported");
  }
  if (const JsonValue* f = field(body, "response_format")) {
    const JsonValue* type = f->kind == Kind::kObject ? field(*f, "type") : nullptr;
    if (type == nullptr || type->kind != Kind::kString || type->string != "text") {
      refuse("response_format", "response_format: only {\"type\": \"text\"} is supported");
    }
  }
  for (const char* key : {"presence_penalty", "frequency_penalty", "repetition_penalty"}) {
    const JsonValue* v = field(body, key);
    if (v == nullptr) continue;
    const double neutral = std::string_view(key) == "repetition_penalty" ? 1.0 : 0.0;
    if (number(*v, key, -2.0, 2.0) != neutral) {
      refuse(key, std::string(key) + " is not supported (only its neutral value)");
    }
  }
}

}  // namespace

std::string ApiError::body() const {
  nlohmann::json error = {{"message", message},
                          {"type", type},
                          {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                          {"code", code.empty() ? nlohmann::json() : nlohmann::json(code)}};
  return nlohmann::json{{"error", error}}.dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace);
}

CompletionRequest parse_completion_request(std::string_view text, Endpoint endpoint) {
  JsonValue body;
  try {
    body = parse_json(text, "the request body");
  } catch (const Error& e) {
    refuse("", e.message());
  }
  if (body.kind != Kind::kObject) refuse("", "the request body must be a JSON object");
  CompletionRequest r;
  r.endpoint = endpoint;
  if (const JsonValue* model = field(body, "model")) r.model = string(*model, "model");
  refuse_unsupported(body);
  if (endpoint == Endpoint::kChatCompletions) {
    read_messages(body, r);
  } else {
    read_prompt(body, r);
  }
  // max_completion_tokens: the newer name of the chat API.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (const JsonValue* v = field(body, key)) {
      r.max_tokens =
          static_cast<std::int32_t>(integer(*v, key, 1, std::numeric_limits<std::int32_t>::max()));
    }
  }
  read_sampling(body, r);
  read_stop(body, r);
  if (const JsonValue* ids = field(body, "stop_token_ids")) {
    r.stop_token_ids = token_ids(*ids, "stop_token_ids");
  }
  if (const JsonValue* v = field(body, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
  if (const JsonValue* v = field(body, "stream")) r.stream = boolean(*v, "stream");
  if (const JsonValue* options = field(body, "stream_options")) {
    if (options->kind != Kind::kObject)
      refuse("stream_options", "stream_options must be an object");
    if (const JsonValue* v = field(*options, "include_usage")) {
      r.include_usage = boolean(*v, "stream_options.include_usage");
    }
  }
  return r;
}

}  // namespace freezeframe
