// oneDNN bf16 matmul rate (bf16 src/weights, fp32 dst) at a GPT-2 shape, weights in plain and
// reordered ("any") layouts: is a CPU bf16 GEMM mode worth it on this machine? (bench/results/model_cpu.md)
//   g++ -std=c++20 -O3 -march=native -fopenmp bench/model/bf16_matmul_probe.cpp -ldnnl -o /tmp/p && OMP_NUM_THREADS=2 /tmp/p
#include <chrono>
#include <cstdio>
#include <vector>
#include <dnnl.hpp>
using namespace dnnl;
int main() {
  const int64_t M = 1024, K = 768, N = 3072;
  engine eng(engine::kind::cpu, 0); stream s(eng);
  using dt = memory::data_type; using tag = memory::format_tag;
  std::vector<uint16_t> A(M*K, 0x3c00), W(N*K, 0x3c00); std::vector<float> C(M*N);
  for (int variant = 0; variant < 4; ++variant) {
    memory::desc a({M,K}, dt::bf16, tag::ab);
    memory::desc b_plain({K,N}, dt::bf16, variant % 2 ? tag::ab : tag::ba);
    memory::desc b = variant >= 2 ? memory::desc({K,N}, dt::bf16, tag::any) : b_plain;
    memory::desc c({M,N}, dt::f32, tag::ab);
    matmul::primitive_desc pd(matmul::desc(a, b, c), eng);
    matmul prim(pd);
    memory am(a, eng, A.data()), bplain(b_plain, eng, W.data()), cm(c, eng, C.data());
    memory bm = bplain;
    double reorder_ms = 0;
    if (variant >= 2) {
      bm = memory(pd.weights_desc(), eng);
      auto t0 = std::chrono::steady_clock::now();
      reorder(bplain, bm).execute(s, bplain, bm); s.wait();
      reorder_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      reorder(bplain, bm).execute(s, bplain, bm); s.wait();
      t0 = std::chrono::steady_clock::now();
      reorder(bplain, bm).execute(s, bplain, bm); s.wait();
      reorder_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    prim.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}}); s.wait();
    double best = 1e9;
    for (int r = 0; r < 10; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      prim.execute(s, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}}); s.wait();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const char* names[] = {"wei ba (W^T view)", "wei ab", "wei any (from ba)", "wei any (from ab)"};
    std::printf("%s: %.1f GFLOP/s, reorder %.2f ms\n", names[variant], 2.0*M*N*K/best/1e9, reorder_ms);
  }
}
