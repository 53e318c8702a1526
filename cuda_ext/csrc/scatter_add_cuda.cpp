// The CUDA side of gradlint::scatter_add on the torch side: argument and index checks, output
// and scratch from torch's caching allocator, the current stream, then the torch-free launchers
// in scatter_add_kernels.cu. Built only when torch has CUDA and a toolkit is found.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <climits>

#include "scatter_add_checks.h"
#include "scatter_add_launch.h"

namespace gradlint {
namespace {

ValueKind value_kind(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return ValueKind::Float32;
    case at::kDouble: return ValueKind::Float64;
    case at::kHalf: return ValueKind::Float16;
    case at::kBFloat16: return ValueKind::BFloat16;
    default: TORCH_CHECK(false, "gradlint::scatter_add: unsupported dtype ", type);
  }
}

// Checked mode: the range must be known on the host before a launch can be refused, which costs
// one device sync (aminmax, then .item()).
void check_index_range_on_device(const at::Tensor& index, int64_t dim_size) {
  if (index.numel() == 0) return;
  const auto [lowest, highest] = at::aminmax(index);
  if (lowest.item<int64_t>() >= 0 && highest.item<int64_t>() < dim_size) return;
  const int64_t position = ((index < 0) | (index >= dim_size)).nonzero()[0][0].item<int64_t>();
  fail_index_out_of_range(position, index[position].item<int64_t>(), dim_size);
}

void check_launch(int status, const char* algorithm) {
  TORCH_CHECK(status == 0, "gradlint::scatter_add (CUDA, ", algorithm,
              "): ", scatter_add_cuda_error_string(status));
}

at::Tensor scatter_add_cuda(const at::Tensor& src, const at::Tensor& index_arg, int64_t dim_size,
                            bool deterministic, bool check_index) {
  check_scatter_add_args(src, index_arg, dim_size);
  const c10::cuda::CUDAGuard guard(src.device());
  // The sort reads the index as its keys, which must be contiguous; no dtype change.
  const at::Tensor index = index_arg.contiguous();
  if (check_index) check_index_range_on_device(index, dim_size);

  at::Tensor out = at::empty(scatter_add_out_shape(src, dim_size), src.options());
  ScatterAddProblem problem{};
  problem.src = src.const_data_ptr();
  problem.src_row_stride = src.stride(0);
  problem.src_col_stride = src.dim() == 2 ? src.stride(1) : 1;
  problem.index = index.const_data_ptr();
  problem.index_is_int64 = index.scalar_type() == at::kLong;
  problem.out = out.data_ptr();
  problem.n = src.size(0);
  problem.d = src.dim() == 2 ? src.size(1) : 1;
  problem.dim_size = dim_size;
  problem.kind = value_kind(src.scalar_type());
  problem.stream = c10::cuda::getCurrentCUDAStream().stream();

  const auto scratch = [&](size_t bytes) {
    return at::empty({static_cast<int64_t>(bytes)}, src.options().dtype(at::kByte));
  };
  if (deterministic) {
    TORCH_CHECK(problem.n <= INT_MAX, "gradlint::scatter_add: the deterministic CUDA path takes at most ",
                INT_MAX, " rows, got ", problem.n, " (use deterministic=False or split the input)");
    // Unvalidated indices are sorted on every bit so that a bad one cannot alias a valid row.
    const bool full_key_width = !check_index;
    const size_t bytes = scatter_add_sorted_workspace_bytes(problem, full_key_width);
    at::Tensor workspace = scratch(bytes);
    check_launch(scatter_add_sorted_cuda(problem, full_key_width, workspace.data_ptr(), bytes), "deterministic");
  } else {
    const size_t bytes = scatter_add_atomic_workspace_bytes(problem);
    at::Tensor workspace = scratch(bytes);
    check_launch(scatter_add_atomic_cuda(problem, workspace.data_ptr(), bytes), "atomic");
  }
  return out;
}

}  // namespace
}  // namespace gradlint

TORCH_LIBRARY_IMPL(gradlint, CUDA, m) { m.impl("scatter_add", &gradlint::scatter_add_cuda); }
