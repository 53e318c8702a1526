// The schema of gradlint::scatter_add. Kernels register per device in scatter_add_cpu.cpp and
// scatter_add_cuda.cpp; the fake (meta) function and autograd are registered from Python in
// gradlint/cuda_ext/ops.py, which set_python_module points torch at.
#include <torch/library.h>

TORCH_LIBRARY(gradlint, m) {
  m.set_python_module("gradlint.cuda_ext.ops");
  m.def(
      "scatter_add(Tensor src, Tensor index, int dim_size, bool deterministic=True, "
      "bool check_index=True) -> Tensor");
}
