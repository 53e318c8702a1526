"""gradlint.cuda_ext.scatter_add against torch's index_add_, on fresh random inputs each run.

The seed of each test's inputs is in its failure message. Every test here runs the compiled op:
the session builds it once (see cuda_ext_session.py).
"""

from __future__ import annotations

import random
from contextlib import contextmanager

import pytest
import torch
from cuda_ext_session import compiled_extension

pytestmark = pytest.mark.slow

ALGORITHMS = [pytest.param(True, id="deterministic"), pytest.param(False, id="atomic")]
INDEX_TYPES = [pytest.param(torch.int64, id="int64"), pytest.param(torch.int32, id="int32")]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.cuda.is_available() is False")


@pytest.fixture(scope="session")
def ext(tmp_path_factory):
    return compiled_extension(tmp_path_factory)


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(random.randrange(2**31))


@contextmanager
def intra_op_threads(count: int):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def index_add_reference(src: torch.Tensor, index: torch.Tensor, dim_size: int) -> torch.Tensor:
    return torch.zeros((dim_size, *src.shape[1:]), dtype=src.dtype, device=src.device).index_add_(0, index, src)


def random_case(rng, n, d, dim_size, index_dtype=torch.int64, dtype=torch.float64, device="cpu"):
    shape = (n, d) if d is not None else (n,)
    src = torch.randn(shape, dtype=dtype, generator=rng).to(device)
    index = torch.randint(0, dim_size, (n,), generator=rng).to(device=device, dtype=index_dtype)
    return src, index


@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
@pytest.mark.parametrize("deterministic", ALGORITHMS)
def test_matches_index_add_with_many_duplicate_targets(ext, rng, deterministic, index_dtype):
    src, index = random_case(rng, n=3000, d=5, dim_size=37, index_dtype=index_dtype)  # ~80 rows per target
    out = ext.scatter_add(src, index, 37, deterministic=deterministic)
    torch.testing.assert_close(out, index_add_reference(src, index.long(), 37), msg=f"seed {rng.initial_seed()}")


@pytest.mark.parametrize("deterministic", ALGORITHMS)
def test_all_rows_to_one_target_sum_into_that_target_only(ext, rng, deterministic):
    src, _ = random_case(rng, n=1000, d=3, dim_size=9)
    index = torch.full((1000,), 4, dtype=torch.int64)
    out = ext.scatter_add(src, index, 9, deterministic=deterministic)
    torch.testing.assert_close(out, index_add_reference(src, index, 9), msg=f"seed {rng.initial_seed()}")
    assert out[torch.arange(9) != 4].count_nonzero() == 0


@pytest.mark.parametrize("deterministic", ALGORITHMS)
@pytest.mark.parametrize("src_shape, dim_size", [((0, 4), 6), ((0,), 6), ((0, 4), 0)])
def test_empty_src_gives_zeros_of_dim_size_rows(ext, deterministic, src_shape, dim_size):
    src = torch.empty(src_shape, dtype=torch.float64)
    out = ext.scatter_add(src, torch.empty(0, dtype=torch.int64), dim_size, deterministic=deterministic)
    assert out.shape == (dim_size, *src_shape[1:])
    assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("deterministic", ALGORITHMS)
def test_target_rows_no_index_names_are_zero(ext, rng, deterministic):
    src, half_index = random_case(rng, n=500, d=4, dim_size=20)
    index = half_index * 2  # only even targets of 40 are used
    out = ext.scatter_add(src, index, 40, deterministic=deterministic)
    # torch.empty is not zero (and NaN in deterministic mode): unused rows must be written, not left.
    assert torch.equal(out[1::2], torch.zeros(20, 4, dtype=torch.float64))
    torch.testing.assert_close(out, index_add_reference(src, index, 40), msg=f"seed {rng.initial_seed()}")


@pytest.mark.parametrize("deterministic", ALGORITHMS)
def test_non_contiguous_src_and_index_give_the_contiguous_result(ext, rng, deterministic):
    wide, _ = random_case(rng, n=800, d=12, dim_size=1)
    long_index = torch.randint(0, 30, (1600,), generator=rng)
    views = {
        "every other column": (wide[:, ::2], long_index[::2]),
        "transposed": (wide.t().contiguous().t(), long_index[::2]),
        "expanded row": (wide[:1].expand(800, 12), long_index[1::2]),
    }
    for name, (src, index) in views.items():
        assert not src.is_contiguous(), name
        out = ext.scatter_add(src, index, 30, deterministic=deterministic)
        expected = ext.scatter_add(src.contiguous(), index.contiguous(), 30, deterministic=deterministic)
        torch.testing.assert_close(out, expected, msg=f"{name}, seed {rng.initial_seed()}")
        torch.testing.assert_close(out, index_add_reference(src, index, 30), msg=f"{name}, seed {rng.initial_seed()}")


@pytest.mark.parametrize("deterministic", ALGORITHMS)
def test_one_dimensional_src_equals_a_single_column(ext, rng, deterministic):
    src, index = random_case(rng, n=700, d=None, dim_size=25)
    flat = ext.scatter_add(src, index, 25, deterministic=deterministic)
    column = ext.scatter_add(src[:, None], index, 25, deterministic=deterministic)
    assert flat.shape == (25,) and column.shape == (25, 1)
    torch.testing.assert_close(flat, column[:, 0])
    torch.testing.assert_close(flat, index_add_reference(src, index, 25), msg=f"seed {rng.initial_seed()}")


@pytest.mark.parametrize("deterministic", ALGORITHMS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_accumulate_in_float32(ext, rng, deterministic, dtype):
    # Summing 1.0 in the half type itself stops at 2048 (float16) or 256 (bfloat16).
    ones = torch.ones(4096, 2, dtype=dtype)
    out = ext.scatter_add(ones, torch.zeros(4096, dtype=torch.int64), 1, deterministic=deterministic)
    assert out.dtype == dtype and out.tolist() == [[4096.0, 4096.0]]

    src, index = random_case(rng, n=2000, d=6, dim_size=15, dtype=torch.float32)
    out = ext.scatter_add(src.to(dtype), index, 15, deterministic=deterministic)
    expected = index_add_reference(src.to(dtype).float(), index, 15).to(dtype)
    torch.testing.assert_close(out, expected, msg=f"seed {rng.initial_seed()}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_int32_index_gives_bitwise_the_int64_result(ext, rng, dtype):
    src, index = random_case(rng, n=5000, d=7, dim_size=300, dtype=dtype)
    as_int64 = ext.scatter_add(src, index, 300, deterministic=True)
    as_int32 = ext.scatter_add(src, index.int(), 300, deterministic=True)
    assert torch.equal(as_int32, as_int64), f"seed {rng.initial_seed()}"


def test_wide_and_narrow_rows_sum_in_the_same_order(ext, rng):
    # With more than 2 threads wide rows go through the sort, narrow ones always through one serial
    # pass; both promise ascending source order per target, so a column on its own must give the
    # wide result's bits.
    src, index = random_case(rng, n=50_000, d=40, dim_size=500, dtype=torch.float32)
    with intra_op_threads(4):
        wide = ext.scatter_add(src, index, 500, deterministic=True)
    for column in (0, 17, 39):
        narrow = ext.scatter_add(src[:, column], index, 500, deterministic=True)
        assert torch.equal(narrow, wide[:, column]), f"column {column}; seed {rng.initial_seed()}"


def test_deterministic_result_is_bitwise_identical_across_runs_and_thread_counts(ext, rng):
    # float32 and ~200 rows per target: a different summation order shows in the low bits.
    src, index = random_case(rng, n=200_000, d=16, dim_size=1000, dtype=torch.float32)
    results = []
    for threads in (1, 2, 3, 4, 2):
        with intra_op_threads(threads):
            results.append((threads, ext.scatter_add(src, index, 1000, deterministic=True)))
    first = results[0][1]
    for threads, out in results[1:]:
        assert torch.equal(out, first), f"{threads} threads differ from 1 thread; seed {rng.initial_seed()}"
    torch.testing.assert_close(first, index_add_reference(src, index, 1000), msg=f"seed {rng.initial_seed()}")


@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
@pytest.mark.parametrize("deterministic", ALGORITHMS)
@pytest.mark.parametrize("d", [None, 3])
def test_gradcheck_in_float64(ext, rng, deterministic, index_dtype, d):
    src, index = random_case(rng, n=40, d=d, dim_size=7, index_dtype=index_dtype)
    src.requires_grad_(True)

    def op(values):
        return ext.scatter_add(values, index, 7, deterministic=deterministic)

    assert torch.autograd.gradcheck(op, (src,))
    assert torch.autograd.gradgradcheck(op, (src,))


@pytest.mark.parametrize(
    "dtype, d, index_dtype, deterministic",
    [
        (torch.float32, 4, torch.int64, True),
        (torch.float64, None, torch.int32, False),
        (torch.float16, 2, torch.int32, True),
    ],
)
def test_opcheck_passes(ext, rng, dtype, d, index_dtype, deterministic):
    src, index = random_case(rng, n=64, d=d, dim_size=10, index_dtype=index_dtype, dtype=dtype)
    src.requires_grad_(True)
    torch.library.opcheck(torch.ops.gradlint.scatter_add.default, (src, index, 10, deterministic, True))


def test_cpu_default_is_the_deterministic_algorithm(ext, rng, monkeypatch):
    calls = []
    real = torch.ops.gradlint.scatter_add

    def spy(*args):
        calls.append(args[3])
        return real(*args)

    monkeypatch.setattr(torch.ops.gradlint, "scatter_add", spy)
    src, index = random_case(rng, n=10, d=2, dim_size=3)
    ext.scatter_add(src, index, 3)
    ext.scatter_add(src, index, 3, deterministic=False)
    assert calls == [True, False]


@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
@pytest.mark.parametrize("deterministic", ALGORITHMS)
@pytest.mark.parametrize("bad_value", [50, 1 << 20, -1])
def test_out_of_range_index_raises_clear_error_on_cpu(ext, rng, deterministic, index_dtype, bad_value):
    src, index = random_case(rng, n=100_000, d=2, dim_size=50, index_dtype=index_dtype)
    index[70_000] = bad_value
    index[17] = bad_value
    with pytest.raises(IndexError, match=rf"index\[17\] = {bad_value} is out of range for dim_size 50"):
        ext.scatter_add(src, index, 50, deterministic=deterministic)


def test_entries_into_zero_target_rows_are_out_of_range(ext):
    with pytest.raises(IndexError, match=r"index\[0\] = 0 is out of range for dim_size 0"):
        ext.scatter_add(torch.ones(3, 2), torch.zeros(3, dtype=torch.int64), 0)


@pytest.mark.parametrize(
    "src, index, message",
    [
        (torch.ones(4, 2), torch.zeros(3, dtype=torch.int64), "index has 3 entries but src has 4 rows"),
        (torch.ones(4, 2, 2), torch.zeros(4, dtype=torch.int64), r"src must be \[N\] or \[N, D\]"),
        (torch.ones(4), torch.zeros(4), "index must be int32 or int64"),
        (torch.ones(4, dtype=torch.int64), torch.zeros(4, dtype=torch.int64), "src must be float32, float64"),
    ],
)
def test_malformed_arguments_raise_clear_errors(ext, src, index, message):
    with pytest.raises(RuntimeError, match=message):
        ext.scatter_add(src, index, 5)


def test_backward_gives_the_gather_of_the_output_gradient(ext, rng):
    src, index = random_case(rng, n=300, d=4, dim_size=11, index_dtype=torch.int32)
    src.requires_grad_(True)
    grad_out = torch.randn(11, 4, dtype=torch.float64, generator=rng)
    (grad_src,) = torch.autograd.grad(ext.scatter_add(src, index, 11), src, grad_out)
    assert torch.equal(grad_src, grad_out.index_select(0, index))


def test_an_int32_index_is_used_as_is_with_no_upcast_copy(ext, rng):
    from torch.profiler import ProfilerActivity, profile

    src, index = random_case(rng, n=500, d=3, dim_size=9, index_dtype=torch.int32)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        ext.scatter_add(src, index, 9)
    ops = {event.name for event in prof.events()}
    assert "gradlint::scatter_add" in ops and not ops & {"aten::to", "aten::_to_copy", "aten::copy_"}, ops


def test_the_op_compiles_into_a_full_graph(ext, rng):
    src, index = random_case(rng, n=200, d=3, dim_size=7, index_dtype=torch.int32)

    def layer(src, index):
        return ext.scatter_add(src, index, 7) * 2

    compiled = torch.compile(layer, backend="eager", fullgraph=True)
    assert torch.equal(compiled(src, index), layer(src, index))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_reference_fallback_agrees_with_the_compiled_op(ext, rng, dtype):
    from gradlint.cuda_ext.reference import scatter_add_reference

    src, index = random_case(rng, n=3000, d=6, dim_size=40, dtype=dtype, index_dtype=torch.int32)
    torch.testing.assert_close(
        scatter_add_reference(src, index, 40), ext.scatter_add(src, index, 40), msg=f"seed {rng.initial_seed()}"
    )
    index[123] = -4
    for op in (scatter_add_reference, ext.scatter_add):
        with pytest.raises(IndexError, match=r"index\[123\] = -4 is out of range for dim_size 40"):
            op(src, index, 40)


@needs_cuda
@pytest.mark.parametrize("index_dtype", INDEX_TYPES)
@pytest.mark.parametrize("deterministic", ALGORITHMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_cuda_matches_index_add(ext, rng, deterministic, index_dtype, dtype):
    assert ext.BACKEND == ext.COMPILED_CUDA, ext.load().cuda_skip_reason
    src, index = random_case(rng, n=20_000, d=9, dim_size=700, index_dtype=index_dtype, device="cuda")
    out = ext.scatter_add(src.to(dtype), index, 700, deterministic=deterministic)
    expected = index_add_reference(src.to(dtype).double(), index.long(), 700).to(dtype)
    torch.testing.assert_close(out, expected, msg=f"seed {rng.initial_seed()}")
    flat = ext.scatter_add(src[:, 0].to(dtype), index, 700, deterministic=deterministic)
    torch.testing.assert_close(flat, expected[:, 0], msg=f"seed {rng.initial_seed()}")


@needs_cuda
def test_cuda_deterministic_result_is_bitwise_identical_across_runs(ext, rng):
    src, index = random_case(rng, n=300_000, d=16, dim_size=2000, dtype=torch.float32, device="cuda")
    first = ext.scatter_add(src, index, 2000, deterministic=True)
    for _ in range(3):
        assert torch.equal(ext.scatter_add(src, index, 2000, deterministic=True), first), f"seed {rng.initial_seed()}"
    assert torch.equal(ext.scatter_add(src, index.int(), 2000, deterministic=True), first)
    torch.testing.assert_close(first.cpu(), ext.scatter_add(src.cpu(), index.cpu(), 2000), msg=f"seed {rng.initial_seed()}")


@needs_cuda
@pytest.mark.parametrize("deterministic", ALGORITHMS)
def test_cuda_checked_mode_raises_before_launch(ext, rng, deterministic):
    src, index = random_case(rng, n=1000, d=3, dim_size=40, device="cuda")
    index[123] = -5
    with pytest.raises(IndexError, match=r"index\[123\] = -5 is out of range for dim_size 40"):
        ext.scatter_add(src, index, 40, deterministic=deterministic)


@needs_cuda
@pytest.mark.parametrize("deterministic", ALGORITHMS)
def test_cuda_unchecked_mode_drops_out_of_range_entries_without_writing_elsewhere(ext, rng, deterministic):
    src, index = random_case(rng, n=1000, d=3, dim_size=40, device="cuda")
    bad = index.clone()
    bad[::7] = 40
    bad[3::11] = -2
    out = ext.scatter_add(src, bad, 40, deterministic=deterministic, check_index=False)
    torch.cuda.synchronize()
    keep = (bad >= 0) & (bad < 40)
    torch.testing.assert_close(out, index_add_reference(src[keep], bad[keep], 40), msg=f"seed {rng.initial_seed()}")
