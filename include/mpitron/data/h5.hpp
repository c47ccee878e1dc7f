// Small RAII + attribute helpers over the HDF5 C API: the shard reader and writer (src/data), the
// checkpoint files (src/checkpoint) and `mpitron inspect`.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mpitron::h5 {

// Owns one hid_t; closes it with the matching H5*close.
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  ~Id() { reset(); }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  Id(Id&& o) noexcept : id_(o.id_) { o.id_ = -1; }
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = -1;
    }
    return *this;
  }
  void reset();
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
};

// Turns off HDF5's automatic error-stack printing (we report our own messages). Idempotent.
void quiet();

// Why the last HDF5 call on this thread failed, from its error stack: the innermost message and,
// when the failure came from a system call, errno's text ("No space left on device", "File too
// large"). E.g. "incorrect metadata checksum after all read attempts". "" when the stack is empty.
// Call it right after the failing call (the next HDF5 call clears the stack).
std::string error_cause();

void write_attr_i64(hid_t obj, const char* name, int64_t v);
void write_attr_str(hid_t obj, const char* name, const std::string& v);
void write_attr_strs(hid_t obj, const char* name, const std::vector<std::string>& v);
// Fixed-length UTF-8 strings: the bytes live in the attribute message itself (the object header,
// checksummed in files written with libver bounds >= V18), not in the global heap, which has no
// checksum and whose corruption crashes libhdf5 1.10.8 inside H5Aread (tests/fuzz, README).
void write_attr_fixed_str(hid_t obj, const char* name, const std::string& v);
void write_attr_fixed_strs(hid_t obj, const char* name, const std::vector<std::string>& v);
bool has_attr(hid_t obj, const char* name);
// The readers check that the attribute holds one value (a crafted file can give it any shape),
// of an integer type or a string (fixed- or variable-length); Error naming file and attribute.
int64_t read_attr_i64(hid_t obj, const char* name, const std::string& file);
std::string read_attr_str(hid_t obj, const char* name, const std::string& file);
// True when attribute/dataset `a` (an open attribute) holds exactly one element.
bool attr_is_single(hid_t a);

}  // namespace mpitron::h5
