// prep's inputs (text_input.hpp): decompression and JSON Lines.
#include "mpitron/data/text_input.hpp"

#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mpitron/core/error.hpp"

namespace mpitron {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// gzip through zlib's inflate with automatic header detection; concatenated members (what
// `cat a.gz b.gz` and pigz make) are read one after the other.
std::string read_gzip(const std::string& path) {
  const std::string in = read_whole_file(path, "input file");
  std::string out;
  z_stream z{};
  usage_check(inflateInit2(&z, 15 + 32) == Z_OK, "'{}': cannot start zlib", path);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  char buf[1 << 16];
  int rc = Z_OK;
  while (true) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) break;
      inflateReset(&z);  // the next member
      continue;
    }
    if (rc != Z_OK) break;
    if (z.avail_in == 0 && z.avail_out != 0) {  // input used up inside a member
      rc = Z_BUF_ERROR;
      break;
    }
  }
  const std::string why = rc == Z_BUF_ERROR ? "truncated gzip stream" : (z.msg ? z.msg : "corrupt gzip stream");
  inflateEnd(&z);
  usage_check(rc == Z_STREAM_END, "input file '{}': {} (after {} bytes of text)", path, why, out.size());
  return out;
}

std::string read_zstd(const std::string& path) {
  const std::string in = read_whole_file(path, "input file");
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  usage_check(ctx != nullptr, "'{}': cannot start zstd", path);
  std::string out;
  std::vector<char> buf(ZSTD_DStreamOutSize());
  ZSTD_inBuffer ib{in.data(), in.size(), 0};
  size_t last = 0;
  while (ib.pos < ib.size) {
    ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
    last = ZSTD_decompressStream(ctx.get(), &ob, &ib);
    usage_check(!ZSTD_isError(last), "input file '{}': corrupt zstd stream ({}) after {} bytes of text", path,
                ZSTD_getErrorName(last), out.size());
    out.append(buf.data(), ob.pos);
  }
  // Flush what the decoder still holds; a frame not finished at the end of the file is truncated.
  while (last != 0) {
    ZSTD_outBuffer ob{buf.data(), buf.size(), 0};
    last = ZSTD_decompressStream(ctx.get(), &ob, &ib);
    usage_check(!ZSTD_isError(last), "input file '{}': corrupt zstd stream ({})", path, ZSTD_getErrorName(last));
    usage_check(ob.pos > 0 || last == 0, "input file '{}': truncated zstd stream (after {} bytes of text)", path,
                out.size());
    out.append(buf.data(), ob.pos);
  }
  return out;
}

std::string json_type(const nlohmann::json& v) { return v.type_name(); }

}  // namespace

std::string read_whole_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  usage_check(static_cast<bool>(in), "cannot open {} '{}'", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string read_input_file(const std::string& path) {
  if (ends_with(path, ".gz")) return read_gzip(path);
  if (ends_with(path, ".zst")) return read_zstd(path);
  return read_whole_file(path, "input file");
}

std::string input_format_of(const std::string& path) {
  std::string p = path;
  for (const char* z : {".gz", ".zst"})
    if (ends_with(p, z)) p.resize(p.size() - std::string(z).size());
  return ends_with(p, ".jsonl") || ends_with(p, ".ndjson") ? "jsonl" : "text";
}

std::vector<JsonlLine> jsonl_lines(std::string_view text) {
  std::vector<JsonlLine> out;
  size_t at = 0;
  int64_t number = 0;
  while (at < text.size()) {
    size_t e = text.find('\n', at);
    if (e == std::string_view::npos) e = text.size();
    std::string_view line = text.substr(at, e - at);
    at = e + 1;
    ++number;
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) out.push_back({line, number});
  }
  return out;
}

bool jsonl_document(std::string_view line, const std::string& field, std::string* doc, std::string* why) {
  nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) {
    *why = "not valid JSON";
  } else if (!j.is_object()) {
    *why = fmt::format("a JSON {}, not an object", json_type(j));
  } else if (auto it = j.find(field); it == j.end()) {
    *why = fmt::format("no \"{}\" field", field);
  } else if (!it->is_string()) {
    *why = fmt::format("\"{}\" is a {}, not a string", field, json_type(*it));
  } else {
    *doc = it->get<std::string>();
    return true;
  }
  return false;
}

void bad_jsonl_line(const std::string& path, int64_t number, const std::string& why, bool skip_bad, BadLines* bad) {
  const std::string msg = fmt::format("{}:{}: {}", path, number, why);
  usage_check(skip_bad, "{} (--on-bad-line skip counts and skips such lines)", msg);
  ++bad->count;
  if (bad->first.size() < BadLines::kKept) bad->first.push_back(msg);
}

}  // namespace mpitron
