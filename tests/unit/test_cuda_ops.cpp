// CUDA backend tests (GPU builds only; an empty translation unit with CUDA=0).
// Without a usable GPU (here: cudaGetDeviceCount fails with error 35) the kernel tests are
// skipped with one line saying why; what needs no device still runs: the no-GPU error message
// and the cuDNN attention graphs (tensor, operation and operation-graph descriptors finalise
// without a device in cuDNN 9.19; heuristics and plans need cudnnCreate, which needs one).
#if MPITRON_CUDA
#include <boost/test/unit_test.hpp>
#include <array>
#include <iostream>

#include "../../src/ops/cuda/attention.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/ops/cuda/cuda_ops.hpp"
#include "../cuda/self_check.hpp"

using namespace mpitron;
namespace utf = boost::unit_test;

namespace {

const std::string& no_gpu_reason() {
  static const std::string why = cuda_unavailable_reason();
  return why;
}

// Precondition for the GPU cases: prints the reason once, and Boost marks the cases skipped.
struct NeedsGpu {
  boost::test_tools::assertion_result operator()(utf::test_unit_id) const {
    static bool said = false;
    if (!no_gpu_reason().empty() && !said) {
      std::cout << "test_cuda_ops: skipping the GPU kernel tests: " << no_gpu_reason() << "\n";
      said = true;
    }
    boost::test_tools::assertion_result r(no_gpu_reason().empty());
    r.message() << "no usable GPU: " << no_gpu_reason();
    return r;
  }
};

void expect_all_pass(const std::vector<OpCheck>& checks) {
  BOOST_TEST(!checks.empty());
  for (const OpCheck& c : checks) BOOST_TEST(c.pass(), c.op << ": rel err " << c.rel_err << " > bound " << c.bound);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_ops)

BOOST_AUTO_TEST_CASE(no_gpu_is_a_clear_error) {
  if (!no_gpu_reason().empty()) {
    BOOST_TEST(no_gpu_reason().find("cudaGetDevice") != std::string::npos);
    try {
      make_cuda_ops();
      BOOST_TEST(false, "make_cuda_ops succeeded without a GPU");
    } catch (const Error& e) {
      BOOST_TEST(std::string(e.what()).find("needs a GPU") != std::string::npos, e.what());
    }
  } else {
    BOOST_TEST(make_cuda_ops() != nullptr);
  }
}

BOOST_AUTO_TEST_CASE(cudnn_attention_graphs_finalise) {
  // GPT-2 124M's attention shape and a small one (KV = H, kv_heads 0), then grouped-query ones:
  // H12/KV4, LLaMA-3 8B's H32/KV8/hd128, multi-query KV1. Grouped-query backward graphs have two
  // more operations (the reductions summing dK, dV over each group). With a GPU, heuristics +
  // plans as well.
  cudnnHandle_t h = nullptr;
  if (no_gpu_reason().empty()) BOOST_REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS);
  for (auto [B, T, H, hd, KV] : {std::array{2, 64, 4, 32, 0}, std::array{8, 1024, 12, 64, 0},
                                 std::array{2, 64, 4, 32, 2}, std::array{8, 1024, 12, 64, 4},
                                 std::array{2, 1024, 32, 128, 8}, std::array{2, 64, 4, 32, 1}}) {
    std::string what = cuda::cudnn_attention_dry_build(h, B, T, H, hd, KV);
    BOOST_TEST(what.find("operation graphs finalised") != std::string::npos, what);
    const bool gqa = KV != 0 && KV != H;
    BOOST_TEST(what.find(gqa ? "backward 24 ops" : "backward 22 ops") != std::string::npos, what);
  }
  BOOST_CHECK_THROW(cuda::cudnn_attention_dry_build(h, 2, 64, 4, 32, 3), Error);  // 3 kv heads do not divide 4
  if (h) cudnnDestroy(h);
}

BOOST_AUTO_TEST_CASE(cudnn_segment_attention_graphs_finalise) {
  // The ragged graphs (ops/attention_segments.hpp) for packed documents at cp 1 (causal segments of
  // the fused qkv rows) and for the ring's off-diagonal blocks (full segments; k|v in a block of
  // their own, rows of 2 KV hd): the padding mask adds 6 operations (two GEN_INDEX, two CMP_LT
  // against the segments' lengths, LOGICAL_AND, BINARY_SELECT); a full segment has no causal mask
  // (4 fewer); grouped-query backward graphs have two more. With a GPU, heuristics + plans too.
  cudnnHandle_t h = nullptr;
  if (no_gpu_reason().empty()) BOOST_REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS);
  for (auto [n, sq, skv, causal, H, hd, KV] :
       {std::array{8, 256, 256, 1, 4, 32, 4}, std::array{64, 64, 64, 1, 12, 64, 4},
        std::array{4, 128, 64, 0, 4, 32, 2}, std::array{2, 1024, 1024, 0, 32, 128, 8}}) {
    const int64_t W = int64_t{H + 2 * KV} * hd;
    const int64_t kv_stride = causal ? W : 2 * int64_t{KV} * hd;
    const std::string what = cuda::cudnn_segment_attention_dry_build(h, SegmentBuckets{n, sq, skv}, causal, H, hd,
                                                                     KV, W, kv_stride, sq);
    BOOST_TEST(what.find("operation graphs finalised") != std::string::npos, what);
    const int fwd = 14 + 6 - (causal ? 0 : 4), bwd = 22 + 6 - (causal ? 0 : 4) + (KV != H ? 2 : 0);
    BOOST_TEST(what.find(fmt::format("forward {} ops, backward {} ops", fwd, bwd)) != std::string::npos, what);
  }
  if (h) cudnnDestroy(h);
}

BOOST_AUTO_TEST_CASE(kernels_match_cpu_naive_attention, *utf::precondition(NeedsGpu())) {
  CudaOpsOptions o;
  o.attention = "naive";
  auto gpu = make_cuda_ops(o);
  auto cpu = make_cpu_ops();
  expect_all_pass(check_cuda_ops_against_cpu(*gpu, *cpu, SelfCheckShape{}));
}

BOOST_AUTO_TEST_CASE(kernels_match_cpu_cudnn_attention, *utf::precondition(NeedsGpu())) {
  auto gpu = make_cuda_ops();
  auto cpu = make_cpu_ops();
  SelfCheckShape s;
  s.T = 128, s.C = 256, s.H = 4;  // hd 64
  expect_all_pass(check_cuda_ops_against_cpu(*gpu, *cpu, s));
}

BOOST_AUTO_TEST_CASE(cudnn_and_naive_attention_agree, *utf::precondition(NeedsGpu())) {
  CudaOpsOptions n;
  n.attention = "naive";
  auto a = make_cuda_ops(), b = make_cuda_ops(n);
  expect_all_pass(check_attention_paths(*a, *b, 2, 256, 4, 64, 99));
}

// Grouped-query attention (H 12, KV 4, hd 64) on both paths; the kernels_match_cpu cases above
// also run the LLaMA kernels and a KV = H / 2 attention against the CPU (SelfCheckShape::KV).
BOOST_AUTO_TEST_CASE(cudnn_and_naive_gqa_attention_agree, *utf::precondition(NeedsGpu())) {
  CudaOpsOptions n;
  n.attention = "naive";
  auto a = make_cuda_ops(), b = make_cuda_ops(n);
  expect_all_pass(check_attention_paths(*a, *b, 2, 256, 12, 64, 99, 4));
}

BOOST_AUTO_TEST_CASE(gqa_attention_matches_cpu, *utf::precondition(NeedsGpu())) {
  auto cpu = make_cpu_ops();
  for (const char* kind : {"naive", "cudnn"}) {
    CudaOpsOptions o;
    o.attention = kind;
    auto gpu = make_cuda_ops(o);
    SelfCheckShape s;
    s.T = 128, s.C = 768, s.H = 12;  // hd 64
    expect_all_pass(check_attention_against_cpu(*gpu, *cpu, s, 4));
  }
}

BOOST_AUTO_TEST_SUITE_END()
#endif
