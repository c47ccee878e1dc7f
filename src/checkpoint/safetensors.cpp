// safetensors reading and writing (safetensors.hpp).
#include "mpitron/checkpoint/safetensors.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mpitron/core/error.hpp"
#include "tmp_file.hpp"

namespace mpitron {
namespace {

// Headers are a few KB per hundred tensors; 100 MB covers any real model and keeps a corrupted
// length from allocating gigabytes.
constexpr uint64_t kMaxHeader = 100u << 20;

const std::map<std::string, size_t>& dtype_sizes() {
  static const std::map<std::string, size_t> m = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                  {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},    {"BOOL", 1},
                                                  {"U16", 2}, {"U32", 4}, {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  return m;
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  auto it = dtype_sizes().find(dtype);
  return it == dtype_sizes().end() ? 0 : it->second;
}

SafetensorsHeader parse_safetensors_header(const std::string& text, uint64_t header_len, uint64_t file_size,
                                           const std::string& path) {
  using nlohmann::json;
  SafetensorsHeader h;
  h.data_start = 8 + header_len;
  const uint64_t data_size = file_size - h.data_start;
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    usage_fail("{}: the safetensors header is not JSON ({})", path, e.what());
  }
  usage_check(j.is_object(), "{}: the safetensors header is not a JSON object", path);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      usage_check(v.is_object(), "{}: __metadata__ is not an object", path);
      for (auto m = v.begin(); m != v.end(); ++m) {
        usage_check(m.value().is_string(), "{}: __metadata__ value '{}' is not a string", path, m.key());
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    usage_check(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
                "{}: tensor '{}' needs dtype, shape and data_offsets", path, name);
    SafetensorsEntry e;
    e.name = name;
    usage_check(v["dtype"].is_string(), "{}: tensor '{}': dtype is not a string", path, name);
    e.dtype = v["dtype"].get<std::string>();
    const size_t esize = safetensors_dtype_size(e.dtype);
    usage_check(esize > 0, "{}: tensor '{}': unknown dtype '{}' (allowed: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL ...)",
                path, name, e.dtype);
    usage_check(v["shape"].is_array() && v["shape"].size() <= 8, "{}: tensor '{}': shape is not a list of <= 8 sizes",
                path, name);
    uint64_t numel = 1;
    for (const json& d : v["shape"]) {
      usage_check(d.is_number_unsigned() && d.get<uint64_t>() <= (uint64_t{1} << 40),
                  "{}: tensor '{}': shape {} has a size that is not a non-negative integer", path, name,
                  v["shape"].dump());
      e.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
      usage_check(numel <= (uint64_t{1} << 48), "{}: tensor '{}': shape {} is too large", path, name, v["shape"].dump());
    }
    const json& o = v["data_offsets"];
    usage_check(o.is_array() && o.size() == 2 && o[0].is_number_unsigned() && o[1].is_number_unsigned(),
                "{}: tensor '{}': data_offsets is not [BEGIN, END]", path, name);
    e.begin = o[0].get<uint64_t>();
    e.end = o[1].get<uint64_t>();
    usage_check(e.begin <= e.end && e.end <= data_size,
                "{}: tensor '{}': bytes [{}, {}) are outside the file's {} data bytes (truncated?)", path, name, e.begin,
                e.end, data_size);
    usage_check(e.end - e.begin == numel * esize,
                "{}: tensor '{}': shape {} of {} needs {} bytes, data_offsets give {}", path, name, v["shape"].dump(),
                e.dtype, numel * esize, e.end - e.begin);
    h.entries.push_back(std::move(e));
  }
  std::sort(h.entries.begin(), h.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < h.entries.size(); ++i)
    usage_check(h.entries[i].begin >= h.entries[i - 1].end || h.entries[i].begin == h.entries[i].end ||
                    h.entries[i - 1].begin == h.entries[i - 1].end,
                "{}: tensors '{}' and '{}' overlap", path, h.entries[i - 1].name, h.entries[i].name);
  return h;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  usage_check(f != nullptr, "cannot open '{}': {}", path, std::strerror(errno));
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  unsigned char len8[8];
  const bool got = !ec && size >= 8 && std::fread(len8, 1, 8, f) == 8;
  if (!got) std::fclose(f);
  usage_check(got, "{}: not a safetensors file (shorter than its 8-byte header length)", path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len8[i];
  if (n > size - 8 || n > kMaxHeader) {
    std::fclose(f);
    usage_fail("{}: the header length {} runs past the end of the {}-byte file (not safetensors, or truncated)", path,
               n, size);
  }
  std::string text(n, '\0');
  const bool ok = std::fread(text.data(), 1, n, f) == n;
  std::fclose(f);
  usage_check(ok, "{}: cannot read its {}-byte header", path, n);
  return parse_safetensors_header(text, n, size, path);
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<SafetensorsEntry> entries,
                                     std::map<std::string, std::string> metadata)
    : entries_(std::move(entries)) {
  nlohmann::ordered_json j;
  if (!metadata.empty()) j["__metadata__"] = metadata;
  uint64_t at = 0;
  for (auto& e : entries_) {
    uint64_t n = safetensors_dtype_size(e.dtype);
    check(n > 0, "safetensors: unknown dtype '{}'", e.dtype);
    for (int64_t d : e.shape) n *= static_cast<uint64_t>(d);
    e.begin = at;
    e.end = at += n;
    j[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string text = j.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data starts 8-byte aligned
  f_ = std::make_unique<TmpFile>(std::move(path));
  unsigned char len8[8];
  for (int i = 0; i < 8; ++i) len8[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  f_->write(len8, 8);
  f_->write(text.data(), text.size());
  total_ = 8 + text.size();
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::write_next(const void* data, size_t bytes) {
  check(next_ < entries_.size(), "safetensors: more tensors than the header lists ({})", f_->path());
  const SafetensorsEntry& e = entries_[next_++];
  check(bytes == e.end - e.begin, "safetensors: tensor '{}' has {} bytes, the header says {}", e.name, bytes,
        e.end - e.begin);
  f_->write(data, bytes);
  total_ += bytes;
}

void SafetensorsWriter::finish() {
  check(next_ == entries_.size(), "safetensors: {} of {} tensors written to {}", next_, entries_.size(), f_->path());
  f_->commit();
}

}  // namespace mpitron
