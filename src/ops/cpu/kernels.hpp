// CPU kernels behind CpuOps (cpu_ops.cpp), one file per family. Same contracts as Ops.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mpitron::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t rows, int64_t C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t rows, int64_t C);
// LLaMA (llama.cpp): RMSNorm over C; rotary embeddings in place on n_heads heads of hd at row
// stride row_stride (positions pos0 + t; inverse: the backward); SwiGLU on [rows, gate F | up F].
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t rows, int64_t C,
                     float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t rows, int64_t C);
void rope(float* x, int B, int T, int n_heads, int hd, int64_t row_stride, double theta, int pos0, bool inverse);
void swiglu_forward(float* out, const float* gate_up, int64_t rows, int64_t F);
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t rows, int64_t F);
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);
// scratch: per-thread workspace of attention_scratch_floats(T, hd) floats for each OpenMP thread.
size_t attention_scratch_floats(int T, int hd, bool backward);
// qkv[B, T, (H + 2 KV) hd] = [q: H heads | k: KV heads | v: KV heads]; query head h reads kv
// head h / (H / KV) (grouped-query attention; KV = H is GPT-2's [3, H, hd]).
// One key/value block of blockwise (ring) attention (attention_block.cpp; Ops::attention_block_*).
size_t attention_block_scratch_floats(int Tk, int hd);
void attention_block_forward(float* o, float* m, float* l, const float* q, int64_t q_stride, const float* kv, int B,
                             int Tq, int Tk, int H, int KV, int hd, const int* qpos, const int* kpos, float* scratch);
void attention_block_backward(float* dq, int64_t dq_stride, float* dkv, const float* q, int64_t q_stride,
                              const float* kv, const float* dout, const float* lse, const float* dsum, int B, int Tq,
                              int Tk, int H, int KV, int hd, const int* qpos, const int* kpos, float* scratch);
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int H, int hd, float* scratch,
                       int KV);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int H,
                        int hd, float* scratch, int KV);
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
