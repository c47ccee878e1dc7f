// GGUF writing (gguf.hpp).
#include "mpitron/checkpoint/gguf.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "mpitron/core/dtype.hpp"
#include "mpitron/core/error.hpp"
#include "tmp_file.hpp"

namespace mpitron {
namespace {

constexpr uint64_t kAlign = 32;  // general.alignment's default

enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9, kU64 = 10 };

void append(std::string& b, const void* p, size_t n) { b.append(static_cast<const char*>(p), n); }
template <class T>
void append_pod(std::string& b, T x) {
  append(b, &x, sizeof x);
}
void append_str(std::string& b, const std::string& s) {
  append_pod<uint64_t>(b, s.size());
  b += s;
}

void append_value(std::string& b, const GgufValue& val) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, uint32_t>) {
          append_pod(b, kU32), append_pod(b, x);
        } else if constexpr (std::is_same_v<T, int32_t>) {
          append_pod(b, kI32), append_pod(b, x);
        } else if constexpr (std::is_same_v<T, float>) {
          append_pod(b, kF32), append_pod(b, x);
        } else if constexpr (std::is_same_v<T, bool>) {
          append_pod(b, kBool), append_pod<uint8_t>(b, x ? 1 : 0);
        } else if constexpr (std::is_same_v<T, std::string>) {
          append_pod(b, kString), append_str(b, x);
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          append_pod(b, kU64), append_pod(b, x);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          append_pod(b, kArray), append_pod(b, kString), append_pod<uint64_t>(b, x.size());
          for (const auto& s : x) append_str(b, s);
        } else if constexpr (std::is_same_v<T, std::vector<int32_t>>) {
          append_pod(b, kArray), append_pod(b, kI32), append_pod<uint64_t>(b, x.size());
          append(b, x.data(), x.size() * 4);
        } else {
          append_pod(b, kArray), append_pod(b, kF32), append_pod<uint64_t>(b, x.size());
          append(b, x.data(), x.size() * 4);
        }
      },
      val.v);
}

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

uint64_t ggml_bytes(GgmlType t, uint64_t n) {
  switch (t) {
    case GgmlType::f32:
      return 4 * n;
    case GgmlType::f16:
    case GgmlType::bf16:
      return 2 * n;
    case GgmlType::q8_0:
      check(n % 32 == 0, "q8_0: {} elements are not whole blocks of 32", n);
      return n / 32 * 34;
  }
  fail("unknown ggml type {}", static_cast<uint32_t>(t));
}

std::vector<char> ggml_encode(GgmlType t, const float* v, uint64_t n) {
  std::vector<char> out(ggml_bytes(t, n));
  char* o = out.data();
  if (t == GgmlType::f32) {
    std::memcpy(o, v, n * 4);
  } else if (t == GgmlType::f16 || t == GgmlType::bf16) {
    for (uint64_t i = 0; i < n; ++i) {
      const uint16_t h = t == GgmlType::f16 ? to_fp16_bits(v[i]) : to_bf16(v[i]).bits;
      std::memcpy(o + 2 * i, &h, 2);
    }
  } else {  // q8_0: per block of 32, d = amax / 127 (stored fp16), q = round(x / d)
    for (uint64_t b = 0; b < n / 32; ++b) {
      const float* x = v + 32 * b;
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float d = amax / 127.f, id = d != 0 ? 1.f / d : 0.f;
      const uint16_t dh = to_fp16_bits(d);
      char* blk = o + 34 * b;
      std::memcpy(blk, &dh, 2);
      for (int i = 0; i < 32; ++i) blk[2 + i] = static_cast<char>(static_cast<int8_t>(std::lround(x[i] * id)));
    }
  }
  return out;
}

GgufWriter::GgufWriter(std::string path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                       std::vector<GgufTensorInfo> tensors)
    : tensors_(std::move(tensors)) {
  std::string h;
  append(h, "GGUF", 4);
  append_pod<uint32_t>(h, 3);
  append_pod<uint64_t>(h, tensors_.size());
  append_pod<uint64_t>(h, metadata.size());
  for (const auto& [k, v] : metadata) append_str(h, k), append_value(h, v);
  uint64_t at = 0;
  for (auto& t : tensors_) {
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    t.offset = at;
    at = align_up(at + ggml_bytes(t.type, n));
    append_str(h, t.name);
    append_pod<uint32_t>(h, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) append_pod(h, d);
    append_pod(h, static_cast<uint32_t>(t.type));
    append_pod(h, t.offset);
  }
  h.resize(align_up(h.size()), '\0');
  data_start_ = h.size();
  f_ = std::make_unique<TmpFile>(std::move(path));
  put(h.data(), h.size());
}

GgufWriter::~GgufWriter() = default;

void GgufWriter::put(const void* p, size_t n) {
  f_->write(p, n);
  written_ += n;
}

void GgufWriter::write_next(const std::vector<char>& bytes) {
  check(next_ < tensors_.size(), "gguf: more tensors than the header lists ({})", f_->path());
  const GgufTensorInfo& t = tensors_[next_++];
  check(written_ == data_start_ + t.offset, "gguf: tensor '{}' at byte {}, its offset says {}", t.name, written_,
        data_start_ + t.offset);
  put(bytes.data(), bytes.size());
  static const char zeros[kAlign] = {};
  put(zeros, align_up(written_ - data_start_) - (written_ - data_start_));
}

void GgufWriter::finish() {
  check(next_ == tensors_.size(), "gguf: {} of {} tensors written to {}", next_, tensors_.size(), f_->path());
  f_->commit();
}

}  // namespace mpitron
