// train.reproducible's gradient accumulator: every micro-batch's gradient added in fixed point,
// so the step's gradient is the same bits whichever rank ran which micro-batch, in whatever
// order, and however the sums over ranks are bracketed (integer addition is associative).
//
// Each element is kept as two int64 "bins" at fixed binary boundaries (ReproBLAS's binned sums,
// two bins of B = 40 bits, with the top bin's index per element):
//   value = hi * 2^(B t) + lo * 2^(B (t - 1)),  t = the element's top bin (int8)
// A term x goes in as hi += round(x / 2^(B t)), lo += round(remainder / 2^(B (t - 1))), both
// rounded to nearest even, exactly, in double. t is the smallest index with |x| < 2^(B (t+1) - 1)
// over every term the element has had; a larger term moves the element up a bin: lo is
// dropped, hi becomes lo. The bins of each term depend only on the term and t, and t only on
// the largest term (a max, order-free), so the result is a function of the set of terms alone.
// Each element keeps >= 39 bits below its largest term (an fp32 sum keeps 24); a bin takes 2^23
// terms (micro-batches x ranks x 2 for a tied embedding) before it could overflow.
//
// Across ranks: all_reduce / reduce_scatter first take the max of t (int8), move every rank's
// bins to it, then sum the bins (int64). On the wire: 17 bytes per element against fp32's 4.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mpitron {

class Comm;

class FixedPointGrads {
 public:
  static constexpr int kBinBits = 40;
  static constexpr int8_t kEmpty = -128;      // no non-zero term yet: the value is 0
  static constexpr int8_t kNonFinite = 127;   // a NaN or Inf term: the value is NaN

  explicit FixedPointGrads(size_t n = 0);
  size_t size() const { return top_.size(); }
  void clear();
  // Adds g[0, n) to elements [at, at + n).
  void add(const float* g, size_t at, size_t n);
  // Over `c`: every rank then holds the sum of [at, at + n) (in place).
  void all_reduce(Comm& c, size_t at, size_t n);
  // Over `c`: the sum of [at, at + sum(counts)), rank r's part (counts[r] elements, after the
  // parts of ranks < r) written to out as floats. This object is left holding partial sums.
  void reduce_scatter_to(Comm& c, size_t at, const size_t* counts, float* out);
  // Elements [at, at + n) as floats (each rounded once from its exact bins).
  void to_float(size_t at, size_t n, float* out) const;

  static int8_t top_of(float x);  // the t a term needs on its own (kEmpty for 0)

 private:
  void raise(size_t i, int8_t t);  // moves element i's bins up to top bin t
  void align_to_max(Comm& c, size_t at, size_t n);
  std::vector<int8_t> top_;
  std::vector<int64_t> bins_;  // hi at 2i, lo at 2i + 1
};

}  // namespace mpitron
