// Files that appear whole or not at all: written as PATH.tmp, flushed to disk, renamed (the
// export writers). Private to src/checkpoint.
#pragma once
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "mpitron/core/error.hpp"

namespace mpitron {

class TmpFile {
 public:
  explicit TmpFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
    f_ = std::fopen(tmp_.c_str(), "wb");
    usage_check(f_ != nullptr, "cannot write '{}': {}", tmp_, std::strerror(errno));
  }
  TmpFile(const TmpFile&) = delete;
  TmpFile& operator=(const TmpFile&) = delete;
  ~TmpFile() {  // not committed: an error on the way; leave nothing behind
    if (f_) {
      std::fclose(f_);
      std::remove(tmp_.c_str());
    }
  }
  void write(const void* p, size_t n) {
    usage_check(std::fwrite(p, 1, n, f_) == n, "cannot write '{}': {}", tmp_, std::strerror(errno));
  }
  // Flush, fsync, close, rename into place.
  void commit() {
    const bool ok = std::fflush(f_) == 0 && ::fsync(fileno(f_)) == 0;
    const int err = errno;
    std::fclose(f_);
    f_ = nullptr;
    if (!ok) std::remove(tmp_.c_str());
    usage_check(ok, "cannot write '{}': {}", tmp_, std::strerror(err));
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int rerr = errno;
      std::remove(tmp_.c_str());  // e.g. PATH is a folder: the whole file goes, not only the rename
      usage_fail("cannot rename '{}' to '{}': {}", tmp_, path_, std::strerror(rerr));
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  FILE* f_ = nullptr;
};

}  // namespace mpitron
