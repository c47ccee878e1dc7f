// Launchers of the CUDA kernels (one .cu file per family), called by cuda_ops.cpp. Host-side
// declarations only, so g++ translation units can include this header. Every launcher enqueues
// on `s`, checks its launches (launch_check) and validates what the kernels assume (C % 8 == 0
// for the 16-byte vector paths, ...), throwing Error otherwise.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "mpitron/core/dtype.hpp"
#include "mpitron/core/fp8.hpp"
#include "mpitron/ops/fp8_scaling.hpp"
#include "mpitron/ops/moe_router.hpp"

namespace mpitron::cuda {

// Stream-ordered scratch memory owned by CudaOps: valid until the next get() on the same stream.
class Scratch {
 public:
  virtual ~Scratch() = default;
  virtual void* get(size_t bytes) = 0;
};

int sm_count();  // multiprocessors of the current device (cached per device)

// elementwise.cu
void residual_forward(cudaStream_t s, bf16* out, const bf16* a, const bf16* b, size_t n);
void add_inplace(cudaStream_t s, float* a, const float* b, size_t n);
void scale_inplace(cudaStream_t s, float* a, float k, size_t n);
void scale_bf16(cudaStream_t s, bf16* x, float k, size_t n);
void axpy(cudaStream_t s, float* y, float a, const float* x, size_t n);
void to_bf16(cudaStream_t s, bf16* out, const float* in, size_t n);
void to_f32(cudaStream_t s, float* out, const bf16* in, size_t n);
// dbias[N] += column sums of x[M,N] (bf16), fixed summation order.
void column_sums(cudaStream_t s, Scratch& scratch, float* dbias, const bf16* x, int64_t M, int64_t N);

// gelu.cu
void gelu_forward(cudaStream_t s, bf16* out, const bf16* inp, size_t n);
void gelu_backward(cudaStream_t s, bf16* dinp, const bf16* inp, const bf16* dout, size_t n);

// layernorm.cu (residual may be nullptr: plain layernorm of a; b is then ignored)
void layernorm_forward(cudaStream_t s, bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a,
                       const bf16* b, const bf16* weight, const bf16* bias, int64_t rows, int64_t C);
void layernorm_backward(cudaStream_t s, Scratch& scratch, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean, const float* rstd, int64_t rows,
                        int64_t C);

// llama.cu: the LLaMA block, same semantics as Ops' rmsnorm / rope / swiglu (src/ops/cpu/llama.cpp).
// rmsnorm_backward: dinp += (bf16), dweight += (fp32; may be nullptr), as layernorm_backward. C % 8 == 0.
void rmsnorm_forward(cudaStream_t s, bf16* out, float* rstd, const bf16* inp, const bf16* weight, int64_t rows,
                     int64_t C, float eps);
void rmsnorm_backward(cudaStream_t s, Scratch& scratch, bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                      const bf16* weight, const float* rstd, int64_t rows, int64_t C);
// rope: inv_freq is the host table of hd / 2 frequencies (hd <= 256), copied into the launch's
// arguments; cos and sin times scale.
void rope(cudaStream_t s, bf16* x, int B, int T, int n_heads, int hd, int64_t row_stride, const double* inv_freq,
          double scale, int pos0, bool inverse);
void swiglu_forward(cudaStream_t s, bf16* out, const bf16* gate_up, int64_t rows, int64_t F);
void swiglu_backward(cudaStream_t s, bf16* dgate_up, const bf16* gate_up, const bf16* dout, int64_t rows, int64_t F);

// attention_segments.cu: cuDNN's ragged attention inputs from a segment table [4][n] (segment_table):
// out [6][n + 1] int32 = seq_q, seq_kv, element offsets of q, k|v, out, stats [B, H, Tq].
void segment_offsets(cudaStream_t s, int32_t* out, const int32_t* table, int n, int Tq, int H, int64_t q_stride,
                     int64_t kv_stride, int64_t out_stride);
// The ring's merge of one block's segments (CudaOps::attention_segments_merge) and dst[r, c] +=
// src[r, c] (bf16 into fp32, strided rows).
void attention_segments_merge(cudaStream_t s, float* acc, float* lse_acc, const bf16* o_step, const float* lse_step,
                              const int32_t* table, int n, int count, int B, int Tq, int H, int hd, bool first);
void add_bf16_rows(cudaStream_t s, float* dst, int64_t dst_stride, const bf16* src, int64_t src_stride, int64_t rows,
                   int64_t cols);

// moe.cu: a MoE MLP's token-copy rows (CudaOps::moe_*; src/ops/cpu/moe_rows.cpp). C % 8 == 0.
void moe_gather_rows(cudaStream_t s, bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C);
void moe_scatter_rows(cudaStream_t s, bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C);
void moe_combine(cudaStream_t s, bf16* out, const bf16* ys, const int64_t* pos, const float* weight, int64_t R, int k,
                 int64_t C);
void moe_combine_backward(cudaStream_t s, bf16* dys, float* dweight, const bf16* dout, const bf16* ys,
                          const int64_t* pos, const float* weight, int64_t R, int k, int64_t C);
void moe_uncombine_add(cudaStream_t s, bf16* dx, const bf16* dxs, const int64_t* pos, int64_t R, int k, int64_t C);

// moe_router.cu: the MoE router's steps (CudaOps::moe_router_*; include/mpitron/ops/moe_router.hpp).
void moe_router_select(cudaStream_t s, const bf16* logits, const MoeRouterShape& shape, const MoeRouterArrays& a);
void moe_router_place(cudaStream_t s, const MoeRouterShape& shape, const MoeRouterArrays& a);
void moe_router_backward(cudaStream_t s, bf16* dlogits, const float* dweight, double aux_scale, double z_scale,
                         const MoeRouterShape& shape, const MoeRouterArrays& a);

// fp8_cast.cu: x's amax into amax (device fp32); the cast with amax's scale into q and/or the
// transposed qt, scale_inv = 1 / scale, statistics added to stats when given (CudaOps::fp8_amax,
// fp8_cast; ops/fp8_scaling.hpp).
void fp8_amax(cudaStream_t s, float* amax, const bf16* x, int64_t n);
void fp8_cast(cudaStream_t s, uint8_t* q, uint8_t* qt, float* scale_inv, const float* amax, const bf16* x,
              int64_t rows, int64_t cols, Fp8Format f, Fp8DeviceStats* stats);

// attention_block.cu: one key/value block of ring attention (CudaOps::attention_block_*).
void attention_block_forward(cudaStream_t s, float* o, float* m, float* l, const bf16* q, int64_t q_stride,
                             const bf16* kv, int B, int Tq, int Tk, int H, int KV, int hd, const int32_t* qpos,
                             const int32_t* kpos, const int32_t* qstart, bool first);
void attention_block_finish(cudaStream_t s, bf16* out, float* lse, const float* o, const float* m, const float* l,
                            int B, int T, int H, int hd);
void attention_block_dsum(cudaStream_t s, float* dsum, const bf16* dout, const bf16* out, int B, int T, int H, int hd);
void attention_block_backward(cudaStream_t s, float* dq, float* dkv, const bf16* q, int64_t q_stride, const bf16* kv,
                              const bf16* dout, const float* lse, const float* dsum, int B, int Tq, int Tk, int H,
                              int KV, int hd, const int32_t* qpos, const int32_t* kpos, const int32_t* qstart);
void attention_block_grads(cudaStream_t s, bf16* dqkv, const float* dq, const float* dkv, int64_t rows, int H, int KV,
                           int hd);

// crossentropy.cu
void crossentropy_forward(cudaStream_t s, float* losses, float* lse, const bf16* logits, const int32_t* targets,
                          int64_t rows, int64_t Vp, int64_t V);
void crossentropy_backward(cudaStream_t s, bf16* dlogits, const float* lse, const int32_t* targets, int64_t rows,
                           int64_t Vp, int64_t V, float scale, int64_t vocab_begin, bool shard);
void crossentropy_fused(cudaStream_t s, float* losses, float* lse, bf16* logits, const int32_t* targets, int64_t rows,
                        int64_t Vp, int64_t V, float scale);
void crossentropy_partial(cudaStream_t s, float* max, float* sumexp, float* target_logit, const bf16* logits,
                          const int32_t* targets, int64_t rows, int64_t Vp, int64_t V, int64_t vocab_begin);
void crossentropy_rescale(cudaStream_t s, float* sumexp, const float* local_max, const float* global_max,
                          int64_t rows);
void crossentropy_combine(cudaStream_t s, float* losses, float* lse, const float* global_max, const float* sumexp,
                          const float* target_logit, const int32_t* targets, int64_t rows);

// embedding.cu
// positions: wpe's row of local position t (device [T]; nullptr: t itself); per_row: positions is
// [B, T], each row's own (document masking; positions < T).
void embedding_forward(cudaStream_t s, bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                       int T, int C, int64_t vocab_begin, int64_t vocab_end, const int32_t* positions, bool per_row);
void embedding_backward(cudaStream_t s, Scratch& scratch, float* dwte, float* dwpe, const bf16* dout,
                        const int32_t* tokens, int B, int T, int C, int64_t vocab_begin, int64_t vocab_end,
                        const int32_t* positions, bool per_row);

// adamw.cu
void adamw(cudaStream_t s, float* p, bf16* p_bf16, const float* g, float grad_scale, float* m, float* v, size_t n,
           float lr, float beta1, float beta2, float eps, float weight_decay, int step);
void sum_squares(cudaStream_t s, Scratch& scratch, double* dst, const float* x, size_t n, bool accumulate);

}  // namespace mpitron::cuda
