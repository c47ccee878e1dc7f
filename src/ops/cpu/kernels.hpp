// CPU kernels behind CpuOps (cpu_ops.cpp), one file per family. Same contracts as Ops.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mpitron::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t rows, int64_t C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t rows, int64_t C);
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);
// scratch: per-thread workspace of attention_scratch_floats(T, hd) floats for each OpenMP thread.
size_t attention_scratch_floats(int T, int hd, bool backward);
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int H, int hd, float* scratch);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int H,
                        int hd, float* scratch);
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                       int64_t vocab_begin, int64_t vocab_end);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                        int64_t vocab_begin, int64_t vocab_end);
void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t rows,
                          int64_t Vp, int64_t V);
void crossentropy_backward(float* dlogits, const float* lse, const int32_t* targets, int64_t rows, int64_t Vp,
                           int64_t V, float scale);
// sums[N] += column sums of x[M, N] (deterministic: columns split across threads).
void column_sums(float* sums, const float* x, int64_t M, int64_t N);
void residual_forward(float* out, const float* a, const float* b, size_t n);
void add_inplace(float* a, const float* b, size_t n);
void scale_inplace(float* a, float s, size_t n);
void axpy(float* y, float a, const float* x, size_t n);
void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
           float weight_decay, int step);
double sum_squares(const float* x, size_t n);

}  // namespace mpitron::cpu
