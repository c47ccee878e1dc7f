// Token + position embedding. Forward: out[bt, :] = wte[tok - vocab_begin] + wpe[pos(t)] (tokens outside
// this shard's [vocab_begin, vocab_end) contribute 0). Backward, deterministic without float
// atomics: the (token, position) pairs are radix-sorted by token (stable, so positions stay in
// order), then one block per run of equal tokens sums its dout rows in position order into dwte.
// dwpe: one thread per (t, column) sums over b in order. pos(t) = positions[t] (context parallel:
// a rank's rows are global positions of two chunks) or t; distinct t have distinct rows. With
// per_row (document masking) positions are [B, T], each row's position in its document: rows share
// wpe rows freely, so dwpe is summed like dwte, by the positions sorted.
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"

namespace mpitron::cuda {
namespace {

__global__ void emb_fwd_kernel(bf* out, const int32_t* tokens, const bf* wte, const bf* wpe, int64_t BT, int T, int C,
                               int64_t vocab_begin, int64_t vocab_end, const int32_t* positions, bool per_row) {
  int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;  // one per 8 channels
  int64_t packs = C / 8;
  if (idx >= BT * packs) return;
  int64_t bt = idx / packs, c = (idx % packs) * 8;
  int64_t tok = tokens[bt];
  float acc[8] = {};
  if (tok >= vocab_begin && tok < vocab_end) {
    Bf8 e = *reinterpret_cast<const Bf8*>(wte + (tok - vocab_begin) * C + c);
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[k] += __bfloat162float(e.v[k]);
  }
  if (wpe) {
    const int64_t t = bt % T, row = per_row ? positions[bt] : positions ? positions[t] : t;
    Bf8 p = *reinterpret_cast<const Bf8*>(wpe + row * C + c);
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[k] += __bfloat162float(p.v[k]);
  }
  Bf8 o;
#pragma unroll
  for (int k = 0; k < 8; ++k) o.v[k] = __float2bfloat16_rn(acc[k]);
  *reinterpret_cast<Bf8*>(out + bt * C + c) = o;
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) v[i] = static_cast<int32_t>(i);
}

// Block i handles the run of equal sorted keys (tokens, or document positions) that starts at i
// (other blocks exit at once): dst's row key - key_begin += the run's dout rows, in row order.
__global__ void sum_rows_by_key_kernel(float* dst, const bf* dout, const int32_t* keys, const int32_t* rows, int64_t n,
                                       int C, int64_t key_begin, int64_t key_end) {
  int64_t i = blockIdx.x;
  int32_t key = keys[i];
  if ((i > 0 && keys[i - 1] == key) || key < key_begin || key >= key_end) return;
  int64_t j1 = i + 1;
  while (j1 < n && keys[j1] == key) ++j1;
  float* d = dst + (key - key_begin) * static_cast<int64_t>(C);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.f;
    for (int64_t j = i; j < j1; ++j) acc += __bfloat162float(dout[static_cast<int64_t>(rows[j]) * C + c]);
    d[c] += acc;
  }
}

__global__ void emb_bwd_wpe_kernel(float* dwpe, const bf* dout, int B, int T, int C, const int32_t* positions) {
  int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<int64_t>(T) * C) return;
  float acc = 0.f;
  for (int b = 0; b < B; ++b) acc += __bfloat162float(dout[static_cast<int64_t>(b) * T * C + idx]);
  const int64_t t = idx / C, row = positions ? positions[t] : t;
  dwpe[row * C + idx % C] += acc;
}

}  // namespace

void embedding_forward(cudaStream_t s, bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                       int T, int C, int64_t vocab_begin, int64_t vocab_end, const int32_t* positions, bool per_row) {
  if (per_row && !positions) throw_error("embedding_forward: per_row needs positions");
  if (C % 8 != 0 || !aligned16(out) || !aligned16(wte) || (wpe && !aligned16(wpe)))
    throw_error("embedding_forward: C = " + std::to_string(C) +
                " must be a multiple of 8 and out/wte/wpe 16-byte aligned");
  int64_t work = static_cast<int64_t>(B) * T * (C / 8);
  if (work == 0) return;
  emb_fwd_kernel<<<static_cast<unsigned>((work + 255) / 256), 256, 0, s>>>(
      as_bf(out), tokens, as_bf(wte), wpe ? as_bf(wpe) : nullptr, static_cast<int64_t>(B) * T, T, C, vocab_begin,
      vocab_end, positions, per_row);
  launch_check("emb_fwd_kernel");
}

namespace {

// dst[key - key_begin] += dout rows of the n row indices with that key (keys outside [key_begin,
// key_end) skipped), each key's rows summed in row order: the keys radix-sorted with their row
// indices (stable), then one block per run of equal keys.
void scatter_rows_by_key(cudaStream_t s, Scratch& scratch, float* dst, const bf16* dout, const int32_t* keys_in, int n,
                         int C, int64_t key_begin, int64_t key_end) {
  size_t temp_bytes = 0;
  cuda_check(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), n, 0, 32, s),
             "cub::DeviceRadixSort::SortPairs (size query)");
  size_t arr = (static_cast<size_t>(n) * sizeof(int32_t) + 255) / 256 * 256;
  char* base = static_cast<char*>(scratch.get(3 * arr + temp_bytes));
  int32_t* iota = reinterpret_cast<int32_t*>(base);
  int32_t* keys = reinterpret_cast<int32_t*>(base + arr);
  int32_t* pos = reinterpret_cast<int32_t*>(base + 2 * arr);
  void* temp = base + 3 * arr;
  iota_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(iota, n);
  launch_check("iota_kernel");
  // Stable LSD radix sort over all 32 bits (keys are >= 0; a negative one only sorts last).
  cuda_check(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys, iota, pos, n, 0, 32, s),
             "cub::DeviceRadixSort::SortPairs");
  sum_rows_by_key_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(dst, as_bf(dout), keys, pos, n, C, key_begin,
                                                                   key_end);
  launch_check("sum_rows_by_key_kernel");
}

}  // namespace

void embedding_backward(cudaStream_t s, Scratch& scratch, float* dwte, float* dwpe, const bf16* dout,
                        const int32_t* tokens, int B, int T, int C, int64_t vocab_begin, int64_t vocab_end,
                        const int32_t* positions, bool per_row) {
  const int64_t BT = static_cast<int64_t>(B) * T;
  if (BT == 0) return;
  if (BT > 0x7fffffff) throw_error("embedding_backward: B*T too large for one launch");
  if (dwte) scatter_rows_by_key(s, scratch, dwte, dout, tokens, static_cast<int>(BT), C, vocab_begin, vocab_end);
  if (dwpe && per_row) {
    scatter_rows_by_key(s, scratch, dwpe, dout, positions, static_cast<int>(BT), C, 0, T);  // positions < T
  } else if (dwpe) {
    int64_t work = static_cast<int64_t>(T) * C;
    emb_bwd_wpe_kernel<<<static_cast<unsigned>((work + 255) / 256), 256, 0, s>>>(dwpe, as_bf(dout), B, T, C, positions);
    launch_check("emb_bwd_wpe_kernel");
  }
}

}  // namespace mpitron::cuda
