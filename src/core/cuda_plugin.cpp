// Finding and loading the CUDA backend's library (core/cuda_plugin.hpp).
#include "mpitron/core/cuda_plugin.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "mpitron/core/error.hpp"

namespace mpitron {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLibrary = "libmpitron-cuda.so";
// Any entry point: present in the program's dynamic symbols when the backend is linked in (the
// programs that link it export them: Makefile, CUDA_LINKED_IN).
constexpr const char* kProbeSymbol = "mpitron_cuda_probe_devices";

bool linked_in() { return dlsym(RTLD_DEFAULT, kProbeSymbol) != nullptr; }

void* load_library() {
  static std::once_flag once;
  static void* handle = nullptr;
  static std::string error;
  std::call_once(once, [] {
    const std::string path = cuda_plugin_path();
    if (path.empty()) {
      error = fmt::format("{} is not next to the mpitron binary nor in ../lib/mpitron/ (a CUDA build makes it "
                          "with the binary; install both)", kLibrary);
      return;
    }
    // RTLD_NOW: a library that does not fit this binary fails here, with the symbol named, rather
    // than at the first call of a missing function.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) error = fmt::format("cannot load the CUDA backend {}: {}", path, dlerror());
  });
  if (!handle) usage_fail("{}", error);
  return handle;
}

}  // namespace

std::string cuda_plugin_path() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (const fs::path& p : {exe.parent_path() / kLibrary, exe.parent_path() / "../lib/mpitron" / kLibrary})
    if (fs::exists(p, ec)) return p.lexically_normal().string();
  return "";
}

bool cuda_backend_may_run(std::string* why) {
#if !MPITRON_CUDA
  if (why) *why = "a CPU-only build (make CUDA=0)";
  return false;
#else
  if (linked_in()) return true;
  if (cuda_plugin_path().empty()) {
    if (why) *why = fmt::format("the CUDA backend's library {} is not installed next to the binary", kLibrary);
    return false;
  }
  // MPITRON_CUDA_LOAD=always: load it anyway (a driver whose device is elsewhere; a check that the
  // library loads on a machine without a GPU).
  const char* load = std::getenv("MPITRON_CUDA_LOAD");
  if (load && std::string(load) == "always") return true;
  if (access("/dev/nvidiactl", F_OK) != 0 && access("/dev/dxg", F_OK) != 0) {
    if (why) *why = "no NVIDIA GPU driver on this node: no /dev/nvidiactl";
    return false;
  }
  return true;
#endif
}

void* cuda_plugin_symbol(const char* name) {
#if !MPITRON_CUDA
  fail("{}: this is a CPU-only build of mpitron (CUDA=0), it has no CUDA backend", name);
#else
  if (void* p = dlsym(RTLD_DEFAULT, name)) return p;
  void* p = dlsym(load_library(), name);
  if (!p) usage_fail("the CUDA backend {} has no entry point {} (from another mpitron version?)", cuda_plugin_path(), name);
  return p;
#endif
}

}  // namespace mpitron
