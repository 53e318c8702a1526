"""What a compiled extension's function reaches in the project's C++ and CUDA sources
(gradlint/native_sources.py): a float atomic add, read textually, and nothing when in doubt."""

from __future__ import annotations

import textwrap

import pytest

from gradlint.native_sources import NativeSources, read_sources

BINDINGS = """
    PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
      m.def("grad", &grad_op, "the op's backward");
    }
"""

CALLER = """
    at::Tensor grad_op(at::Tensor g) {
      launch_grad(g.numel(), g.data_ptr<float>(), out.data_ptr<float>());
      return out;
    }
"""


def _sources(kernel: str, caller: str = CALLER, bindings: str = BINDINGS) -> NativeSources:
    return NativeSources({"ext/bindings.cpp": textwrap.dedent(bindings), "ext/op.cpp": textwrap.dedent(caller),
                          "ext/op_gpu.cu": textwrap.dedent(kernel)})


FLOAT_KERNEL = """
    __global__ void grad_kernel(int n, const float *__restrict__ g, float *__restrict__ out) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) atomicAdd(out + i % 7, g[i]);
    }
    void launch_grad(int n, const float *g, float *out) {
      grad_kernel<<<(n + 255) / 256, 256>>>(n, g, out);
    }
"""


def test_a_float_atomic_add_is_found_through_the_calls_and_the_launch():
    found = _sources(FLOAT_KERNEL).float_atomic_add("grad")
    assert found is not None and (found.path, found.line, found.kernel) == ("ext/op_gpu.cu", 4, "grad_kernel")


@pytest.mark.parametrize("kernel", [
    # a float add in shared memory, a template type torch's dispatch makes floating, the half types
    FLOAT_KERNEL.replace("float *__restrict__ out", "double *out"),
    FLOAT_KERNEL.replace("float *__restrict__ out", "scalar_t* __restrict__ out"),
    FLOAT_KERNEL.replace("float *__restrict__ out", "at::Half *out").replace("atomicAdd", "gpuAtomicAdd"),
    FLOAT_KERNEL.replace("if (i < n) atomicAdd(out + i % 7, g[i]);",
                         "__shared__ float acc[32];\n      atomicAdd(&acc[i % 32], g[i]);"),
    # a kernel taken by address, then launched (mamba's selective scan)
    FLOAT_KERNEL.replace("grad_kernel<<<(n + 255) / 256, 256>>>(n, g, out);",
                         "auto kernel = &grad_kernel;\n      kernel<<<1, 256>>>(n, g, out);"),
])
def test_the_float_forms_are_found(kernel):
    assert _sources(kernel).float_atomic_add("grad") is not None


@pytest.mark.parametrize("kernel", [
    FLOAT_KERNEL.replace("float *__restrict__ out", "int *__restrict__ out"),  # integers: exact
    FLOAT_KERNEL.replace("float *__restrict__ out", "int64_t *out"),
    FLOAT_KERNEL.replace("float *__restrict__ out", "index_t *out"),
    FLOAT_KERNEL.replace("float *__restrict__ out", "T *out"),  # a plain template type: not read
    FLOAT_KERNEL.replace("if (i < n) atomicAdd(out + i % 7, g[i]);",
                         "// atomicAdd(out + i, g[i]);\n      if (i < n) out[i] = g[i];"),  # a comment
    FLOAT_KERNEL.replace("if (i < n) atomicAdd(out + i % 7, g[i]);",
                         'printf("atomicAdd(out, g)");'),  # a string
    FLOAT_KERNEL.replace("grad_kernel<<<", "other_kernel<<<"),  # the add is in a kernel never reached
])
def test_what_is_not_a_float_atomic_add_or_is_not_reached_is_none(kernel):
    assert _sources(kernel).float_atomic_add("grad") is None


def test_a_name_bound_twice_counts_only_when_every_binding_adds_atomically():
    twice = BINDINGS.replace('m.def("grad", &grad_op, "the op\'s backward");',
                             'm.def("grad", &grad_op);\n  m.def("grad", &grad_cpu);')
    cpu = CALLER + "\nat::Tensor grad_cpu(at::Tensor g) { return g.clone(); }\n"
    assert _sources(FLOAT_KERNEL, cpu, twice).float_atomic_add("grad") is None
    assert _sources(FLOAT_KERNEL).float_atomic_add("unbound") is None


def test_too_many_sources_are_not_read(tmp_path, monkeypatch):
    from gradlint import native_sources

    for i in range(4):
        (tmp_path / f"k{i}.cu").write_text("__global__ void k() {}\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "generated.cu").write_text("")  # build output: not the project's sources
    assert sorted(p.rsplit("/", 1)[1] for p in read_sources(str(tmp_path), 1_000_000)) == [f"k{i}.cu" for i in range(4)]
    monkeypatch.setattr(native_sources, "_MAX_FILES", 3)
    assert read_sources(str(tmp_path), 1_000_000) is None


# mmcv's way: the bound function calls an `_impl` that dispatches to the implementation a
# registration macro names, whose launcher launches a kernel templated on T with scalar_t.
REGISTERED = {
    "ops/pybind.cpp": """
        PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("pool_backward", &pool_backward); }
    """,
    "ops/pool.cpp": """
        void pool_backward_impl(Tensor grad, Tensor out) {
          DISPATCH_DEVICE_IMPL(pool_backward_impl, grad, out);
        }
        void pool_backward(Tensor grad, Tensor out) { pool_backward_impl(grad, out); }
    """,
    "ops/cudabind.cpp": """
        void pool_backward_cuda(Tensor grad, Tensor out) { PoolBackwardLauncher(grad, out); }
        void pool_backward_impl(Tensor grad, Tensor out);
        REGISTER_DEVICE_IMPL(pool_backward_impl, CUDA, pool_backward_cuda);
    """,
    "ops/pool_cuda.cu": """
        void PoolBackwardLauncher(Tensor grad, Tensor out) {
          AT_DISPATCH_FLOATING_TYPES_AND_HALF(grad.scalar_type(), "pool_backward", ([&] {
            pool_backward_kernel<scalar_t><<<GET_BLOCKS(n), THREADS>>>(n, grad.data_ptr<scalar_t>(),
                                                                       out.data_ptr<scalar_t>());
          }));
        }
    """,
    "ops/pool_kernel.cuh": """
        template <typename T>
        __global__ void pool_backward_kernel(const int n, const T* grad, T* out) {
          CUDA_1D_KERNEL_LOOP(index, n) { atomicAdd(out + index / 4, grad[index]); }
        }
    """,
}


def test_a_registered_implementation_and_a_kernel_launched_with_scalar_t_are_followed():
    texts = {path: textwrap.dedent(text) for path, text in REGISTERED.items()}
    found = NativeSources(texts).float_atomic_add("pool_backward")
    assert found is not None and (found.path, found.kernel) == ("ops/pool_kernel.cuh", "pool_backward_kernel")


def test_a_kernel_launched_with_an_integer_type_adds_integers():
    texts = {path: textwrap.dedent(text) for path, text in REGISTERED.items()}
    texts["ops/pool_cuda.cu"] = texts["ops/pool_cuda.cu"].replace("pool_backward_kernel<scalar_t>", "pool_backward_kernel<int>")
    assert NativeSources(texts).float_atomic_add("pool_backward") is None


def test_without_the_registration_the_dispatch_is_not_followed():
    texts = {path: textwrap.dedent(text) for path, text in REGISTERED.items()}
    texts["ops/cudabind.cpp"] = texts["ops/cudabind.cpp"].replace(
        "REGISTER_DEVICE_IMPL(pool_backward_impl, CUDA, pool_backward_cuda);", "")
    assert NativeSources(texts).float_atomic_add("pool_backward") is None
