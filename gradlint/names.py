"""Resolve what a name refers to through the file's imports.

A light alias table, not libcst's scope metadata: QualifiedNameProvider costs about 9x the
parse (measured), and the questions our rules ask ("is this base class torch.autograd.Function?",
"is this call torch.no_grad?") only need imports resolved.
"""

from __future__ import annotations

import libcst as cst


_EMPTY_MODULE = cst.Module(body=[])


def code(node: cst.CSTNode) -> str:
    """A node's source text, as libcst prints it."""
    return _EMPTY_MODULE.code_for_node(node)


def dotted(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while type(node) is cst.Attribute:  # exact types: isinstance on libcst's classes goes through ABCMeta
        parts.append(node.attr.value)
        node = node.value
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def _module_name(node: cst.BaseExpression | None) -> str:
    return dotted(node) or "" if node is not None else ""


class ImportTable:
    """Maps each locally bound import name to the dotted name it stands for."""

    def __init__(self, package: str | None = None) -> None:
        self.aliases: dict[str, str] = {}
        # The package this file's relative imports start from (None: not known, so they stay
        # unresolved), and the modules it star-imports, resolved.
        self.package = package
        self.stars: list[str] = []

    def add(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = _module_name(alias.name)
                if alias.asname is not None:
                    local = dotted(alias.asname.name)  # type: ignore[arg-type]
                    if local:
                        self.aliases[local] = full
                else:
                    # `import torch.nn` binds `torch`, which already resolves to itself.
                    head = full.split(".")[0]
                    self.aliases.setdefault(head, head)
            return
        base = _module_name(node.module)
        if node.relative:
            base = self._absolute(len(node.relative), base)
            if base is None:
                return
        if isinstance(node.names, cst.ImportStar):
            if base:
                self.stars.append(base)
            return
        for alias in node.names:
            name = _module_name(alias.name)
            local = dotted(alias.asname.name) if alias.asname else name  # type: ignore[arg-type]
            if local:
                self.aliases[local] = f"{base}.{name}" if base else name

    def _absolute(self, dots: int, module: str) -> str | None:
        """`from ..layers import MLP` in `pkg.models.net`: `pkg.layers`."""
        if not self.package:  # not in a package: Python refuses relative imports there too
            return None
        parts = self.package.split(".")
        if dots > len(parts):
            return None  # above the top package: Python raises ImportError too
        base = ".".join(parts[:len(parts) - (dots - 1)])
        return f"{base}.{module}" if module else base

    def qualify(self, node: cst.BaseExpression) -> str | None:
        """The dotted name `node` stands for once imports are applied (`th.nn.Module` ->
        `torch.nn.Module`). Names that are not imports come back unchanged."""
        name = dotted(node)
        return None if name is None else self.qualify_dotted(name)

    def qualify_dotted(self, name: str) -> str:
        """`qualify` for a dotted name kept as text (the callee of a module-level `m = utils.Meter()`)."""
        head, _, rest = name.partition(".")
        full = self.aliases.get(head, head)
        return f"{full}.{rest}" if rest else full
