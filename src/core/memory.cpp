#include "mpitron/core/memory.hpp"

#include "mpitron/core/error.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace mpitron {

std::string_view mem_name(Mem m) {
  switch (m) {
    case Mem::params: return "params";
    case Mem::grads: return "grads";
    case Mem::optim: return "optim";
    case Mem::activations: return "activations";
    case Mem::comm: return "comm";
    case Mem::workspace: return "workspace";
    case Mem::data: return "data";
    case Mem::checkpoint: return "checkpoint";
    default: return "?";
  }
}

namespace {
void raise_peak(std::atomic<int64_t>& peak, int64_t v) {
  int64_t p = peak.load(std::memory_order_relaxed);
  while (v > p && !peak.compare_exchange_weak(p, v, std::memory_order_relaxed)) {
  }
}
}  // namespace

void MemTracker::on_alloc(Mem m, int64_t bytes) {
  auto i = static_cast<size_t>(m);
  raise_peak(peak_[i], live_[i].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  raise_peak(total_peak_, total_live_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void MemTracker::on_free(Mem m, int64_t bytes) {
  live_[static_cast<size_t>(m)].fetch_sub(bytes, std::memory_order_relaxed);
  total_live_.fetch_sub(bytes, std::memory_order_relaxed);
}

MemStats MemTracker::stats() const {
  MemStats s;
  for (size_t i = 0; i < kMemCategories; ++i) {
    s.live[i] = live_[i].load();
    s.peak[i] = peak_[i].load();
  }
  s.total_live = total_live_.load();
  s.total_peak = total_peak_.load();
  return s;
}

void MemTracker::reset_peaks() {
  for (size_t i = 0; i < kMemCategories; ++i) peak_[i].store(live_[i].load());
  total_peak_.store(total_live_.load());
}

MemTracker& MemTracker::host() {
  static MemTracker t;
  return t;
}

MemTracker& MemTracker::cuda() {
  static MemTracker t;
  return t;
}

void* host_alloc(Mem m, size_t bytes, Fill fill) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) {  // name what did not fit, and what this process holds already (the ledger's categories)
    const MemStats st = MemTracker::host().stats();
    int64_t live = 0;
    for (int64_t v : st.live) live += v;
    fail("out of host memory: cannot allocate {} for {} (this process holds {} already, {} of it {}); "
         "`mpitron plan` predicts the bytes per rank: shard further (ZeRO, tp, pp, cp) or lower the micro-batch or seq_len",
         format_bytes(static_cast<int64_t>(bytes)), mem_name(m), format_bytes(live),
         format_bytes(st.live[static_cast<size_t>(m)]), mem_name(m));
  }
  if (fill == Fill::zeros) std::memset(p, 0, rounded);
#if defined(__SANITIZE_ADDRESS__)
  // aligned_alloc wants a multiple of the alignment, so ASan would see `rounded` bytes as the
  // buffer; poisoning the padding makes an access past `bytes` a heap-buffer-overflow there too
  // (ASan unpoisons the whole block again on free).
  ASAN_POISON_MEMORY_REGION(static_cast<char*>(p) + bytes, rounded - bytes);
#endif
  MemTracker::host().on_alloc(m, static_cast<int64_t>(bytes));
  return p;
}

void host_free(Mem m, void* p, size_t bytes) {
  if (!p) return;
  std::free(p);
  MemTracker::host().on_free(m, static_cast<int64_t>(bytes));
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace mpitron
