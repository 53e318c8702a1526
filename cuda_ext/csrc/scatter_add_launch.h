// The boundary between the torch-side CUDA glue (scatter_add_cuda.cpp) and the kernels
// (scatter_add_kernels.cu). Nothing here includes torch: the kernels must compile with a bare
// nvcc on machines whose torch has no CUDA build, so they see only raw pointers and sizes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradlint {

enum class ValueKind : int { Float32 = 0, Float64 = 1, Float16 = 2, BFloat16 = 3 };

struct ScatterAddProblem {
  const void* src;          // [n, d], element strides below; 1-D src is d == 1
  int64_t src_row_stride;
  int64_t src_col_stride;
  const void* index;        // [n], contiguous
  bool index_is_int64;
  void* out;                // [dim_size, d], contiguous, same ValueKind as src
  int64_t n;
  int64_t d;
  int64_t dim_size;
  ValueKind kind;
  void* stream;             // cudaStream_t
};

// Both entry points take scratch memory from the caller (the torch caching allocator) so that
// the kernels never call cudaMalloc. Query the size first, then launch. The return value is a
// cudaError_t (0 on success); scatter_add_cuda_error_string turns it into text.
size_t scatter_add_atomic_workspace_bytes(const ScatterAddProblem& p);
int scatter_add_atomic_cuda(const ScatterAddProblem& p, void* workspace, size_t workspace_bytes);

// full_key_width: sort on every bit of the index. Needed when the indices were not validated, so
// that an out-of-range value sorts outside [0, dim_size) and is dropped instead of aliasing a row.
size_t scatter_add_sorted_workspace_bytes(const ScatterAddProblem& p, bool full_key_width);
int scatter_add_sorted_cuda(const ScatterAddProblem& p, bool full_key_width, void* workspace,
                            size_t workspace_bytes);

const char* scatter_add_cuda_error_string(int code);

}  // namespace gradlint
