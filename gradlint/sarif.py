"""SARIF 2.1.0: the log GitHub code scanning (and other SARIF viewers) read.

One run; the driver lists every rule gradlint has, selected or not, plus the engine's GL000 and
GL001, so each result's ruleId resolves and a viewer can show a rule's doc beside its alert."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence
from urllib.parse import quote

from gradlint import __version__
from gradlint.escaping import valid_strings
from gradlint.findings import Edit, Finding, Severity
from gradlint.registry import all_rules
from gradlint.ruledocs import ENGINE_CODES, REPOSITORY_URL, rule_url

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = REPOSITORY_URL
SRCROOT = "%SRCROOT%"

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.NOTE: "note"}

# Code scanning filters alerts by tag. The code's first digit is the family: GL1 memory held
# across training steps, GL2 the autograd.Function contract, GL3 memory footprint.
_FAMILY_TAG = {"GL1": "memory", "GL2": "correctness", "GL3": "memory"}


def _section(doc: str, heading: str) -> str:
    """The body under `## heading`: what code scanning shows atop an alert is the rule's
    "What it does", while `help` carries the whole doc."""
    lines = doc.strip().splitlines()
    try:
        start = lines.index(f"## {heading}") + 1
    except ValueError:
        return doc.strip()
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(lines[start:end]).strip()


def _descriptor(code: str, name: str, summary: str, doc: str, severity: Severity,
                enabled: bool, tags: list[str]) -> dict:
    what = _section(doc, "What it does")
    configuration: dict = {"level": _LEVEL[severity]}
    if not enabled:
        configuration["enabled"] = False
    descriptor = {
        "id": code,
        "name": name,
        "shortDescription": {"text": summary},
        "fullDescription": {"text": what, "markdown": what},
        "help": {"text": doc.strip(), "markdown": doc.strip()},
        "helpUri": rule_url(code),
        "defaultConfiguration": configuration,
    }
    if tags:
        descriptor["properties"] = {"tags": tags}
    return descriptor


def _descriptors() -> list[dict]:
    # The engine's own codes (GL000, GL001) are not Rule classes; ruledocs documents them.
    descriptors = [_descriptor(c.code, c.name, c.summary, c.doc, Severity.ERROR, True, [])
                   for c in ENGINE_CODES]
    for rule in all_rules():
        family = _FAMILY_TAG.get(rule.code[:3])
        descriptors.append(_descriptor(rule.code, rule.name, rule.summary, rule.doc, rule.severity,
                                       rule.default_enabled,
                                       ["pytorch", "autograd"] + ([family] if family else [])))
    return sorted(descriptors, key=lambda d: d["id"])


def _artifact_location(path: str) -> dict:
    """A relative path stays relative to %SRCROOT% (code scanning matches alerts across runs by
    path, and the runner's checkout directory differs from run to run); an absolute path under
    the current directory is made relative for the same reason, and any other absolute path
    becomes a file:// URI. A URI is percent-encoded bytes: those of the name as the file system has
    it (os.fsencode), so a name that is not UTF-8 (`bad\\xff.py`, decoded with surrogateescape)
    becomes `bad%FF.py` rather than a string no encoder accepts."""
    given = Path(path)
    if given.is_absolute():
        try:
            given = given.relative_to(Path.cwd())
        except ValueError:
            return {"uri": given.as_uri()}  # as_uri() quotes os.fsencode(path) too
    # quote() also escapes ':', so a first segment like "a:b.py" cannot read as a URI scheme.
    return {"uri": quote(os.fsencode(given.as_posix()), safe="/"), "uriBaseId": SRCROOT}


def _directory_uri(directory: Path) -> str:
    # A base URI must end in '/': resolving "pkg/op.py" against "file:///repo" drops "repo".
    uri = directory.as_uri()
    return uri if uri.endswith("/") else uri + "/"


def _region(line: int, column: int, end_line: int, end_column: int) -> dict:
    return {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}


def _replacement(edit: Edit) -> dict:
    return {"deletedRegion": _region(edit.line, edit.column, edit.end_line, edit.end_column),
            "insertedContent": {"text": edit.content}}


def _result(finding: Finding, rule_index: dict[str, int]) -> dict:
    location = _artifact_location(finding.path)
    result = {
        "ruleId": finding.code,
        "ruleIndex": rule_index[finding.code],
        "level": _LEVEL[finding.severity],
        "message": {"text": finding.message},
        "locations": [{"physicalLocation": {
            "artifactLocation": location,
            "region": _region(finding.line, finding.column, finding.end_line or finding.line,
                              finding.end_column or finding.column),
        }}],
    }
    if finding.fix is not None:
        result["fixes"] = [{
            "description": {"text": finding.fix.message},
            "artifactChanges": [{"artifactLocation": location,
                                 "replacements": [_replacement(e) for e in finding.fix.edits]}],
            # SARIF has no notion of fix safety; ruff's word for it, so a consumer can skip unsafe fixes.
            "properties": {"applicability": finding.fix.applicability.value},
        }]
    return result


def sarif(findings: Sequence[Finding]) -> str:
    """json.dumps escapes control characters; surrogates in a message (a string literal's
    `"\\udcff"`) become backslash escapes, so the log is valid Unicode for every parser."""

    rules = _descriptors()
    known = {d["id"] for d in rules}
    # A code reported by neither a rule nor ENGINE_CODES still gets a descriptor, so its
    # ruleIndex resolves: a log with a dangling index is rejected by code scanning.
    for code, name in sorted({(f.code, f.name) for f in findings if f.code not in known}):
        rules.append({"id": code, "name": name or code, "helpUri": rule_url(code)})
        known.add(code)
    rule_index = {d["id"]: i for i, d in enumerate(rules)}
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "gradlint",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": rules,
            }},
            "originalUriBaseIds": {SRCROOT: {"uri": _directory_uri(Path.cwd())}},
            # libcst and CPython's SyntaxError both count columns in code points, not UTF-16 units.
            "columnKind": "unicodeCodePoints",
            "results": valid_strings([_result(f, rule_index) for f in findings]),
        }],
    }
    return json.dumps(log, indent=2) + "\n"
