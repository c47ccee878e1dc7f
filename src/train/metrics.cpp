#include "mpitron/train/metrics.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "mpitron/core/error.hpp"

namespace mpitron {

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  check(!ec, "cannot create directory '{}': {}", path, ec.message());
}

MetricsWriter::MetricsWriter(const std::string& path, bool append) {
  if (path.empty()) return;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) make_dirs(parent.string());
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

void MetricsWriter::write(const std::vector<std::pair<std::string, Value>>& fields) {
  if (!f_) return;
  std::string line = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& [k, v] = fields[i];
    line += (i ? ", " : "") + json_string(k) + ": ";
    if (auto d = std::get_if<double>(&v)) line += std::isfinite(*d) ? fmt::format("{:.9g}", *d) : "null";
    else if (auto n = std::get_if<int64_t>(&v)) line += std::to_string(*n);
    else line += json_string(std::get<std::string>(v));
  }
  line += "}\n";
  std::fputs(line.c_str(), f_);
  std::fflush(f_);
}

}  // namespace mpitron
