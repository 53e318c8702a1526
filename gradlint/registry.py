"""Find the rules: every `Rule` subclass in a module of the `gradlint.rules` package."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from gradlint.rule import Rule


@lru_cache(maxsize=1)
def all_rules() -> tuple[Rule, ...]:
    import gradlint.rules as package

    found: dict[str, Rule] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule \
                    and value.__module__ == module.__name__:
                rule = value()
                if rule.code in found:
                    raise RuntimeError(f"rule code {rule.code} is defined twice")
                found[rule.code] = rule
    return tuple(sorted(found.values(), key=lambda r: r.code))


def rule_by_code(code: str) -> Rule | None:
    return next((r for r in all_rules() if r.code == code.upper()), None)
