"""What one parsed file holds, in the terms our rules ask about.

Built once per file: the import table, the autograd Functions (classes, setup_context style,
`torch.library.custom_op` with `register_autograd`), the nn.Module classes, and one `Walk` per
function. Rules read this model; they never traverse the syntax tree themselves.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Iterable, Iterator

import libcst as cst

from gradlint import parse, torch_api as api
from gradlint.torch_api import is_module_base
from gradlint.annotations import annotated_value, tensor_or_tensors
from gradlint.flow import (_SCALAR_LIKE, _loop_info, _names_in, AttributeStore, _detaches, ContainerAdd, FunctionApplied, FunctionRole, NameStore, ReturnValue, Walk, Walker, disables_grad, foreign_arguments,
                           looks_like_module, walk_called)
from gradlint.call_sites import CallSite, collect_call_sites, in_training_step, runs_a_training_loop
from gradlint.trained_buffers import Facts as BufferFacts, trained_and_emptied
from gradlint.prescan import Prescan, blocks_of, child_nodes
from gradlint.native_sources import NativeSum
from gradlint.project import Project, module_name_of
from gradlint.names import ImportTable, code, dotted
from gradlint.values import SCALAR, UNKNOWN, Kind, Val, merge, new_binding


@dataclass
class AutogradFunction:
    """One custom autograd op: a Function subclass or a custom_op with register_autograd."""

    name: str
    node: cst.CSTNode
    style: str  # "ctx" (forward(ctx, ...)), "setup_context", or "custom_op"
    forward: cst.FunctionDef | None
    backward: cst.FunctionDef | None
    setup_context: cst.FunctionDef | None = None
    op_name: str | None = None  # "ns::name" for custom ops

    @property
    def forward_inputs(self) -> list[cst.Param] | None:
        """The inputs backward must return a gradient for (ctx excluded); None when they
        cannot be counted (*args, **kwargs, no forward)."""
        if self.forward is None:
            return None
        params = self.forward.params
        if not isinstance(params.star_arg, cst.MaybeSentinel) or params.star_kwarg is not None:
            return None
        return self.forward_parameters()

    def forward_parameters(self) -> list[cst.Param]:
        """forward's named parameters after ctx (and a @classmethod's cls), in order; a `*args`
        takes the rest."""
        if self.forward is None:
            return []
        params = self.forward.params
        listed = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
        listed = listed[leading_params(self.forward):]  # a @classmethod's cls
        return listed[1:] if self.style == "ctx" else listed

    @property
    def backward_node_name(self) -> str:
        """The name torch gives the backward node in its error messages."""
        if self.style == "custom_op" and self.op_name:
            return f"GeneratedBackwardFor_{self.op_name.replace('::', '_').replace('.', '_')}_defaultBackward"
        return f"{self.name}Backward"


@dataclass
class ModuleClass:
    name: str
    node: cst.ClassDef
    methods: dict[str, cst.FunctionDef] = field(default_factory=dict)
    attributes: dict[str, Val] = field(default_factory=dict)  # what __init__ put on self
    # An nn.Module because of a base another module of the project defines: that base and its
    # place (`BaseModel (models/base.py:4)`), through this file's own bases too. For messages.
    through: str | None = None


@dataclass
class _ClassInfo:
    node: cst.ClassDef
    bases: list[str]
    methods: dict[str, cst.FunctionDef]
    nested: bool


class FileModel:
    def __init__(self, module: cst.Module, path: str = "<string>", source: str | None = None,
                 project: Project | None = None):
        self.module = module
        self.path = path
        # Text questions answered without a walk (None: ask the tree): does the file register hooks?
        self._source = source
        # The modules around this one (None: the file alone, as for text given on stdin).
        self.project = project
        package = None
        if project is not None:
            dotted = module_name_of(path)[1]
            package = dotted if path.endswith("__init__.py") else dotted.rpartition(".")[0]
        self.imports = ImportTable(package)
        self.top_level_classes: dict[str, cst.ClassDef] = {}
        self._star_names: set[str] = set()  # names bound by a star import of a project module
        self.functions: dict[str, cst.FunctionDef] = {}  # module-level defs, by name
        self._compiled: dict[str, str] = {}  # `fast = torch.compile(train_step)`: fast -> train_step
        self.module_names: set[str] = set()
        self._module_values: dict[str, Val] = {}
        self._classes: list[_ClassInfo] = []
        # Every def in the file with its class (for methods) and the def it is nested in.
        self._all_functions: list[tuple[cst.FunctionDef, _ClassInfo | None, cst.FunctionDef | None]] = []
        self._custom_ops: dict[str, tuple[cst.FunctionDef, str | None]] = {}
        self._autograd_registrations: list[tuple[str, str | None, str | None]] = []
        self._prescans: dict[int, Prescan] = {}
        self._within: dict[int, cst.CSTNode] = {}  # a def's id -> the top-level statement holding it
        self._instances: dict[str, str] = {}  # module-level `model = Net(...)`: name -> class called
        self._instance_of: dict[str, str | None] = {}  # the same, with the callee as written (dotted)
        self._graph_attributes: set[tuple[str, str]] | None = None
        self._call_results: dict[tuple, tuple[Val, tuple[ContainerAdd, ...], tuple[Walk, ...]]] = {}
        self._call_walks: list[Walk] = []  # see call_result
        self._generators: dict[int, bool] = {}
        self._detaching: dict[int, bool] = {}
        self._cut: list[bool] = []  # per call under way: whether a callee's result was cut off
        self._calls_under_way: list[int] = []  # the defs being walked for a call's result
        self._tensor_params: dict[int, frozenset[str]] = {}
        self._int64_pinned: dict[int, frozenset[str]] = {}  # see _int64_pins
        self._int64_outputs: dict[str, bool] = {}
        self._class_attributes: dict[str, dict[str, Val]] = {}
        self._trained_in: dict[int, set[str]] = {}
        self._single_walks: dict[int, Walk] = {}
        self._forward_numbers: dict[str, frozenset[int]] = {}  # see forward_numbers
        self._no_grad_decorated: dict[int, bool] = {}  # see decorated_no_grad
        self._runs_steps: dict[int, bool] = {}  # see runs_steps
        self._outside: dict[int, frozenset[str]] = {}  # see _outside_bases
        self._through: dict[tuple[int, str], str | None] = {}  # see runs_through
        self._asking_callers = False  # see _applied_int64
        self._loops: dict[int, object] = {}
        self._names: dict[int, frozenset[str]] = {}
        self._scan(module.body, owner=None, top=True)
        self.function_classes, self.module_classes = self._classify()
        self.function_class_names = {f.name for f in self.function_classes}
        self.module_class_names = {m.name for m in self.module_classes}
        self._plain_attributes: dict[int, dict[str, Val]] = {}  # other classes', asked as walked
        own = {m.name: self._init_attributes(m.name, m.methods) for m in self.module_classes}
        for module_class in self.module_classes:
            # What the bases' __init__ put on self is on a subclass instance too (GalLinear's forward
            # calls GalLayer's method, which reads the coeffs GalLinear's own __init__ made).
            merged: dict[str, Val] = {}
            for ancestor in self._chain(module_class.name):
                merged.update(own.get(ancestor, {}))
            module_class.attributes = merged

    def release(self) -> None:
        """Forget everything worked out for the file once its findings are made. The walks, the
        events and this model refer to one another, so the file's whole tree otherwise waits for
        the cyclic collector: a run over torch's 2,285 files spent 2.4 of 21.5 s in gen-0
        collections (engine._lint_in_worker) going through those trees."""
        self.__dict__.clear()

    # ----- the statement-level scan (expressions are left to the walks) ---------------------

    def _scan(self, statements, owner: _ClassInfo | None, top: bool, in_function: cst.FunctionDef | None = None,
              within: cst.CSTNode | None = None) -> None:
        for statement in statements:
            if top:
                within = statement
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    self._scan_small(small, top)
            elif isinstance(statement, cst.ClassDef):
                info = _ClassInfo(statement, [self.imports.qualify(b.value) or "" for b in statement.bases],
                                  {}, nested=not top)
                self._classes.append(info)
                if top:
                    self._bind_here(statement.name.value)
                    self.top_level_classes[statement.name.value] = statement
                self._scan(statement.body.body, owner=info, top=False, in_function=in_function, within=within)
            elif isinstance(statement, cst.FunctionDef):
                if owner is not None:
                    owner.methods[statement.name.value] = statement
                if top:
                    self.functions[statement.name.value] = statement
                    self._bind_here(statement.name.value)
                    self._note_custom_op(statement)
                self._all_functions.append((statement, owner, in_function))
                self._within[id(statement)] = within
                self._scan(statement.body.body, owner=None, top=False, in_function=statement, within=within)
            else:
                for block in blocks_of(statement):
                    self._scan(block, owner=owner, top=top, in_function=in_function, within=within)

    def _scan_small(self, small: cst.BaseSmallStatement, top: bool) -> None:
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            stars = len(self.imports.stars)
            self.imports.add(small)
            if self.project is not None and len(self.imports.stars) > stars:
                # `from .imports import *`: its names, as the module that binds them says (tsai's
                # `nn` and `Module` come from there). Bound later here, they are this file's again.
                for name, target in self.project.star_bindings(self.imports.stars[-1]).items():
                    self.imports.aliases[name] = target
                    self._star_names.add(name)
            if top:
                for alias in small.names if not isinstance(small.names, cst.ImportStar) else ():
                    bound = alias.asname.name if alias.asname else alias.name
                    name = dotted(bound)  # type: ignore[arg-type]
                    if name:
                        self.module_names.add(name.split(".")[0])
        elif top and isinstance(small, (cst.Assign, cst.AnnAssign)):
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            for target in targets:
                if isinstance(target, cst.Name):
                    self._bind_here(target.value)
                    if small.value is not None:
                        self._module_values[target.value] = self._module_level_value(small.value)
                        made = _constructed(small.value)
                        if isinstance(made, cst.Call) and isinstance(made.func, cst.Name):
                            self._instances[target.value] = made.func.value
                        if isinstance(small.value, cst.Call):  # `meter = utils.AverageMeter()` too
                            self._instance_of[target.value] = dotted(small.value.func)
                        else:
                            self._instance_of.pop(target.value, None)
                        # The last binding decides: `fast = torch.compile(step)` then `fast = other`.
                        compiled = _compiled_def(small.value, self.imports)
                        if compiled is not None:
                            self._compiled[target.value] = compiled
                        else:
                            self._compiled.pop(target.value, None)
        elif top and isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            self._note_register_autograd(small.value)

    def _bind_here(self, name: str) -> None:
        self.module_names.add(name)
        if name in self._star_names:
            self._star_names.discard(name)
            self.imports.aliases.pop(name, None)

    def imported_class(self, qualified: str | None):
        """The facts of a class another module of the project defines (`ClassFacts`), or None."""
        if self.project is None or not qualified or qualified in self.module_names:
            return None
        return self.project.class_facts(qualified)

    def _project_instance(self, qualified: str | None) -> Val | None:
        """An instance of the plain class `qualified` of another project module (a module-level
        `meter = AverageMeter()`): its methods are walked there, as for `Meter()` in a function
        (imported_call). None for anything else. Not a module class: its call would then count as
        graph-attached, which a module without parameters does not give (monai's AnchorGenerator,
        taken as a module from its annotation while annotations were read so: one false alarm on
        the corpus, measured).
        A parameter annotated with such a class is not one: GL103/GL104's precheck would have to
        let through every file calling a method of a parameter annotated with any imported class
        (603 of the corpus' 1,688 files with the rules' markers against 514), and the corpus holds
        48 such calls, none keeping a graph (tests/realworld/sites)."""
        if not qualified or qualified in self.module_names or not qualified.rpartition(".")[2][:1].isupper():
            return None
        found = self.imported_call(qualified, [])
        return found if found is not None and found.project_class is not None and found.kind is not Kind.MODULE \
            else None

    def imported_call(self, qualified: str, args: list[tuple[cst.Arg, Val]],
                      kept: list | None = None) -> Val | None:
        """What calling a class or def of another project module gives: an instance of its
        nn.Module or of its plain class, or the def's body walked there with these arguments
        (`compute_loss(out, y)` from losses.py returns the model's output). None: not the
        project's, or unknown. `kept` gets what the def keeps past the call (call_result's)."""
        if self.project is None:
            return None
        if qualified.rpartition(".")[2][:1].isupper():  # a class, as Python names them
            facts = self.project.class_facts(qualified)
            if facts is None or facts.kind == "function":
                return None
            short = qualified.rpartition(".")[2]
            # A module instance keeps its class too: `model.compute_loss(out)` is walked there
            return Val(Kind.MODULE, origin=f"{short} ({facts.where})", project_class=qualified) \
                if facts.kind == "module" else Val(project_class=qualified)
        # A def given no tensor and no module makes one only from globals of its own: rare, and
        # following every call into other modules reads much of the project (torch's own sources:
        # 2,021 modules read for its 2,285 files, 4.6x the CPU time; with this gate, see the note).
        if self.project.calls_under_way >= self.IMPORTED_CALL_DEPTH or not any(
                value.kind in (Kind.TENSOR, Kind.MODULE) or value.holds_graph() for _, value in args):
            return None
        found = self.project.function(qualified)
        if found is None:
            return None
        model, function, module = found
        result = self._walk_imported(model, function, None, module, args, None, kept)
        if result.kind is Kind.UNKNOWN and not result.holds_graph():
            return Val(Kind.TENSOR) if model.detaches(function) else None
        if result.holds_graph():  # its graph is what that def returns: the message names it
            where = self.project.where_defined(qualified)
            result = result.with_(origin=f"{qualified.rpartition('.')[2]}()" + (f" ({where})" if where else ""))
        return result

    def imported_ctx_stores(self, qualified: str, args: list[tuple[cst.Arg, Val]]) -> tuple[list, str | None] | None:
        """What a def of another project module given ctx stores on it (`stash(ctx, x)`): its
        ctx attribute stores, walked there with these arguments, and that def's place."""
        with self.imported_function(qualified) as found:
            if found is None:
                return None
            model, function, where = found
            walk = walk_called(model, function, args).walk
        stores = [e for e in walk.of(AttributeStore) if e.owner.kind is Kind.CTX]
        return stores, where if stores else None

    def _imported_as(self, name: str) -> str | None:
        """What a call of `name` reaches when this file imports it, while calls into other
        modules are still followed (IMPORTED_CALL_DEPTH); None for a def of the file."""
        if name in self.functions or self.project is None or self.project.calls_under_way >= self.IMPORTED_CALL_DEPTH:
            return None
        return self.imports.aliases.get(name)

    def native_float_atomic_add(self, name: str) -> tuple[NativeSum, str] | None:
        """What the project's C++ and CUDA sources say a compiled extension's function `name` (as
        a call in this file names it: `_ext.gather_points_grad` -> `gather_points_grad`) reaches:
        a float atomic add and its place, or None (Project.native_float_atomic_add)."""
        return self.project.native_float_atomic_add(name) if self.project is not None else None

    def imported_def_holds(self, name: str, words: tuple[str, ...]) -> bool:
        """Whether `imported_def(name, holding=words)` may find a def: one of the project whose
        text (as a model of it would keep it) holds one of the words. Nothing is parsed."""
        qualified = self._imported_as(name)
        return qualified is not None and self.project.function_text_holds(qualified, words)

    def imported_def(self, name: str, holding: tuple[str, ...] = ()):
        """`imported_function` for the def this file imports as `name`."""
        return self.imported_function(self._imported_as(name), holding)

    @contextmanager
    def imported_function(self, qualified: str | None, holding: tuple[str, ...] = ()):
        """The top-level def `qualified` of another project module, with a model of that module
        to ask about it and its place for messages: (model, def, `ops/clamp.py:4`), or None. What
        is asked inside the `with` is read on that module's behalf (a cached result rests on it),
        one call deeper. `holding`: see Project.function."""
        found = where = None
        if qualified is not None and self.project is not None \
                and self.project.calls_under_way < self.IMPORTED_CALL_DEPTH:
            found = self.project.function(qualified, holding)
            if found is None and "." in qualified:  # `Saver.keep(ctx, x)`: a staticmethod is a def too
                owner, _, name = qualified.rpartition(".")
                method = self.project.method(owner, name)
                if method is not None and _is_static(method[1]):
                    found, where = (method[0], method[1], method[3]), self.project.method_line(owner, name)
        if found is None:
            yield None
            return
        model, function, module = found
        where = where or self.project.where_defined(qualified) or qualified
        self.project.calls_under_way += 1
        try:
            with self.project.asking(module):
                yield model, function, where
        finally:
            self.project.calls_under_way -= 1

    def imported_method(self, qualified_class: str, method: str, args: list[tuple[cst.Arg, Val]],
                        kept: list | None = None) -> Val | None:
        """`meter.update(loss)` on an instance of a plain class of another project module: the
        method walked in that module, on an instance of its class, with these arguments."""
        if self.project is None or self.project.calls_under_way >= self.IMPORTED_CALL_DEPTH or not any(
                value.kind in (Kind.TENSOR, Kind.MODULE) or value.holds_graph() for _, value in args):
            return None
        found = self.project.method(qualified_class, method)
        if found is None:
            return None
        model, function, owner, module = found
        receiver = Val(module_class=owner.node.name.value)  # the class, as its own module names it
        return self._walk_imported(model, function, owner, module, args, receiver, kept)

    def imported_inherited_method(self, class_name: str, method: str, args: list[tuple[cst.Arg, Val]],
                                  kept: list | None = None) -> tuple[Val, str] | None:
        """`super().training_step(batch, i)` in a class of this file whose base comes from another
        project module (`class DebugRegressor(Regressor)`, Regressor in lit_modules.py): the base's
        method walked in its module, on an instance of the base, with these arguments; and the
        base's qualified name. The bases are tried in order, those of this file left to
        inherited_method. No tensor argument is needed (imported_method's gate): the receiver is
        this self, and what the base's method returns comes from it. Not `__init__`: it returns
        None and runs once, not every step; followed, every nn.Module subclass of torch's own
        sources read module.py, and one edit there checked 28 files again (14 s) instead of 4 (1.9 s)."""
        info = self._top_classes_by_name.get(class_name)
        if method == "__init__" or info is None or self.project is None \
                or self.project.calls_under_way >= self.IMPORTED_CALL_DEPTH:
            return None
        for base in info.bases:
            # torch's own classes are not followed (as in _outside_bases): linting torch's sources,
            # every Module subclass's `self.parameters()` would read module.py, and one edit of
            # class Module checked 20 files again (4.8 s) instead of 2 (bench/lint_speed.py)
            if base in self._top_classes_by_name or base.startswith("torch.") or self.imported_class(base) is None:
                continue
            found = self.project.method(base, method)
            if found is None:
                continue
            model, function, owner, module = found
            receiver = Val(module_class=owner.node.name.value)  # the base, as its own module names it
            return self._walk_imported(model, function, owner, module, args, receiver, kept), base
        return None

    def _walk_imported(self, model, function, owner, module, args, receiver, kept) -> Val:
        given = foreign_arguments(args)
        self.project.calls_under_way += 1
        try:
            with self.project.asking(module):
                result = model.call_result(function, owner, None, given, receiver, None, kept=kept)
        finally:
            self.project.calls_under_way -= 1
        return result.with_(module_class=None) if result.module_class else result

    def compiled(self, name: str) -> cst.FunctionDef | None:
        """The def a top-level `name = torch.compile(def_name, ...)` compiles: calling it runs that
        def's code (for what it returns and keeps, the same)."""
        return self.functions.get(self._compiled.get(name, ""))

    def _module_level_value(self, value: cst.BaseExpression) -> Val:
        if isinstance(value, (cst.List, cst.Dict, cst.Tuple)):
            return Val(Kind.CONTAINER)
        if isinstance(value, cst.Call):
            name = self.imports.qualify(value.func) if isinstance(value.func, (cst.Name, cst.Attribute)) else None
            if name in ("list", "dict", "collections.deque", "collections.defaultdict", "deque", "defaultdict"):
                return Val(Kind.CONTAINER)
        return UNKNOWN

    def _note_custom_op(self, function: cst.FunctionDef) -> None:
        for decorator in function.decorators:
            call = decorator.decorator
            if not isinstance(call, cst.Call):
                continue
            name = self.imports.qualify(call.func) if isinstance(call.func, (cst.Name, cst.Attribute)) else None
            if name in ("torch.library.custom_op", "torch._library.custom_ops.custom_op"):
                op_name = None
                if call.args and isinstance(call.args[0].value, cst.SimpleString):
                    op_name = str(call.args[0].value.evaluated_value)
                self._custom_ops[function.name.value] = (function, op_name)

    def _note_register_autograd(self, call: cst.Call) -> None:
        func = call.func
        backward = setup = None
        positional = [a.value for a in call.args if a.keyword is None]
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "setup_context":
                setup = dotted(arg.value)
            if arg.keyword is not None and arg.keyword.value == "backward":
                backward = dotted(arg.value)
        qualified = self.imports.qualify(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
        if qualified == "torch.library.register_autograd" or (
                isinstance(func, cst.Attribute) and func.attr.value == "register_autograd"):
            if qualified == "torch.library.register_autograd":
                op = positional[0].evaluated_value if positional and isinstance(positional[0], cst.SimpleString) else None
                op_function = next((name for name, (_, op_name) in self._custom_ops.items() if op_name == op), None)
                backward = backward or (dotted(positional[1]) if len(positional) > 1 else None)
            else:
                op_function = dotted(func.value)
                backward = backward or (dotted(positional[0]) if positional else None)
            if op_function:
                self._autograd_registrations.append((op_function, backward, setup))

    # ----- classification -------------------------------------------------------------------

    def _classify(self) -> tuple[list[AutogradFunction], list[ModuleClass]]:
        function_names: set[str] = set()
        module_names: set[str] = set()
        changed = True
        while changed:  # a subclass may come before its base in the file
            changed = False
            for info in self._classes:
                name = info.node.name.value
                if name not in function_names and any(
                        b in api.FUNCTION_BASES or b in function_names for b in info.bases):
                    function_names.add(name)
                    changed = True
                if name not in module_names and (any(is_module_base(b) or b in module_names or (
                                                         b not in api.FUNCTION_BASES and self._imported_module(b))
                                                         for b in info.bases)
                                                 or self._module_like(info, function_names)):
                    module_names.add(name)
                    changed = True
        functions: list[AutogradFunction] = []
        modules: list[ModuleClass] = []
        by_name = {info.node.name.value: info for info in self._classes}
        for info in self._classes:
            name = info.node.name.value
            if name in function_names:
                methods = self._inherited_methods(info, by_name, function_names)
                setup = methods.get("setup_context")
                functions.append(AutogradFunction(
                    name=name, node=info.node, style="setup_context" if setup is not None else "ctx",
                    forward=methods.get("forward"), backward=methods.get("backward"), setup_context=setup))
            elif name in module_names:
                modules.append(ModuleClass(name=name, node=info.node, methods=dict(info.methods),
                                           through=self._module_through(info, by_name, module_names)))
        for op_function, backward, setup in self._autograd_registrations:
            if op_function not in self._custom_ops:
                continue
            forward, op_name = self._custom_ops[op_function]
            functions.append(AutogradFunction(
                name=op_function, node=forward, style="custom_op", forward=forward,
                backward=self.functions.get(backward or ""), setup_context=self.functions.get(setup or ""),
                op_name=op_name))
        return functions, modules

    def _module_through(self, info: _ClassInfo, by_name: dict, module_names: set[str]) -> str | None:
        """The project base (of another module) this class is an nn.Module by, if that is why."""
        todo, seen = [info], set()
        while todo:
            current = todo.pop(0)
            if id(current) in seen:
                continue
            seen.add(id(current))
            if any(is_module_base(b) for b in current.bases):
                return None  # torch's own base says so: nothing rests on another file
            for base in current.bases:
                if base in by_name and base in module_names:
                    todo.append(by_name[base])
                elif base not in api.FUNCTION_BASES and self._imported_module(base):
                    facts = self.imported_class(base)
                    return f"{base.rpartition('.')[2]} ({facts.where})"
        return None

    def module_through(self, class_name: str | None) -> str | None:
        found = self._modules_by_name.get(class_name or "")
        return found.through if found is not None else None

    def _imported_module(self, base: str) -> bool:
        """A base another module of the project defines as an nn.Module (recbole's models
        subclass `GeneralRecommender` from `recbole.model.abstract_recommender`)."""
        facts = self.imported_class(base)
        return facts is not None and facts.kind == "module"

    def _module_like(self, info: _ClassInfo, function_names: set[str]) -> bool:
        """A class whose base comes from another file (`class MKR(KnowledgeRecommender)`) that
        defines forward and builds torch.nn layers or parameters on self in __init__: an nn.Module
        as far as this file can tell."""
        if "forward" not in info.methods or "__init__" not in info.methods or not info.bases:
            return False
        if any(b in function_names or b.startswith("torch.") or b in ("object", "") for b in info.bases):
            return False
        init = info.methods["__init__"]
        for call in _calls_in_assignments(init):
            name = self.imports.qualify(call.func) if isinstance(call.func, (cst.Name, cst.Attribute)) else None
            if name is not None and (api.is_nn_module_class(name) or name in api.PARAMETER_CONSTRUCTORS):
                return True
        return False

    def _inherited_methods(self, info: _ClassInfo, by_name, function_names) -> dict[str, cst.FunctionDef]:
        methods: dict[str, cst.FunctionDef] = {}
        chain = [info]
        seen = {info.node.name.value}
        while True:  # same-file base classes supply what the subclass does not override
            parent = next((by_name[b] for b in chain[-1].bases if b in function_names and b not in seen), None)
            if parent is None:
                break
            seen.add(parent.node.name.value)
            chain.append(parent)
        for cls in reversed(chain):
            methods.update(cls.methods)
        return methods

    def _init_attributes(self, class_name: str, methods: dict[str, cst.FunctionDef]) -> dict[str, Val]:
        """What `__init__` puts on self: submodules, parameters, buffers, containers (a Trainer's
        `self.l1 = nn.Linear(...)` too: any class's)."""
        attributes: dict[str, Val] = {}
        init = methods.get("__init__")
        if init is None or not init.params.params:
            return attributes
        self_name = init.params.params[0].name.value
        walk = Walk(self, init, FunctionRole("init", self_name=self_name, owner_class=class_name))
        walker = Walker(walk, init)
        params = {p.name.value: self._param_value(p, walk.role, init) for p in all_params(init)}
        walker.bind_params({**params, self_name: UNKNOWN})
        walker.run()
        for event in walk.of(AttributeStore):
            if event.owner_name == self_name:
                attributes[event.attribute] = event.value.with_(binding=None, reads=frozenset())
        # register_buffer("name", t): a tensor that is not graph-attached.
        for statement in _calls_in(init):
            if isinstance(statement.func, cst.Attribute) and statement.func.attr.value in ("register_buffer", "register_parameter") \
                    and statement.args and isinstance(statement.args[0].value, cst.SimpleString):
                if len(statement.args) > 1 and isinstance(statement.args[1].value, cst.Name) \
                        and statement.args[1].value.value == "None":
                    # `register_parameter("num_batches_tracked", None)` when stats are off registers
                    # None: the tensor the other branch registers decides (speechbrain's norms)
                    continue
                buffer = str(statement.args[0].value.evaluated_value)
                is_param = statement.func.attr.value == "register_parameter"
                attributes[buffer] = Val(Kind.TENSOR, param=is_param)
        return attributes

    def prescan(self, function: cst.FunctionDef | cst.Module) -> Prescan:
        """One Prescan per function, shared by every walk of it (helpers are walked once per
        call site, nested functions ask for their parents')."""
        scan = self._prescans.get(id(function))
        if scan is None:
            imported = frozenset(self.imports.aliases)
            scan = self._prescans[id(function)] = parse.memo(
                "prescan", function, self._within.get(id(function)), lambda: Prescan(function, imported), imported)
        return scan

    def _chain(self, class_name: str) -> list[str]:
        """The class and its bases defined in this file, bases first (first base's line only)."""
        bases = {info.node.name.value: info.bases for info in self._classes if not info.nested}
        chain, name = [], class_name
        while name in bases and name not in chain:
            chain.append(name)
            name = next((b for b in bases[name] if b in bases), None)
        return list(reversed(chain))

    def ancestors(self, class_name: str) -> set[str]:
        """The class and its bases defined in this file, transitively (by name)."""
        bases = {info.node.name.value: info.bases for info in self._classes}
        found, todo = set(), [class_name]
        while todo:
            name = todo.pop()
            if name in found:
                continue
            found.add(name)
            todo.extend(b for b in bases.get(name, ()) if b in bases)
        return found

    def distinct_methods(self, method: str) -> Iterator[tuple[AutogradFunction, cst.FunctionDef]]:
        """Each Function with its `method` ("forward", "backward"), each def once: a subclass that
        inherits its base's method would otherwise have the base's lines reported twice."""
        seen: set[int] = set()
        for function in self.function_classes:
            found = getattr(function, method)
            if found is not None and id(found) not in seen:
                seen.add(id(found))
                yield function, found

    def function_class(self, name: str) -> AutogradFunction | None:
        return next((f for f in self.function_classes if f.name == name), None)

    def function_class_call(self, call: cst.Call, method: str) -> str | None:
        """`MyFn` when `call` is `MyFn.<method>(...)` on an autograd Function class of this file."""
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == method and isinstance(func.value, cst.Name) \
                and func.value.value in self._function_class_defs:
            return func.value.value
        return None

    def apply_calls(self, name: str) -> list[cst.Call]:
        """The calls of Function `name`'s apply in this file: `Name.apply(...)`, and calls of a
        name bound to it anywhere in the file (`scatter_sum = ScatterSum.apply`)."""
        return self._apply_calls.get(name, [])

    @cached_property
    def apply_aliases(self) -> dict[str, str]:
        """Names bound to a Function's apply anywhere in the file (`index_first_axis =
        IndexFirstAxis.apply`), to the Function's name."""
        classes = self._function_class_defs
        aliases: dict[str, str] = {}
        for node in _assignments(self.module):
            value = node.value
            if isinstance(value, cst.Attribute) and value.attr.value == "apply" and isinstance(value.value, cst.Name) \
                    and value.value.value in classes:
                for target in node.targets:
                    if isinstance(target.target, cst.Name):
                        aliases[target.target.value] = value.value.value
        return aliases

    @cached_property
    def _apply_calls(self) -> dict[str, list[cst.Call]]:
        aliases = self.apply_aliases
        found: dict[str, list[cst.Call]] = {}
        for site in self.call_sites:
            func = site.call.func
            name = self.function_class_call(site.call, "apply")
            if name is None and isinstance(func, cst.Name):
                name = aliases.get(func.value)
            if name is not None:
                found.setdefault(name, []).append(site.call)
        return found

    @cached_property
    def _function_class_defs(self) -> set[str]:
        """Function subclasses (custom ops are functions, with no .forward/.apply of their own)."""
        return {f.name for f in self.function_classes if isinstance(f.node, cst.ClassDef)}

    @property
    def plain_class_names(self) -> set[str]:
        """Classes of the file that are neither modules nor Functions (a meter, a trainer)."""
        return self._plain_class_names

    @cached_property
    def _plain_class_names(self) -> set[str]:
        return {info.node.name.value for info in self._classes if not info.nested} \
            - self.module_class_names - self.function_class_names

    @cached_property
    def forward_hooks(self) -> set[int]:
        """The defs registered as forward hooks (`layer.register_forward_hook(hook)`): torch calls
        them with (module, input, output), the output of a module call: graph-attached."""
        hooks: set[int] = set()
        if self._source is not None and not any(r in self._source for r in api.FORWARD_HOOK_REGISTRATIONS):
            return hooks  # most files: no pass over their functions at all
        # Read from the prescans (shared with the walks).
        scans = [self.prescan(self.module)] + [self.prescan(f) for f, _, _ in self._all_functions]
        registrations = [call for scan in scans for call in scan.hook_registrations if call.args]
        # Only in a file that trains: feature extraction runs its forwards under no_grad.
        if not registrations or not any(scan.calls_backward for scan in scans):
            return hooks
        defs_by_name: dict[str, list[cst.FunctionDef]] = {}
        for function, _, _ in self._all_functions:
            defs_by_name.setdefault(function.name.value, []).append(function)
        for call in registrations:
            first = call.args[0]
            hook = first.value if first.keyword is None or first.keyword.value == "hook" else None
            if hook is None:
                continue
            if isinstance(hook, cst.Call):  # `get_activation("fc1")`: the hook its factory returns
                hook = hook.func
                hooks.update(id(n) for f in defs_by_name.get(_last_name(hook), ())
                             for n in f.body.body if isinstance(n, cst.FunctionDef))
                continue
            name = _last_name(hook)
            hooks.update(id(f) for f in defs_by_name.get(name, ()))
            instance_class = self._instances.get(name) if isinstance(hook, cst.Name) else None
            if instance_class is not None:  # an instance of a class of the file: its __call__
                found = self.method_of(instance_class, "__call__")
                if found is not None:
                    hooks.add(id(found[0]))
        return hooks

    @cached_property
    def trained_buffers(self) -> set[str]:
        """Containers backward is run through and that are then emptied (trained_buffers.py)."""
        # Only a function that stores or calls backward can fill, empty or train a container.
        functions = [f for f, _, _ in self._all_functions
                     if self.prescan(f).stores or self.prescan(f).backward_roots or self.prescan(f).deletes]
        found = trained_and_emptied(functions, self._buffer_facts)
        top = self.prescan(self.module)
        if top.backward_roots and top.stores:  # a script's own loop, read on its own (trained_buffers.py)
            facts = self._buffer_facts(self.module)
            found |= facts.trained() & facts.emptied
        return found

    def trained_in(self, function: cst.FunctionDef | cst.Module) -> set[str]:
        """What a backward in the function is computed from (trained_buffers keys)."""
        found = self._trained_in.get(id(function))
        if found is None:
            found = self._trained_in[id(function)] = self._buffer_facts(function).trained()
        return found

    def _buffer_facts(self, function: cst.FunctionDef | cst.Module) -> BufferFacts:
        """A def read by trained_buffers: from the def and the import names alone, so it is kept
        with the def's statement (parse.memo) for the next lint of the same text."""
        return parse.memo("buffers", function, self._within.get(id(function)),
                          lambda: BufferFacts(function, self.imports), self._import_names)

    @cached_property
    def _import_names(self) -> frozenset[tuple[str, str]]:
        """What the import table resolves (all that ImportTable.qualify reads)."""
        return frozenset(self.imports.aliases.items())

    @cached_property
    def call_sites(self) -> list[CallSite]:
        return collect_call_sites(self.module)

    def in_training_step(self, site: CallSite) -> bool:
        """Whether a call runs once per training step (call_sites.in_training_step), or runs in the
        forward or backward of an autograd Function or an nn.Module's forward, which every step
        runs (outside loops of their own)."""
        return in_training_step(site, self.call_sites, self) or (
            not site.loops and site.function is not None and id(site.function) in self._per_step_methods)

    def runs_through(self, call: cst.Call, qualified: str) -> str | None:
        """Whether a call runs `qualified` (`torch.cuda.empty_cache`), and how: "" for a call of it
        (as the imports resolve it); the def it goes through, as a message names it (`empty_cache()
        (utils.py:930)`), for a call of a def of this file or of another project module (one
        import deep) whose own lines call it on every call: outside its loops, not under a
        remainder test (trl's `empty_cache()`, which empties the available device's cache). None
        for any other call. Asked again for a message: remembered per call."""
        key = (id(call), qualified)
        if key not in self._through:
            self._through[key] = self._runs_through(call, qualified)
        return self._through[key]

    def _runs_through(self, call: cst.Call, qualified: str) -> str | None:
        if self.imports.qualify(call.func) == qualified:
            return ""
        if not isinstance(call.func, cst.Name):
            return None
        name = call.func.value
        function, model, where = self.functions.get(name), self, None
        if function is None:
            # the def's own lines name it (GL106's precheck asks that much: Project.def_text_holds)
            target, words = self._imported_as(name), (qualified.rpartition(".")[2],)
            found = self.project.function(target, words) \
                if target is not None and self.project.def_text_holds(target, words) else None
            if found is None:
                return None
            model, function, _ = found
            where = self.project.where_defined(target)
        if not any(site.function is function and not site.loops and not site.periodic
                   and model.imports.qualify(site.call.func) == qualified for site in model.call_sites):
            return None
        return f"{name}() ({where})" if where else f"{name}()"

    # call_sites.LoopFacts: what a loop's calls are, for the loops their header alone makes training loops

    def grad_off(self, site: CallSite) -> bool:
        """Whether a call runs with grad off: under `with torch.no_grad():` (inference_mode,
        set_grad_enabled(False)) in its function, or in a def decorated so."""
        return any(disables_grad(context, self.imports) for context in site.contexts) \
            or (site.function is not None and self.decorated_no_grad(site.function))

    def runs_steps(self, site: CallSite) -> bool:
        """Whether a call runs a def of this file (`train(epoch)`, `self.train_epoch()`) that has a
        training loop of its own."""
        func = site.call.func
        function = None
        if isinstance(func, cst.Name):
            function = self.functions.get(func.value)
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and site.owner_class is not None \
                and site.function is not None and func.value.value == _self_param(site.function):
            found = self.method_of(site.owner_class.name.value, func.attr.value)
            function = found[0] if found is not None else None
        if function is None:
            return False
        found = self._runs_steps.get(id(function))
        if found is None:
            found = self._runs_steps[id(function)] = runs_a_training_loop(function, self.call_sites)
        return found

    @cached_property
    def _per_step_methods(self) -> set[int]:
        found = {id(m) for f in self.function_classes for m in (f.forward, f.backward) if m is not None}
        found |= {id(m.methods["forward"]) for m in self.module_classes if "forward" in m.methods}
        for info in self._top_classes_by_name.values():  # Lightning's training_step, a Trainer's compute_loss
            found |= {id(info.methods[n]) for n in self.framework_methods(info, api.PER_STEP_METHODS)}
        return found

    def framework_methods(self, info: _ClassInfo, table: dict[str, frozenset[str]]) -> frozenset[str]:
        """The methods of a class of this file that a framework it derives from runs in a way
        `table` names (api.GRAD_OFF_METHODS, api.PER_STEP_METHODS): those of `table`'s bases the
        class reaches through this file's classes and the project's. Only the ones it defines
        itself, and only those are looked up (the project is asked nothing for a class without one)."""
        wanted = info.methods.keys() & set().union(*table.values())
        if not wanted:
            return frozenset()
        return frozenset(wanted & set().union(*(table.get(b, ()) for b in self._outside_bases(info))))

    def _outside_bases(self, info: _ClassInfo) -> frozenset[str]:
        """The bases from outside this file a class of it reaches through its bases: each base not
        a class of this file, and what a project class among them reaches (Project.outside_bases).
        torch's own classes are not followed: no framework base of the tables derives from them."""
        found = self._outside.get(id(info.node))
        if found is None:
            self._outside[id(info.node)] = frozenset()  # a class that inherits from itself
            bases: set[str] = set()
            for base in info.bases:
                own = self._top_classes_by_name.get(base)
                if own is not None:
                    bases |= self._outside_bases(own)
                elif base:
                    bases.add(base)
                    if self.project is not None and not base.startswith("torch.") and base not in self.module_names:
                        bases |= self.project.outside_bases(base)
            found = self._outside[id(info.node)] = frozenset(bases)
        return found

    # ----- what names at module level hold ----------------------------------------------------

    def global_value(self, name: str) -> Val:
        if name in self.module_class_names or name in self.function_class_names:
            return UNKNOWN
        value = self._module_values.get(name)
        if value is not None and value.kind is not Kind.UNKNOWN:
            return value
        if name in self.prescan(self.module).frozen:
            return UNKNOWN
        if self._instances.get(name) in self.module_class_names:
            return Val(Kind.MODULE, module_class=self._instances[name])
        if self._instances.get(name) in self._plain_class_names:  # `meter = Meter()`: its methods are walked
            return Val(module_class=self._instances[name])
        called = self._instance_of.get(name)
        instance = self._project_instance(self.imports.qualify_dotted(called)) if called else None
        if instance is not None:  # `meter = AverageMeter()` with the class from utils/meters.py
            return instance
        if looks_like_module(name) and not self._names_a_def(name):
            return Val(Kind.MODULE)
        return UNKNOWN

    def _names_a_def(self, name: str) -> bool:
        """A def of this file, or one imported from another module of the project: called, it
        runs its body (walked where it can be), it is not a module called for its output."""
        if name in self.functions:
            return True
        qualified = self.imports.aliases.get(name)
        return qualified is not None and self.project is not None and self.project.is_def(qualified)

    # ----- walks ------------------------------------------------------------------------------

    @cached_property
    def autograd_walks(self) -> list[tuple[AutogradFunction, Walk]]:
        """forward (ctx style) or setup_context walked with ctx known, one per Function."""
        walks = []
        for function in self.function_classes:
            walk = self._autograd_walk(function)
            if walk is not None:
                walks.append((function, walk))
        return walks

    def _autograd_walk(self, function: AutogradFunction) -> Walk | None:
        if function.style == "ctx":
            target = function.forward
            if target is None or not target.params.params:
                return None
            skip = leading_params(target)
            if len(target.params.params) <= skip:
                return None
            ctx = target.params.params[skip].name.value
            walk = Walk(self, target, FunctionRole("forward", ctx_name=ctx, owner_class=function.name))
            walker = Walker(walk, target)
            bound = {ctx: Val(Kind.CTX)}
            for position, param in enumerate(target.params.params[skip + 1:]):
                bound[param.name.value] = self._pinned(function, position, self.input_value(param, walker.scan))
            star = target.params.star_arg
            if isinstance(star, cst.Param) and star.name.value in walker.scan.tensor_holders:
                # `forward(ctx, fn, n, *inputs_and_weights)` whose items are used as tensors
                bound[star.name.value] = Val(Kind.CONTAINER, is_input=True)
            walker.bind_params(bound)
            walker.run()
            for event in walk.of(ReturnValue):
                walk.output_bindings.update(bindings_of(event.value))
            items = walker.scan.returned_items
            for event in walk.of(NameStore):  # `event_t, y = ans; return ans`: each item is an output
                if event.name in items and event.value.binding is not None:
                    walk.output_bindings.add(event.value.binding)
            return walk
        setup = function.setup_context
        if setup is None or len(setup.params.params) < 3 + leading_params(setup):
            return None
        names = [p.name.value for p in setup.params.params][leading_params(setup):]
        # custom ops with keyword-only arguments pass them third: (ctx, inputs, keyword_only_inputs, output)
        ctx, inputs, output = names[0], names[1], names[-1] if len(names) >= 4 else names[2]
        walk = Walk(self, setup, FunctionRole("setup_context", ctx_name=ctx, owner_class=function.name))
        walker = Walker(walk, setup)
        forward_inputs = function.forward_inputs or []
        input_values = tuple(self._pinned(function, i, self.input_value(p, self.prescan(function.forward)))
                             for i, p in enumerate(forward_inputs))
        output_value = self.output_value(function)
        walk.output_bindings.update(bindings_of(output_value))
        walker.bind_params({
            ctx: Val(Kind.CTX),
            inputs: Val(Kind.CONTAINER, elements=input_values),
            output: output_value,
        })
        walker.run()
        return walk

    def declared_value(self, annotation: cst.BaseExpression, value: Val = UNKNOWN, fields: bool = False) -> Val:
        """What an annotation says a value is, with the class when it names one of this file
        (`pattern: Sparse24Tensor`: a tensor whose attributes its class body declares)."""
        declared = annotated_value(annotation, self.imports)
        name = dotted(annotation) if isinstance(annotation, (cst.Name, cst.Attribute)) else (
            str(annotation.evaluated_value) if isinstance(annotation, cst.SimpleString) else None)
        if name in self._class_names:
            declared = declared.with_(module_class=name)
        elif isinstance(annotation, (cst.Name, cst.Attribute)) and self.imports.qualify(annotation) in api.TENSOR_SUBCLASS_ATTRIBUTES:
            declared = declared.with_(module_class=self.imports.qualify(annotation))
        elif fields and declared.kind is Kind.SCALAR and self.project is not None:
            # A Function's input `cp_context: FLACPContext | None`, the class of another module of
            # the project: the fields it declares (`cu_seqlens: torch.Tensor | None`) say what reading
            # them gives. Looked up only when one is read, and for a Function's inputs only: 485
            # lookups for torch's own sources when every annotated name had them, about 3% of the run.
            qualified = self._class_annotated(annotation)
            if qualified and qualified not in self._class_names:
                declared = declared.with_(module_class=qualified)
        if declared.kind is Kind.UNKNOWN and declared.module_class is None:
            return value
        return value.with_(kind=declared.kind, int64=declared.int64, item=declared.item,
                           module_class=declared.module_class)

    @cached_property
    def _class_names(self) -> set[str]:
        return {info.node.name.value for info in self._classes if not info.nested}

    def class_attribute(self, class_name: str, attribute: str) -> Val | None:
        """What the class body (or a base's, in this file) declares an attribute to be:
        `meta: torch.Tensor` beside the methods; None when it declares nothing."""
        if class_name in api.TENSOR_SUBCLASS_ATTRIBUTES:  # torch's own: `pattern.meta` of a semi-structured tensor
            return Val(Kind.TENSOR) if attribute in api.TENSOR_SUBCLASS_ATTRIBUTES[class_name] else None
        if class_name not in self._class_names:
            # Another module's class (a Function's input annotated with it, declared_value): its
            # module's model reads its body there.
            return self.project.class_attribute(class_name, attribute) if self.project is not None else None
        declared = self._class_attributes.get(class_name)
        if declared is None:
            declared = {}
            by_name = {info.node.name.value: info for info in self._classes if not info.nested}
            for ancestor in self._chain(class_name):
                info = by_name.get(ancestor)
                for line in info.node.body.body if info is not None else ():
                    if isinstance(line, cst.SimpleStatementLine):
                        for small in line.body:
                            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                                found = annotated_value(small.annotation.annotation, self.imports)
                                if found.kind is not Kind.UNKNOWN:
                                    declared[small.target.value] = found
            self._class_attributes[class_name] = declared
        return declared.get(attribute)

    def input_value(self, param: cst.Param, scan: Prescan) -> Val:
        """A forward input: a tensor unless the code shows it is a Python scalar; an int64 one
        when forward checks it is (`assert idx.dtype == torch.long`)."""
        value = self._input_value(param, scan)
        if param.name.value in self._int64_pins(scan) and value.kind in (Kind.TENSOR, Kind.UNKNOWN):
            return value.with_(kind=Kind.TENSOR, int64=True, is_input=True)
        return value

    def _int64_pins(self, scan: Prescan, depth: int = 0) -> frozenset[str]:
        """The names code checks to be int64 where a wrong dtype stops it: its own checks, and the
        names it passes where a def of this file checks its parameter so (liger's forward calls
        `_validate_inputs(x, weight, target, ...)`, which raises unless target is int64)."""
        found = self._int64_pinned.get(id(scan.root)) if depth == 0 else None
        if found is not None:  # forward asks once per input, callers once per apply argument
            return found
        pins = frozenset(scan.int64_pins)
        if depth <= self.MAX_HELPER_DEPTH:
            pins |= self._passed_as(scan, lambda target: self._int64_pins(self.prescan(target), depth + 1))
        if depth == 0:
            self._int64_pinned[id(scan.root)] = pins
        return pins

    def _passed_as(self, scan: Prescan, wanted: Callable[[cst.FunctionDef], Iterable[str]]) -> set[str]:
        """The names the scanned code passes, by position or keyword, to a def of this file at one
        of the parameters `wanted(def)` names (a helper's use of its parameter says what the caller
        passed there: tensor_params, _int64_pins)."""
        found: set[str] = set()
        for callee, positional, keywords in scan.name_calls:
            target = self.functions.get(callee)
            if target is None or target is scan.root:
                continue
            inner = wanted(target)
            if not inner:
                continue
            target_params = [p.name.value for p in (*target.params.posonly_params, *target.params.params)]
            target_params = target_params[leading_params(target):]
            found.update(name for name, param in zip(positional, target_params) if name and param in inner)
            found.update(name for keyword, name in keywords if keyword in inner)
        return found

    def _pinned(self, function: AutogradFunction, position: int, value: Val) -> Val:
        if value.kind in (Kind.TENSOR, Kind.UNKNOWN) and not value.int64 and self.pinned_by_callers(function, position):
            return value.with_(kind=Kind.TENSOR, int64=True, is_input=True)
        if value.kind is Kind.UNKNOWN:
            declared = self._callers_declare(function, position)
            if declared is not None:
                return value.with_(kind=declared.kind, item=declared.item, is_input=True)
        return value

    def _callers_declare(self, function: AutogradFunction, position: int) -> Val | None:
        """What every call of the Function's apply in the file passes at `position`, when each
        passes a parameter of its caller annotated as a tensor (`cu_seqlens: Optional[torch.LongTensor]`):
        a tensor, or one tensor or a container of them when some annotation says
        `torch.LongTensor | tuple[torch.LongTensor, torch.LongTensor]`. None: not all of them say so."""
        calls = self.apply_calls(function.name)
        if not calls:
            return None
        around = {id(site.call): site.function for site in self.call_sites}
        either, int64 = False, True
        for call in calls:
            args = [a for a in call.args if a.keyword is None]
            if any(a.star for a in call.args) or position >= len(args) or not isinstance(args[position].value, cst.Name):
                return None
            caller = around.get(id(call))
            name = args[position].value.value
            declared = next((p for p in all_params(caller) if p.name.value == name), None) if caller is not None else None
            found = annotated_value(declared.annotation.annotation, self.imports) \
                if declared is not None and declared.annotation is not None else UNKNOWN
            if found.kind is not Kind.TENSOR and not tensor_or_tensors(found):
                return None
            either = either or found.kind is not Kind.TENSOR
            int64 = int64 and (found.int64 if found.kind is Kind.TENSOR else found.item.int64)
        # A tensor's int64 is pinned_by_callers' to decide; a container's items carry theirs.
        return Val(item=Val(Kind.TENSOR, int64=int64)) if either else Val(Kind.TENSOR)

    def pinned_by_callers(self, function: AutogradFunction, position: int) -> bool:
        """Whether every call of the Function's apply in this file passes, at `position`, an int64
        tensor for certain: made by `.long()`, `.to(torch.int64)`, `dtype=torch.long`, or a name its
        caller checks is int64 (`KORNIA_CHECK(target.dtype == torch.int64)`)."""
        calls = self.apply_calls(function.name)
        if not calls:
            return False
        around = {id(site.call): site.function for site in self.call_sites}
        for call in calls:
            args = [a for a in call.args if a.keyword is None]
            if any(a.star for a in call.args) or position >= len(args):
                return False
            value = args[position].value
            caller = around.get(id(call))
            pinned = isinstance(value, cst.Name) and caller is not None and (
                value.value in self._int64_pins(self.prescan(caller)) or self._declared_int64(caller, value.value))
            if not (pinned or self._makes_int64(value) or self._applied_int64(call, caller, position)):
                return False
        return True

    def _applied_int64(self, call: cst.Call, caller: cst.FunctionDef | None, position: int) -> bool:
        """Whether the caller's own walk gives an int64 tensor at `position` of this apply call
        (`indices = torch.nonzero(mask).flatten()`, then `index_first_axis(x, indices)`). Not while
        a caller's walk is asked already: that walk may need this Function's forward, whose inputs
        ask this again."""
        if self._asking_callers:
            return False
        self._asking_callers = True
        try:
            walk = self.walk_of(caller)
        finally:
            self._asking_callers = False
        for event in walk.of(FunctionApplied):
            if event.call is call:
                positional = [v for a, v in event.arguments if a.keyword is None and not a.star]
                return position < len(positional) and positional[position].kind is Kind.TENSOR \
                    and positional[position].int64
        return False

    def _declared_int64(self, function: cst.FunctionDef, name: str) -> bool:
        """`cu_seqlens: torch.LongTensor` (or Optional of it) among the def's parameters."""
        for param in all_params(function):
            if param.name.value == name and param.annotation is not None:
                return annotated_value(param.annotation.annotation, self.imports).int64
        return False

    def _makes_int64(self, expr: cst.BaseExpression) -> bool:
        if not isinstance(expr, cst.Call):
            return False
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value == "long" and not expr.args:
            return True
        for arg in expr.args:
            if arg.keyword is None and not (isinstance(func, cst.Attribute) and func.attr.value == "to"):
                continue
            if arg.keyword is not None and arg.keyword.value != "dtype":
                continue
            name = self.imports.qualify(arg.value) if isinstance(arg.value, (cst.Name, cst.Attribute)) else None
            if name in api.INT64_DTYPES:
                return True
        return False

    MAX_HELPER_DEPTH = 4

    def _triton(self, alias: str) -> bool:
        head, _, rest = alias.partition(".")
        full = self.imports.aliases.get(head, head) + (f".{rest}" if rest else "")
        return full.startswith("triton.language")

    @cached_property
    def atomic_kernels(self) -> frozenset[str]:
        """Triton kernels of this file (module-level defs) that add floats atomically
        (`tl.atomic_add(dw_ptr + c, dw)`): their result depends on the order programs run in."""
        return frozenset(name for name, function in self.functions.items()
                         if any(self._triton(alias) for alias in self.prescan(function).atomic_sums))

    def kernel_writes(self, function: cst.FunctionDef) -> frozenset[str]:
        """The parameters a Triton kernel of this file writes through (`tl.store(q_ptr + offs,
        v)`, an atomic), or a cuTile kernel writes into (`ct.store(Q, index=..., tile=t)`,
        `ct.scatter(Q, idx, v)`): launching it changes the tensors passed there in place."""
        params = {p.name.value for p in all_params(function)}
        return frozenset(base for alias, base in self.prescan(function).pointer_writes
                         if base in params and (self._triton(alias) or self._cutile(alias)))

    def _cutile(self, alias: str) -> bool:
        head, _, rest = alias.partition(".")
        return self.imports.aliases.get(head, head) + (f".{rest}" if rest else "") == "cuda.tile"

    def imported_atomic_kernel(self, name: str) -> str | None:
        """Where the Triton kernel this file imports as `name` is defined (`ops/kernels.py:12`),
        when it adds floats atomically there as `atomic_kernels` reads a kernel of the file; None
        for anything else: not imported from the project, or no such kernel."""
        with self.imported_def(name) as found:
            if found is None:
                return None
            model, function, where = found
            return where if function.name.value in model.atomic_kernels else None

    @cached_property
    def backward_defs(self) -> frozenset[int]:
        """The defs that run when an autograd Function's backward runs: the backwards themselves and
        the module-level helpers they call by name, transitively."""
        todo = [f.backward for f in self.function_classes if f.backward is not None]
        seen: set[int] = set()
        while todo:
            function = todo.pop()
            if id(function) in seen:
                continue
            seen.add(id(function))
            todo.extend(self.functions[name] for name in self.prescan(function).called_names
                        if name in self.functions and name not in self.atomic_kernels)
        return frozenset(seen)

    def tensor_params(self, function: cst.FunctionDef, depth: int = 0) -> frozenset[str]:
        """The parameters a def uses as only tensors are used: directly (prescan's tensor_uses), as
        a Triton pointer (`tl.load(ptr + offs)`), or by passing them where a def of this file (a
        helper, a kernel it launches) uses its own parameter so (`_launch(q, cos)` with
        `cos.stride(0)` inside). Read once per def."""
        found = self._tensor_params.get(id(function))
        if found is not None:
            return found
        if depth > self.MAX_HELPER_DEPTH:
            return frozenset()
        self._tensor_params[id(function)] = frozenset()  # a recursive helper finds nothing more
        scan = self.prescan(function)
        params = [p.name.value for p in all_params(function)]
        names = set(params) & scan.tensor_uses
        names |= {name for module, name in scan.pointer_uses
                  if (self.imports.aliases.get(module.split(".")[0], "") + module[len(module.split(".")[0]):])
                  .startswith("triton.language")}
        names |= self._passed_as(scan, lambda target: self.tensor_params(target, depth + 1))
        # An annotation says what the def accepts: `block_counts: torch.LongTensor | int` may be an int
        # whatever a branch of the body does with it.
        declared = {p.name.value: annotated_value(p.annotation.annotation, self.imports).kind
                    for p in all_params(function) if p.annotation is not None}
        found = frozenset(n for n in names & set(params) if declared.get(n, Kind.TENSOR) is Kind.TENSOR)
        self._tensor_params[id(function)] = found
        return found

    def _input_value(self, param: cst.Param, scan: Prescan) -> Val:
        name = param.name.value
        if param.annotation is not None:
            declared = self.declared_value(param.annotation.annotation, fields=True)
            if declared.kind is Kind.CONTAINER and name not in scan.tensor_holders \
                    and not any(m.is_tensor for m in declared.members()):
                # `aux_scalars: Optional[tuple]`, `new_shape: tuple`: a container, of what the
                # annotation does not say; not an input container of tensors (ctx_stores.stored_kind)
                return declared
            if declared.kind is not Kind.UNKNOWN:
                return declared.with_(is_input=True) if declared.kind in (Kind.TENSOR, Kind.CONTAINER) else declared
        if param.default is not None and not (isinstance(param.default, cst.Name) and param.default.value == "None"):
            return SCALAR
        if _SCALAR_LIKE.match(name) or name in scan.scalar_uses:
            return SCALAR
        if name in scan.tensor_uses or name in scan.attribute_uses or (
                isinstance(scan.root, cst.FunctionDef) and name in self.tensor_params(scan.root)):
            return Val(Kind.TENSOR, is_input=True)
        if name in scan.single_returns and name not in scan.tuple_sources:
            return Val(Kind.TENSOR, is_input=True)  # forward returns it as it came: its output, a tensor
        if name in scan.tensor_holders:
            # `edge_index[0]` used as a tensor: it is one, or holds some; which item is which is
            # unknown (`in_idx, out_idx, counts = kmap`: counts is a list of ints).
            return Val(Kind.CONTAINER, is_input=True)
        return UNKNOWN

    def output_value(self, function: AutogradFunction) -> Val:
        """setup_context's `output`: what forward returns, one element per returned value when it
        returns a tuple. An element counts as a tensor only when forward visibly returns one
        there (a NumPy array returned beside the tensor is no cycle)."""
        returned = self._forward_returns(function)
        if returned is not None and returned.kind is Kind.CONTAINER and returned.elements:
            elements = tuple(Val(Kind.TENSOR if e.kind is Kind.TENSOR else Kind.UNKNOWN, binding=new_binding())
                             for e in returned.elements)
            return Val(Kind.CONTAINER, elements=elements, binding=new_binding())
        annotation = function.forward.returns if function.forward is not None else None
        if annotation is not None and "Tensor" in self.module.code_for_node(annotation.annotation) \
                and "uple" not in self.module.code_for_node(annotation.annotation):
            return Val(Kind.TENSOR, binding=new_binding())
        # One value returned: the Function's output, a tensor unless it is visibly something else.
        scalar = returned is not None and returned.kind in (Kind.SCALAR, Kind.CONTAINER, Kind.MODULE)
        return Val(Kind.UNKNOWN if scalar else Kind.TENSOR, binding=new_binding())

    def returns_int64(self, name: str) -> bool:
        """Whether Function `name`'s forward returns one int64 tensor (`torch.min(d, 1).indices`):
        then what `.apply` gives is that index."""
        found = self._int64_outputs.get(name)
        if found is None:
            function = self.function_class(name)
            returned = self._forward_returns(function) if function is not None and function.style == "ctx" else None
            found = self._int64_outputs[name] = bool(returned is not None and returned.is_tensor and returned.int64)
        return found

    def _forward_returns(self, function: AutogradFunction) -> Val | None:
        """The value forward's last `return` gives, its inputs taken as tensors."""
        forward = function.forward
        if forward is None:
            return None
        walk = Walk(self, forward, FunctionRole("function"))
        walker = Walker(walk, forward)
        walker.bind_params({p.name.value: Val(Kind.TENSOR, is_input=True) for p in all_params(forward)})
        walker.run()
        returns = [e.value for e in walk.of(ReturnValue)]
        return returns[-1] if returns else None

    def stores_graph_on_self(self, module_class: str, attribute: str) -> bool:
        """Whether some method of the module class stores a graph-attached value on
        `self.<attribute>`, so that reading it from an instance gives one."""
        if self._graph_attributes is None:
            # The methods are walked here on their own: the walk of the function asking may be
            # under way in `walks`, and a method reading another instance's attribute asks again.
            self._graph_attributes = set()
            found = set()
            for function, owner, _ in self._all_functions:
                role = self._role(function, owner)
                if role.kind not in ("module_forward", "module_method") or not self.prescan(function).stores:
                    continue
                walk = self._plain_walk(function, role)
                found.update((role.owner_class, event.attribute) for event in walk.of(AttributeStore)
                             if event.owner_name == role.self_name and event.value.holds_graph())
            self._graph_attributes = found
        return (module_class, attribute) in self._graph_attributes

    # A helper's result depends on what it is given, but a file seldom calls one helper with
    # arguments of more than a few kinds; deeper than this, a result is unknown.
    MAX_CALL_DEPTH = 3
    IMPORTED_CALL_DEPTH = 1  # calls followed into other modules, nested: one, measured on torch (see project.py)

    def call_result(self, function: cst.FunctionDef, owner: _ClassInfo | None, call: cst.Call,
                    args: list[tuple[cst.Arg, Val]], receiver: Val | None, receiver_name: str | None,
                    keep: Callable[[cst.BaseExpression, ContainerAdd], None] | None = None,
                    kept: list | None = None) -> Val:
        """What a call of one of this file's functions (or of a method, on `receiver`) gives: its
        body walked with the call's arguments bound, the returned values merged. Of its events,
        what it keeps on an attribute or a global for graph-attached arguments is kept as a walk
        of its own (reported at the helper's line); what it adds to a container the caller passed
        goes to `keep` with the caller's expression for it (the caller's list may outlive the
        step or not); the rest belong to the caller. `kept` gets the stores that outlive the call
        (another module's caller reports them at its call: this file's walks are not its own)."""
        if function.asynchronous is not None or self._is_generator(function):
            return UNKNOWN
        if id(function) in self._calls_under_way or len(self._calls_under_way) >= self.MAX_CALL_DEPTH:
            self._cut = [True] * len(self._cut)  # every call under way now has a cut-off result
            return UNKNOWN
        role = self._role(function, owner)
        instance = self._modules_by_name.get(receiver.module_class) if receiver is not None else None
        if instance is not None and role.self_name is not None:
            role.self_attributes = instance.attributes  # a base's method, run on the subclass's instance
        bound = {p.name.value: self._param_value(p, role, function) for p in all_params(function)}
        positional = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
        if receiver is not None and not _is_static(function):
            if positional and leading_params(function) == 0:
                bound[positional[0]] = receiver
            positional = positional[1:]
        given: dict[str, Val] = {}
        given_exprs: dict[str, cst.BaseExpression] = {}
        if not any(a.star for a, _ in args):
            for (arg, value), name in zip([(a, v) for a, v in args if a.keyword is None], positional):
                given[name], given_exprs[name] = value, arg.value
        for arg, value in args:
            if arg.keyword is not None and arg.keyword.value in bound:
                given[arg.keyword.value], given_exprs[arg.keyword.value] = value, arg.value
        for name, value in given.items():
            if value.kind is not Kind.UNKNOWN:
                bound[name] = _as_argument(value)
        # A result cut off by the depth limit or a recursion (some callee unknown) holds only at
        # that depth: the same call made from higher up may see more. A whole one holds anywhere.
        shape = tuple(sorted((n, _shape(v)) for n, v in bound.items()))
        whole, at_depth = (id(function), None, shape), (id(function), len(self._calls_under_way), shape)
        cached = self._call_results.get(whole) or self._call_results.get(at_depth)
        if cached is not None:
            result, param_adds, outliving = cached
        else:
            self._calls_under_way.append(id(function))
            self._cut.append(False)
            try:
                walk = Walk(self, function, role)
                walker = Walker(walk, function)
                walker.bind_params(bound)
                walker.run()
            finally:
                self._calls_under_way.pop()
                cut = self._cut.pop()
            returned = [e.value for e in walk.of(ReturnValue)
                        if not (isinstance(e.where.node, cst.Return) and _returns_none(e.where.node))]
            result = _returned(returned)
            param_adds = tuple(e for e in walk.of(ContainerAdd) if e.scope == "param" and e.value.holds_graph())
            outliving: tuple = ()
            if self.prescan(function).stores and any(v.holds_graph() for v in given.values()):
                # What it keeps where the call outlives (its self, a global) is kept for the caller's
                # values: `meter.update(loss)` chaining `self.total = self.total + loss`.
                walk.events = [e for e in walk.events if _outlives_the_call(e)]
                if walk.events:
                    walk.for_caller = True
                    self._call_walks.append(walk)
                    outliving = (walk,)
            self._call_results[at_depth if cut else whole] = (result, param_adds, outliving)
        if kept is not None:
            kept.extend(outliving)
        self_name = role.self_name if receiver is not None else None
        if result.kind is Kind.UNKNOWN and result.module_class is None and function.returns is not None:
            result = self.declared_value(function.returns.annotation, result)  # `-> Sparse24Tensor`

        def as_read_by_caller(value: Val) -> Val:
            """What the callee read of its parameters and its self is what the caller passed."""
            if not value.reads:
                return value
            reads: set[str] = set()
            for name in value.reads:
                head, _, rest = name.partition(".")
                if not rest and name in given:
                    reads |= given[name].reads
                elif rest and head == self_name and receiver_name is not None:
                    reads.add(f"{receiver_name}.{rest}")
            return value.with_(reads=frozenset(reads))

        if keep is not None:
            # Per call, not in the cache: a call that leaves the list to its default shares the
            # cached walk with one that passes it. Only a graph the caller passed travels.
            from_caller = {name for name, value in given.items() if value.holds_graph()}
            for add in param_adds:
                # A list left to a default that names a global (`buf=HISTORY`) is that global.
                container = given_exprs.get(add.container_name) or _global_default(function, add.container_name)
                if container is not None and _reads_within(add.value) & from_caller:
                    keep(container, replace(add, value=as_read_by_caller(add.value)))
        return as_read_by_caller(result)

    def _is_generator(self, function: cst.FunctionDef) -> bool:
        found = self._generators.get(id(function))
        if found is None:
            found = self._generators[id(function)] = _is_generator(function)
        return found

    def detaches(self, function: cst.FunctionDef) -> bool:
        """flow's question of a helper (does it call .detach()?), read once per def: a file that
        calls its helpers many times asked it at every call (0.56 s of 2.9 s on 80 helpers)."""
        found = self._detaching.get(id(function))
        if found is None:
            found = self._detaching[id(function)] = _detaches(function)
        return found

    def method_of(self, class_name: str, method: str) -> tuple[cst.FunctionDef, _ClassInfo] | None:
        """The def of `method` a class of this file has, itself or from a base in this file."""
        by_name = self._top_classes_by_name
        todo, seen = [class_name], set()
        while todo:
            info = by_name.get(todo.pop(0))
            if info is None or info.node.name.value in seen:
                continue
            seen.add(info.node.name.value)
            if method in info.methods:
                return info.methods[method], info
            todo.extend(info.bases)
        return None

    def inherited_method(self, class_name: str, method: str) -> tuple[cst.FunctionDef, _ClassInfo] | None:
        """The def `super().method` reaches from a class of this file: its bases' (in this file),
        in order, not its own."""
        info = self._top_classes_by_name.get(class_name)
        for base in info.bases if info is not None else ():
            found = self.method_of(base, method)
            if found is not None:
                return found
        return None

    @cached_property
    def _top_classes_by_name(self) -> dict[str, _ClassInfo]:
        return {info.node.name.value: info for info in self._classes if not info.nested}

    def _role(self, function: cst.FunctionDef, owner: _ClassInfo | None) -> FunctionRole:
        role = FunctionRole("function")
        module = self._modules_by_node.get(id(owner.node)) if owner is not None else None
        if owner is not None and _self_param(function) is not None:
            role.self_name = _self_param(function)
            role.owner_class = owner.node.name.value
            role.kind = "method"
        if module is None and role.self_name is not None and function.name.value not in _DATA_METHODS \
                and not any(base.rsplit(".", 1)[-1].endswith("Dataset") for base in owner.bases):
            attributes = self._plain_attributes.get(id(owner.node))
            if attributes is None:
                # Set first: a method walked from __init__'s own walk finds none, not a loop.
                self._plain_attributes[id(owner.node)] = {}
                attributes = self._init_attributes(owner.node.name.value, owner.methods)
                self._plain_attributes[id(owner.node)] = attributes
            role.self_attributes = attributes
        if module is not None:
            role.self_attributes = module.attributes
            name = function.name.value
            role.kind = "module_forward" if name == "forward" else "module_method"
        if owner is not None and function.name.value in self.framework_methods(owner, api.GRAD_OFF_METHODS):
            role.no_grad = True
        if self.decorated_no_grad(function) or id(function) in self._no_grad_by_callers:
            role.no_grad = True
        return role

    def decorated_no_grad(self, function: cst.FunctionDef) -> bool:
        """`@torch.no_grad()`, `@torch.inference_mode()`, or a decorator of the project made to run
        its def so: a def of this file or another module whose text names `no_grad` or
        `inference_mode` (yolov5's `@smart_inference_mode()` from utils/torch_utils.py returns
        `(torch.inference_mode if torch_1_9 else torch.no_grad)()(fn)`). One that may run it with
        grad on some calls only (`torch.no_grad() if flag else nullcontext()`) counts too: quiet
        where the analysis cannot tell."""
        found = self._no_grad_decorated.get(id(function))
        if found is None:  # _role and _no_grad_by_callers both ask, of every def
            found = self._no_grad_decorated[id(function)] = self._decorated_so(function)
        return found

    def _decorated_so(self, function: cst.FunctionDef) -> bool:
        if _decorated_no_grad(function, self.imports):
            return True
        for decorator in function.decorators:
            expr = decorator.decorator
            target = expr.func if isinstance(expr, cst.Call) else expr
            if not isinstance(target, cst.Name):
                continue
            name = target.value
            own = self.functions.get(name)
            if own is not None:
                if any(word in code(own) for word in _NO_GRAD_WORDS):
                    return True
            else:
                qualified = self._imported_as(name)
                if qualified is not None and self.project.def_text_holds(qualified, _NO_GRAD_WORDS):
                    return True
        return False

    @cached_property
    def _no_grad_by_callers(self) -> set[int]:
        """Methods whose every caller in the file runs with grad off: a helper only the class's
        `@torch.inference_mode()` methods call (megatron's forward_pass_* under run_one_forward_step,
        read as a GL104 loop before), or a model's `inference` only a `@torch.no_grad()` function of
        the file calls (PyG's layer-wise inference, read as a GL103 loop before), or calls inside
        `with torch.no_grad():` (PyG's distributed sampling example, whose test function is not
        decorated). Transitively. A method that nothing in the file calls by name is not one; a
        name called on any object counts as a caller (`called_names`), and so does the module's
        top level, which is off only inside such a `with`: both can only keep a method out."""
        off: set[int] = set()
        # The file's top-level defs and its classes' methods, by name: a def only `with
        # torch.no_grad():` code of the file calls (torchao's get_batched_output, a batched
        # inference helper) runs with grad off as such a method does.
        defs: dict[str, list[tuple[cst.FunctionDef, str | None]]] = {}  # with the class of a method
        for name, function in self.functions.items():
            defs.setdefault(name, []).append((function, None))
        for info in self._top_classes_by_name.values():
            grad_off = self.framework_methods(info, api.GRAD_OFF_METHODS)
            for name, method in info.methods.items():
                defs.setdefault(name, []).append((method, info.node.name.value))
                if name in grad_off:
                    off.add(id(method))
        # Each caller, and the class of the method it is when it calls the name only on its self:
        # that call reaches the name's def in its own class hierarchy only (speechbrain's greedy
        # searcher's forward_step, run by the base's @torch.no_grad() forward, is no beam
        # searcher's, whose forward runs with grad on).
        callers: dict[str, list[tuple[int, str | None]]] = {}
        # A call inside `with torch.no_grad():` is a caller with grad off, whatever the def it is in.
        off.add(_OFF_BLOCK)
        for function, owner, _ in self._all_functions:
            scan = self.prescan(function)
            if self.decorated_no_grad(function):
                off.add(id(function))
            for called, grad_on in self._calls_of(scan, defs.keys() - {function.name.value}):
                on_self = owner.node.name.value if owner is not None and called in scan.called_on_self else None
                callers.setdefault(called, []).append((id(function) if grad_on else _OFF_BLOCK, on_self))
        for called, grad_on in self._calls_of(self.prescan(self.module), defs.keys()):
            callers.setdefault(called, []).append((id(self.module) if grad_on else _OFF_BLOCK, None))
        related = self._related_classes()
        result: set[int] = set()
        changed = True
        while changed:
            changed = False
            for name, calling in callers.items():
                for method, owner in defs[name]:
                    reaching = [c for c, cls in calling if cls is None or owner is None or (cls, owner) in related]
                    if reaching and all(c in off for c in reaching) and id(method) not in off:
                        off.add(id(method))
                        result.add(id(method))
                        changed = True
        return result

    def _related_classes(self) -> set[tuple[str, str]]:
        """Pairs of this file's classes one instance may be both of (a class is itself, a base or a
        subclass of the other, or some class of the file inherits from both): a method's call on
        its self may reach the other's method of that name."""
        pairs: set[tuple[str, str]] = set()
        for info in self._classes:
            lineage = self.ancestors(info.node.name.value)
            pairs.update((a, b) for a in lineage for b in lineage)
        return pairs

    def _calls_of(self, scan: Prescan, names) -> Iterator[tuple[str, bool]]:
        """Each of `names` the scanned code calls, and whether some call of it may run with grad
        on as far as the code's own `with` blocks go (True), or every call is inside a `with`
        that turns grad off (False)."""
        for name in scan.called_names & names:
            yield name, name in scan.called_outside_with or any(
                not any(disables_grad(item.item, self.imports) for block in blocks for item in block.items)
                for blocks in scan.called_in_with.get(name, ()))

    def runs_in_forward(self, function: cst.FunctionDef) -> bool:
        """Whether a Module's method runs as part of its forward: forward itself, or a method of the
        class that forward calls on self (`self._attention(q, k)`), transitively."""
        return id(function) in self._forward_methods

    def called_by_its_class(self, function: cst.FunctionDef) -> bool:
        """Whether another method of the same module class calls this one on self (a private
        helper of `full_sort_predict`): on its own it is read without what its caller set up."""
        return id(function) in self._class_helpers

    @cached_property
    def _class_helpers(self) -> set[int]:
        found: set[int] = set()
        for module in self.module_classes:
            for name, method in module.methods.items():
                for called in self.prescan(method).called_names:
                    callee = self.method_of(module.name, called)
                    if callee is not None and called != name and called not in ("__init__", "forward"):
                        found.add(id(callee[0]))
        return found

    @cached_property
    def _forward_methods(self) -> set[int]:
        """The forwards of the file's modules and the module methods they call, transitively: on
        self, or by name on another module of the file (`self.student.FeatureInteraction(x)`)."""
        todo = [found[0] for m in self.module_classes if (found := self.method_of(m.name, "forward")) is not None]
        seen: set[int] = set()
        while todo:
            method = todo.pop()
            if id(method) in seen:
                continue
            seen.add(id(method))
            # Only a name some class of the file defines can be found (method_of looks in them):
            # the rest (`self.norm(x)`, `torch.relu`) would ask every module class in vain.
            for name in (self.prescan(method).called_names & self._method_names) - {"__init__", "forward"}:
                todo.extend(found[0] for m in self.module_classes
                            if (found := self.method_of(m.name, name)) is not None)
        return seen

    @cached_property
    def _method_names(self) -> frozenset[str]:
        """The name of every method of a top-level class of the file."""
        return frozenset(name for info in self._top_classes_by_name.values() for name in info.methods)

    @cached_property
    def _modules_by_name(self) -> dict[str, ModuleClass]:
        return {m.name: m for m in self.module_classes}

    @cached_property
    def _modules_by_node(self) -> dict[int, ModuleClass]:
        return {id(m.node): m for m in self.module_classes}

    @cached_property
    def walks(self) -> list[Walk]:
        """Every function (and the module's top level) walked as ordinary code."""
        autograd_methods = set()
        for function in self.function_classes:
            for method in (function.forward, function.backward, function.setup_context):
                if method is not None:
                    autograd_methods.add(id(method))
        result = [self._plain_walk(self.module, FunctionRole("module"))]
        parents = {id(f): parent for f, _, parent in self._all_functions}
        for function, owner, parent in self._all_functions:
            if id(function) in autograd_methods:
                continue
            role = self._role(function, owner)
            scan = self.prescan(function)
            if not scan.stores and not scan.applies and not self._calls_a_storing_def(function):
                continue  # nothing in it can keep a value past its statement, nor calls an apply
            closure: set[str] = set()
            while parent is not None:
                scan = self.prescan(parent)
                closure |= scan.assigned | scan.augmented | {p.name.value for p in all_params(parent)}
                parent = parents.get(id(parent))
            result.append(self._plain_walk(function, role, frozenset(closure)))
        # Helpers walked with a caller's graph-attached arguments (findings on one line report once).
        return result + self._call_walks

    def names_in(self, node: cst.CSTNode) -> frozenset[str]:
        """Every plain name under a node (read or bound), read once per node of this file."""
        found = self._names.get(id(node))
        if found is None:
            found = self._names[id(node)] = frozenset(n.value for n in _names_in(node))
        return found

    def loop_info(self, node: cst.For | cst.While, scan: Prescan):
        """flow's Loop for a loop statement, read once (a loop walked again, or in each walk of its
        function, asks again)."""
        found = self._loops.get(id(node))
        if found is None:
            found = self._loops[id(node)] = _loop_info(node, scan, self.names_in)
        return found

    def forward_numbers(self, class_name: str) -> frozenset[int]:
        """The places of the tuple a module class of this file returns from forward that hold a
        Python number on every return (`return out, attn_loss, out.size(0) / x.size(0)`): calling
        an instance gives a graph-attached output, but not there (PyG's pooling ratio, summed
        across steps as a number). Empty when unknown, or while the forward's own walk asks."""
        found = self._forward_numbers.get(class_name)
        if found is None:
            self._forward_numbers[class_name] = frozenset()  # a forward calling its own class: unknown
            method = self.method_of(class_name, "forward") if class_name in self.module_class_names else None
            places: set[int] | None = None
            for event in self.walk_of(method[0]).of(ReturnValue) if method is not None else ():
                value = event.value
                numbers = {i for i, e in enumerate(value.elements) if e.kind is Kind.SCALAR and not e.none} \
                    if value.kind is Kind.CONTAINER else set()
                places = numbers if places is None else places & numbers
            found = self._forward_numbers[class_name] = frozenset(places or ())
        return found

    def walk_of(self, function: cst.FunctionDef | None) -> Walk:
        """The plain walk of one def (None: the module's top level), without walking the rest of
        the file: a rule that asks about a few calls walks only the functions they are in."""
        key = id(function) if function is not None else id(self.module)
        found = self._single_walks.get(key)
        if found is None:
            if function is None:
                found = self._plain_walk(self.module, FunctionRole("module"))
            else:
                owner = next((o for f, o, _ in self._all_functions if f is function), None)
                found = self._plain_walk(function, self._role(function, owner))
            self._single_walks[key] = found
        return found

    @property
    def all_defs(self) -> list[cst.FunctionDef]:
        """Every def of the file, methods and nested defs too, in source order."""
        return [function for function, _, _ in self._all_functions]

    @cached_property
    def _storing_defs(self) -> set[str]:
        return {f.name.value for f, _, _ in self._all_functions if self.prescan(f).stores}

    def _calls_a_storing_def(self, function: cst.FunctionDef) -> bool:
        """A call of a def of this file that stores (walked with this function's values)."""
        return not self.prescan(function).called_names.isdisjoint(self._storing_defs)

    def _plain_walk(self, function: cst.FunctionDef | cst.Module, role: FunctionRole,
                    closure: frozenset[str] = frozenset()) -> Walk:
        walk = Walk(self, function, role)
        walk.closure_names = closure
        walker = Walker(walk, function)
        if isinstance(function, cst.FunctionDef):
            walker.bind_params({param.name.value: self._param_value(param, role, function)
                                for param in all_params(function)})
        walker.run()
        return walk

    def _param_value(self, param: cst.Param, role: FunctionRole, function: cst.FunctionDef) -> Val:
        """A plain function's parameter: a module when it is a module class's self, is annotated as
        a module (`encoder: nn.Module`, `model: Net`), is named like one, or has `.parameters()`
        (or another method only a module has) called on it; unknown otherwise."""
        name = param.name.value
        # Not in __init__: what it stores once is no per-step leak, and its self is half built.
        if name == role.self_name and role.kind in ("module_forward", "module_method") \
                and function.name.value != "__init__":
            return Val(Kind.MODULE, module_class=role.owner_class)
        if id(function) in self.forward_hooks:
            hook_params = [p.name.value for p in function.params.params]
            if role.self_name is not None:
                hook_params = hook_params[1:]
            if name in hook_params[2:3]:  # (module, input, output): whatever the module returns
                return Val(Kind.TENSOR, graph=True, assumed=True)
            if name in hook_params[1:2]:
                return Val(Kind.CONTAINER, item=Val(Kind.TENSOR, graph=True, assumed=True))
        annotated = self._annotated_class(param)
        if annotated is not None and annotated in self.module_class_names:
            return Val(Kind.MODULE, module_class=annotated)
        if annotated is not None and (annotated.rsplit(".", 1)[-1] == "Module" or api.is_nn_module_class(annotated)):
            return Val(Kind.MODULE)
        scan = self.prescan(function)
        if name in scan.frozen:
            return UNKNOWN  # `teacher.requires_grad_(False)`: calling it keeps no graph of its own
        if looks_like_module(name) or name in scan.module_uses:
            return Val(Kind.MODULE)
        return UNKNOWN

    def _annotated_class(self, param: cst.Param) -> str | None:
        """The class a parameter is annotated with, through Optional[...] and `| None`."""
        return self._class_annotated(param.annotation.annotation) if param.annotation is not None else None

    def _class_annotated(self, node: cst.BaseExpression) -> str | None:
        if isinstance(node, cst.Subscript) and dotted(node.value) in ("Optional", "typing.Optional") \
                and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            node = node.slice[0].slice.value
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitOr) \
                and isinstance(node.right, cst.Name) and node.right.value == "None":
            node = node.left
        if isinstance(node, cst.SimpleString):  # "Net": a forward reference
            return str(node.evaluated_value)
        if isinstance(node, (cst.Name, cst.Attribute)):
            return self.imports.qualify(node)
        return None


def leading_params(function: cst.FunctionDef) -> int:
    """How many leading parameters are not the method's own: `cls` of a @classmethod."""
    return 1 if any(dotted(d.decorator) == "classmethod" for d in function.decorators) else 0


def _is_static(function: cst.FunctionDef) -> bool:
    return any(dotted(d.decorator) in ("staticmethod",) for d in function.decorators)


def _self_param(method: cst.FunctionDef) -> str | None:
    """The name a method's first parameter gives its instance (`self`); None for a staticmethod
    or a def without one."""
    return method.params.params[0].name.value if method.params.params and not _is_static(method) else None


def _constructed(value: cst.BaseExpression) -> cst.BaseExpression:
    """`Net(...)` in `Net(...).to(device).train()`: what a module's own `.to()`, `.cuda()`, ...
    return is the module they are called on."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value in api.MODULE_RETURNING_METHODS and isinstance(value.func.value, cst.Call):
        value = value.func.value
    return value


_OFF_BLOCK = -1  # the id _no_grad_by_callers gives a call made inside `with torch.no_grad():`

# What a decorator of the project that turns grad off says in its text (FileModel.decorated_no_grad).
_NO_GRAD_WORDS = ("no_grad", "inference_mode")


def _decorated_no_grad(function: cst.FunctionDef, imports: ImportTable) -> bool:
    for decorator in function.decorators:
        expr = decorator.decorator
        target = expr.func if isinstance(expr, cst.Call) else expr
        if isinstance(target, (cst.Name, cst.Attribute)) and imports.qualify(target) in api.NO_GRAD_CONTEXTS:
            return True
    return False


def all_params(function: cst.FunctionDef) -> Iterator[cst.Param]:
    params = function.params
    yield from params.posonly_params
    yield from params.params
    yield from params.kwonly_params
    if isinstance(params.star_arg, cst.Param):
        yield params.star_arg
    if params.star_kwarg is not None:
        yield params.star_kwarg


def arguments_by_param(function: cst.FunctionDef, args: Iterable[cst.Arg]) -> dict[str, cst.Arg]:
    """A call's arguments by the parameter of `function` each binds: positional ones in order,
    keyword ones by name (a call with a star argument binds nothing it can tell)."""
    positional = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    args = list(args)
    found = dict(zip(positional, (arg for arg in args if arg.keyword is None)))
    found.update((arg.keyword.value, arg) for arg in args if arg.keyword is not None)
    return found


# The statement walks below recurse through module-level functions, never through a closure that
# calls itself: such a closure is a reference cycle, and it would keep the tree it walked alive
# until the cyclic collector ran (tests/test_reference_cycles.py checks that a lint leaves none).
def returns_in(function: cst.FunctionDef) -> Iterator[cst.Return]:
    """The function's own return statements that can run (nested functions excluded, and any
    statement after a return, raise, continue or break of its own block: dead code)."""
    return _returns_in(function.body.body)


def _returns_in(block) -> Iterator[cst.Return]:
    for statement in block:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Return):
                    yield small
                if isinstance(small, (cst.Return, cst.Raise, cst.Continue, cst.Break)):
                    return
        elif not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            for inner in blocks_of(statement):
                yield from _returns_in(inner)


def has_return(function: cst.FunctionDef) -> bool:
    """Whether the function has a `return` statement of its own anywhere (reachable or not)."""
    return any(isinstance(small, cst.Return) for small in _own_smalls(function.body.body))


def _own_smalls(block) -> Iterator[cst.BaseSmallStatement]:
    """The small statements of a block and the blocks in it, not those of nested defs and classes."""
    for statement in block:
        if isinstance(statement, cst.SimpleStatementLine):
            yield from statement.body
        elif not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            for inner in blocks_of(statement):
                yield from _own_smalls(inner)


def _calls_in_assignments(function: cst.FunctionDef) -> Iterator[cst.Call]:
    """`self.x = nn.Linear(...)`: the calls assigned to an attribute in the def's own statements."""
    for small in _own_smalls(function.body.body):
        if isinstance(small, (cst.Assign, cst.AnnAssign)) and isinstance(small.value, cst.Call):
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
            if any(isinstance(t, cst.Attribute) for t in targets):
                yield small.value


def _assignments(module: cst.Module) -> Iterator[cst.Assign]:
    """Every `a = b` statement in the file, at any depth."""
    return _all_assignments(module.body)


def _all_assignments(block) -> Iterator[cst.Assign]:
    for statement in block:
        if isinstance(statement, cst.SimpleStatementLine):
            yield from (s for s in statement.body if isinstance(s, cst.Assign))
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            yield from _all_assignments(statement.body.body)
        else:
            for inner in blocks_of(statement):
                yield from _all_assignments(inner)


def _calls_in(function: cst.FunctionDef) -> Iterator[cst.Call]:
    """The calls that are statements of their own (`helper(x)`) in the def's own statements."""
    for small in _own_smalls(function.body.body):
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            yield small.value


# A Dataset's transforms (`nn.Sequential(Resize(...), Normalize(...))`) run outside any training
# step, with no parameters: what they make is no graph.
_DATA_METHODS = frozenset({"__init__", "__getitem__", "__iter__", "__len__", "__next__"})


def _outlives_the_call(event) -> bool:
    """An event of a helper walked for one call that holds whatever the call passed: a store into
    an attribute, a global or a closure. Not one into a parameter or a local: the caller's list may
    be made anew every step, and the helper's own loops are not the caller's."""
    if isinstance(event, AttributeStore):
        return event.owner.kind is not Kind.CTX
    if isinstance(event, ContainerAdd):
        return event.scope in ("global", "closure", "attribute", "self-attribute")
    if isinstance(event, NameStore):
        return event.scope in ("global", "closure")
    return False


def _compiled_def(value: cst.BaseExpression, imports: ImportTable) -> str | None:
    """`torch.compile(train_step, ...)` or `torch.compile(model=train_step)`: train_step."""
    if not isinstance(value, cst.Call) or imports.qualify(value.func) != "torch.compile":
        return None
    positional = [a.value for a in value.args if a.keyword is None and not a.star]
    given = positional[0] if positional else next(
        (a.value for a in value.args if a.keyword is not None and a.keyword.value == "model"), None)
    return given.value if isinstance(given, cst.Name) else None


def _global_default(function: cst.FunctionDef, name: str | None) -> cst.Name | None:
    """The default of parameter `name` when it is a plain name (`buf=HISTORY`)."""
    for param in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params):
        if param.name.value == name and isinstance(param.default, cst.Name) and param.default.value != "None":
            return param.default
    return None


def _reads_within(value: Val) -> frozenset[str]:
    """The names a value was computed from, its members' included (`{"logits": logits}`)."""
    return value.reads.union(*(_reads_within(m) for m in value.members()))


def _last_name(expr: cst.BaseExpression) -> str:
    name = dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
    return name.rsplit(".", 1)[-1] if name else ""


def _is_generator(function: cst.FunctionDef) -> bool:
    stack = list(child_nodes(function.body))
    while stack:  # exact types: isinstance on libcst's classes goes through ABCMeta (flow._ev)
        node = stack.pop()
        kind = type(node)
        if kind is cst.Yield:
            return True
        if kind is not cst.FunctionDef and kind is not cst.ClassDef and kind is not cst.Lambda:
            stack.extend(child_nodes(node))
    return False


def _returns_none(node: cst.Return) -> bool:
    """`return` and `return None`: an early exit, not what the function is for."""
    return node.value is None or (isinstance(node.value, cst.Name) and node.value.value == "None")


def _shape(value: Val) -> tuple:
    """What of an argument can change a walk's result (not the binding, not what it read)."""
    return (value.kind, value.graph, value.param, value.int64, value.module_class,
            value.assumed, value.one_element, value.consumed,
            tuple(_shape(m) for m in value.elements), _shape(value.item) if value.item is not None else None)


def _as_argument(value: Val) -> Val:
    """An argument as the callee sees it: a fresh object, no reads of the caller's names."""
    return replace(value, binding=None, view_of=frozenset(), reads=frozenset(), is_input=False,
                   elements=tuple(_as_argument(e) for e in value.elements),
                   item=_as_argument(value.item) if value.item is not None else None)


def _returned(values: list[Val]) -> Val:
    """What a call gives: the values its returns give, merged; unknown when they differ in kind.
    What each one read stays (the caller maps it back to its arguments)."""
    if not values:
        return UNKNOWN
    result = values[0]
    for value in values[1:]:
        result = merge(result, value)
    reads = result.reads
    cleaned = _as_argument(result)
    return cleaned.with_(reads=reads)


def bindings_of(value: Val) -> set[int]:
    """The bindings of a value and of everything it holds (a returned tuple's outputs)."""
    found = {value.binding} if value.binding is not None else set()
    for element in value.members():
        found |= bindings_of(element)
    return found

