#include "mpitron/parallel/collective_progress.hpp"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>

#include "mpitron/core/error.hpp"
#include "mpitron/core/trace.hpp"

namespace mpitron {

ProgressMode parse_progress_mode(const std::string& s) {
  if (s == "thread") return ProgressMode::thread;
  if (s == "poll") return ProgressMode::poll;
  if (s == "none") return ProgressMode::none;
  throw UsageError(fmt::format("parallel.dp_progress = \"{}\": allowed values are thread, poll, none", s));
}

const char* progress_mode_name(ProgressMode m) {
  return m == ProgressMode::thread ? "thread" : m == ProgressMode::poll ? "poll" : "none";
}

CommProgress::CommProgress(ProgressMode mode) : mode_(mode) {
  if (mode_ == ProgressMode::thread) {
    thread_ = std::thread([this] { progress_loop(); });
    pthread_setname_np(thread_.native_handle(), "mpitron-ddp");  // named in top, gdb and /proc
  }
}

CommProgress::~CommProgress() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Requests still in flight are waited for by their destructors (never free busy memory).
}

CommProgress::Handle CommProgress::add(Request r, std::function<void()> on_done) {
  auto op = std::make_shared<Op>();
  op->req = std::move(r);
  op->on_done = std::move(on_done);
  op->start = Clock::now();
  Handle h;
  {
    std::lock_guard<std::mutex> lk(mu_);
    h = next_handle_++;
    ops_.emplace(h, op);
  }
  if (mode_ == ProgressMode::thread) cv_work_.notify_one();
  return h;
}

void CommProgress::progress_loop() {
  std::vector<std::shared_ptr<Op>> pending;
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    pending.clear();
    for (auto& [h, op] : ops_)
      if (!op->complete) pending.push_back(op);
    if (pending.empty()) {
      cv_work_.wait(lk);
      continue;
    }
    lk.unlock();
    for (auto& op : pending) {
      if (!op->req->test()) continue;  // MPI_Test: drives this op's rounds forward
      auto end = Clock::now();
      std::lock_guard<std::mutex> g(mu_);
      op->complete = true;
      op->end = end;
      cv_done_.notify_all();
    }
    // Short sleeps: often enough to keep a ring moving, rare enough to leave the core to compute.
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    lk.lock();
  }
}

std::string CommProgress::op_name(const Op& op) {
  const CommOpTag t = op.req ? op.req->tag() : CommOpTag{};
  std::string name = *t.op ? t.op : "collective";
  if (name.size() > 7 && name.compare(name.size() - 7, 7, " (wait)") == 0) name.resize(name.size() - 7);
  return t.count ? fmt::format("{} ({} x {})", name, t.count, dtype_name(t.dtype)) : name;
}

void CommProgress::finish(Op& op) {
  if (op.finished) return;
  op.finished = true;
  if (op.on_done) op.on_done();
}

void CommProgress::poll() {
  std::vector<std::shared_ptr<Op>> ready;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [h, op] : ops_) {
      if (op->finished) continue;
      if (!op->complete && mode_ == ProgressMode::poll && op->req->test()) {
        op->complete = true;
        op->end = Clock::now();
      }
      if (op->complete) ready.push_back(op);
    }
  }
  for (auto& op : ready) finish(*op);
}

void CommProgress::wait(Handle h) {
  std::shared_ptr<Op> op;
  {
    std::lock_guard<std::mutex> lk(mu_);
    check(h < next_handle_, "CommProgress::wait: unknown handle {}", h);
    auto it = ops_.find(h);
    if (it == ops_.end()) return;  // finished and accounted for by take_timing
    op = it->second;
  }
  if (op->finished) return;
  auto t0 = Clock::now();
  if (mode_ == ProgressMode::thread) {
    CommWait w(op->req->tag());  // the progress thread drives it; this thread is the one waiting
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [&] { return op->complete; });
  } else {
    bool was_complete;
    {
      std::lock_guard<std::mutex> lk(mu_);
      was_complete = op->complete;
    }
    if (!was_complete) {
      op->req->wait();
      std::lock_guard<std::mutex> lk(mu_);
      op->complete = true;
      op->end = Clock::now();
    }
  }
  const auto t1 = Clock::now();
  exposed_ms_ += std::chrono::duration<double, std::milli>(t1 - t0).count();
  if (trace::enabled()) trace::event("waiting for " + op_name(*op), trace::compute, t0, t1);
  finish(*op);
}

void CommProgress::wait_all() {
  std::vector<Handle> hs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [h, op] : ops_) hs.push_back(h);
  }
  for (Handle h : hs) wait(h);
}

bool CommProgress::done(Handle h) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = ops_.find(h);
  return h < next_handle_ && (it == ops_.end() || it->second->finished);
}

void CommProgress::blocking(const std::function<void()>& f) {
  auto t0 = Clock::now();
  f();
  auto t1 = Clock::now();
  exposed_ms_ += std::chrono::duration<double, std::milli>(t1 - t0).count();
  if (trace::enabled()) {  // in flight and waited for, the whole time
    trace::lane_event("blocking collective", trace::comm, t0, t1);
    trace::event("waiting for blocking collective", trace::compute, t0, t1);
  }
  std::lock_guard<std::mutex> lk(mu_);
  intervals_.emplace_back(t0, t1);
}

CommTiming CommProgress::take_timing() {
  std::lock_guard<std::mutex> lk(mu_);
  // The timeline (trace.hpp): each collective from launch to completion, on a comm lane.
  for (auto it = ops_.begin(); it != ops_.end();) {
    if (!it->second->finished) {  // still in flight (ZeRO-1/2's parameter gathers): the next period's
      ++it;
      continue;
    }
    std::shared_ptr<Op> op = it->second;
    it = ops_.erase(it);
    intervals_.emplace_back(op->start, op->end);
    if (trace::enabled()) trace::lane_event(op_name(*op), trace::comm, op->start, op->end);
  }
  std::sort(intervals_.begin(), intervals_.end());
  CommTiming t;
  Clock::time_point cur_b{}, cur_e{};
  bool open = false;
  for (auto& [b, e] : intervals_) {
    if (open && b <= cur_e) {
      cur_e = std::max(cur_e, e);
      continue;
    }
    if (open) t.comm_ms += std::chrono::duration<double, std::milli>(cur_e - cur_b).count();
    cur_b = b, cur_e = e, open = true;
  }
  if (open) t.comm_ms += std::chrono::duration<double, std::milli>(cur_e - cur_b).count();
  t.exposed_ms = std::min(exposed_ms_, t.comm_ms);
  intervals_.clear();
  exposed_ms_ = 0;
  return t;
}

}  // namespace mpitron
