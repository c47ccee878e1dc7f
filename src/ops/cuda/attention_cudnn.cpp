// Causal attention through cuDNN 9's backend (graph) API, no cudnn-frontend. cuDNN 9.19's
// dedicated SDPA node has no causal mask, so the graphs are the composite ones that cuDNN's fused
// attention engines recognise (cudnn-frontend builds the same shape of graph):
//
// forward (one graph, 14 ops; K given transposed through its strides, [B,KV,hd,T]):
//   S = Q K^T (matmul) -> S *= scale -> row = gen_index(S, axis 2), col = gen_index(S, axis 3)
//   -> mask = row >= col -> S = select(mask, S, lowest) -> M = max_j S -> E = exp(S - M)
//   -> Z = sum_j E -> stats = M + log Z (output) -> P = E / Z (bf16) -> O = P V (output)
// backward (one graph, 22 ops, 24 with KV < H; inputs Q, K^T, V^T, O, dO, stats):
//   D = (sum_d dO * O) * 1 -> S = scale Q K^T, causal select -> P = exp(S - stats)
//   -> dV = P^T dO (P^T: reshape, bf16) -> dS = ((dO V^T) * 1 - D) * P * scale
//   -> dK = dS^T Q (dS^T: reshape, bf16) -> dQ = dS K (K: reshape of K^T)
// The "* 1" multiplies are where cudnn-frontend puts its dropout factors; they are kept so the
// graph has the shape cuDNN's fused-attention engines match (bmm2's A operand in the I/O type,
// the transposes as reshapes, INT32 index generation, BOOLEAN compare), as cudnn-frontend does.
//
// Q/K/V/O/dO/dQ/dK/dV are strided views of the fused layouts: qkv rows [q H hd | k KV hd | v KV hd]
// (W = (H + 2 KV) hd wide; KV = H is GPT-2's [B,T,3,H,hd]) give Q dims [B,H,T,hd] with strides
// [WT, hd, W, 1] and K, V dims [B,KV,T,hd] with the same strides; out[B,T,H,hd] gives [CT, hd, C, 1].
// Graph, plan and workspace size are built once per (B,T,H,hd,KV) and cached; a call only binds
// pointers.
//
// Grouped-query attention (KV < H), as cudnn-frontend's composite SDPA graphs express it: K^T and V
// (V^T) simply have KV heads while Q, S, P, O have H (the matmuls broadcast kv head h / (H / KV) to
// query head h); in the backward, dK and dV are computed per query head into virtual bf16
// [B,H,T,hd] tensors and summed over each group by an ADD reduction into the [B,KV,T,hd] outputs
// ("b (hk g) s d -> b hk s d"). cuDNN's fused attention engines need hd a multiple of 8 and at most
// 128 (256 on Hopper with recent cuDNN 9) and H a multiple of KV; otherwise no plan is found and
// the error says so.
#include <cudnn.h>

#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "attention.hpp"
#include "cudnn_graph.hpp"
#include "mpitron/ops/cuda/check.hpp"
#include "mpitron/core/error.hpp"

namespace mpitron::cuda {
namespace {

// UIDs of the tensors bound at execution (virtual tensors get 1000+).
enum Uid : int64_t {
  kQ = 1, kKt, kV, kVt, kO, kStats, kDO, kDQ, kDK, kDV, kScale, kLowest, kOne,
  // segment graphs (ragged batches): per segment its lengths, the element offsets of its first row
  // in q (and dq), k|v (and dk|dv), out (and dout), stats; minus infinity for the padding mask
  kSeqQ, kSeqKv, kQOff, kKvOff, kOOff, kStatsOff, kNegInf
};

// The causal mask on scores s [B,H,T,T]: returns select(row >= col, s, lowest).
Desc& causal_mask(GraphBuilder& g, const Desc& s, const Dims& dims) {
  Desc& row = g.virt(dims, CUDNN_DATA_INT32);  // INT32 index generation, as cudnn-frontend
  Desc& col = g.virt(dims, CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, row, nullptr, CUDNN_DATA_INT32, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, col, nullptr, CUDNN_DATA_INT32, 3);
  Desc& mask = g.virt(dims, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, mask, nullptr, CUDNN_DATA_BOOLEAN);
  Desc& lowest = g.scalar(kLowest);
  Desc& out = g.virt(dims);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, &lowest, out, &mask);
  return out;
}

// The two graphs of one shape. Dense: B sequences of T rows, causal. Segments (ragged,
// ops/attention_segments.hpp): B segments of at most Tq query and Tk key rows, their lengths and
// first rows bound at execution (cuDNN's ragged offsets), causal or not.
struct Shape {
  int B, Tq, Tk, H, hd, KV;
  int64_t qs, ks, os;  // row strides (elements): q and dq; k, v, dk and dv; out and dout
  int64_t stats_T;     // stats [.., H, stats_T]: rows per (sequence, head)
  bool causal = true, ragged = false;
  Dims bhtd() const { return {B, H, Tq, hd}; }
  Dims kv_td() const { return {B, KV, Tk, hd}; }  // K, V, dK, dV
  Dims kv_dt() const { return {B, KV, hd, Tk}; }  // the transposed K^T, V^T views
  Dims full_kv() const { return {B, H, Tk, hd}; }  // dK, dV per query head (grouped-query)
  Dims bhtt() const { return {B, H, Tq, Tk}; }
  Dims bht1() const { return {B, H, Tq, 1}; }
  Dims q_strides() const { return {Tq * qs, hd, qs, 1}; }
  Dims kv_strides() const { return {Tk * ks, hd, ks, 1}; }
  Dims kv_strides_t() const { return {Tk * ks, hd, 1, ks}; }  // the [B,KV,hd,Tk] transposed view
  Dims o_strides() const { return {Tq * os, hd, os, 1}; }
  Dims stats_strides() const { return {static_cast<int64_t>(H) * stats_T, stats_T, 1, 1}; }
};

// Causal attention over the fused qkv rows [q H hd | k KV hd | v KV hd] of B sequences of T.
Shape dense_shape(int B, int T, int H, int hd, int KV) {
  const int64_t C = int64_t{H} * hd, W = C + 2 * int64_t{KV} * hd;
  return Shape{B, T, T, H, hd, KV, W, W, C, T, true, false};
}

// A segment graph's extra inputs: per segment its lengths (the padding mask, the matmuls' M, N, K
// overrides) and the element offsets of its first rows (INT32, [B + 1]); all null when dense.
struct Ragged {
  const Desc *seq_q = nullptr, *seq_kv = nullptr, *q = nullptr, *kv = nullptr, *o = nullptr, *stats = nullptr;
};

Ragged ragged_inputs(GraphBuilder& g, const Shape& sh) {
  Ragged r;
  if (!sh.ragged) return r;
  const Dims lens = {sh.B, 1, 1, 1}, offs = {sh.B + 1, 1, 1, 1}, unit = {1, 1, 1, 1};
  r.seq_q = &g.tensor(kSeqQ, lens, unit, CUDNN_DATA_INT32, false);
  r.seq_kv = &g.tensor(kSeqKv, lens, unit, CUDNN_DATA_INT32, false);
  r.q = &g.tensor(kQOff, offs, unit, CUDNN_DATA_INT32, false);
  r.kv = &g.tensor(kKvOff, offs, unit, CUDNN_DATA_INT32, false);
  r.o = &g.tensor(kOOff, offs, unit, CUDNN_DATA_INT32, false);
  r.stats = &g.tensor(kStatsOff, offs, unit, CUDNN_DATA_INT32, false);
  return r;
}

// The scaled scores' masks: a segment's padding (row < seq_q and col < seq_kv, else minus
// infinity, cudnn-frontend's padding mask on cuDNN >= 9.10), then the causal one.
const Desc& mask_scores(GraphBuilder& g, const Shape& sh, const Ragged& r, const Desc& s) {
  const Dims tt = sh.bhtt();
  const Desc* out = &s;
  if (r.seq_q) {
    Desc& row = g.virt(tt, CUDNN_DATA_INT32);
    Desc& col = g.virt(tt, CUDNN_DATA_INT32);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, row, nullptr, CUDNN_DATA_INT32, 2);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, nullptr, col, nullptr, CUDNN_DATA_INT32, 3);
    Desc& row_in = g.virt(tt, CUDNN_DATA_BOOLEAN);
    Desc& col_in = g.virt(tt, CUDNN_DATA_BOOLEAN);
    g.pointwise(CUDNN_POINTWISE_CMP_LT, row, r.seq_q, row_in, nullptr, CUDNN_DATA_BOOLEAN);
    g.pointwise(CUDNN_POINTWISE_CMP_LT, col, r.seq_kv, col_in, nullptr, CUDNN_DATA_BOOLEAN);
    Desc& both = g.virt(tt, CUDNN_DATA_BOOLEAN);
    g.pointwise(CUDNN_POINTWISE_LOGICAL_AND, row_in, &col_in, both, nullptr, CUDNN_DATA_BOOLEAN);
    Desc& neg_inf = g.scalar(kNegInf);
    Desc& padded = g.virt(tt);
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, &neg_inf, padded, &both);
    out = &padded;
  }
  return sh.causal ? causal_mask(g, *out, tt) : *out;
}

// dst = a b where dst is a [B,KV,Tk,hd] gradient: direct when KV = H; otherwise the product per
// query head into a virtual bf16 [B,H,Tk,hd] and an ADD reduction over each group of H / KV heads.
void matmul_kv_grad(GraphBuilder& g, const Shape& sh, const Desc& a, const Desc& b, const Desc& dst, const Ragged& r) {
  if (sh.KV == sh.H) {
    g.matmul(a, b, dst, r.seq_kv, nullptr, r.seq_q);
    return;
  }
  Desc& full = g.virt(sh.full_kv(), CUDNN_DATA_BFLOAT16);
  g.matmul(a, b, full, r.seq_kv, nullptr, r.seq_q);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, dst);
}

void build_forward(GraphBuilder& g, const Shape& sh) {
  const Ragged r = ragged_inputs(g, sh);
  Desc& q = g.tensor(kQ, sh.bhtd(), sh.q_strides(), CUDNN_DATA_BFLOAT16, false, false, r.q);
  Desc& kt = g.tensor(kKt, sh.kv_dt(), sh.kv_strides_t(), CUDNN_DATA_BFLOAT16, false, false, r.kv);
  Desc& v = g.tensor(kV, sh.kv_td(), sh.kv_strides(), CUDNN_DATA_BFLOAT16, false, false, r.kv);
  Desc& o = g.tensor(kO, sh.bhtd(), sh.o_strides(), CUDNN_DATA_BFLOAT16, false, false, r.o);
  Desc& stats = g.tensor(kStats, sh.bht1(), sh.stats_strides(), CUDNN_DATA_FLOAT, false, false, r.stats);
  Desc& scale = g.scalar(kScale);
  Desc& s = g.virt(sh.bhtt());
  g.matmul(q, kt, s, r.seq_q, r.seq_kv);
  Desc& ss = g.virt(sh.bhtt());
  g.pointwise(CUDNN_POINTWISE_MUL, s, &scale, ss);
  const Desc& sm = mask_scores(g, sh, r, ss);
  Desc& mx = g.virt(sh.bht1());
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, sm, mx);
  Desc& sub = g.virt(sh.bhtt());
  g.pointwise(CUDNN_POINTWISE_SUB, sm, &mx, sub);
  Desc& e = g.virt(sh.bhtt());
  g.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, e);
  Desc& z = g.virt(sh.bht1());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  Desc& logz = g.virt(sh.bht1());
  g.pointwise(CUDNN_POINTWISE_LOG, z, nullptr, logz);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, &logz, stats);
  Desc& p = g.virt(sh.bhtt(), CUDNN_DATA_BFLOAT16);  // bmm2's A operand in the I/O type
  g.pointwise(CUDNN_POINTWISE_DIV, e, &z, p);
  g.matmul(p, v, o, r.seq_q, nullptr, r.seq_kv);
}

void build_backward(GraphBuilder& g, const Shape& sh) {
  const Ragged r = ragged_inputs(g, sh);
  const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16;
  Desc& q = g.tensor(kQ, sh.bhtd(), sh.q_strides(), bf, false, false, r.q);
  Desc& kt = g.tensor(kKt, sh.kv_dt(), sh.kv_strides_t(), bf, false, false, r.kv);
  Desc& vt = g.tensor(kVt, sh.kv_dt(), sh.kv_strides_t(), bf, false, false, r.kv);
  Desc& o = g.tensor(kO, sh.bhtd(), sh.o_strides(), bf, false, false, r.o);
  Desc& dout = g.tensor(kDO, sh.bhtd(), sh.o_strides(), bf, false, false, r.o);
  Desc& stats = g.tensor(kStats, sh.bht1(), sh.stats_strides(), CUDNN_DATA_FLOAT, false, false, r.stats);
  Desc& dq = g.tensor(kDQ, sh.bhtd(), sh.q_strides(), bf, false, false, r.q);
  Desc& dk = g.tensor(kDK, sh.kv_td(), sh.kv_strides(), bf, false, false, r.kv);
  Desc& dv = g.tensor(kDV, sh.kv_td(), sh.kv_strides(), bf, false, false, r.kv);
  Desc& scale = g.scalar(kScale);
  Desc& one = g.scalar(kOne);
  const Dims tt = sh.bhtt();
  const Dims tt_t = {tt[1] * tt[2] * tt[3], tt[2] * tt[3], 1, tt[3]};  // [B,H,Tq,Tk] read transposed
  const Dims tt_tr = {tt[0], tt[1], tt[3], tt[2]};                     // ... as [B,H,Tk,Tq]
  // D = rowsum(dO * O)
  Desc& doo = g.virt(sh.bhtd());
  g.pointwise(CUDNN_POINTWISE_MUL, dout, &o, doo);
  Desc& d0 = g.virt(sh.bht1());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, doo, d0);
  Desc& d = g.virt(sh.bht1());
  g.pointwise(CUDNN_POINTWISE_MUL, d0, &one, d);
  // P = exp(mask(scale Q K^T) - stats)
  Desc& s = g.virt(tt);
  g.matmul(q, kt, s, r.seq_q, r.seq_kv);
  Desc& ss = g.virt(tt);
  g.pointwise(CUDNN_POINTWISE_MUL, s, &scale, ss);
  const Desc& sm = mask_scores(g, sh, r, ss);
  Desc& sub = g.virt(tt);
  g.pointwise(CUDNN_POINTWISE_SUB, sm, &stats, sub);
  Desc& p = g.virt(tt);
  g.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, p);
  // dV = P^T dO
  Desc& pt = g.tensor(g.next_uid(), tt_tr, tt_t, bf, true);
  g.reshape(p, pt);
  matmul_kv_grad(g, sh, pt, dout, dv, r);
  // dS = ((dO V^T) * 1 - D) * P * scale
  Desc& dp = g.virt(tt);
  g.matmul(dout, vt, dp, r.seq_q, r.seq_kv);
  Desc& dp1 = g.virt(tt);
  g.pointwise(CUDNN_POINTWISE_MUL, dp, &one, dp1);
  Desc& dpd = g.virt(tt);
  g.pointwise(CUDNN_POINTWISE_SUB, dp1, &d, dpd);
  Desc& ds0 = g.virt(tt);
  g.pointwise(CUDNN_POINTWISE_MUL, dpd, &p, ds0);
  Desc& ds = g.virt(tt);
  g.pointwise(CUDNN_POINTWISE_MUL, ds0, &scale, ds);
  // dK = dS^T Q
  Desc& dst = g.tensor(g.next_uid(), tt_tr, tt_t, bf, true);
  g.reshape(ds, dst);
  matmul_kv_grad(g, sh, dst, q, dk, r);
  // dQ = dS K, K = the [B,KV,Tk,hd] reshape of the K^T input
  Desc& k = g.tensor(g.next_uid(), sh.kv_td(), sh.kv_strides(), bf, true, false, r.kv);
  g.reshape(kt, k);
  g.matmul(ds, k, dq, r.seq_q, nullptr, r.seq_kv);
}

struct Plan {
  GraphBuilder graph;
  Desc* plan = nullptr;
  int64_t workspace = 0;
};

void make_plan(Plan& p, cudnnHandle_t h, const char* name) {
  p.graph.graph(h);
  p.plan = &p.graph.plan(h, name);
  cudnn_check(cudnnBackendGetAttribute(p.plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                       nullptr, &p.workspace),
              "cudnnBackendGetAttribute(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)");
}

void execute(cudnnHandle_t h, Plan& p, Scratch& scratch, std::vector<int64_t> uids, std::vector<void*> ptrs,
             const char* name) {
  void* ws = p.workspace > 0 ? scratch.get(static_cast<size_t>(p.workspace)) : nullptr;
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR");
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data(),
           "CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS");
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()), ptrs.data(),
           "CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS");
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, "CUDNN_ATTR_VARIANT_PACK_WORKSPACE");
  pack.finalize();
  cudnnStatus_t st = cudnnBackendExecute(h, p.plan->get(), pack.get());
  if (st != CUDNN_STATUS_SUCCESS) cudnn_check(st, fmt::format("cudnnBackendExecute({} attention)", name).c_str());
}

// Graph and plan per shape (every field of Shape, and the direction, in the key), built on first
// use and kept; size() is the number of graphs built.
class PlanCache {
 public:
  explicit PlanCache(cudnnHandle_t h) : h_(h) {}
  Plan& get(const Shape& sh, bool fwd, const char* name) {
    const Key key{sh.B, sh.Tq, sh.Tk, sh.H, sh.hd, sh.KV, sh.qs, sh.ks, sh.os, sh.stats_T, sh.causal, sh.ragged, fwd};
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    auto p = std::make_unique<Plan>();
    if (fwd)
      build_forward(p->graph, sh);
    else
      build_backward(p->graph, sh);
    make_plan(*p, h_, name);
    return *plans_.emplace(key, std::move(p)).first->second;
  }
  int size() const { return static_cast<int>(plans_.size()); }

 private:
  using Key = std::tuple<int, int, int, int, int, int, int64_t, int64_t, int64_t, int64_t, bool, bool, bool>;
  cudnnHandle_t h_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

class CudnnAttention final : public Attention {
 public:
  CudnnAttention(cudnnHandle_t h, Scratch& scratch) : h_(h), scratch_(scratch), plans_(h) {}

  // The dense graphs are plain causal: packed documents go through the segment graphs
  // (CudaOps::attention_segments_*), which the model calls instead.
  static void refuse_documents(const int32_t* doc_start) {
    if (doc_start)
      throw_error("cuDNN attention: the dense causal graph has no document mask (documents take the segment graphs, "
                  "CudaOps::attention_segments_*)");
  }

  void forward(cudaStream_t s, bf16* out, float* stats, const bf16* qkv, int B, int T, int H, int hd, int KV,
               const int32_t* doc_start) override {
    refuse_documents(doc_start);
    const Shape sh = dense_shape(B, T, H, hd, KV);
    Plan& p = plans_.get(sh, true, "forward");
    cudnn_check(cudnnSetStream(h_, s), "cudnnSetStream");
    float scale = 1.f / std::sqrt(static_cast<float>(hd)), lowest = std::numeric_limits<float>::lowest();
    char* base = reinterpret_cast<char*>(const_cast<bf16*>(qkv));
    const int64_t k_off = 2 * int64_t{H} * hd, v_off = 2 * int64_t{H + KV} * hd;  // bytes to the k and v slices
    execute(h_, p, scratch_, {kQ, kKt, kV, kO, kStats, kScale, kLowest},
            {base, base + k_off, base + v_off, out, stats, &scale, &lowest}, "forward");
  }

  int graphs() const override { return plans_.size(); }

  void backward(cudaStream_t s, bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* stats,
                int B, int T, int H, int hd, int KV, const int32_t* doc_start) override {
    refuse_documents(doc_start);
    const Shape sh = dense_shape(B, T, H, hd, KV);
    Plan& p = plans_.get(sh, false, "backward");
    cudnn_check(cudnnSetStream(h_, s), "cudnnSetStream");
    float scale = 1.f / std::sqrt(static_cast<float>(hd)), lowest = std::numeric_limits<float>::lowest();
    char* base = reinterpret_cast<char*>(const_cast<bf16*>(qkv));
    char* dbase = reinterpret_cast<char*>(dqkv);
    const int64_t k_off = 2 * int64_t{H} * hd, v_off = 2 * int64_t{H + KV} * hd;
    float one = 1.f;
    execute(h_, p, scratch_, {kQ, kKt, kVt, kO, kDO, kStats, kDQ, kDK, kDV, kScale, kLowest, kOne},
            {base, base + k_off, base + v_off, const_cast<bf16*>(out), const_cast<bf16*>(dout),
             const_cast<float*>(stats), dbase, dbase + k_off, dbase + v_off, &scale, &lowest, &one},
            "backward");
  }

 private:
  cudnnHandle_t h_;
  Scratch& scratch_;
  PlanCache plans_;
};

// Attention over segments (ops/attention_segments.hpp) on the ragged graphs: the per-segment
// lengths and element offsets are computed on the device from the segment table
// (segment_offsets, attention_segments.cu) into a buffer of this object's, then bound with the
// tensors. One graph pair per (buckets, causal, heads, strides).
class CudnnSegmentAttention final : public SegmentAttention {
 public:
  CudnnSegmentAttention(cudnnHandle_t h, Scratch& scratch) : h_(h), scratch_(scratch), plans_(h) {}
  ~CudnnSegmentAttention() override {
    if (offsets_) cudaFree(offsets_);
  }

  void forward(cudaStream_t s, bf16* out, float* lse, const bf16* q, int64_t qs, const bf16* k, const bf16* v,
               int64_t ks, int H, int KV, int hd, const DeviceSegments& seg) override {
    if (seg.count == 0) return;
    run(s, seg, shape(seg, qs, ks, H, KV, hd), true, {kQ, kKt, kV, kO, kStats},
        {const_cast<bf16*>(q), const_cast<bf16*>(k), const_cast<bf16*>(v), out, lse});
  }

  void backward(cudaStream_t s, bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, int64_t qs,
                const bf16* k, const bf16* v, int64_t ks, const bf16* out, const float* lse, int H, int KV, int hd,
                const DeviceSegments& seg) override {
    if (seg.count == 0) return;
    run(s, seg, shape(seg, qs, ks, H, KV, hd), false, {kQ, kKt, kVt, kO, kDO, kStats, kDQ, kDK, kDV},
        {const_cast<bf16*>(q), const_cast<bf16*>(k), const_cast<bf16*>(v), const_cast<bf16*>(out),
         const_cast<bf16*>(dout), const_cast<float*>(lse), dq, dk, dv});
  }

  int graphs() const override { return plans_.size(); }

 private:
  static Shape shape(const DeviceSegments& seg, int64_t qs, int64_t ks, int H, int KV, int hd) {
    check(KV > 0 && H % KV == 0, "attention: {} kv heads do not divide {} query heads", KV, H);
    check(seg.count <= seg.shape.n && seg.shape.sq <= seg.Tq && seg.shape.skv <= seg.Tk,
          "attention segments: {} segments of {} x {} rows do not fit a table of {} and {} x {} rows", seg.count,
          seg.shape.sq, seg.shape.skv, seg.shape.n, seg.Tq, seg.Tk);
    const int64_t C = int64_t{H} * hd, lim = std::numeric_limits<int32_t>::max();
    check(int64_t{seg.B} * seg.Tq * std::max(qs, C) < lim && int64_t{seg.B} * seg.Tk * ks < lim &&
              int64_t{seg.B} * H * seg.Tq < lim,
          "attention segments: {} x {} rows of {} elements exceed cuDNN's 32-bit ragged offsets", seg.B, seg.Tq, qs);
    return Shape{seg.shape.n, seg.shape.sq, seg.shape.skv, H, hd, KV, qs, ks, C, seg.Tq, seg.causal, true};
  }

  // The lengths and offsets, [6][n + 1] int32 (segment_offsets), in a buffer grown on the stream.
  int32_t* offsets(cudaStream_t s, const DeviceSegments& seg, const Shape& sh) {
    const size_t need = 6 * static_cast<size_t>(seg.shape.n + 1) * sizeof(int32_t);
    if (need > cap_) {
      if (offsets_) cuda_check(cudaFreeAsync(offsets_, s), "cudaFreeAsync(attention segment offsets)");
      cuda_check(cudaMallocAsync(reinterpret_cast<void**>(&offsets_), need, s),
                 "cudaMallocAsync(attention segment offsets)");
      cap_ = need;
    }
    segment_offsets(s, offsets_, seg.table, seg.shape.n, seg.Tq, sh.H, sh.qs, sh.ks, sh.os);
    return offsets_;
  }

  // Runs the forward or backward graph on the given tensors, with what every segment graph also
  // reads: the per-segment lengths and offsets, the scalars (the causal mask's lowest only when
  // the graph has one; the backward's "* 1").
  void run(cudaStream_t s, const DeviceSegments& seg, const Shape& sh, bool fwd, std::vector<int64_t> uids,
           std::vector<void*> ptrs) {
    const char* name = fwd ? "segment forward" : "segment backward";
    Plan& p = plans_.get(sh, fwd, name);
    int32_t* off = offsets(s, seg, sh);
    cudnn_check(cudnnSetStream(h_, s), "cudnnSetStream");
    float scale = 1.f / std::sqrt(static_cast<float>(sh.hd)), lowest = std::numeric_limits<float>::lowest();
    float neg_inf = -std::numeric_limits<float>::infinity(), one = 1.f;
    uids.insert(uids.end(), {kScale, kNegInf});
    ptrs.insert(ptrs.end(), {&scale, &neg_inf});
    if (!fwd) uids.push_back(kOne), ptrs.push_back(&one);
    if (sh.causal) uids.push_back(kLowest), ptrs.push_back(&lowest);
    const int64_t m = seg.shape.n + 1;
    for (auto [uid, at] : {std::pair{kSeqQ, 0}, {kSeqKv, 1}, {kQOff, 2}, {kKvOff, 3}, {kOOff, 4}, {kStatsOff, 5}})
      uids.push_back(uid), ptrs.push_back(off + at * m);
    execute(h_, p, scratch_, uids, ptrs, name);
  }

  cudnnHandle_t h_;
  Scratch& scratch_;
  PlanCache plans_;
  int32_t* offsets_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace

std::unique_ptr<SegmentAttention> make_cudnn_segment_attention(cudnnHandle_t cudnn, Scratch& scratch) {
  return std::make_unique<CudnnSegmentAttention>(cudnn, scratch);
}

std::unique_ptr<Attention> make_cudnn_attention(cudnnHandle_t cudnn, Scratch& scratch) {
  return std::make_unique<CudnnAttention>(cudnn, scratch);
}

namespace {

std::string dry_build(cudnnHandle_t handle, const Shape& sh) {
  check(sh.KV > 0 && sh.H % sh.KV == 0, "attention: {} kv heads do not divide {} query heads", sh.KV, sh.H);
  Plan f, b;
  build_forward(f.graph, sh);
  build_backward(b.graph, sh);
  f.graph.graph(handle);
  b.graph.graph(handle);
  std::string what = fmt::format("operation graphs finalised (forward {} ops, backward {} ops)", f.graph.op_count(),
                                 b.graph.op_count());
  if (!handle) return what + "; heuristics and plans skipped: they need a device (cudnnCreate)";
  make_plan(f, handle, "forward");
  make_plan(b, handle, "backward");
  return what + fmt::format("; plans built (workspace forward {} B, backward {} B)", f.workspace, b.workspace);
}

}  // namespace

std::string cudnn_attention_dry_build(cudnnHandle_t handle, int B, int T, int H, int hd, int KV) {
  return dry_build(handle, dense_shape(B, T, H, hd, KV == 0 ? H : KV));
}

std::string cudnn_segment_attention_dry_build(cudnnHandle_t handle, const SegmentBuckets& k, bool causal, int H, int hd,
                                              int KV, int64_t q_stride, int64_t kv_stride, int stats_T) {
  const Shape sh{k.n, k.sq, k.skv, H, hd, KV == 0 ? H : KV, q_stride, kv_stride, int64_t{H} * hd, stats_T, causal, true};
  return dry_build(handle, sh);
}

}  // namespace mpitron::cuda
