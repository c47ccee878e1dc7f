#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>

#include "mpitron/core/dtype.hpp"
#include "mpitron/core/memory.hpp"
#include "mpitron/core/rng.hpp"
#include "mpitron/train/peak_probe.hpp"

using namespace mpitron;

BOOST_AUTO_TEST_SUITE(core)

BOOST_AUTO_TEST_CASE(bf16_round_to_nearest_even) {
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to the even one (1).
  BOOST_TEST(to_f32(to_bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  // 1 + 3*2^-8 is a tie between 1+2^-7 (odd mantissa) and 1+2^-6 (even): goes up.
  BOOST_TEST(to_f32(to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
  BOOST_TEST(to_f32(to_bf16(-2.5f)) == -2.5f);
  BOOST_TEST(std::isnan(to_f32(to_bf16(std::nanf("")))));
  BOOST_TEST(std::isinf(to_f32(to_bf16(INFINITY))));
  // Relative error of rounding is at most 2^-9.
  for (float x : {0.1f, 3.14159f, -123.456f, 1e-20f, 6.5e4f})
    BOOST_TEST(std::fabs(to_f32(to_bf16(x)) - x) <= std::fabs(x) * std::ldexp(1.0f, -9));
}

BOOST_AUTO_TEST_CASE(tracker_counts_live_and_peak) {
  auto before = MemTracker::host().stats();
  {
    Buffer<float> a(Mem::grads, 1000);
    Buffer<float> b(Mem::grads, 500);
    auto mid = MemTracker::host().stats();
    BOOST_TEST(mid.of(Mem::grads) - before.of(Mem::grads) == 6000);
    BOOST_TEST(a[999] == 0.0f);  // zero-filled
    BOOST_TEST(reinterpret_cast<uintptr_t>(a.data()) % 64 == 0);
    Buffer<float> c = std::move(b);
    BOOST_TEST(b.data() == nullptr);
    BOOST_TEST(MemTracker::host().stats().of(Mem::grads) == mid.of(Mem::grads));
  }
  auto after = MemTracker::host().stats();
  BOOST_TEST(after.of(Mem::grads) == before.of(Mem::grads));
  BOOST_TEST(after.peak_of(Mem::grads) >= before.of(Mem::grads) + 6000);
}

BOOST_AUTO_TEST_CASE(counter_rng_is_pure_and_normal) {
  BOOST_TEST(normal_at(1, 2, 3) == normal_at(1, 2, 3));
  BOOST_TEST(normal_at(1, 2, 3) != normal_at(1, 2, 4));
  BOOST_TEST(normal_at(1, 2, 3) != normal_at(1, 3, 3));
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = normal_at(7, 11, i);
    sum += x;
    sq += x * x;
  }
  BOOST_TEST(std::fabs(sum / n) < 0.01);
  BOOST_TEST(std::fabs(sq / n - 1.0) < 0.02);
}

// The hardware peak MFU is measured against (peak_probe.hpp): read from /proc/cpuinfo, cores x
// clock x FLOP per cycle, and SMT siblings do not count as cores.
BOOST_AUTO_TEST_CASE(cpu_hardware_peak_from_cpuinfo) {
  const CpuPeak p = cpu_hardware_peak(2);
  BOOST_TEST(p.cores >= 1);
  BOOST_TEST(p.cores <= 2);
  BOOST_TEST((p.flop_per_cycle == 8 || p.flop_per_cycle == 16 || p.flop_per_cycle == 32 || p.flop_per_cycle == 64));
  BOOST_TEST(!p.isa.empty());
  if (p.ghz > 0) BOOST_TEST(p.flops == p.cores * p.ghz * 1e9 * p.flop_per_cycle);
  BOOST_TEST(cpu_hardware_peak(4).cores >= p.cores);
}

BOOST_AUTO_TEST_SUITE_END()
