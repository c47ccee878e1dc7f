#include "mpitron/train/metrics.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "mpitron/core/error.hpp"

namespace mpitron {

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  check(!ec, "cannot create directory '{}': {}", path, ec.message());
}

namespace {

// The "step" of one metrics.jsonl line, or -1 when it has none (memory records).
int64_t record_step(const std::string& line) {
  const std::string key = "\"step\": ";
  size_t at = line.find(key);
  return at == std::string::npos ? -1 : std::strtoll(line.c_str() + at + key.size(), nullptr, 10);
}

// Rewrites path without the records of steps after `step`, and without a last line cut short
// (a full disk, a kill in the middle of a write: not JSON, and the resumed run appends after it).
// Temp file + rename: a crash leaves either the old or the new file.
void drop_records_after(const std::string& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;  // nothing logged yet
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  std::string kept;
  bool dropped = false;
  for (size_t at = 0; at < all.size();) {
    size_t nl = all.find('\n', at);
    if (nl == std::string::npos) {  // no newline: cut short
      dropped = true;
      break;
    }
    std::string line = all.substr(at, nl - at);
    at = nl + 1;
    if (record_step(line) > step) dropped = true;
    else kept += line + "\n";
  }
  if (!dropped) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    check(static_cast<bool>(out), "cannot write '{}'", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  check(!ec, "cannot rename '{}' to '{}': {}", tmp, path, ec.message());
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, bool append, int64_t resumed_step) {
  if (path.empty()) return;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) make_dirs(parent.string());
  if (append && resumed_step >= 0) drop_records_after(path, resumed_step);
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  check(f_ != nullptr, "cannot open metrics file '{}' for writing", path);
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

namespace {
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", c);
    else out += c;
  }
  return out + "\"";
}
}  // namespace

void MetricsWriter::write(const Record& fields) {
  if (!f_) return;
  std::string line = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& [k, v] = fields[i];
    line += (i ? ", " : "") + json_string(k) + ": ";
    if (auto d = std::get_if<double>(&v)) line += std::isfinite(*d) ? fmt::format("{}", *d) : "null";  // shortest exact: resumes compare bit for bit
    else if (auto n = std::get_if<int64_t>(&v)) line += std::to_string(*n);
    else line += json_string(std::get<std::string>(v));
  }
  line += "}\n";
  std::fputs(line.c_str(), f_);
  std::fflush(f_);
}

}  // namespace mpitron
