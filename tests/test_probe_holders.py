"""Tensors kept on plain Python objects (a logger, a slotted record): the probe names their holder
as `Class.attribute`, once, and the cross-check joins it to the static finding on `variable.attribute`."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gradlint.runtime_probe import Verdict, probe
from gradlint.runtime_probe.crosscheck import (
    CONFIRMED,
    RUNTIME_ONLY,
    STATIC_ONLY,
    cross_check,
    static_findings,
)
from gradlint.runtime_probe.target import load_target

STEPS = Path(__file__).parent / "probe_targets" / "plain_holders.py"


def step(name: str):
    return load_target(f"{STEPS}:{name}").step


def line_of(text: str) -> int:
    return next(n for n, line in enumerate(STEPS.read_text().splitlines(), 1) if text in line)


def shown(path: Path) -> str:
    """The path as the cross-check table prints it."""
    from gradlint.runtime_probe.attribute import display_path

    return display_path(str(path))


def test_losses_appended_to_a_logger_list_are_one_holder_named_logger_history():
    report = probe(step("log_history"), steps=40)
    assert report.verdict is Verdict.RETAINED
    # One holder carries both the bytes and the graph: no "(unnamed)" row beside it.
    (holder,) = report.holders
    assert holder.subject == "Logger.history" and holder.kind == "attribute"
    assert holder.bytes_per_step == pytest.approx(4.0) and holder.graph_nodes_per_step > 0
    assert Path(holder.file).samefile(STEPS) and holder.line == line_of("class Logger")
    assert holder.aliases == ["log.history"]


def test_a_loss_accumulated_on_a_logger_attribute_is_named_logger_total():
    report = probe(step("log_total"), steps=40)
    assert report.verdict is Verdict.RETAINED and report.graph_nodes_per_step > 0
    (holder,) = report.holders
    assert holder.subject == "Logger.total" and holder.aliases == ["log.total"]


def test_a_list_in_an_inherited_slot_is_named_by_the_instance_class():
    report = probe(step("slotted_record"), steps=40)
    assert report.verdict is Verdict.RETAINED
    (holder,) = report.holders
    assert holder.subject == "Slotted.kept" and holder.bytes_per_step == pytest.approx(4.0)
    assert holder.aliases == ["record.kept"]


def test_a_logger_that_keeps_only_floats_is_clean():
    report = probe(step("clean_step"), steps=40)
    assert report.verdict is Verdict.CLEAN, report.reason
    assert not report.holders


@pytest.mark.parametrize("name, subject, code, statement", [
    ("log_history", "Logger.history", "GL103", "log.history.append(loss)"),
    ("log_total", "Logger.total", "GL104", "log.total = log.total + loss"),
])
def test_a_logger_leak_is_confirmed_by_its_static_finding_and_not_listed_twice(name, subject, code, statement):
    report = probe(step(name), steps=40)
    rows = cross_check(report, static_findings([str(STEPS)]))
    (confirmed,) = [r for r in rows if r.agreement == CONFIRMED]
    assert confirmed.holder == subject
    assert confirmed.static == f"{code} at {shown(STEPS)}:{line_of(statement)}"
    static_name = statement.split(".append")[0].split(" =")[0]
    assert not [r for r in rows if r.holder == static_name and r.agreement == STATIC_ONLY]
    assert not [r for r in rows if r.agreement == RUNTIME_ONLY]


def test_a_loss_stored_through_a_helper_is_a_runtime_only_gap_in_the_rules():
    report = probe(step("remember_loss"), steps=40)
    assert report.verdict is Verdict.RETAINED
    rows = cross_check(report, static_findings([str(STEPS)]))
    (row,) = [r for r in rows if r.holder == "metrics"]
    assert row.agreement == RUNTIME_ONLY and row.static == "-"
    assert "gap" in row.note

