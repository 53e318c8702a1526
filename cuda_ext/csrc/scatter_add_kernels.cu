// CUDA kernels for gradlint::scatter_add, free of torch headers (see scatter_add_launch.h) so a
// bare `nvcc -c` compiles this file on machines whose torch has no CUDA build.
//
// atomic: one atomicAdd per element into an explicitly zeroed output (torch.empty is not zero,
// and in deterministic mode torch fills it with NaN), float32 scratch for half types.
// sorted (deterministic): radix-sort (index, position) pairs on only the bits that dim_size
// needs, find each target's segment by binary search, then one thread per output element sums
// its segment in ascending source order. No atomics anywhere, so the bits never vary.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "scatter_add_launch.h"

namespace gradlint {
namespace {

// How a stored value type loads into its accumulator type and back.
template <typename T>
struct Value {
  using acc = T;
  __device__ static acc load(T v) { return v; }
  __device__ static T store(acc v) { return v; }
};
template <>
struct Value<__half> {
  using acc = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Value<__nv_bfloat16> {
  using acc = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

template <typename T>
struct Tag {
  using type = T;
};

constexpr int kThreads = 256;

int blocks_for(int64_t work) {
  // Grid-stride loops below: enough blocks to fill any current GPU, not one block per element.
  return static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, int64_t{1} << 16));
}

size_t aligned(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

__device__ inline int64_t thread_start() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ inline int64_t thread_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <typename T, typename I>
__global__ void atomic_add_kernel(const T* src, int64_t row_stride, int64_t col_stride, const I* index,
                                  typename Value<T>::acc* acc, int64_t n, int64_t d, int64_t dim_size) {
  for (int64_t e = thread_start(); e < n * d; e += thread_stride()) {
    const int64_t i = e / d;
    const int64_t j = e - i * d;
    const int64_t target = static_cast<int64_t>(index[i]);
    // Unchecked mode lands here with bad indices: drop them rather than write outside `out`.
    if (target < 0 || target >= dim_size) continue;
    atomicAdd(acc + target * d + j, Value<T>::load(src[i * row_stride + j * col_stride]));
  }
}

template <typename T>
__global__ void store_kernel(const typename Value<T>::acc* acc, T* out, int64_t count) {
  for (int64_t e = thread_start(); e < count; e += thread_stride()) out[e] = Value<T>::store(acc[e]);
}

__global__ void iota_kernel(int32_t* values, int64_t n) {
  for (int64_t e = thread_start(); e < n; e += thread_stride()) values[e] = static_cast<int32_t>(e);
}

// row_begin[r] = first sorted position whose key is >= r, for r in [0, dim_size]. Keys are the
// indices read as unsigned, so negative ones sort after every valid row and belong to none.
template <typename K>
__global__ void row_begin_kernel(const K* sorted, int64_t n, int32_t* row_begin, int64_t dim_size) {
  for (int64_t r = thread_start(); r <= dim_size; r += thread_stride()) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (sorted[mid] < static_cast<K>(r)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    row_begin[r] = static_cast<int32_t>(lo);
  }
}

// Consecutive threads take consecutive columns of one target, so a [*, 64] row is read coalesced.
template <typename T>
__global__ void segment_sum_kernel(const T* src, int64_t row_stride, int64_t col_stride, const int32_t* order,
                                   const int32_t* row_begin, T* out, int64_t d, int64_t dim_size) {
  for (int64_t e = thread_start(); e < dim_size * d; e += thread_stride()) {
    const int64_t r = e / d;
    const int64_t j = e - r * d;
    typename Value<T>::acc sum = 0;
    for (int32_t p = row_begin[r], end = row_begin[r + 1]; p < end; ++p) {
      sum += Value<T>::load(src[static_cast<int64_t>(order[p]) * row_stride + j * col_stride]);
    }
    out[e] = Value<T>::store(sum);
  }
}

template <typename F>
int with_types(const ScatterAddProblem& p, F&& f) {
  const auto with_index = [&](auto value) {
    return p.index_is_int64 ? f(value, Tag<int64_t>{}) : f(value, Tag<int32_t>{});
  };
  switch (p.kind) {
    case ValueKind::Float32: return with_index(Tag<float>{});
    case ValueKind::Float64: return with_index(Tag<double>{});
    case ValueKind::Float16: return with_index(Tag<__half>{});
    case ValueKind::BFloat16: return with_index(Tag<__nv_bfloat16>{});
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

template <typename I>
using SortKey = std::conditional_t<sizeof(I) == 8, unsigned long long, unsigned int>;

int sort_bits(const ScatterAddProblem& p, int key_bits, bool full_key_width) {
  if (full_key_width || p.dim_size <= 1) return full_key_width ? key_bits : 1;
  int bits = 0;
  for (uint64_t top = static_cast<uint64_t>(p.dim_size - 1); top != 0; top >>= 1) ++bits;
  return bits;
}

// The sorted path's scratch, carved from one caller-provided block.
struct SortedScratch {
  size_t keys_out, order_in, order_out, row_begin, cub_temp, cub_temp_bytes, total;
};

template <typename K>
SortedScratch sorted_scratch(const ScatterAddProblem& p, int bits, cudaError_t* status) {
  SortedScratch s{};
  s.cub_temp_bytes = 0;
  *status = cub::DeviceRadixSort::SortPairs(nullptr, s.cub_temp_bytes, static_cast<const K*>(nullptr),
                                            static_cast<K*>(nullptr), static_cast<const int32_t*>(nullptr),
                                            static_cast<int32_t*>(nullptr), static_cast<int>(p.n), 0, bits);
  const size_t n = static_cast<size_t>(p.n);
  s.keys_out = 0;
  s.order_in = s.keys_out + aligned(n * sizeof(K));
  s.order_out = s.order_in + aligned(n * sizeof(int32_t));
  s.row_begin = s.order_out + aligned(n * sizeof(int32_t));
  s.cub_temp = s.row_begin + aligned((static_cast<size_t>(p.dim_size) + 1) * sizeof(int32_t));
  s.total = s.cub_temp + aligned(s.cub_temp_bytes);
  return s;
}

}  // namespace

size_t scatter_add_atomic_workspace_bytes(const ScatterAddProblem& p) {
  const bool half = p.kind == ValueKind::Float16 || p.kind == ValueKind::BFloat16;
  return half ? static_cast<size_t>(p.dim_size * p.d) * sizeof(float) : 0;
}

int scatter_add_atomic_cuda(const ScatterAddProblem& p, void* workspace, size_t workspace_bytes) {
  if (workspace_bytes < scatter_add_atomic_workspace_bytes(p)) return static_cast<int>(cudaErrorInvalidValue);
  return with_types(p, [&](auto value_tag, auto index_tag) -> int {
    using T = typename decltype(value_tag)::type;
    using I = typename decltype(index_tag)::type;
    using Acc = typename Value<T>::acc;
    const auto stream = static_cast<cudaStream_t>(p.stream);
    const int64_t count = p.dim_size * p.d;
    Acc* acc = std::is_same_v<Acc, T> ? static_cast<Acc*>(p.out) : static_cast<Acc*>(workspace);
    cudaError_t status = cudaMemsetAsync(acc, 0, static_cast<size_t>(count) * sizeof(Acc), stream);
    if (status != cudaSuccess) return static_cast<int>(status);
    if (p.n * p.d > 0) {
      atomic_add_kernel<T, I><<<blocks_for(p.n * p.d), kThreads, 0, stream>>>(
          static_cast<const T*>(p.src), p.src_row_stride, p.src_col_stride, static_cast<const I*>(p.index), acc,
          p.n, p.d, p.dim_size);
    }
    if constexpr (!std::is_same_v<Acc, T>) {
      if (count > 0) store_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(acc, static_cast<T*>(p.out), count);
    }
    return static_cast<int>(cudaGetLastError());
  });
}

size_t scatter_add_sorted_workspace_bytes(const ScatterAddProblem& p, bool full_key_width) {
  if (p.n > INT_MAX) return 0;
  cudaError_t status = cudaSuccess;
  const SortedScratch s =
      p.index_is_int64
          ? sorted_scratch<unsigned long long>(p, sort_bits(p, 64, full_key_width), &status)
          : sorted_scratch<unsigned int>(p, sort_bits(p, 32, full_key_width), &status);
  return status == cudaSuccess ? s.total : 0;
}

int scatter_add_sorted_cuda(const ScatterAddProblem& p, bool full_key_width, void* workspace,
                            size_t workspace_bytes) {
  // Positions are int32 to halve the sort's traffic; the glue refuses larger inputs first.
  if (p.n > INT_MAX) return static_cast<int>(cudaErrorInvalidValue);
  return with_types(p, [&](auto value_tag, auto index_tag) -> int {
    using T = typename decltype(value_tag)::type;
    using I = typename decltype(index_tag)::type;
    using K = SortKey<I>;
    const auto stream = static_cast<cudaStream_t>(p.stream);
    const int bits = sort_bits(p, static_cast<int>(sizeof(K) * 8), full_key_width);
    cudaError_t status = cudaSuccess;
    const SortedScratch s = sorted_scratch<K>(p, bits, &status);
    if (status != cudaSuccess) return static_cast<int>(status);
    if (workspace_bytes < s.total) return static_cast<int>(cudaErrorInvalidValue);

    char* base = static_cast<char*>(workspace);
    K* keys_out = reinterpret_cast<K*>(base + s.keys_out);
    int32_t* order_in = reinterpret_cast<int32_t*>(base + s.order_in);
    int32_t* order_out = reinterpret_cast<int32_t*>(base + s.order_out);
    int32_t* row_begin = reinterpret_cast<int32_t*>(base + s.row_begin);

    if (p.n > 0) {
      iota_kernel<<<blocks_for(p.n), kThreads, 0, stream>>>(order_in, p.n);
      size_t temp_bytes = s.cub_temp_bytes;
      // LSD radix sort is stable: equal targets keep ascending source positions.
      status = cub::DeviceRadixSort::SortPairs(base + s.cub_temp, temp_bytes, static_cast<const K*>(p.index),
                                               keys_out, order_in, order_out, static_cast<int>(p.n), 0, bits,
                                               stream);
      if (status != cudaSuccess) return static_cast<int>(status);
    }
    row_begin_kernel<K><<<blocks_for(p.dim_size + 1), kThreads, 0, stream>>>(keys_out, p.n, row_begin, p.dim_size);
    if (p.dim_size * p.d > 0) {
      segment_sum_kernel<T><<<blocks_for(p.dim_size * p.d), kThreads, 0, stream>>>(
          static_cast<const T*>(p.src), p.src_row_stride, p.src_col_stride, order_out, row_begin,
          static_cast<T*>(p.out), p.d, p.dim_size);
    }
    return static_cast<int>(cudaGetLastError());
  });
}

const char* scatter_add_cuda_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

}  // namespace gradlint
