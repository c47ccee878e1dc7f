// CudaOps: the GPU twin of Ops (include/mpitron/ops/ops.hpp), bf16 compute. GPU builds only
// (MPITRON_CUDA=1); every pointer is device memory; every call is enqueued on stream() and
// returns without synchronising unless its comment says "syncs".
//
// Precision plan (llm.c's, and what Megatron calls bf16 mixed precision):
//   - activations and the weights the kernels read: bf16 (mpitron::bf16 = __nv_bfloat16 bits);
//   - parameter gradients (dweight, dbias, dwte, dwpe, LayerNorm dweight/dbias): fp32, and
//     ACCUMULATED (+=) as in Ops, so micro-batches sum in fp32;
//   - master weights and Adam moments: fp32; adamw() writes the bf16 copy the kernels read;
//   - reductions (LayerNorm stats, softmax, losses, norms): fp32 (sum_squares: fp64).
//
// Mapping from Ops (same names, same row-major shapes, same accumulate/overwrite rules):
//   Ops                           CudaOps
//   matmul_forward(f32...)        matmul_forward(bf16 out, bf16 inp, bf16 W, bf16 bias [, bf16 gelu_pre])
//                                   gelu_pre != nullptr: gelu_pre = inp W^T + b, out = gelu(gelu_pre)
//                                   in one cuBLASLt call (GELU_AUX_BIAS epilogue) = Ops matmul + gelu.
//   matmul_backward               matmul_backward(bf16 dinp, f32 dW +=, f32 db +=, bf16 dout, ...
//                                   [, bf16 gelu_pre]): gelu_pre != nullptr multiplies dinp by
//                                   gelu'(gelu_pre) (DGELU epilogue) = Ops matmul_backward + gelu_backward.
//   layernorm_forward             layernorm_forward (bf16 in/out, f32 mean/rstd), plus the fused
//                                   residual_layernorm_forward: residual = a + b, out = LN(residual).
//   layernorm_backward            layernorm_backward: bf16 dinp +=, f32 dweight/dbias +=, one pass.
//   gelu_forward/backward         same, bf16.
//   attention_forward(out, att)   attention_forward(out, stats): stats[B,H,T] f32 = logsumexp of the
//                                   scaled, masked scores (the [B,H,T,T] probabilities are never kept).
//   attention_backward(.., att)   attention_backward(dqkv, dout, qkv, out, stats): needs the forward
//                                   output too (rowsum(dO * O) term of the softmax backward).
//                                   Both take Ops' kv_heads (grouped-query attention).
//   rmsnorm_forward/backward      same (bf16 in/out, f32 rstd); backward as layernorm_backward:
//                                   bf16 dinp +=, f32 dweight +=.
//   rope, swiglu_forward/backward same, bf16 (rope: the host table of angles, in double, as Ops).
//   moe_gather_rows ... (MoE)     same, bf16 rows; device int64 indices, fp32 routing weights.
//   embedding_forward/backward    same; wte/wpe bf16, dwte/dwpe f32 +=, deterministic (sorted tokens).
//   residual_forward              residual_forward (bf16); add_inplace/scale_inplace/axpy on f32 grads.
//   crossentropy_forward/backward same (bf16 logits, f32 losses/lse); backward overwrites the bf16
//                                   logits with dlogits. crossentropy_fused does both in one pass.
//                                   Vocab-parallel: crossentropy_partial -> all-reduce max ->
//                                   crossentropy_rescale -> all-reduce sums -> crossentropy_combine.
//   adamw(p, g, m, v)             adamw(p_master f32, p_bf16 out, g f32, m, v): same torch order.
//   sum_squares -> double         sum_squares(double* dst on device, x, n, accumulate) (no sync),
//                                   sum_squares_host (syncs). Deterministic (fixed reduction tree).
// New: to_bf16 / to_f32 conversions, synchronize().
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mpitron/core/dtype.hpp"
#include "mpitron/core/error.hpp"
#include "mpitron/core/fp8.hpp"
#include "mpitron/ops/attention_segments.hpp"
#include "mpitron/ops/fp8_scaling.hpp"
#include "mpitron/ops/moe_router.hpp"
#include "mpitron/ops/rope_freqs.hpp"

namespace mpitron {

// out [M, N] (row-major) = a_scale_inv b_scale_inv (a [M, K] b [N, K]^T) + bias [N], the codes of
// a and b with K contiguous (the layout Hopper's FP8 tensor cores read: a GEMM contracting over
// another dimension takes fp8_cast's transposed copies), their 1 / scale device fp32 scalars.
// out: bf16, overwritten; or acc: fp32, += (weight gradients; no bias). M, K, N multiples of 16.
struct Fp8Gemm {
  int64_t M = 0, K = 0, N = 0;
  const uint8_t* a = nullptr;
  Fp8Format a_format = Fp8Format::e4m3;
  const float* a_scale_inv = nullptr;
  const uint8_t* b = nullptr;
  Fp8Format b_format = Fp8Format::e4m3;
  const float* b_scale_inv = nullptr;
  bf16* out = nullptr;
  const bf16* bias = nullptr;
  float* acc = nullptr;
  // What every fp8_gemm (CudaOps' and the CPU emulation's) takes: the shape, one output.
  void check() const {
    usage_check(M % 16 == 0 && K % 16 == 0 && N % 16 == 0,
                "FP8 GEMM {} x {} x {} (M x K x N): cuBLASLt's FP8 GEMMs need every dimension a multiple of 16", M, K,
                N);
    usage_check((out != nullptr) != (acc != nullptr) && !(acc && bias),
                "fp8_gemm: exactly one of out (bf16, with an optional bias) and acc (fp32 +=)");
  }
};

struct CudaOpsOptions {
  std::string attention = "cudnn";    // model.attention: "cudnn" (graph API) | "naive" (cuBLAS + softmax)
  int device = -1;                    // -1: the current device (init_launch binds it)
  size_t lt_workspace_bytes = 32u << 20;  // cuBLASLt workspace (Hopper wants >= 32 MiB)
};

class CudaOps {
 public:
  virtual ~CudaOps() = default;
  virtual const char* name() const = 0;  // "cuda"
  virtual cudaStream_t stream() const = 0;
  virtual const std::string& attention_kind() const = 0;
  virtual void synchronize() = 0;  // syncs

  // ---- linear layers: out[M,N] = inp[M,K] W[N,K]^T + bias ----
  virtual void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int64_t M, int64_t K,
                              int64_t N, bf16* gelu_pre = nullptr) = 0;
  // dinp[M,K] = dout W (+= when accumulate_dinp; times gelu'(gelu_pre) when gelu_pre != nullptr,
  // which excludes accumulate_dinp); dweight[N,K] += dout^T inp; dbias[N] += column sums of dout.
  virtual void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                               const bf16* weight, int64_t M, int64_t K, int64_t N, bool accumulate_dinp = false,
                               const bf16* gelu_pre = nullptr) = 0;

  // ---- layernorm over C (eps 1e-5, biased variance) ----
  virtual void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                                 const bf16* bias, int64_t rows, int64_t C) = 0;
  virtual void residual_layernorm_forward(bf16* residual, bf16* out, float* mean, float* rstd, const bf16* a,
                                          const bf16* b, const bf16* weight, const bf16* bias, int64_t rows,
                                          int64_t C) = 0;
  virtual void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                  const bf16* weight, const float* mean, const float* rstd, int64_t rows,
                                  int64_t C) = 0;

  // ---- GELU (tanh) ----
  virtual void gelu_forward(bf16* out, const bf16* inp, size_t n) = 0;
  virtual void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n) = 0;  // may alias

  // ---- causal attention on qkv[B,T,(H + 2 KV) hd] = [q H hd | k KV hd | v KV hd]; out[B,T,H,hd];
  // stats[B,H,T] ----
  // kv_heads = KV (0: H, plain multi-head attention on GPT-2's [B,T,3,H,hd]): grouped-query
  // attention, query head h attending with kv head h / (H / KV); KV must divide H. The backward
  // overwrites dqkv, its dk and dv summed over each group's query heads.
  // doc_start (device [B, T], nullptr: none): document masking as Ops' (the naive path only; cuDNN
  // refuses it by name).
  virtual void attention_forward(bf16* out, float* stats, const bf16* qkv, int B, int T, int H, int hd,
                                 int kv_heads = 0, const int32_t* doc_start = nullptr) = 0;
  virtual void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                                  const float* stats, int B, int T, int H, int hd, int kv_heads = 0,
                                  const int32_t* doc_start = nullptr) = 0;

  // ---- attention over segments (ops/attention_segments.hpp): packed documents on cuDNN ----
  // Query rows b * Tq + t of q (row stride q_stride; H heads of hd), key rows b * Tk + j of k and v
  // (row stride kv_stride, KV heads); each segment attends within itself (causal or full, seg).
  // Forward: out[B * Tq, H hd] and lse[B, H, Tq] of the segments' query rows (other rows are not
  // written). Backward from out, lse and dout: dq (q_stride) and dk, dv (kv_stride) of the
  // segments' rows overwritten. cuDNN graphs per bucketed shape, cached (attention_graphs()).
  virtual void attention_segments_forward(bf16* out, float* lse, const bf16* q, int64_t q_stride, const bf16* k,
                                          const bf16* v, int64_t kv_stride, int H, int KV, int hd,
                                          const DeviceSegments& seg) = 0;
  virtual void attention_segments_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                                           int64_t q_stride, const bf16* k, const bf16* v, int64_t kv_stride,
                                           const bf16* out, const float* lse, int H, int KV, int hd,
                                           const DeviceSegments& seg) = 0;
  // The cuDNN attention graphs (forward and backward, dense and segment) built so far.
  virtual int attention_graphs() const = 0;
  // The ring on segments: one block's out_step[B * Tq, H hd] and lse_step[B, H, Tq] merged into the
  // running normalised output acc (fp32) and log-sum-exp lse_acc: lse = max + log1p(exp(min -
  // max)), acc = acc exp(lse_acc - lse) + out_step exp(lse_step - lse); only the rows the block's
  // segments cover (first: the running ones start there, others at 0 and minus infinity).
  virtual void attention_segments_merge(float* acc, float* lse_acc, const bf16* out_step, const float* lse_step,
                                        int H, int hd, const DeviceSegments& seg, bool first) = 0;
  // dst[r * dst_stride + c] += src[r * src_stride + c] for c < cols (bf16 into fp32).
  virtual void add_bf16_rows(float* dst, int64_t dst_stride, const bf16* src, int64_t src_stride, int64_t rows,
                             int64_t cols) = 0;

  // ---- one key/value block of ring attention (context parallel; Ops::attention_block_*) ----
  // Queries: Tq rows per sequence of q (bf16, H heads of hd, row stride q_stride); the block
  // kv[B, Tk, 2 KV hd] (bf16) = [k | v]; key j visible to query i when kpos[j] <= qpos[i] (device
  // int32 arrays) and, with document masking, kpos[j] >= qstart[b, i] (device [B, Tq]: the global
  // position of the first token of i's document; nullptr: none). Forward: online softmax into fp32 running max m, sum l [B, H, Tq] and the
  // unnormalised output o[B*Tq, H hd]; first = the first block (m, l, o start at -inf, 0, 0 and
  // are not read). hd <= 256.
  virtual void attention_block_forward(float* o, float* m, float* l, const bf16* q, int64_t q_stride, const bf16* kv,
                                       int B, int Tq, int Tk, int H, int KV, int hd, const int32_t* qpos,
                                       const int32_t* kpos, const int32_t* qstart, bool first) = 0;
  // After the last block: out[B*T, H hd] (bf16) = o / l, lse[B, H, T] = m + log l.
  virtual void attention_block_finish(bf16* out, float* lse, const float* o, const float* m, const float* l, int B,
                                      int T, int H, int hd) = 0;
  // D[B, H, T] = rowsum(dout * out), the backward's softmax term.
  virtual void attention_block_dsum(float* dsum, const bf16* dout, const bf16* out, int B, int T, int H, int hd) = 0;
  // Backward of one block from the final lse and D: dq[B*Tq, H hd] += and dkv[B, Tk, 2 KV hd] +=
  // (fp32, deterministic).
  virtual void attention_block_backward(float* dq, float* dkv, const bf16* q, int64_t q_stride, const bf16* kv,
                                        const bf16* dout, const float* lse, const float* dsum, int B, int Tq, int Tk,
                                        int H, int KV, int hd, const int32_t* qpos, const int32_t* kpos,
                                        const int32_t* qstart) = 0;
  // dqkv[rows, (H + 2 KV) hd] (bf16) = [dq[rows, H hd] | dkv[rows, 2 KV hd]].
  virtual void attention_block_grads(bf16* dqkv, const float* dq, const float* dkv, int64_t rows, int H, int KV,
                                     int hd) = 0;

  // ---- the LLaMA block (Ops' rmsnorm / rope / swiglu) ----
  // RMSNorm over C (a multiple of 8): out = inp * rstd * weight, rstd[rows] f32 = (mean(inp^2) + eps)^-1/2.
  virtual void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* weight, int64_t rows, int64_t C,
                               float eps) = 0;
  // As layernorm_backward: dinp[rows,C] += (bf16), dweight[C] += (f32; may be nullptr); C <= 8192.
  virtual void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const bf16* weight,
                                const float* rstd, int64_t rows, int64_t C) = 0;
  // Rotary position embeddings in place on the first n_heads heads of hd (even, <= 256) of every row
  // of x[B*T, row_stride], positions pos0 + t, Meta's pairs (2i, 2i+1) rotated by (pos0 + t)
  // freqs.inv_freq[i], cos and sin times freqs.scale (Ops::rope's table, host memory: passed to the
  // kernel by value); inverse = rotation by minus the angle (the backward, dx from dy in place).
  virtual void rope(bf16* x, int B, int T, int n_heads, int hd, int64_t row_stride, const RopeFreqs& freqs,
                    int pos0, bool inverse) = 0;
  // SwiGLU: out[rows,F] = silu(gate) * up over gate_up[rows,2F] = [gate | up]; the backward
  // overwrites dgate_up[rows,2F] (it may alias gate_up).
  virtual void swiglu_forward(bf16* out, const bf16* gate_up, int64_t rows, int64_t F) = 0;
  virtual void swiglu_backward(bf16* dgate_up, const bf16* gate_up, const bf16* dout, int64_t rows, int64_t F) = 0;

  // ---- mixture of experts: a MoE MLP's token copies (Ops' moe_*; moe_mlp.hpp), bf16 rows of C ----
  // Index arrays (idx, pos: int64; weight: fp32) are device memory. Gather / scatter copy rows
  // bit for bit; combine sums in fp32 and rounds once; combine_backward's dweight is fp32 (a dot
  // product over C in fp32, fixed order: deterministic); uncombine_add adds in fp32, rounds once.
  virtual void moe_gather_rows(bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C) = 0;
  virtual void moe_scatter_rows(bf16* dst, const bf16* src, const int64_t* idx, int64_t n, int64_t C) = 0;
  virtual void moe_combine(bf16* out, const bf16* ys, const int64_t* pos, const float* weight, int64_t R, int k,
                           int64_t C) = 0;
  virtual void moe_combine_backward(bf16* dys, float* dweight, const bf16* dout, const bf16* ys, const int64_t* pos,
                                    const float* weight, int64_t R, int k, int64_t C) = 0;
  virtual void moe_uncombine_add(bf16* dx, const bf16* dxs, const int64_t* pos, int64_t R, int k, int64_t C) = 0;

  // ---- the MoE router (moe_mlp.hpp; include/mpitron/ops/moe_router.hpp: the steps and arrays) ----
  // select: from the bf16 router logits [R, E], probs, lse, expert, weight, seq_routed, seq_psum.
  // place: ranks, capacity drops, pos, srow, and the summary (kept copies per expert, dropped,
  // aux, z) from expert, seq_routed and seq_psum (the latter two as select wrote them, or summed
  // over the context-parallel ranks). backward: dlogits [R, E] bf16 (overwritten) from the
  // routing weights' gradient dweight [R k] fp32 and the two losses (aux_scale, z_scale: each
  // loss's coefficient x the loss scale). Deterministic.
  virtual void moe_router_select(const bf16* logits, const MoeRouterShape& s, const MoeRouterArrays& a) = 0;
  virtual void moe_router_place(const MoeRouterShape& s, const MoeRouterArrays& a) = 0;
  virtual void moe_router_backward(bf16* dlogits, const float* dweight, double aux_scale, double z_scale,
                                   const MoeRouterShape& s, const MoeRouterArrays& a) = 0;

  // ---- FP8 (ops/fp8_scaling.hpp: current scaling; the FP8 linears, model/fp8_recipe.hpp) ----
  // amax[0] = max |x[0, n)| (device fp32, overwritten; 0 for n = 0).
  virtual void fp8_amax(float* amax, const bf16* x, int64_t n) = 0;
  // x [rows, cols] cast in format f with the scale of amax[0] (fp8_scale_for; a tensor split over
  // ranks passes the group's amax): q [rows, cols] and/or qt, the transposed copy [cols, rows]
  // (Hopper's FP8 GEMM reads both operands with K contiguous, so a GEMM contracting over rows
  // needs it); either may be nullptr. scale_inv[0] = 1 / scale. stats (nullptr: not counted) gets
  // this cast's figures added. The bytes are those of the CPU's fp8_quantize on the same values.
  virtual void fp8_cast(uint8_t* q, uint8_t* qt, float* scale_inv, const float* amax, const bf16* x, int64_t rows,
                        int64_t cols, Fp8Format f, Fp8DeviceStats* stats) = 0;
  // The FP8 GEMM (Fp8Gemm): cuBLASLt with the operands' scale pointers, fp32 accumulation.
  virtual void fp8_gemm(const Fp8Gemm& g) = 0;
  // q [n] = fp8(x * scale), scale = max finite / amax(x): the amax and the cast above in one call.
  void fp8_quantize(uint8_t* q, float* scale_inv, float* amax, const bf16* x, int64_t n, Fp8Format f) {
    fp8_amax(amax, x, n);
    fp8_cast(q, nullptr, scale_inv, amax, x, 1, n, f, nullptr);
  }

  // ---- embeddings ----
  // positions (device [T]; nullptr: 0..T-1): wpe's row for local position t (context parallel);
  // per_row: positions is [B, T], every row's own (document masking: positions in the document).
  virtual void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int T,
                                 int C, int64_t vocab_begin, int64_t vocab_end, const int32_t* positions = nullptr,
                                 bool per_row = false) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B, int T,
                                  int C, int64_t vocab_begin, int64_t vocab_end, const int32_t* positions = nullptr,
                                  bool per_row = false) = 0;

  // ---- elementwise ----
  virtual void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n) = 0;
  virtual void add_inplace(float* a, const float* b, size_t n) = 0;
  virtual void scale_inplace(float* a, float s, size_t n) = 0;
  // x[i] *= s in fp32, rounded back to bf16 (the LM head's input gradient gets its loss scale).
  virtual void scale_bf16_inplace(bf16* x, float s, size_t n) = 0;
  virtual void axpy(float* y, float a, const float* x, size_t n) = 0;
  virtual void to_bf16(bf16* out, const float* in, size_t n) = 0;
  virtual void to_f32(float* out, const bf16* in, size_t n) = 0;

  // ---- softmax + cross-entropy on logits[rows, Vp] (columns >= V never count) ----
  virtual void crossentropy_forward(float* losses, float* lse, const bf16* logits, const int32_t* targets,
                                    int64_t rows, int64_t Vp, int64_t V) = 0;
  // logits <- scale * (softmax - onehot(target)); rows whose target is outside [0, V) and padded
  // columns <- 0 (as Ops).
  virtual void crossentropy_backward(bf16* logits_to_dlogits, const float* lse, const int32_t* targets, int64_t rows,
                                     int64_t Vp, int64_t V, float scale) = 0;
  // Vocab-parallel shard holding global columns [vocab_begin, vocab_begin + V): lse is the global
  // one (crossentropy_combine); rows with target < 0 <- 0; the onehot only where this shard owns it.
  virtual void crossentropy_backward_shard(bf16* logits_to_dlogits, const float* lse, const int32_t* targets,
                                           int64_t rows, int64_t Vp, int64_t V, float scale,
                                           int64_t vocab_begin) = 0;
  // Forward and backward in one pass over the logits (single shard).
  virtual void crossentropy_fused(float* losses, float* lse, bf16* logits_to_dlogits, const int32_t* targets,
                                  int64_t rows, int64_t Vp, int64_t V, float scale) = 0;
  // Vocab-parallel pieces: local max / sum exp(x - local max) / logit of the target when this shard
  // owns it (else 0) ...
  virtual void crossentropy_partial(float* max, float* sumexp, float* target_logit, const bf16* logits,
                                    const int32_t* targets, int64_t rows, int64_t Vp, int64_t V,
                                    int64_t vocab_begin) = 0;
  // ... after max was all-reduced (MAX) into global_max: sumexp *= exp(local_max - global_max) ...
  virtual void crossentropy_rescale(float* sumexp, const float* local_max, const float* global_max,
                                    int64_t rows) = 0;
  // ... after sumexp and target_logit were all-reduced (SUM): lse = max + log(sum), loss = lse - target.
  virtual void crossentropy_combine(float* losses, float* lse, const float* global_max, const float* sumexp,
                                    const float* target_logit, const int32_t* targets, int64_t rows) = 0;

  // ---- optimizer ----
  virtual void adamw(float* p, bf16* p_bf16, const float* g, float grad_scale, float* m, float* v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int step) = 0;
  virtual void sum_squares(double* dst, const float* x, size_t n, bool accumulate) = 0;
  virtual double sum_squares_host(const float* x, size_t n) = 0;  // syncs
};

// "" when a CUDA device can be used; otherwise why not ("cudaGetDeviceCount failed with error 35
// (CUDA driver version is insufficient for CUDA runtime version)").
std::string cuda_unavailable_reason();

// Throws Error (naming the failing call) when no device is usable or a library fails to start.
std::unique_ptr<CudaOps> make_cuda_ops(const CudaOpsOptions& options = {});

}  // namespace mpitron
