// Kernel interface: every numeric operation the model needs, pointer + dims based, so a CUDA
// twin (src/ops/cuda/, bf16 compute) can implement the same calls. Row-major throughout.
// Conventions (GPT-2 / torch.nn.Linear layout):
//   - a linear weight is [N, K] = (out, in); out[M, N] = inp[M, K] * weight^T + bias[N];
//   - "backward" kernels ACCUMULATE into parameter gradients (dweight, dbias, dwte, ...);
//     activation gradients are overwritten unless the comment says "+=".
//   - attention works on the fused QKV layout of GPT-2: qkv[B, T, 3, H, hd] (= [B, T, 3C]),
//     output [B, T, H, hd] (= [B, T, C]); att[B, H, T, T] keeps the causal softmax
//     probabilities for the backward (entries above the diagonal are 0).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "mpitron/ops/flat_vector_ops.hpp"
#include "mpitron/ops/rope_freqs.hpp"

namespace mpitron {

// The flat-vector part (scale_inplace, axpy, adamw, sum_squares: flat_vector_ops.hpp) is shared with
// the GPU backend's training code.
class Ops : public FlatOps {
 public:
  virtual const char* name() const = 0;
  // train.precision = bf16: the linear layers' GEMMs round their inputs to bf16 and accumulate in
  // fp32 (the GPU backend's rounding points); everything else stays fp32. false: unsupported (here:
  // a CPU without oneDNN's bf16 matmul), the GEMMs stay fp32.
  virtual bool set_gemm_bf16(bool on) { return !on; }
  virtual bool gemm_bf16() const { return false; }
  // A model's flat parameter buffer [base, base + n): under bf16 GEMMs its weights are rounded
  // once per change into a bf16 copy (2 bytes per float, Mem::params) rather than on every GEMM
  // that reads them. The model calls weights_changed(base) whenever the values change (optimizer
  // step, load, gather, a write through param_data()) and unregister_weights before freeing it.
  virtual void register_weights(const float* base, size_t n) { (void)base, (void)n; }
  virtual void unregister_weights(const float* base) { (void)base; }
  virtual void weights_changed(const float* base) { (void)base; }

  // ---- linear layers (GEMM) ----
  // out[M,N] = inp[M,K] * weight[N,K]^T (+ bias[N] when bias != nullptr).
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                              int64_t K, int64_t N) = 0;
  // dinp[M,K] = dout[M,N] * weight (or += when accumulate_dinp); dweight[N,K] += dout^T * inp;
  // dbias[N] += column sums of dout. Any of dinp / dweight / dbias may be nullptr (skipped).
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, int64_t M, int64_t K, int64_t N,
                               bool accumulate_dinp = false) = 0;

  // ---- layernorm over the last dimension C (eps 1e-5, biased variance, as torch) ----
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int64_t rows, int64_t C) = 0;
  // dinp[rows,C] += ...; dweight[C] += ...; dbias[C] += ...
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, const float* mean, const float* rstd, int64_t rows,
                                  int64_t C) = 0;

  // ---- GELU, tanh approximation (torch approximate='tanh') ----
  virtual void gelu_forward(float* out, const float* inp, size_t n) = 0;
  // dinp = dout * gelu'(inp); dinp may alias dout.
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) = 0;

  // ---- causal multi-head self-attention, softmax scale 1/sqrt(hd) ----
  // kv_heads (0: H): grouped-query attention, qkv[B, T, (H + 2 kv_heads) hd] = [q | k | v], query
  // head h attending with kv head h / (H / kv_heads); kv_heads = H is the [B, T, 3, H, hd] layout.
  // doc_start [B, T] (nullptr: all 0): document masking, query t sees keys doc_start[t] .. t only
  // (its document's); the key blocks before a row block's first document are not computed.
  virtual void attention_forward(float* out, float* att, const float* qkv, int B, int T, int H, int hd,
                                 int kv_heads = 0, const int32_t* doc_start = nullptr) = 0;
  // dqkv = gradient (overwritten) from dout[B,T,C]; doc_start as the forward's.
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T,
                                  int H, int hd, int kv_heads = 0, const int32_t* doc_start = nullptr) = 0;

  // ---- one key/value block of blockwise (ring) attention: context parallel's per-step compute ----
  // Queries: Tq rows per sequence of q (H heads of hd, row stride q_stride); the block kv[B, Tk,
  // 2 KV hd] = [k | v] per row, its two halves each position-contiguous (the load-balanced
  // chunks); key j visible to query i when kpos[j] <= qpos[i], and with qstart ([B, Tq]: document
  // masking, nullptr: none) qstart[b, i] <= kpos[j] (key blocks no row of a row block sees are
  // skipped; a row that sees nothing of a block leaves m, l, o as they were). Forward: online softmax into the
  // running max m, sum l [B, H, Tq] and the unnormalised output o[B, Tq, H hd] (the caller
  // starts them at -inf, 0, 0 and divides o by l at the end; log-sum-exp = m + log l).
  virtual void attention_block_forward(float* o, float* m, float* l, const float* q, int64_t q_stride, const float* kv,
                                       int B, int Tq, int Tk, int H, int KV, int hd, const int* qpos,
                                       const int* kpos, const int32_t* qstart = nullptr) = 0;
  // Backward of one block from the final lse and D = rowsum(dout * out) [B, H, Tq]: dq (row
  // stride dq_stride) += and dkv[B, Tk, 2 KV hd] = [dk | dv] +=.
  virtual void attention_block_backward(float* dq, int64_t dq_stride, float* dkv, const float* q, int64_t q_stride,
                                        const float* kv, const float* dout, const float* lse, const float* dsum, int B,
                                        int Tq, int Tk, int H, int KV, int hd, const int* qpos, const int* kpos,
                                        const int32_t* qstart = nullptr) = 0;

  // ---- the LLaMA block ----
  // RMSNorm over C: out = inp * rstd * weight, rstd[rows] = (mean(inp^2) + eps)^-1/2.
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t rows,
                               int64_t C, float eps) = 0;
  // dinp += ...; dweight += ... (may be nullptr).
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                                const float* rstd, int64_t rows, int64_t C) = 0;
  // Rotary position embeddings in place on the first n_heads heads of hd floats of every row of
  // x[B*T, row_stride], at positions pos0 + t: the element pairs (2i, 2i+1) (Meta's reference
  // pairing, not the rotate-half layout) turn by (pos0 + t) freqs.inv_freq[i] (hd / 2 entries),
  // cos and sin times freqs.scale. inverse = the backward, the transpose (rotation by minus the
  // angle, the same scale: dx from dy, in place).
  virtual void rope(float* x, int B, int T, int n_heads, int hd, int64_t row_stride, const RopeFreqs& freqs,
                    int pos0, bool inverse) = 0;
  // SwiGLU: out[rows, F] = silu(gate) * up over gate_up[rows, 2F] = [gate | up]; the backward
  // writes dgate_up[rows, 2F] (overwritten).
  virtual void swiglu_forward(float* out, const float* gate_up, int64_t rows, int64_t F) = 0;
  virtual void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t rows, int64_t F) = 0;

  // ---- mixture of experts: a MoE MLP's token copies (moe_mlp.hpp), rows of C ----
  // dst[i] = src[idx[i]] for i < n.
  virtual void moe_gather_rows(float* dst, const float* src, const int64_t* idx, int64_t n, int64_t C) = 0;
  // dst[idx[i]] = src[i] for i < n (idx without repeats).
  virtual void moe_scatter_rows(float* dst, const float* src, const int64_t* idx, int64_t n, int64_t C) = 0;
  // out[t] = sum_j weight[t k + j] ys[pos[t k + j]] over token t's kept copies (pos >= 0), t < R
  // (overwritten; 0 where every copy was dropped).
  virtual void moe_combine(float* out, const float* ys, const int64_t* pos, const float* weight, int64_t R, int k,
                           int64_t C) = 0;
  // Its backward: dys[pos[t k + j]] = weight[t k + j] dout[t] (each kept copy's row overwritten),
  // dweight[t k + j] = dout[t] . ys[pos[t k + j]] (0 for a dropped copy).
  virtual void moe_combine_backward(float* dys, float* dweight, const float* dout, const float* ys, const int64_t* pos,
                                    const float* weight, int64_t R, int k, int64_t C) = 0;
  // dx[t] += sum_j dxs[pos[t k + j]] over token t's kept copies.
  virtual void moe_uncombine_add(float* dx, const float* dxs, const int64_t* pos, int64_t R, int k, int64_t C) = 0;

  // ---- embeddings: out[b,t,:] = wte[tok - vocab_begin] + wpe[t] ----
  // wte holds rows [vocab_begin, vocab_end) of the (vocab-parallel) table; tokens outside
  // contribute 0 (the TP all-reduce adds the owner's row). wpe may be nullptr.
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                                 int C, int64_t vocab_begin, int64_t vocab_end) = 0;
  // dwte += scatter of dout by token, dwpe += sum over b (deterministic: no atomics).
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T,
                                  int C, int64_t vocab_begin, int64_t vocab_end) = 0;

  // ---- elementwise ----
  virtual void residual_forward(float* out, const float* a, const float* b, size_t n) = 0;  // out = a + b
  virtual void add_inplace(float* a, const float* b, size_t n) = 0;                         // a += b

  // ---- fused softmax + cross-entropy over rows of logits [rows, Vp] ----
  // Columns >= V (padded vocab) never count. target < 0: row ignored (loss 0, gradient 0).
  // Forward: losses[r] = lse_r - logit[r, target_r]; lse[r] = logsumexp over the V real columns.
  virtual void crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                    int64_t rows, int64_t Vp, int64_t V) = 0;
  // In place: logits[r, :] <- scale * (softmax(logits[r]) - onehot(target_r)); padded columns and
  // ignored rows <- 0.
  virtual void crossentropy_backward(float* logits_to_dlogits, const float* lse, const int32_t* targets,
                                     int64_t rows, int64_t Vp, int64_t V, float scale) = 0;
};

// oneDNN GEMMs + OpenMP/AVX-512 kernels, fp32.
std::unique_ptr<Ops> make_cpu_ops();

}  // namespace mpitron
