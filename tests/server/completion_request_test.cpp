// server/: request bodies read as OpenAI's API defines them, every mistake a 400 naming its
// field, what the server cannot do refused by name.

#include "freezeframe/server/completion_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace freezeframe {
namespace {

ApiError refusal(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
  try {
    (void)parse_completion_request(body, endpoint);
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << body << " was accepted";
  return {};
}

TEST(CompletionRequest, ReadsACompletion) {
  const CompletionRequest r = parse_completion_request(
      R"({"model": "m", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
          "top_k": 20, "seed": -3, "stop": ["\n\n", "END"], "stop_token_ids": [2],
          "stream": true, "stream_options": {"include_usage": true}, "user": "u",
          "presence_penalty": 0, "n": 1, "logprobs": null, "ignore_eos": true})",
      Endpoint::kCompletions);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "Hello");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 20);
  EXPECT_TRUE(r.seeded);
  EXPECT_EQ(r.sampling.seed, static_cast<std::uint64_t>(-3));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.stop_token_ids, (std::vector<std::int32_t>{2}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.ignore_eos);
}

TEST(CompletionRequest, DefaultsAreOpenAis) {
  const CompletionRequest r =
      parse_completion_request(R"({"prompt": [1, 2, 3]})", Endpoint::kCompletions);
  EXPECT_EQ(r.prompt_tokens, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_FALSE(r.max_tokens);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FALSE(r.seeded);
  EXPECT_FALSE(r.stream);
  // A list of one prompt, and max_completion_tokens (the chat API's newer name).
  EXPECT_EQ(parse_completion_request(R"({"prompt": ["a"]})", Endpoint::kCompletions).prompt, "a");
  EXPECT_EQ(parse_completion_request(R"({"prompt": "a", "max_completion_tokens": 3})",
                                     Endpoint::kCompletions)
                .max_tokens,
            3);
}

TEST(CompletionRequest, ReadsAChat) {
  const CompletionRequest r = parse_completion_request(
      R"({"messages": [{"role": "developer", "content": "Be brief."},
                       {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                    {"type": "text", "text": "there"}]}]})",
      Endpoint::kChatCompletions);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Hi there");
}

TEST(CompletionRequest, MistakesNameTheirField) {
  const struct {
    const char* body;
    const char* param;
    const char* message;
  } cases[] = {
      {R"({"prompt": "a", "max_tokens": 0})", "max_tokens", "max_tokens must be from 1"},
      {R"({"prompt": "a", "max_tokens": -5})", "max_tokens", "max_tokens must be from 1"},
      {R"({"prompt": "a", "max_tokens": "10"})", "max_tokens", "must be an integer, got a string"},
      {R"({"prompt": "a", "max_tokens": 2.5})", "max_tokens", "must be an integer, got 2.5"},
      {R"({"prompt": "a", "temperature": 3})", "temperature", "from 0 to 2"},
      {R"({"prompt": "a", "temperature": "hot"})", "temperature", "must be a number"},
      {R"({"prompt": "a", "top_p": 0})", "top_p", "above 0"},
      {R"({"prompt": "a", "top_k": -2})", "top_k", "from -1"},
      {R"({"prompt": "a", "stream": "yes"})", "stream", "true or false"},
      {R"({"prompt": "a", "stop": 5})", "stop", "a string or a list"},
      {R"({"prompt": "a", "stop": [""]})", "stop[0]", "must not be empty"},
      {R"({"prompt": "a", "stop_token_ids": [-1]})", "stop_token_ids[0]", "from 0"},
      {R"({"prompt": 5})", "prompt", "a string or a list of token ids"},
      {R"({"prompt": ["a", "b"]})", "prompt", "one prompt a request"},
      {R"({"max_tokens": 5})", "prompt", "prompt is required"},
      {R"({"prompt": "a", "n": 2})", "n", "n > 1 is not supported"},
      {R"({"prompt": "a", "best_of": 3})", "best_of", "not supported"},
      {R"({"prompt": "a", "logprobs": 5})", "logprobs", "not supported"},
      {R"({"prompt": "a", "echo": true})", "echo", "not supported"},
      {R"({"prompt": "a", "frequency_penalty": 0.5})", "frequency_penalty", "not supported"},
      {R"({"prompt": "a", "model": 7})", "model", "must be a string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = refusal(c.body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param);
    EXPECT_NE(e.message.find(c.message), std::string::npos) << e.message;
  }
}

TEST(CompletionRequest, ChatMistakesAndWhatIsNotSupported) {
  const struct {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"messages": []})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url",
           "image_url": {"url": "http://x"}}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": []})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "json_object"}})",
       "response_format"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    EXPECT_EQ(refusal(c.body, Endpoint::kChatCompletions).param, c.param);
  }
}

TEST(CompletionRequest, BodiesThatAreNotObjects) {
  for (const char* body : {"", "[1]", "{", "null", "{\"prompt\": \"a\",}", "\"a\""}) {
    SCOPED_TRACE(body);
    const ApiError e = refusal(body);
    EXPECT_EQ(e.status, 400);
  }
}

TEST(CompletionRequest, ErrorBodyIsOpenAis) {
  ApiError e;
  e.status = 404;
  e.message = "no \"such\" model";
  e.type = "not_found_error";
  e.param = "model";
  const auto body = nlohmann::json::parse(e.body());
  EXPECT_EQ(body["error"]["message"], "no \"such\" model");
  EXPECT_EQ(body["error"]["type"], "not_found_error");
  EXPECT_EQ(body["error"]["param"], "model");
  EXPECT_TRUE(body["error"]["code"].is_null());
}

}  // namespace
}  // namespace freezeframe
