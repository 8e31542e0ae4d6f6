// serving/: reading request traces.

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/serving/request_trace.h"

namespace freezeframe {
namespace {

constexpr std::string_view kHeader = "TIMESTAMP,ContextTokens,GeneratedTokens\n";

/// The message parse_azure_trace gives for `rows` after the header, or a failure.
std::string refusal(std::string_view rows) {
  try {
    (void)parse_azure_trace(std::string(kHeader) + std::string(rows), "t.csv");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.message();
  }
  ADD_FAILURE() << "accepted: " << rows;
  return {};
}

constexpr std::string_view kSmall =
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 23:59:59.5000000,4808,10\r\n"
    "2023-11-17 00:00:01.2500000,3180,8\n"
    "2023-11-17 00:00:01.2500000,12,0";

TEST(RequestTrace, ParsesArrivalsAcrossMidnightAndScalesThem) {
  const auto trace = parse_azure_trace(kSmall, "small.csv");
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_DOUBLE_EQ(trace[0].arrival_s, 0.0);
  EXPECT_NEAR(trace[1].arrival_s, 1.75, 1e-9);
  EXPECT_EQ(trace[1].prompt_tokens, 3180);
  EXPECT_EQ(trace[2].output_tokens, 0);
  const auto fast = parse_azure_trace(kSmall, "small.csv", {.time_scale = 0.5, .max_requests = 2});
  ASSERT_EQ(fast.size(), 2u);
  EXPECT_NEAR(fast[1].arrival_s, 0.875, 1e-9);
}

TEST(RequestTrace, MalformedRowsNameTheFileAndLine) {
  struct Case {
    std::string_view csv, needle;
  };
  const Case cases[] = {
      {"TIME,A,B\n", "small.csv:1: expected the header"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,10\n",
       "small.csv:2: expected 3"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.98,-4,1\n",
       "small.csv:2: ContextTokens"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.98,4,x\n",
       "small.csv:2: GeneratedTokens"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-16 18:17:03.98,4,1\n",
       "small.csv:2: TIMESTAMP"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04,4,1\n2023-11-16 "
       "18:17:03,4,1\n",
       "small.csv:3: timestamps must not go backwards"},
  };
  for (const Case& c : cases) {
    try {
      (void)parse_azure_trace(c.csv, "small.csv");
      ADD_FAILURE() << "accepted: " << c.csv;
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(c.needle), std::string::npos) << e.message();
    }
  }
  EXPECT_THROW((void)load_azure_trace("/nonexistent/trace.csv"), Error);
}

TEST(RequestTrace, DatesAndTimesMustExist) {
  EXPECT_EQ(refusal("2023-02-31 18:17:03.98,4,1\n"),
            "t.csv:2: TIMESTAMP '2023-02-31 18:17:03.98' has day 31, but 2023-02 has 28 days");
  EXPECT_EQ(refusal("2023-13-01 18:17:03.98,4,1\n"),
            "t.csv:2: TIMESTAMP '2023-13-01 18:17:03.98' has month 13, not 1..12");
  EXPECT_EQ(refusal("2023-11-16 25:00:00,4,1\n"),
            "t.csv:2: TIMESTAMP '2023-11-16 25:00:00' has hour 25, not 0..23");
  EXPECT_NE(refusal("2023-11-16 18:60:00,4,1\n").find("has minute 60"), std::string::npos);
  EXPECT_NE(refusal("2023-11-16 18:17:60,4,1\n").find("has second 60"), std::string::npos);
  EXPECT_NE(refusal("2023-04-31 00:00:00,4,1\n").find("2023-04 has 30 days"), std::string::npos);
  EXPECT_NE(refusal("2023-00-10 00:00:00,4,1\n").find("has month 0"), std::string::npos);
  EXPECT_NE(refusal("2023-11-00 00:00:00,4,1\n").find("has day 0"), std::string::npos);
  // Leap years: every fourth, but not centuries, except every fourth century.
  EXPECT_NE(refusal("2023-02-29 00:00:00,4,1\n").find("2023-02 has 28 days"), std::string::npos);
  EXPECT_NE(refusal("1900-02-29 00:00:00,4,1\n").find("1900-02 has 28 days"), std::string::npos);
  for (const char* leap : {"2024-02-29 12:00:00", "2000-02-29 12:00:00"}) {
    EXPECT_EQ(parse_azure_trace(std::string(kHeader) + leap + ",4,1\n", "t.csv").size(), 1u)
        << leap;
  }
  // Signs and spaces are not digits.
  for (const char* stamp : {"2023-11-16 18:17:-1", "2023-11-16 18:-1:00", "-023-11-16 18:17:01",
                            "2023-11-16 1 :17:01", "2023-11-16 18:17:01.", "2023-11-16T18:17:01"}) {
    EXPECT_NE(refusal(std::string(stamp) + ",4,1\n").find("is not 'YYYY-MM-DD HH:MM:SS.fffffff'"),
              std::string::npos)
        << stamp;
  }
}

TEST(RequestTrace, TokenCountsPast32BitsAreRefusedNotClamped) {
  EXPECT_EQ(refusal("2023-11-16 18:17:03.98,99999999999,10\n"),
            "t.csv:2: ContextTokens 99999999999 is more than a 32-bit token count holds "
            "(2147483647)");
  EXPECT_EQ(refusal("2023-11-16 18:17:03.98,4,2147483648\n"),
            "t.csv:2: GeneratedTokens 2147483648 is more than a 32-bit token count holds "
            "(2147483647)");
  EXPECT_NE(refusal("2023-11-16 18:17:03.98,4,99999999999999999999999999\n")
                .find("GeneratedTokens 99999999999999999999999999 is more than a 32-bit"),
            std::string::npos);
  EXPECT_EQ(refusal("2023-11-16 18:17:03.98,2147483647,10\n"),
            "t.csv:2: ContextTokens + GeneratedTokens = 2147483657 tokens, more than a 32-bit "
            "sequence length holds (2147483647)");
  EXPECT_NE(refusal("2023-11-16 18:17:03.98,0,10\n").find("ContextTokens must be a positive"),
            std::string::npos);
  EXPECT_NE(refusal("2023-11-16 18:17:03.98,+4,10\n").find("ContextTokens must be a positive"),
            std::string::npos);
  // The largest that fits is kept as it is (the serving loop decides what is too long).
  const auto trace =
      parse_azure_trace(std::string(kHeader) + "2023-11-16 18:17:03.98,2147483647,0\n", "t.csv");
  ASSERT_EQ(trace.size(), 1u);
  EXPECT_EQ(trace[0].prompt_tokens, 2147483647);
}

TEST(RequestTrace, EchoedTextIsEscapedAndShortened) {
  const std::string line = "2023-11-16 18:17:03.98,4," + std::string(5'000'000, '7') + "x";
  const std::string long_field = refusal(line + "\n");
  EXPECT_LT(long_field.size(), 250u) << long_field.substr(0, 300);
  EXPECT_NE(long_field.find("GeneratedTokens must be a non-negative integer, got '7777"),
            std::string::npos);
  EXPECT_NE(long_field.find("…' (5000001 bytes)"), std::string::npos) << long_field;
  const std::string long_line = refusal(std::string(5'000'000, ',') + "\n");
  EXPECT_LT(long_line.size(), 250u);
  EXPECT_NE(long_line.find("t.csv:2: expected 3 comma-separated fields, got ',,,"),
            std::string::npos);
  EXPECT_EQ(refusal("2023-11-16 18:17:03.98,4,1\x07\x1b[2J\n"),
            "t.csv:2: GeneratedTokens must be a non-negative integer, got '1\\x07\\x1B[2J'");
  EXPECT_EQ(refusal("2023-11-16\t18:17:03.98,4,1\n"),
            "t.csv:2: TIMESTAMP '2023-11-16\\t18:17:03.98' is not 'YYYY-MM-DD HH:MM:SS.fffffff'");
  try {
    (void)parse_azure_trace(std::string("TIMESTAMP\0,\xff\n", 13), "t.csv");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("got 'TIMESTAMP\\x00,\\xFF'"), std::string::npos) << e.message();
  }
}

TEST(RequestTrace, AByteOrderMarkBeforeTheHeaderIsSkipped) {
  const auto trace = parse_azure_trace(
      "\xEF\xBB\xBF" + std::string(kHeader) + "2023-11-16 18:17:03.98,4,1\n", "t.csv");
  EXPECT_EQ(trace.size(), 1u);
}

TEST(RequestTrace, OnlyRegularFilesOfBoundedSizeAreRead) {
  for (const char* path : {"/dev/zero", "/dev/null", "/"}) {
    try {
      (void)load_azure_trace(path);
      ADD_FAILURE() << "read " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << path;
      EXPECT_NE(e.message().find(std::string("trace file '") + path + "' is a "), std::string::npos)
          << e.message();
      EXPECT_NE(e.message().find("not a regular file"), std::string::npos) << e.message();
    }
  }
  // A sparse file: its size is refused before anything is read.
  const std::filesystem::path big = std::filesystem::temp_directory_path() /
                                    ("ff_big_trace_" + std::to_string(::getpid()) + ".csv");
  { std::ofstream(big) << kHeader; }
  std::filesystem::resize_file(big, std::uintmax_t(300) << 20);
  try {
    (void)load_azure_trace(big.string());
    ADD_FAILURE() << "read a 300 MiB trace";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("is 314572800 bytes (300.00 MiB), more than the 256.00 MiB a "
                               "trace file may be"),
              std::string::npos)
        << e.message();
  }
  std::filesystem::remove(big);
  try {
    (void)load_azure_trace("/nonexistent/trace.csv");
    ADD_FAILURE() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(e.message().find("/nonexistent/trace.csv"), std::string::npos);
  }
}

TEST(RequestTrace, ReadsTheFixturesCutFromTheAzureTraces) {
  for (const char* name : {"azure_code_head.csv", "azure_conv_head.csv"}) {
    const auto trace =
        load_azure_trace(std::string(FREEZEFRAME_SOURCE_DIR) + "/tests/traces/" + name);
    ASSERT_EQ(trace.size(), 200u) << name;
    EXPECT_DOUBLE_EQ(trace[0].arrival_s, 0.0);
    EXPECT_GT(trace.back().arrival_s, 10.0) << name;
    for (const TraceRequest& r : trace) EXPECT_GT(r.prompt_tokens, 0);
  }
}

// Mooncake JSON Lines: arrivals from milliseconds, and the prefix an ideal prefix cache could
// reuse: the leading blocks whose (position, hash id) an earlier request had.
TEST(MooncakeTrace, ReadsRowsAndTheReusablePrefix) {
  const std::string text =
      "{\"timestamp\": 1000, \"input_length\": 1500, \"output_length\": 7, \"hash_ids\": [0, 1, "
      "2]}\n"
      "{\"timestamp\": 1000, \"input_length\": 1100, \"output_length\": 1, \"hash_ids\": [0, 1, "
      "9]}\n"
      "\n"
      "{\"hash_ids\": [0, 5], \"timestamp\": 4500, \"output_length\": 3, \"input_length\": 600}\n"
      "{\"timestamp\": 4500, \"input_length\": 100, \"output_length\": 0, \"hash_ids\": [1]}\n";
  const auto trace = parse_mooncake_trace(text, "inline.jsonl", {.time_scale = 0.5});
  ASSERT_EQ(trace.size(), 4u);
  EXPECT_EQ(trace[0].arrival_s, 0.0);
  EXPECT_EQ(trace[2].arrival_s, 1.75) << "(4500 − 1000) ms at time scale 0.5";
  EXPECT_EQ(trace[0].prompt_tokens, 1500);
  EXPECT_EQ(trace[0].output_tokens, 7);
  EXPECT_EQ(trace[0].reusable_prefix_tokens, 0);
  EXPECT_EQ(trace[1].reusable_prefix_tokens, 1024) << "blocks 0 and 1";
  EXPECT_EQ(trace[2].reusable_prefix_tokens, 512) << "block 0 only: 5 is new at position 1";
  EXPECT_EQ(trace[3].reusable_prefix_tokens, 0) << "id 1 was seen, but at position 1";
  EXPECT_EQ(parse_mooncake_trace(text, "inline.jsonl", {.max_requests = 2}).size(), 2u);
}

TEST(MooncakeTrace, MalformedRowsNameTheLineAndField) {
  const std::string good =
      "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [3]}\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"timestamp\": 0, \"input_length\": 5}",
       "needs timestamp, input_length and output_length"},
      {"{\"timestamp\": 0, \"input_length\": 2147483648, \"output_length\": 1}",
       "input_length must be a whole number"},
      {"{\"timestamp\": 0, \"input_length\": 2147483000, \"output_length\": 1000}", "past 32 bits"},
      {"{\"timestamp\": -5, \"input_length\": 5, \"output_length\": 1}",
       "timestamp must be a whole number"},
      {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1, 2]}",
       "2 ids for 1 blocks"},
      {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"extra\": 1}",
       "unknown or repeated key 'extra'"},
      {"{\"timestamp\": 0, \"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}",
       "unknown or repeated key 'timestamp'"},
      {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1} trailing",
       "text after the object"},
      {"[1, 2]", "expected a JSON object"},
      {"{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1}", "at least 1"},
  };
  for (const auto& [row, want] : cases) {
    try {
      (void)parse_mooncake_trace(good + row + "\n", "bad.jsonl");
      ADD_FAILURE() << "accepted " << row;
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("bad.jsonl:2: "), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(want), std::string::npos) << e.message();
    }
  }
  try {
    (void)parse_mooncake_trace(
        good + "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n" +
            "{\"timestamp\": 9, \"input_length\": 5, \"output_length\": 1}\n" +
            "{\"timestamp\": 8, \"input_length\": 5, \"output_length\": 1}\n",
        "bad.jsonl");
    ADD_FAILURE() << "a decreasing timestamp was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("bad.jsonl:4: timestamps must not decrease"), std::string::npos)
        << e.message();
  }
  EXPECT_THROW((void)parse_mooncake_trace("\n\n", "empty.jsonl"), Error);
}

/// Writes `text` to a trace file of its own and returns its path.
std::string trace_file(const std::string& name, const std::string& text) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("ff_trace_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

TEST(Trace, TheTimeScaleIsBounded) {
  for (const double scale : {1e300, 1001.0, 0.0, -1.0}) {
    for (const bool mooncake : {false, true}) {
      try {
        if (mooncake) {
          (void)parse_mooncake_trace(
              "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n", "t.jsonl",
              {.time_scale = scale});
        } else {
          (void)parse_azure_trace(kSmall, "t.csv", {.time_scale = scale});
        }
        ADD_FAILURE() << "time scale " << scale << " was accepted";
      } catch (const Error& e) {
        EXPECT_NE(e.message().find("the trace time scale must be above 0 and at most 1000"),
                  std::string::npos)
            << e.message();
      }
    }
  }
  EXPECT_EQ(parse_azure_trace(kSmall, "t.csv", {.time_scale = 1000}).size(), 3u);
}

TEST(Trace, AnEmptyFileIsToldSo) {
  for (const std::string text : {"", "\n \r\n", "\xEF\xBB\xBF", "\xEF\xBB\xBF\n"}) {
    const std::string path = trace_file("empty.txt", text);
    try {
      (void)load_trace(path);
      ADD_FAILURE() << "an empty trace was read";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("empty trace file '" + path + "'"), std::string::npos)
          << e.message();
      EXPECT_EQ(e.message().find("expected the header"), std::string::npos) << e.message();
    }
    std::filesystem::remove(path);
  }
  try {
    (void)parse_azure_trace("", "e.csv");
    ADD_FAILURE() << "an empty CSV was read";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("empty trace file 'e.csv'"), std::string::npos) << e.message();
  }
}

TEST(MooncakeTrace, AByteOrderMarkBeforeTheFirstRowIsSkipped) {
  const std::string row =
      "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [3]}\n";
  const std::string path = trace_file("bom.jsonl", "\xEF\xBB\xBF" + row + row);
  EXPECT_EQ(load_trace(path).size(), 2u) << "read as Mooncake's, not as a CSV without its header";
  EXPECT_EQ(parse_mooncake_trace("\xEF\xBB\xBF" + row, "bom.jsonl").size(), 1u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace freezeframe
