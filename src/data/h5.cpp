#include "mpitron/data/h5.hpp"

#include <cerrno>
#include <cstring>
#include <mutex>

#include "mpitron/core/error.hpp"
#include "mpitron/data/hdf5_lock.hpp"

namespace mpitron {

std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}


namespace h5 {

void Id::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    default: break;
  }
  id_ = -1;
}

void quiet() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

namespace {

// One error stack entry: the description the library wrote at the failing line, and the text of
// its minor error code ("Address overflowed", "Write failed", ...).
herr_t collect_error(unsigned, const H5E_error2_t* e, void* out) {
  auto* v = static_cast<std::vector<std::string>*>(out);
  std::string d = e->desc ? e->desc : "";
  char minor[128] = {0};
  if (H5Eget_msg(e->min_num, nullptr, minor, sizeof minor) > 0 && d.find(minor) == std::string::npos)
    d += d.empty() ? minor : std::string(" (") + minor + ")";
  v->push_back(std::move(d));
  return 0;
}

}  // namespace

std::string error_cause() {
  const int saved_errno = errno;  // what the failing system call (if any) left behind
  std::vector<std::string> entries;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &entries);
  // Downward: from the API call to the line that detected the problem; the last one says why.
  std::string cause;
  for (auto it = entries.rbegin(); it != entries.rend() && cause.empty(); ++it) cause = *it;
  // The MPI-IO and POSIX drivers keep errno; a write that hit a full disk or a size limit
  // otherwise only says "file write failed".
  if (saved_errno == ENOSPC || saved_errno == EFBIG || saved_errno == EDQUOT || saved_errno == EIO ||
      saved_errno == EROFS) {
    std::string sys = std::strerror(saved_errno);
    if (cause.find(sys) == std::string::npos) cause += (cause.empty() ? "" : ": ") + sys;
  }
  return cause;
}

void write_attr_i64(hid_t obj, const char* name, int64_t v) {
  Id space(H5Screate(H5S_SCALAR));
  Id a(H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT));
  check(a.valid() && H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0, "HDF5: cannot write attribute '{}'", name);
}

void write_attr_str(hid_t obj, const char* name, const std::string& v) {
  // Variable-length UTF-8 string: h5py returns a str, h5dump prints it.
  Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  Id space(H5Screate(H5S_SCALAR));
  Id a(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT));
  const char* p = v.c_str();
  check(a.valid() && H5Awrite(a, type, &p) >= 0, "HDF5: cannot write attribute '{}'", name);
}

void write_attr_strs(hid_t obj, const char* name, const std::vector<std::string>& v) {
  Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  hsize_t n = v.size();
  Id space(n ? H5Screate_simple(1, &n, nullptr) : H5Screate(H5S_NULL));
  std::vector<const char*> ptrs;
  for (const auto& s : v) ptrs.push_back(s.c_str());
  Id a(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT));
  check(a.valid() && (n == 0 || H5Awrite(a, type, ptrs.data()) >= 0), "HDF5: cannot write attribute '{}'", name);
}

void write_attr_fixed_str(hid_t obj, const char* name, const std::string& v) {
  Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, v.empty() ? 1 : v.size());  // HDF5 has no 0-byte strings
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  H5Tset_cset(type, H5T_CSET_UTF8);
  Id space(H5Screate(H5S_SCALAR));
  Id a(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT));
  std::string buf = v.empty() ? std::string(1, '\0') : v;
  check(a.valid() && H5Awrite(a, type, buf.data()) >= 0, "HDF5: cannot write attribute '{}'", name);
}

void write_attr_fixed_strs(hid_t obj, const char* name, const std::vector<std::string>& v) {
  size_t width = 1;
  for (const auto& s : v) width = s.size() > width ? s.size() : width;
  Id type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, width);
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  H5Tset_cset(type, H5T_CSET_UTF8);
  hsize_t n = v.size();
  Id space(n ? H5Screate_simple(1, &n, nullptr) : H5Screate(H5S_NULL));
  std::string buf(v.size() * width, '\0');
  for (size_t i = 0; i < v.size(); ++i) v[i].copy(buf.data() + i * width, width);
  Id a(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT));
  check(a.valid() && (n == 0 || H5Awrite(a, type, buf.data()) >= 0), "HDF5: cannot write attribute '{}'", name);
}

bool has_attr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

bool attr_is_single(hid_t a) {
  Id space(H5Aget_space(a));
  return space.valid() && H5Sget_simple_extent_npoints(space) == 1;
}

int64_t read_attr_i64(hid_t obj, const char* name, const std::string& file) {
  check(has_attr(obj, name), "{}: missing attribute '{}' (not an mpitron shard?)", file, name);
  Id a(H5Aopen(obj, name, H5P_DEFAULT));
  check(a.valid(), "{}: cannot open attribute '{}' (corrupted file?)", file, name);
  Id ftype(H5Aget_type(a));
  // One integer: H5Aread writes every element of the attribute into &v.
  check(attr_is_single(a) && H5Tget_class(ftype) == H5T_INTEGER, "{}: attribute '{}' is not one integer", file,
        name);
  int64_t v = 0;
  check(H5Aread(a, H5T_NATIVE_INT64, &v) >= 0, "{}: cannot read integer attribute '{}'", file, name);
  return v;
}

std::string read_attr_str(hid_t obj, const char* name, const std::string& file) {
  check(has_attr(obj, name), "{}: missing attribute '{}' (not an mpitron shard?)", file, name);
  Id a(H5Aopen(obj, name, H5P_DEFAULT));
  check(a.valid(), "{}: cannot open attribute '{}' (corrupted file?)", file, name);
  Id ftype(H5Aget_type(a));
  check(H5Tget_class(ftype) == H5T_STRING, "{}: attribute '{}' is not a string", file, name);
  // One string: H5Aread writes every element (a pointer or a fixed-size string each) into the buffer.
  check(attr_is_single(a), "{}: attribute '{}' is not one string", file, name);
  if (H5Tis_variable_str(ftype) > 0) {
    Id mtype(H5Tcopy(H5T_C_S1));
    H5Tset_size(mtype, H5T_VARIABLE);
    H5Tset_cset(mtype, H5Tget_cset(ftype));
    char* p = nullptr;
    check(H5Aread(a, mtype, &p) >= 0, "{}: cannot read string attribute '{}'", file, name);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  // A fixed-length string is stored in the file at its full size: a larger claim is corruption
  // (and would be a huge allocation here).
  size_t n = H5Tget_size(ftype);
  hsize_t file_size = 0;
  Id fid(H5Iget_file_id(a));
  check(n > 0 && H5Fget_filesize(fid, &file_size) >= 0 && n <= file_size,
        "{}: string attribute '{}' claims {} bytes, more than the file holds (corrupted file?)", file, name, n);
  std::string s(n, '\0');
  check(H5Aread(a, ftype, s.data()) >= 0, "{}: cannot read string attribute '{}'", file, name);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

}  // namespace h5
}  // namespace mpitron
