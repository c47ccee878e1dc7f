// cuDNN 9's backend (graph) API without cudnn-frontend: one descriptor, destroyed with its
// owner, and a graph under construction (tensors, pointwise, matmul, reduction and reshape
// operations, the operation graph, and the first engine config the heuristics offer that
// finalises into an execution plan). attention_cudnn.cpp builds the attention graphs with it.
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpitron/core/error.hpp"
#include "mpitron/ops/cuda/check.hpp"

namespace mpitron::cuda {

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc(cudnnBackendDescriptorType_t type, const char* what) : what_(what) {
    cudnn_check(cudnnBackendCreateDescriptor(type, &d_), what);
  }
  explicit Desc(cudnnBackendDescriptor_t adopt) : d_(adopt), what_("CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR") {}
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type, int64_t count, const void* v,
           const char* attr_name) {
    cudnnStatus_t st = cudnnBackendSetAttribute(d_, attr, type, count, v);
    if (st != CUDNN_STATUS_SUCCESS) cudnn_check(st, fmt::format("cudnnBackendSetAttribute({}, {})", what_, attr_name).c_str());
  }
  void set_desc(cudnnBackendAttributeName_t attr, const Desc& other, const char* attr_name) {
    cudnnBackendDescriptor_t o = other.get();
    set(attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o, attr_name);
  }
  void finalize() {
    cudnnStatus_t st = cudnnBackendFinalize(d_);
    if (st != CUDNN_STATUS_SUCCESS) cudnn_check(st, fmt::format("cudnnBackendFinalize({})", what_).c_str());
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  std::string what_;
};

using Dims = std::vector<int64_t>;

inline Dims contiguous(const Dims& d) {
  Dims s(d.size());
  int64_t acc = 1;
  for (size_t i = d.size(); i-- > 0;) {
    s[i] = acc;
    acc *= d[i];
  }
  return s;
}

// A graph under construction: owns every descriptor it creates.
class GraphBuilder {
 public:
  Desc& tensor(int64_t uid, const Dims& dims, const Dims& strides, cudnnDataType_t type, bool is_virtual,
               bool by_value = false, const Desc* ragged_offset = nullptr) {
    Desc& t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "CUDNN_BACKEND_TENSOR_DESCRIPTOR");
    int64_t align = 16;
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "CUDNN_ATTR_TENSOR_DATA_TYPE");
    t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data(),
          "CUDNN_ATTR_TENSOR_DIMENSIONS");
    t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data(),
          "CUDNN_ATTR_TENSOR_STRIDES");
    t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "CUDNN_ATTR_TENSOR_UNIQUE_ID");
    t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT");
    bool v = is_virtual;
    t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v, "CUDNN_ATTR_TENSOR_IS_VIRTUAL");
    if (by_value) {
      bool b = true;
      t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &b, "CUDNN_ATTR_TENSOR_IS_BY_VALUE");
    }
    if (ragged_offset) t.set_desc(CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, *ragged_offset, "CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC");
    t.finalize();
    return t;
  }
  Desc& virt(const Dims& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return tensor(next_virtual_++, dims, contiguous(dims), type, true);
  }
  int64_t next_uid() { return next_virtual_++; }
  Desc& scalar(int64_t uid) { return tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, true); }

  // y = mode(x [, b [, t]]); math precision `prec`; axis for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc& y, const Desc* t = nullptr,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    Desc& pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "CUDNN_BACKEND_POINTWISE_DESCRIPTOR");
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "CUDNN_ATTR_POINTWISE_MODE");
    pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "CUDNN_ATTR_POINTWISE_MATH_PREC");
    if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "CUDNN_ATTR_POINTWISE_AXIS");
    pw.finalize();
    Desc& op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR");
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR");
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "CUDNN_ATTR_OPERATION_POINTWISE_XDESC");
    if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b, "CUDNN_ATTR_OPERATION_POINTWISE_BDESC");
    if (t) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t, "CUDNN_ATTR_OPERATION_POINTWISE_TDESC");
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "CUDNN_ATTR_OPERATION_POINTWISE_YDESC");
    op.finalize();
    ops_.push_back(&op);
  }
  // m, n, k: the actual sizes per batch entry when they vary (a segment's lengths, [n,1,1,1] INT32).
  void matmul(const Desc& a, const Desc& b, const Desc& c, const Desc* m = nullptr, const Desc* n = nullptr,
              const Desc* k = nullptr) {
    Desc& mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "CUDNN_BACKEND_MATMUL_DESCRIPTOR");
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "CUDNN_ATTR_MATMUL_COMP_TYPE");
    mm.finalize();
    Desc& op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR");
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "CUDNN_ATTR_OPERATION_MATMUL_ADESC");
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "CUDNN_ATTR_OPERATION_MATMUL_BDESC");
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "CUDNN_ATTR_OPERATION_MATMUL_CDESC");
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, "CUDNN_ATTR_OPERATION_MATMUL_DESC");
    if (m) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, *m, "CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC");
    if (n) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, *n, "CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC");
    if (k) op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, *k, "CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC");
    op.finalize();
    ops_.push_back(&op);
  }
  void reduction(cudnnReduceTensorOp_t mode, const Desc& x, const Desc& y) {
    Desc& rd = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "CUDNN_BACKEND_REDUCTION_DESCRIPTOR");
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    rd.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "CUDNN_ATTR_REDUCTION_COMP_TYPE");
    rd.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "CUDNN_ATTR_REDUCTION_OPERATOR");
    rd.finalize();
    Desc& op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR");
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "CUDNN_ATTR_OPERATION_REDUCTION_XDESC");
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "CUDNN_ATTR_OPERATION_REDUCTION_YDESC");
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd, "CUDNN_ATTR_OPERATION_REDUCTION_DESC");
    op.finalize();
    ops_.push_back(&op);
  }
  void reshape(const Desc& x, const Desc& y) {
    Desc& op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR");
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "CUDNN_ATTR_OPERATION_RESHAPE_XDESC");
    op.set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "CUDNN_ATTR_OPERATION_RESHAPE_YDESC");
    op.finalize();
    ops_.push_back(&op);
  }

  // Finalises the operation graph (handle may be null: the handle attribute is deprecated in 9.x).
  Desc& graph(cudnnHandle_t handle) {
    Desc& g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR");
    std::vector<cudnnBackendDescriptor_t> raw;
    for (Desc* d : ops_) raw.push_back(d->get());
    g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()), raw.data(),
          "CUDNN_ATTR_OPERATIONGRAPH_OPS");
    if (handle) g.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "CUDNN_ATTR_OPERATIONGRAPH_HANDLE");
    g.finalize();
    graph_ = &g;
    return g;
  }

  // Heuristics (mode A, then FALLBACK) -> the first engine config that finalises into a plan.
  Desc& plan(cudnnHandle_t handle, const char* name) {
    std::string tried;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Desc& heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR");
      heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *graph_, "CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH");
      heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "CUDNN_ATTR_ENGINEHEUR_MODE");
      heur.finalize();
      int64_t count = 0;
      cudnn_check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                           &count, nullptr),
                  "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS, count)");
      if (count <= 0) {
        tried += fmt::format(" heuristics mode {}: no engine;", static_cast<int>(mode));
        continue;
      }
      std::vector<Desc*> cfgs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < count; ++i) {
        cfgs.push_back(&make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR"));
        raw.push_back(cfgs.back()->get());
      }
      int64_t got = 0;
      cudnn_check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                           count, &got, raw.data()),
                  "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)");
      for (int64_t i = 0; i < got; ++i) {
        cudnnBackendDescriptor_t p = nullptr;
        cudnn_check(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p),
                    "cudnnBackendCreateDescriptor(EXECUTION_PLAN)");
        cudnnStatus_t st = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        if (st == CUDNN_STATUS_SUCCESS)
          st = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                        &raw[i]);
        if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(p);
        if (st == CUDNN_STATUS_SUCCESS) {
          owned_.push_back(std::make_unique<Desc>(p));
          return *owned_.back();
        }
        char last[512] = {};
        cudnnGetLastErrorString(last, sizeof last);
        tried += fmt::format(" mode {} config {}: {} {};", static_cast<int>(mode), i, cudnnGetErrorString(st), last);
        cudnnBackendDestroyDescriptor(p);
      }
    }
    fail("cuDNN found no execution plan for the {} attention graph:{}", name, tried);
  }

  size_t op_count() const { return ops_.size(); }

 private:
  Desc& make(cudnnBackendDescriptorType_t type, const char* what) {
    owned_.push_back(std::make_unique<Desc>(type, what));
    return *owned_.back();
  }
  std::vector<std::unique_ptr<Desc>> owned_;
  std::vector<Desc*> ops_;
  Desc* graph_ = nullptr;
  int64_t next_virtual_ = 1000;
};

}  // namespace mpitron::cuda
