"""What a compiled extension's function does, read from the project's own C++ and CUDA sources.

A custom op's backward often calls its extension (`_ext.gather_points_grad(...)`,
`_backend.grid_encode_backward(...)`, `selective_scan_cuda.bwd(...)`), and the nondeterminism
GL302 is about is then in a CUDA kernel: `atomicAdd(grad_points + idx, g)` on floats, whose order
changes from run to run. Where the project holds those sources (a research repository, the
user's own op), the kernel can be read: the Python name is bound to a C++ function by pybind11
(`m.def("gather_points_grad", &gather_points_grad)`) or a torch library (`m.impl("op", &fn)`), and
the C++ calls lead to the kernel.

The reading is textual and errs towards unknown: comments and strings are blanked; a function is
a name, a parameter list and a braced body (templates, `Class::` and kernel launches
`k<<<grid, block>>>(...)` included); an edge is a call of a function defined in the sources, a
launch, `&function` (a kernel taken by address, then launched), or a registration at the top
level naming a dispatcher and its implementations (mmcv's `REGISTER_DEVICE_IMPL(op_impl, CUDA,
op_cuda)`, which `DISPATCH_DEVICE_IMPL(op_impl, ...)` reaches). Only an atomic add whose target
is declared, in the kernel's parameters or body, with a floating-point type (`float`, `double`,
the half types, or a template type such as `scalar_t` or `weight_t` that is no index or integer
type) counts; a template parameter `T` is the type the kernel is called or launched with
(`k<scalar_t><<<...>>>` under AT_DISPATCH_FLOATING_TYPES), and unknown without one; an integer
target or an undeclared one is not reported. A Python name bound in several places counts only
when every binding reaches such an add.

Sources are the files under the project's top directory, or its package root where it has no
top (build, dist, third-party and hidden directories left out), at most _MAX_FILES of them and
_MAX_TEXT characters in all, found in at most _MAX_DIRECTORIES directories: a project with more is
unknown here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hxx", ".inl")
_SKIPPED_DIRECTORIES = frozenset({"build", "dist", "third_party", "third-party", "thirdparty", "3rdparty",
                                  "external", "externals", "vendor", "node_modules", "__pycache__", "site-packages"})
_MAX_FILES = 2_000
_MAX_TEXT = 20_000_000
_MAX_DIRECTORIES = 5_000  # a file checked alone in a home directory: its root is that directory

_COMMENT_OR_TEXT = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)
_BINDING = re.compile(r'\.(?:def|impl)\s*\(\s*"(\w+)[^"]*"\s*,\s*(?:TORCH_FN\s*\(\s*)?'
                      r'(?:py::overload_cast\s*<[^>]*>\s*\(\s*)?&?\s*([A-Za-z_][\w:]*)')
# A call or a launch (`k<<<grid, block>>>(...)`, `k<scalar_t><<<...>>>`, template arguments one
# level deep), or a function taken by address (`auto kernel = &k<Traits>;`).
_CALLED = re.compile(r'\b([A-Za-z_]\w*)\s*(?:<<<|(<[^;{}()<>]*(?:<[^;{}()<>]*>[^;{}()<>]*)*>)?\s*(?:\(|<<<))')
_ADDRESS = re.compile(r'&\s*([A-Za-z_]\w*)\s*(<[^;{}()<>]*(?:<[^;{}()<>]*>[^;{}()<>]*)*>)?')
_TEMPLATE = re.compile(r'template\s*<([^{};]*?)>\s*$')
_DEFINED = re.compile(r'\b([A-Za-z_]\w*)\s*(?:<[^;{}()]*?>\s*)?\(')
_NOT_FUNCTIONS = frozenset({"if", "for", "while", "switch", "return", "sizeof", "catch", "decltype", "alignof",
                            "static_assert", "defined", "__launch_bounds__", "__attribute__", "__declspec"})
_AFTER_PARAMETERS = re.compile(r'\s*(?:const\b|noexcept\b|override\b|final\b|mutable\b|->\s*[\w:<>,\s\*&]+?)*\s*\{')
_ATOMIC_ADD = re.compile(r'\b(atomicAdd|atomicAdd_block|atomicAdd_system|gpuAtomicAdd|gpuAtomicAddNoReturn|'
                         r'fastAtomicAdd|unsafeAtomicAdd|fastSpecializedAtomicAdd)\s*\(')
_FLOAT_TYPES = frozenset({"float", "double", "half", "__half", "__half2", "half2", "Half", "BFloat16", "bfloat16",
                          "__nv_bfloat16", "__nv_bfloat162", "nv_bfloat16", "float2", "float4", "double2"})
# `_t` types that hold integers; any other `_t` type (scalar_t, weight_t, input_t, acc_t) is a
# floating-point template type as torch's extensions name them.
_INTEGER_WORDS = ("int", "index", "idx", "size", "long", "short", "char", "bool", "byte", "offset", "count")
_MAX_DEPTH = 12


@dataclass(frozen=True)
class NativeSum:
    """An atomic add of floats a bound function reaches."""

    path: str  # the source file holding the add
    line: int
    kernel: str  # the function (kernel) the add is in


@dataclass(frozen=True)
class _Function:
    path: str
    header: int  # where the name starts, in the blanked text
    start: int  # the body's `{`
    end: int  # after the body's `}`


class NativeSources:
    """The C++ and CUDA sources of one project, indexed once: bindings, function bodies and the
    implementations registration macros name."""

    def __init__(self, texts: dict[str, str]):
        self._blanked: dict[str, str] = {}
        self._bindings: dict[str, set[str]] = {}
        self._functions: dict[str, list[_Function]] = {}
        # `REGISTER_DEVICE_IMPL(roi_align_backward_impl, CUDA, roi_align_backward_cuda)` at the top
        # level: the first name dispatches to the others (mmcv; torch's REGISTER_DISPATCH alike).
        self._registered: dict[str, set[str]] = {}
        for path in sorted(texts):
            blanked, bound = _blank(texts[path])
            self._blanked[path] = blanked
            for python_name, native in bound:
                self._bindings.setdefault(python_name, set()).add(native.rsplit("::", 1)[-1])
            for name, function in _functions(path, blanked):
                self._functions.setdefault(name, []).append(function)
            for first, others in _registrations(blanked):
                self._registered.setdefault(first, set()).update(others)
        self._answers: dict[str, NativeSum | None] = {}

    @property
    def paths(self) -> list[str]:
        return list(self._blanked)

    def float_atomic_add(self, python_name: str) -> NativeSum | None:
        """The first float atomic add every binding of `python_name` reaches, or None."""
        if python_name not in self._answers:
            targets = sorted(self._bindings.get(python_name, ()))
            found = [self._reached(target) for target in targets]
            self._answers[python_name] = found[0] if found and all(found) else None
        return self._answers[python_name]

    def _reached(self, start: str) -> NativeSum | None:
        """Breadth first from `start`, each function with the template arguments it was first
        called or launched with (`kernel<scalar_t><<<...>>>`)."""
        seen = {start}
        layer: list[tuple[str, tuple[str, ...]]] = [(start, ())]
        for _ in range(_MAX_DEPTH):
            following: list[tuple[str, tuple[str, ...]]] = []
            for name, arguments in layer:
                for function in self._functions.get(name, ()):
                    body = self._blanked[function.path][function.start:function.end]
                    found = self._float_add(function, name, body, arguments)
                    if found is not None:
                        return found
                    for callee, callee_arguments in _callees(body):
                        if callee not in seen and (callee in self._functions or callee in self._registered):
                            seen.add(callee)
                            following.append((callee, callee_arguments))
                for registered in sorted(self._registered.get(name, ())):
                    if registered not in seen:
                        seen.add(registered)
                        following.append((registered, ()))
            if not following:
                return None
            layer = sorted(following)
        return None

    def _float_add(self, function: _Function, name: str, body: str, arguments: tuple[str, ...]) -> NativeSum | None:
        text = self._blanked[function.path]
        declarations = text[function.header:function.end]
        parameters = _template_parameters(text, function.header)
        for match in _ATOMIC_ADD.finditer(body):
            target = _first_argument(body, match.end())
            base = re.match(r'[\s&(*]*([A-Za-z_]\w*)', target or "")
            if base is None:
                continue
            declared = _declared_type(declarations, base.group(1))
            if declared in parameters and parameters.index(declared) < len(arguments):
                # `T *grad` in a kernel launched as `k<scalar_t><<<...>>>`: what T is there
                declared = arguments[parameters.index(declared)].rsplit("::", 1)[-1]
            if _is_float(declared):
                line = text.count("\n", 0, function.start + match.start()) + 1
                return NativeSum(function.path, line, name)
        return None


def read_sources(top: str, max_file_bytes: int) -> dict[str, bytes] | None:
    """The bytes of the project's C++ and CUDA files under `top`, by path; None when there are
    too many, or too many directories to look through (counted before any file is read)."""
    paths: list[str] = []
    total = 0
    for visited, (directory, directories, files) in enumerate(os.walk(top)):
        if visited > _MAX_DIRECTORIES:
            return None
        directories[:] = sorted(d for d in directories if not d.startswith(".") and d not in _SKIPPED_DIRECTORIES)
        for file in sorted(files):
            if not file.endswith(SUFFIXES):
                continue
            path = os.path.join(directory, file)
            try:
                size = os.path.getsize(path)
            except OSError:
                continue
            if size > max_file_bytes:
                continue
            paths.append(path)
            total += size
            if len(paths) > _MAX_FILES or total > _MAX_TEXT:
                return None
    found: dict[str, bytes] = {}
    for path in paths:
        try:
            with open(path, "rb") as stream:
                found[path] = stream.read()
        except OSError:
            continue
    return found


def _blank(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The text with comments and string literals turned to spaces (lines and offsets kept), and
    the bindings read before their names' strings went."""
    without_comments = _COMMENT_OR_TEXT.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else _spaces(m.group(0)), text)
    bound = [(m.group(1), m.group(2)) for m in _BINDING.finditer(without_comments)]
    return _COMMENT_OR_TEXT.sub(lambda m: _spaces(m.group(0)), text), bound


def _spaces(text: str) -> str:
    return re.sub(r'[^\n]', " ", text)


def _functions(path: str, text: str):
    """(name, _Function) for each definition: a name, its parameters, then a braced body."""
    position = 0
    while True:
        match = _DEFINED.search(text, position)
        if match is None:
            return
        name = match.group(1)
        close = _matching(text, match.end() - 1, "(", ")")
        if close is None:
            return
        position = match.end()
        if name in _NOT_FUNCTIONS or _member_access(text, match.start()):
            continue
        after = _AFTER_PARAMETERS.match(text, close + 1)
        if after is None:
            continue
        start = after.end() - 1
        end = _matching(text, start, "{", "}")
        if end is None:
            return
        yield name, _Function(path, match.start(), start, end + 1)
        position = end + 1  # a nested lambda or local struct is the function's own


def _member_access(text: str, at: int) -> bool:
    """`obj.f(...) {` or `p->f(...)` cannot start a definition."""
    before = text[:at].rstrip()
    return before.endswith((".", "->"))


_BRACKETS = {"(": re.compile(r"[()]"), "{": re.compile(r"[{}]")}


def _matching(text: str, at: int, opening: str, closing: str) -> int | None:
    """Where the bracket opened at `at` closes (only the brackets are visited: a regex finds them)."""
    depth = 0
    for match in _BRACKETS[opening].finditer(text, at):
        if match.group() == opening:
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return match.start()
    return None


def _callees(body: str) -> list[tuple[str, tuple[str, ...]]]:
    """Names called, launched or taken by address in a body, each with its template arguments."""
    return [(m.group(1), _split_arguments(m.group(2))) for regex in (_CALLED, _ADDRESS) for m in regex.finditer(body)]


def _split_arguments(written: str | None) -> tuple[str, ...]:
    """`<scalar_t, 4>` -> ("scalar_t", "4")."""
    if not written:
        return ()
    inner, parts, depth, current = written[1:-1], [], 0, ""
    for char in inner:
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += (char == "<") - (char == ">")
        current += char
    return (*parts, current.strip())


def _template_parameters(text: str, header: int) -> list[str]:
    """The names of the template parameters a definition is declared with (`template <typename
    T, int N>` -> ["T", "N"]), read back from its name to the statement before it."""
    before = text[max(0, header - 400):header]
    cut = max(before.rfind(";"), before.rfind("}"))
    found = _TEMPLATE.search(re.sub(r'\b[A-Za-z_][\w:]*\s*(?:\*|&)*\s*$', "", before[cut + 1:].rstrip())
                             .replace("__global__", "").replace("__device__", "").replace("__host__", "")
                             .replace("static", "").replace("inline", "").replace("__forceinline__", "").rstrip())
    if found is None:
        return []
    return [part.split("=")[0].split()[-1] for part in found.group(1).split(",") if part.split("=")[0].split()]


def _registrations(text: str):
    """(first name, the other names) of each invocation at the top level, outside any body, that
    names two or more functions: a registration macro pairing a dispatcher with its implementations."""
    depth, segment = 0, 0
    for brace in _BRACKETS["{"].finditer(text):
        if depth == 0:
            yield from _invocations(text, segment, brace.start())
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            segment = brace.end()
        depth = max(depth, 0)
    if depth == 0:
        yield from _invocations(text, segment, len(text))


_INVOKED = re.compile(r'(?<![\w:.>])([A-Za-z_]\w*)\s*\(')
_BARE_ARGUMENT = re.compile(r'(?:^|,)\s*&?\s*([A-Za-z_][\w:]*)\s*(?=,|$)')


def _invocations(text: str, start: int, end: int):
    position = start
    while True:
        match = _INVOKED.search(text, position, end)
        if match is None:
            return
        close = _matching(text, match.end() - 1, "(", ")")
        if close is None or close >= end:
            return
        position = close + 1
        if re.match(r'[ \t]*;?[ \t]*(?:\n|$)', text[close + 1:close + 80]):  # a statement of its own, no body
            names = [n.rsplit("::", 1)[-1] for n in _BARE_ARGUMENT.findall(text[match.end():close])]
            if len(names) >= 2:
                yield names[0], names[1:]


def _first_argument(text: str, at: int) -> str | None:
    depth = 0
    for index in range(at, len(text)):
        char = text[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                return text[at:index]
            depth -= 1
        elif char == "," and depth == 0:
            return text[at:index]
    return None


def _declared_type(text: str, name: str) -> str | None:
    """The last type word `name` is declared with, as a pointer or an array (`float *grad`,
    `const scalar_t* __restrict__ grad`, `__shared__ float smem[256]`), in a function's text."""
    escaped = re.escape(name)
    pattern = re.compile(r'([A-Za-z_][\w:]*)\s*(?:<[^;{}()]*>)?\s*(?:const\s*)?\*+\s*(?:const\s*)?'
                         r'(?:__restrict__\s*|__restrict\s*|restrict\s*)?' + escaped + r'\b'
                         r'|([A-Za-z_][\w:]*)\s+' + escaped + r'\s*\[')
    found = None
    for match in pattern.finditer(text):
        found = match.group(1) or match.group(2)
    return found.rsplit("::", 1)[-1] if found else None


def _is_float(type_name: str | None) -> bool:
    if type_name is None:
        return False
    if type_name in _FLOAT_TYPES:
        return True
    lowered = type_name.lower()
    return lowered.endswith("_t") and not any(word in lowered for word in _INTEGER_WORDS)
