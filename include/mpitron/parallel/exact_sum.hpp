// Exact, order-free sums for train.reproducible: the same total bit for bit whatever order the
// terms arrive in and however they are spread over ranks.
//
// ExactSum is a superaccumulator for doubles: the value is sum_k bins[k] * 2^(32k + kLowExp),
// each term cut exactly into 32-bit pieces at those fixed boundaries. Integer addition is
// associative, so the bins after any order of add() and any tree of merge() / Comm sums are the
// same integers; value() reads them the same way every time. A bin takes 2^31 terms before it
// could overflow, far beyond a step's micro-batches or a rank count. Non-finite terms are
// counted apart (value() is then NaN).
//
// add_squares sums g^2 over floats exactly (a float's square is exact in 48 bits), fast: the
// squares of one exponent are first summed in an int64, 2^15 at a time.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace mpitron {

class Comm;

class ExactSum {
 public:
  static constexpr int kLowExp = -1152;                    // the lowest bin's unit (subnormals included)
  static constexpr int kBins = (1088 + 128 - kLowExp) / 32;  // up to 2^(1024 + 64 + 128)

  void add(double x);
  void add_scaled(int64_t v, int exp2);  // v * 2^exp2, exactly
  void add_squares(const float* g, size_t n, double sign = 1.0);
  void merge(const ExactSum& o);
  void all_reduce(Comm& c);  // every rank of c then holds the sum of theirs
  double value() const;      // rounded once per bin from the top: the same bits for the same bins
  bool empty() const;

 private:
  std::array<int64_t, kBins + 1> bins_{};  // the last slot counts non-finite terms
};

}  // namespace mpitron
