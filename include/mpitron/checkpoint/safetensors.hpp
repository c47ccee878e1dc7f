// Hugging Face safetensors files, from the published format: an 8-byte little-endian header
// length N, N bytes of JSON {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [BEGIN, END]},
// ..., "__metadata__": {"k": "v"}} (offsets relative to the byte after the header), then the
// raw little-endian tensor bytes, row-major.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mpitron {

class TmpFile;  // src/checkpoint/tmp_file.hpp

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32" | "BF16" | "F16" (what mpitron writes; the reader knows more)
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

// Bytes per element of a safetensors dtype name; 0 if unknown.
size_t safetensors_dtype_size(const std::string& dtype);

// A header: entries (in data order), metadata; the data section starts at data_start.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;
};

// Parses and checks a header read from `path` (file_size bytes): the length within the file,
// JSON of the layout above, known dtypes, shapes whose element count matches the byte range,
// ranges inside the file that do not overlap. UsageError naming the file and tensor otherwise.
SafetensorsHeader parse_safetensors_header(const std::string& header_json, uint64_t header_len, uint64_t file_size,
                                           const std::string& path);
SafetensorsHeader read_safetensors_header(const std::string& path);

// Writes one file: the header from `entries` (their begin/end are assigned here, in order),
// then each tensor's bytes through write_tensor(i, FILE*) in that order. The file appears whole
// or not at all (written to PATH.tmp, flushed, renamed).
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::vector<SafetensorsEntry> entries,
                    std::map<std::string, std::string> metadata);
  ~SafetensorsWriter();  // not finished: the partial file is removed
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // The next tensor's bytes (exactly its size).
  void write_next(const void* data, size_t bytes);
  void finish();  // all tensors written: close and rename into place
  uint64_t bytes() const { return total_; }

 private:
  std::vector<SafetensorsEntry> entries_;
  std::unique_ptr<TmpFile> f_;
  size_t next_ = 0;
  uint64_t total_ = 0;
};

}  // namespace mpitron
