#include "freezeframe/base/input_file.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"

namespace freezeframe {
namespace {

std::string_view kind_of(std::filesystem::file_type type) {
  using std::filesystem::file_type;
  switch (type) {
    case file_type::directory: return "a directory";
    case file_type::character: return "a character device";
    case file_type::block: return "a block device";
    case file_type::fifo: return "a FIFO";
    case file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

}  // namespace

void require_regular_file(const std::string& path, std::string_view what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Follows links: a link to a regular file is fine. Opening a FIFO would block, so the type
  // is checked before the file is opened.
  const fs::file_status status = fs::status(path, ec);
  FF_CHECK(!ec && fs::exists(status), ErrorCode::kNotFound, "cannot read ", what, " file ",
           quote(path, 200), ec ? ": " + ec.message() : std::string(": no such file"));
  FF_CHECK(fs::is_regular_file(status), ErrorCode::kInvalidArgument, what, " file ",
           quote(path, 200), " is ", kind_of(status.type()), ", not a regular file");
}

std::string read_input_file(const std::string& path, std::string_view what,
                            std::int64_t max_bytes) {
  const std::string name = quote(path, 200);
  require_regular_file(path, what);
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  FF_CHECK(ec || size <= static_cast<std::uintmax_t>(max_bytes), ErrorCode::kInvalidArgument, what,
           " file ", name, " is ", size, " bytes (", format_bytes(static_cast<std::int64_t>(size)),
           "), more than the ", format_bytes(max_bytes), " a ", what, " file may be");
  std::ifstream in(path, std::ios::binary);
  FF_CHECK(in.good(), ErrorCode::kNotFound, "cannot read ", what, " file ", name);
  // The size may be wrong (files under /proc say 0) or change while reading: read at most one
  // byte past the limit.
  std::string text;
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof buffer);
    text.append(buffer, static_cast<std::size_t>(in.gcount()));
    FF_CHECK(static_cast<std::int64_t>(text.size()) <= max_bytes, ErrorCode::kInvalidArgument, what,
             " file ", name, " holds more than the ", format_bytes(max_bytes), " a ", what,
             " file may be");
  }
  FF_CHECK(!in.bad(), ErrorCode::kInvalidArgument, "cannot read ", what, " file ", name);
  return text;
}

}  // namespace freezeframe
