"""Holders named as the user knows them (probe_targets/user_terms.py): the list that keeps model
output objects, not the objects' fields; a custom op by the op and the user's `ctx.y =` line, joined
to GL101; the list that keeps exceptions, with the finished frame's variables they pin; a buffer
registered under a new name every step as one holder with a count."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gradlint.runtime_probe import Verdict, probe
from gradlint.runtime_probe.crosscheck import CONFIRMED, cross_check, static_findings
from gradlint.runtime_probe.target import load_target

CASES = Path(__file__).parent / "probe_targets" / "user_terms.py"


def step(name: str):
    return load_target(f"{CASES}:{name}").step


def line_of(text: str) -> int:
    return next(n for n, line in enumerate(CASES.read_text().splitlines(), 1) if text in line)


def test_output_objects_appended_to_a_list_are_held_by_the_list_not_by_their_fields():
    report = probe(step("keep_output_objects"), steps=30, device="cpu")
    assert report.verdict is Verdict.RETAINED
    (holder,) = report.holders
    assert holder.subject == "Trainer.epoch_outputs" and holder.aliases == ["trainer.epoch_outputs"]
    assert "StepOutput objects (their " in holder.detail and ".logits" in holder.detail
    assert holder.graph_nodes_per_step > 0


def test_hugging_face_model_outputs_kept_in_a_list_are_held_by_the_list():
    report = probe(step("keep_hf_outputs"), steps=30, device="cpu")
    (holder,) = report.holders
    assert holder.subject == "hf_outputs" and holder.kind == "global"
    assert holder.line == line_of("hf_outputs = []")


def test_tensors_an_installed_library_made_are_created_at_the_users_line_that_called_it():
    report = probe(step("keep_library_made"), steps=30, device="cpu")
    (holder,) = report.holders
    assert holder.subject == "library_made"
    # GELU's tanh-form ops run in transformers/activations.py, a file the user cannot change
    assert holder.created_at and all(site.split(" (")[0].endswith(f"{CASES.name}:{line_of('kept = gelu(')}")
                                     for site in holder.created_at), holder.created_at


def test_a_custom_op_keeping_its_output_on_ctx_is_named_by_the_op_at_the_users_line_and_joins_gl101():
    report = probe(step("custom_op_output_on_ctx"), steps=30, device="cpu")
    assert report.verdict is Verdict.DELAYED_FREE, report.reason
    (holder,) = report.holders
    assert holder.subject == "scaled_sigmoid.ctx.y"
    assert Path(holder.file).samefile(CASES) and holder.line == line_of("ctx.y = output")
    assert "torch/_library" not in holder.detail and "gltest::scaled_sigmoid" in holder.detail
    # The batch the layer saved in the kept output's graph is freed with it: the same holder.
    assert any("randn" in site and "saved in the graph" in site for site in holder.created_at)
    rows = cross_check(report, static_findings([str(CASES)]))
    (row,) = [r for r in rows if r.holder == "scaled_sigmoid.ctx.y"]
    assert row.agreement == CONFIRMED and row.static.endswith(f":{line_of('ctx.y = output')}")
    assert len([r for r in rows if "scaled_sigmoid" in r.holder]) == 1


def test_exceptions_kept_across_steps_are_held_by_their_list_with_the_frame_variables_they_pin():
    report = probe(step("keep_exceptions"), steps=30, device="cpu")
    assert report.verdict is Verdict.RETAINED
    (holder,) = report.holders
    assert holder.subject == "failures" and holder.line == line_of("failures = []")
    assert "a frame still running" not in holder.detail
    assert ("exceptions whose tracebacks pin the finished frame of forward_that_fails() at "
            in holder.detail)
    assert holder.detail.endswith("(batch, hidden, scores)")


def test_a_buffer_registered_under_a_new_name_each_step_is_one_holder_with_a_count():
    report = probe(step("register_a_buffer_each_step"), steps=30, device="cpu")
    assert report.verdict is Verdict.RETAINED
    (holder,) = report.holders
    assert holder.subject == "Memory.slot*" and holder.aliases == ["memory.slot*"]
    assert holder.count == 30 and holder.detail.startswith("30 attributes of one kind, slot0 to slot29: ")
    assert holder.bytes_per_step == pytest.approx(4 * 32 * 4)
