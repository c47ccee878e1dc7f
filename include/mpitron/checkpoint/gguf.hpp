// GGUF files (llama.cpp, ollama, LM Studio), from the published format (version 3): magic "GGUF",
// version, tensor count, metadata count; metadata as (key, type, value); tensor infos (name,
// dimensions innermost first, ggml type, offset); padding to general.alignment (32); the data.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace mpitron {

class TmpFile;  // src/checkpoint/tmp_file.hpp

// ggml tensor types mpitron writes.
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q8_0 = 8, bf16 = 30 };

// Bytes of n elements (n a multiple of 32 for q8_0: blocks of an fp16 scale + 32 int8).
uint64_t ggml_bytes(GgmlType t, uint64_t n);
// n floats in type t, little-endian; q8_0 as ggml's reference quantizer does (scale amax/127,
// round to nearest).
std::vector<char> ggml_encode(GgmlType t, const float* v, uint64_t n);

struct GgufValue {
  // u32, i32, f32, bool, string, u64, string array, i32 array, f32 array
  std::variant<uint32_t, int32_t, float, bool, std::string, uint64_t, std::vector<std::string>, std::vector<int32_t>,
               std::vector<float>>
      v;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // ggml's dimensions, innermost (contiguous) first
  GgmlType type = GgmlType::f32;
  uint64_t offset = 0;  // assigned by the writer
};

// Writes PATH whole or not at all (PATH.tmp, renamed at finish()).
class GgufWriter {
 public:
  GgufWriter(std::string path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
             std::vector<GgufTensorInfo> tensors);
  ~GgufWriter();  // not finished: the partial file is removed
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  void write_next(const std::vector<char>& bytes);  // the next tensor's data, in order
  void finish();
  uint64_t bytes() const { return written_; }

 private:
  void put(const void* p, size_t n);
  std::vector<GgufTensorInfo> tensors_;
  std::unique_ptr<TmpFile> f_;
  size_t next_ = 0;
  uint64_t written_ = 0, data_start_ = 0;
};

}  // namespace mpitron
