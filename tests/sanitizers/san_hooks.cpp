// Linked into the sanitizer build's executables only (Makefile, SAN=...): two fixes to how the
// sanitizer runtimes meet our third-party libraries. Not part of mpitron itself.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

// 1. A dlclose that keeps every shared object loaded. OpenMPI 4.1 dlopens its MCA components
// (mca_*.so) and PMIx its plugins, and dlcloses them in MPI_Finalize; LeakSanitizer reports at
// exit, when their address ranges no longer belong to any module, so the allocation stacks of
// their (deliberate, once-per-process) leaks read "<unknown module>" and no suppression in
// lsan.supp can name them. OpenMPI 5 has an MCA parameter for this (mca_base_component_disable_dlclose);
// 4.1 does not. Never unloading is harmless: each process exits right after MPI_Finalize.
// The executable exports it (-Wl,--export-dynamic-symbol=dlclose), so the libraries' calls bind
// to it ahead of libc's.
extern "C" int dlclose(void*) { return 0; }

// 2. UBSAN_OPTIONS=log_path in a GCC ASan + UBSan build. libubsan and libasan each carry their own
// copy of the report-file state; libubsan's start-up applies log_path by calling
// __sanitizer_set_report_path, which binds to libasan's (loaded first), so UBSan's own reports
// still went to stderr. tests/sanitizers/env.sh relies on report files (a finding in a process
// whose failure a test expects must still fail the test), so set libubsan's path directly.
namespace {
__attribute__((constructor)) void ubsan_report_path() {
  const char* opts = std::getenv("UBSAN_OPTIONS");
  const char* at = opts ? std::strstr(opts, "log_path=") : nullptr;
  if (!at) return;
  at += std::strlen("log_path=");
  const std::string path(at, std::strcspn(at, ": ,"));  // sanitizer option separators; copied by the runtime
  void* ubsan = dlopen("libubsan.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!ubsan) return;
  using SetPath = void (*)(const char*);
  if (auto set = reinterpret_cast<SetPath>(dlsym(ubsan, "__sanitizer_set_report_path"))) set(path.c_str());
}
}  // namespace
