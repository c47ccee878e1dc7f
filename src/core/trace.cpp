// The step timeline (trace.hpp).
#include "mpitron/core/trace.hpp"

#include <fmt/format.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "mpitron/core/error.hpp"

namespace mpitron::trace {
namespace {

struct Event {
  std::string name;
  int track;
  Clock::time_point b, e;
};

std::atomic<bool> g_on{false};
std::mutex g_mu;
std::vector<Event> g_events;
std::map<int, std::vector<Clock::time_point>> g_lane_free;  // base track -> each lane's last end

double us(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    else out += c;
  }
  return out + "\"";
}

std::string track_name(int t) {
  if (t == compute) return "compute";
  if (t == data) return "data";
  if (t == tp) return "tp";
  if (t == ep) return "ep";
  if (t == checkpoint) return "checkpoint";
  if (t == pp_recv) return "pp recv";
  if (t >= cp) return fmt::format("cp {}", t - cp);
  if (t >= pp_send) return fmt::format("pp send {}", t - pp_send);
  if (t >= comm) return fmt::format("comm {}", t - comm);
  return fmt::format("track {}", t);
}

}  // namespace

bool enabled() { return g_on.load(std::memory_order_relaxed); }
void set_enabled(bool on) { g_on.store(on, std::memory_order_relaxed); }

void event(const std::string& name, int track, Clock::time_point b, Clock::time_point e) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_events.push_back({name, track, b, e});
}

void lane_event(const std::string& name, int base, Clock::time_point b, Clock::time_point e) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto& free = g_lane_free[base];
  size_t lane = 0;
  while (lane < free.size() && free[lane] > b) ++lane;
  if (lane == free.size()) free.push_back(e);
  else free[lane] = e;
  g_events.push_back({name, base + static_cast<int>(lane), b, e});
}

void write(const std::string& path, int rank) {
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    events.swap(g_events);
    g_lane_free.clear();
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    usage_check(static_cast<bool>(out), "train.trace_steps: cannot write '{}'", tmp);
    out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    out << fmt::format(R"({{"name": "process_name", "ph": "M", "pid": {}, "args": {{"name": "rank {}"}}}})", rank, rank);
    std::set<int> tracks;
    for (const Event& ev : events) tracks.insert(ev.track);
    for (int t : tracks)
      out << fmt::format(",\n{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"args\": {{\"name\": {}}}}}",
                         rank, t, json_string(track_name(t)));
    for (const Event& ev : events)
      out << fmt::format(",\n{{\"name\": {}, \"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"ts\": {:.3f}, \"dur\": {:.3f}}}",
                         json_string(ev.name), rank, ev.track, us(ev.b),
                         std::chrono::duration<double, std::micro>(ev.e - ev.b).count());
    out << "\n]}\n";
    usage_check(static_cast<bool>(out), "train.trace_steps: writing '{}' failed", tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  usage_check(!ec, "train.trace_steps: cannot rename '{}' to '{}': {}", tmp, path, ec.message());
}

}  // namespace mpitron::trace
