// Argument checks shared by the CPU kernels and the CUDA glue, so both devices reject the same
// inputs with the same words.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace gradlint {

inline void check_scatter_add_args(const at::Tensor& src, const at::Tensor& index, int64_t dim_size) {
  TORCH_CHECK(src.dim() == 1 || src.dim() == 2,
              "gradlint::scatter_add: src must be [N] or [N, D], got shape ", src.sizes());
  TORCH_CHECK(index.dim() == 1, "gradlint::scatter_add: index must be 1-D [N], got shape ",
              index.sizes());
  TORCH_CHECK(index.scalar_type() == at::kInt || index.scalar_type() == at::kLong,
              "gradlint::scatter_add: index must be int32 or int64, got ", index.scalar_type());
  const auto t = src.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16,
              "gradlint::scatter_add: src must be float32, float64, float16 or bfloat16, got ", t);
  TORCH_CHECK(index.size(0) == src.size(0), "gradlint::scatter_add: index has ", index.size(0),
              " entries but src has ", src.size(0), " rows");
  TORCH_CHECK(dim_size >= 0, "gradlint::scatter_add: dim_size must be >= 0, got ", dim_size);
  TORCH_CHECK(src.device() == index.device(), "gradlint::scatter_add: src is on ", src.device(),
              " but index is on ", index.device());
}

[[noreturn]] inline void fail_index_out_of_range(int64_t position, int64_t value, int64_t dim_size) {
  TORCH_CHECK_INDEX(false, "gradlint::scatter_add: index[", position, "] = ", value,
                    " is out of range for dim_size ", dim_size, " (every index must be in [0, ",
                    dim_size, "))");
  __builtin_unreachable();
}

inline std::vector<int64_t> scatter_add_out_shape(const at::Tensor& src, int64_t dim_size) {
  if (src.dim() == 1) return {dim_size};
  return {dim_size, src.size(1)};
}

}  // namespace gradlint
