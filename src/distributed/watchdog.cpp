// The hang watchdog: see include/mpitron/distributed/watchdog.hpp for what it does and why.
#include "mpitron/distributed/watchdog.hpp"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "mpitron/distributed/step_activity.hpp"

namespace mpitron {
namespace {

constexpr int kTagQuestion = 1;  // payload: a group name; answer: "<collectives started>\n<where>"
constexpr int kTagAnswer = 2;
constexpr int kTagNotice = 3;    // payload: what the reporting rank saw
constexpr size_t kMaxAsked = 256;  // peers asked about one hang (big DP groups: a sample is enough)

std::atomic<int> g_running{0};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", v[i]);
  return s;
}

}  // namespace

bool hang_watchdog_running() { return g_running.load() > 0; }

HangWatchdog::HangWatchdog(const LaunchInfo& launch, const WatchdogOptions& opt) : launch_(launch), opt_(opt) {
  if (launch_.world <= 1 || opt_.timeout_s <= 0) return;
  multiple_ = launch_.thread_level == MPI_THREAD_MULTIPLE;
  if (multiple_) MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  thread_ = std::thread([this] { run(); });
  pthread_setname_np(thread_.native_handle(), "mpitron-watch");
  g_running.fetch_add(1);
}

HangWatchdog::~HangWatchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  g_running.fetch_sub(1);
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;  // a caller that finalized MPI first: nothing left to free (MPI would abort)
  // Answers still in flight: small messages complete at once; never wait on a dead peer.
  for (auto& o : outgoing_) {
    int done = 0;
    MPI_Test(&o->req, &done, MPI_STATUS_IGNORE);
    if (!done) {
      MPI_Cancel(&o->req);
      MPI_Request_free(&o->req);
    }
  }
  outgoing_.clear();
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void HangWatchdog::say(const std::string& text) const {
  std::fprintf(stderr, "mpitron: rank %d on %s: %s\n", launch_.rank, launch_.host.c_str(), text.c_str());
  std::fflush(stderr);
}

std::string HangWatchdog::where() const {
  const int step = activity_step();
  std::string s = step >= 0 ? fmt::format("at step {} (phase '{}')", step, activity_phase())
                            : fmt::format("outside the training steps (phase '{}')", activity_phase());
  const auto waits = waits_in_progress();
  if (waits.empty()) return s + ", not waiting on communication";
  for (const auto& w : waits) s += fmt::format(", waiting {:.1f} s in {}", w.waited_s, describe_wait(w));
  return s;
}

void HangWatchdog::post(int dest, int tag, std::string text) {
  auto o = std::make_unique<Outgoing>();
  o->text = std::move(text);
  MPI_Isend(o->text.data(), static_cast<int>(o->text.size()), MPI_CHAR, dest, tag, comm_, &o->req);
  outgoing_.push_back(std::move(o));
}

void HangWatchdog::serve() {
  if (!multiple_) return;
  for (int tag : {kTagQuestion, kTagNotice}) {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, tag, comm_, &flag, &st);
      if (!flag) break;
      int n = 0;
      MPI_Get_count(&st, MPI_CHAR, &n);
      std::string msg(static_cast<size_t>(std::max(n, 0)), '\0');
      MPI_Recv(msg.data(), n, MPI_CHAR, st.MPI_SOURCE, tag, comm_, MPI_STATUS_IGNORE);
      if (tag == kTagQuestion) {
        const CommGroupInfo* g = find_comm_group(msg);
        long long started = g ? static_cast<long long>(g->collectives_started()) : -1;
        post(st.MPI_SOURCE, kTagAnswer, fmt::format("{}\n{}", started, where()));
      } else if (!noticed_) {
        noticed_ = true;  // one line per rank, however many ranks report
        say(fmt::format("hang reported by rank {} ({}); here: {}", st.MPI_SOURCE, msg, where()));
      }
    }
  }
  // Drop the answers MPI is done with.
  outgoing_.erase(std::remove_if(outgoing_.begin(), outgoing_.end(),
                                 [](const std::unique_ptr<Outgoing>& o) {
                                   int done = 0;
                                   MPI_Test(&o->req, &done, MPI_STATUS_IGNORE);
                                   return done != 0;
                                 }),
                  outgoing_.end());
}

void HangWatchdog::run() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return stop_; })) return;
    }
    serve();
    for (const auto& w : waits_in_progress()) {
      const double limit = w.tag.limit_s > 0 ? w.tag.limit_s : opt_.timeout_s;
      if (w.waited_s > limit) fire(w, limit);
    }
  }
}

void HangWatchdog::fire(const WaitInProgress& w, double limit) {
  const std::string what = describe_wait(w);
  noticed_ = true;  // this rank reports; others' notices would repeat it
  const int step = activity_step();
  say(fmt::format("hang: {} has not completed after {:.0f} s ({} = {} s); this rank is {} (phase '{}')", what,
                  w.waited_s, w.tag.limit_s > 0 ? "its limit" : "comm.timeout_s", limit,
                  step >= 0 ? fmt::format("at step {}", step) : std::string("outside the training steps"),
                  activity_phase()));
  // Whom to ask: the peer of a point-to-point operation, else the group's other members (the
  // whole world for a wait that is not on a Comm, such as collective file I/O).
  std::vector<int> ask;
  if (w.tag.peer >= 0) ask = {w.tag.peer};
  else if (w.tag.group) ask = w.world_ranks;
  else for (int r = 0; r < launch_.world; ++r) ask.push_back(r);
  ask.erase(std::remove(ask.begin(), ask.end(), launch_.rank), ask.end());
  if (ask.size() > kMaxAsked) ask.resize(kMaxAsked);

  std::vector<std::string> lines;
  std::vector<int> absent;
  if (multiple_ && !ask.empty()) {
    std::vector<MPI_Request> reqs(ask.size(), MPI_REQUEST_NULL);
    std::vector<std::string> answers(ask.size(), std::string(4096, '\0'));
    for (size_t i = 0; i < ask.size(); ++i) {
      MPI_Irecv(answers[i].data(), static_cast<int>(answers[i].size()), MPI_CHAR, ask[i], kTagAnswer, comm_, &reqs[i]);
      post(ask[i], kTagQuestion, w.group_name);
    }
    std::vector<int> got(ask.size(), -1);  // answer length, -1: none yet
    const auto t0 = Clock::now();
    while (seconds_since(t0) < opt_.answer_wait_s &&
           std::count(got.begin(), got.end(), -1) > 0) {
      for (size_t i = 0; i < ask.size(); ++i) {
        if (got[i] >= 0) continue;
        int done = 0;
        MPI_Status st;
        MPI_Test(&reqs[i], &done, &st);
        if (done) MPI_Get_count(&st, MPI_CHAR, &got[i]);
      }
      serve();  // a peer reporting the same hang at the same time is asking us too
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (size_t i = 0; i < ask.size(); ++i) {
      if (got[i] < 0) {
        MPI_Cancel(&reqs[i]);
        absent.push_back(ask[i]);
        lines.push_back(fmt::format("rank {}: no answer within {:.0f} s (stopped, dead or unreachable)", ask[i],
                                    opt_.answer_wait_s));
        continue;
      }
      const std::string a = answers[i].substr(0, static_cast<size_t>(got[i]));
      const size_t nl = a.find('\n');
      const long long started = std::atoll(a.substr(0, nl).c_str());
      const std::string there = nl == std::string::npos ? a : a.substr(nl + 1);
      const bool arrived = w.tag.seq > 0 && started >= static_cast<long long>(w.tag.seq);
      if (!arrived) absent.push_back(ask[i]);
      if (w.tag.seq > 0)
        lines.push_back(fmt::format("rank {}: {} ({} collectives started on '{}'): {}", ask[i],
                                    arrived ? "arrived" : "did not arrive", started, w.group_name, there));
      else
        lines.push_back(fmt::format("rank {}: {}", ask[i], there));
    }
  }
  for (const auto& l : lines) say("hang: " + l);
  if (!absent.empty() && w.tag.seq > 0)
    say(fmt::format("hang: ranks that did not arrive in {}: {}", what, join(absent)));
  else if (!absent.empty())
    say(fmt::format("hang: ranks that did not answer or are elsewhere: {}", join(absent)));
  say(fmt::format("hang: aborting the job (exit {}) in {:.0f} s", kExitHang, opt_.grace_s));
  if (multiple_) {
    std::string notice = fmt::format("it waited {:.0f} s in {}", w.waited_s, what);
    for (int r = 0; r < launch_.world; ++r)
      if (r != launch_.rank) post(r, kTagNotice, notice);
    const auto t0 = Clock::now();
    while (seconds_since(t0) < opt_.grace_s) {
      serve();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  // From this thread while the main thread sits in MPI: fine under MPI_THREAD_MULTIPLE, and the
  // best chance to take the job down otherwise.
  MPI_Abort(MPI_COMM_WORLD, kExitHang);
  std::_Exit(kExitHang);
}

}  // namespace mpitron
