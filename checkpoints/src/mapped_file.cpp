#include "mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "freezeframe/base/error.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/printable.h"

namespace freezeframe {

MappedFile MappedFile::open(const std::string& path, std::string_view kind) {
  // Checked before the open: opening a FIFO would wait for a writer. O_NONBLOCK keeps a file
  // that becomes one in between from blocking; fstat below refuses it then.
  require_regular_file(path, kind);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  FF_CHECK(fd >= 0, ErrorCode::kNotFound, "cannot open ", kind, " file ", quote(path, 200), ": ",
           std::strerror(errno));
  struct stat st {};
  const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!regular) ::close(fd);
  FF_CHECK(regular, ErrorCode::kInvalidArgument, kind, " file ", quote(path, 200),
           " is not a regular file");
  MappedFile file;
  file.size_ = static_cast<std::uint64_t>(st.st_size);
  void* base = MAP_FAILED;
  if (file.size_ > 0) base = mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);
  FF_CHECK(file.size_ == 0 || base != MAP_FAILED, ErrorCode::kInvalidArgument, path,
           ": cannot be mapped: ", std::strerror(error));
  if (file.size_ > 0) file.base_ = base;
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) munmap(base_, size_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (base_ != nullptr) munmap(base_, size_);
}

}  // namespace freezeframe
