// Metrics: records of named values (a step's loss, rates, memory, ...) go to a MetricsSink. The
// one sink today is MetricsWriter: one JSON object per record appended to
// <run_dir>/metrics.jsonl (rank 0 only), with at least "step" and "loss" on step records. Another
// destination (a TensorBoard file, a socket) is one more class deriving from MetricsSink.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace mpitron {

class MetricsSink {
 public:
  using Value = std::variant<double, int64_t, std::string>;
  using Record = std::vector<std::pair<std::string, Value>>;
  virtual ~MetricsSink() = default;
  virtual void write(const Record& fields) = 0;
};

// metrics.jsonl. Values are written as they are; NaN/Inf become null so every line stays valid JSON.
class MetricsWriter final : public MetricsSink {
 public:
  MetricsWriter() = default;
  // Opens path (creating parent folders): appending when a run resumes, else truncating so a
  // fresh run's file holds only its own records. An empty path disables writing.
  // resumed_step >= 0 (with append): records of later steps are dropped first. They come from a
  // run that went past its last checkpoint before it died; the resumed run redoes those steps,
  // and the file must not hold two different losses for one step.
  MetricsWriter(const std::string& path, bool append, int64_t resumed_step = -1);
  ~MetricsWriter() override;
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const Record& fields) override;

 private:
  std::FILE* f_ = nullptr;
};

// "a/b/c" -> creates a, a/b, a/b/c. Throws Error naming the path on failure.
void make_dirs(const std::string& path);

}  // namespace mpitron
