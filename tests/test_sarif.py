"""`--output-format sarif`: one SARIF 2.1.0 log, valid against the OASIS schema, that GitHub code
scanning can upload as it is."""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import pickle
import re
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from urllib.parse import unquote, unquote_to_bytes, urljoin, urlsplit

import jsonschema
import pytest

from gradlint.findings import Applicability, Edit, Finding, Fix, Severity
from gradlint.registry import all_rules
from gradlint.sarif import sarif

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
SARIF_SCHEMA_ID = "https://raw.githubusercontent.com/oasis-tcs/sarif-spec/master/Schemata/sarif-schema-2.1.0.json"

# RFC 3986 relative-path reference (path-noscheme): the first segment has no ':', so no reader
# can take it for a scheme; every other character is unreserved, a sub-delim, ':' '@' or %XX.
_SEGMENT_NC = r"(?:[A-Za-z0-9\-._~!$&'()*+,;=@]|%[0-9A-Fa-f]{2})+"
_SEGMENT = r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})*"
RELATIVE_PATH_REFERENCE = re.compile(rf"{_SEGMENT_NC}(?:/{_SEGMENT})*")


# ----- the official schema, from the schemastore package's response cache ------------------

class _StandIn:
    """Whatever class the pickle names: it records what it is given and runs nothing."""

    def __init__(self, *args, **kwargs):
        self.args, self.state = args, kwargs

    def __setstate__(self, state):
        self.state = state


class _DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return _StandIn


def _response_body(value) -> bytes | None:
    """requests-cache keeps a response's body as `_content`, in a plain dict (schemastore 0.2.3)
    or in the state of a response object (older requests-cache): look in both."""
    if isinstance(value, dict):
        if isinstance(value.get("_content"), bytes):
            return value["_content"]
        children = list(value.values())
    elif isinstance(value, _StandIn):
        children = [value.state, *value.args]
    elif isinstance(value, (list, tuple)):
        children = list(value)
    else:
        return None
    return next((body for body in map(_response_body, children) if body is not None), None)


def _official_sarif_schema() -> dict:
    # Found through its installed files: importing schemastore opens an HTTP session and fetches
    # the catalog, and this test runs offline.
    try:
        distribution = importlib.metadata.distribution("schemastore")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("the SARIF schema test reads the official schema from the `schemastore` package, "
                    "which is not installed: pip install -e '.[test]'", pytrace=False)
    store = Path(distribution.locate_file("schemastore/cache.sqlite"))
    if not store.is_file():
        pytest.fail(f"schemastore {distribution.version} has no {store}: the SARIF schema test "
                    "knows the layout of schemastore 0.2.3", pytrace=False)
    # immutable: no journal or lock file next to a site-packages file that may be read-only.
    with closing(sqlite3.connect(f"{store.as_uri()}?mode=ro&immutable=1", uri=True)) as db:
        rows = db.execute("SELECT value FROM responses WHERE instr(value, ?) > 0",
                          (SARIF_SCHEMA_ID.encode(),)).fetchall()
    for (value,) in rows:
        body = _response_body(_DataOnlyUnpickler(io.BytesIO(value)).load())
        if body is None:
            continue
        schema = json.loads(body.decode("utf-8-sig"))
        if schema.get("$id") == SARIF_SCHEMA_ID:
            return schema
    pytest.fail(f"no schema with $id {SARIF_SCHEMA_ID} in {store} (schemastore "
                f"{distribution.version}): the SARIF schema test knows the layout of schemastore 0.2.3",
                pytrace=False)


@pytest.fixture(scope="module")
def validator():
    schema = _official_sarif_schema()
    assert schema["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    cls = jsonschema.validators.validator_for(schema, default=None)
    assert cls is not None, f"jsonschema knows no validator for $schema {schema.get('$schema')!r}"
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def assert_valid(validator, log: dict) -> None:
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:10])


# ----- running gradlint as a user does ------------------------------------------------------

def gradlint(*args: str, cwd: Path) -> str:
    completed = subprocess.run([sys.executable, "-m", "gradlint", "check", *args],
                               cwd=cwd, capture_output=True, text=True, encoding="utf-8")
    assert completed.stderr == ""
    assert completed.returncode in (0, 1), completed.stdout
    return completed.stdout


def gradlint_sarif(*paths: str, cwd: Path) -> dict:
    return json.loads(gradlint("--output-format", "sarif", "--exit-zero", *paths, cwd=cwd))


def results_by_rule(log: dict) -> list[tuple[dict, dict]]:
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    return [(result, rules[result["ruleIndex"]]) for result in run["results"]]


def where(result: dict) -> tuple[str, dict]:
    location = result["locations"][0]["physicalLocation"]
    return unquote(location["artifactLocation"]["uri"]), location["region"]


# ----- the tests ----------------------------------------------------------------------------

def test_examples_give_a_valid_log_with_every_rule_described(validator):
    log = gradlint_sarif("examples/", cwd=REPO)
    assert_valid(validator, log)
    assert log["version"] == "2.1.0" and log["$schema"] == "https://json.schemastore.org/sarif-2.1.0.json"
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "gradlint" and driver["version"]
    assert [r["id"] for r in driver["rules"]] == ["GL000", "GL001", "GL002"] + [r.code for r in all_rules()]
    for descriptor in driver["rules"]:
        # What code scanning shows on an alert's page: each must be there and not empty.
        for field in ("shortDescription", "fullDescription", "help"):
            assert descriptor[field]["text"].strip(), (descriptor["id"], field)
        assert descriptor["help"]["markdown"].strip()
        # The rule's page in docs/rules, which exists in the checkout (test_rule_docs keeps it current).
        assert descriptor["helpUri"].endswith(f"/docs/rules/{descriptor['id']}.md")
        assert (REPO / "docs" / "rules" / f"{descriptor['id']}.md").is_file()
    gl101 = next(d for d in driver["rules"] if d["id"] == "GL101")
    assert "## Why is this bad?" in gl101["help"]["markdown"]
    assert gl101["defaultConfiguration"] == {"level": "error"}
    assert next(d for d in driver["rules"] if d["id"] == "GL105")["defaultConfiguration"]["level"] == "warning"
    assert "pytorch" in gl101["properties"]["tags"]
    assert run["columnKind"] == "unicodeCodePoints"
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == REPO.as_uri() + "/"
    levels = {r["ruleId"]: r["level"] for r in run["results"]}
    assert levels["GL101"] == "error" and levels["GL301"] == "note"


def test_a_code_no_rule_describes_still_gets_a_descriptor_its_result_resolves_to(validator):
    # An engine code added without a doc entry must not give a log with a dangling ruleIndex.
    finding = Finding("op.py", 3, 5, "GL999", "something the engine reports", name="engine-check",
                      end_line=3, end_column=9)
    log = json.loads(sarif([finding]))
    assert_valid(validator, log)
    ((result, descriptor),) = results_by_rule(log)
    assert descriptor == {"id": "GL999", "name": "engine-check",
                          "helpUri": "https://github.com/gradlint/gradlint/blob/main/docs/rules/GL999.md"}


def test_every_result_names_a_rule_of_the_driver(validator):
    log = gradlint_sarif("examples/", cwd=REPO)
    pairs = results_by_rule(log)
    assert len(pairs) >= 7
    for result, descriptor in pairs:
        assert descriptor["id"] == result["ruleId"]
        assert result["message"]["text"]
        assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"] == "%SRCROOT%"


def test_regions_are_the_positions_the_text_and_json_outputs_report():
    text_lines = gradlint("--exit-zero", "--quiet", "examples/", cwd=REPO).splitlines()
    ends = json.loads(gradlint("--output-format", "json", "--exit-zero", "examples/", cwd=REPO))
    results = gradlint_sarif("examples/", cwd=REPO)["runs"][0]["results"]
    assert len(results) == len(text_lines) == len(ends)
    for result, line, record in zip(results, text_lines, ends):
        path, region = where(result)
        assert line.startswith(f"{path}:{region['startLine']}:{region['startColumn']}: {result['ruleId']} ")
        assert (region["endLine"], region["endColumn"]) == (record["end_location"]["row"],
                                                            record["end_location"]["column"])


def test_a_syntax_error_is_a_gl000_result_at_its_position(project, validator):
    (project / "broken.py").write_text("import torch\n\nclass F(torch.autograd.Function):\n    def forward(ctx, x:\n")
    log = gradlint_sarif("broken.py", cwd=project)
    assert_valid(validator, log)
    ((result, descriptor),) = results_by_rule(log)
    assert result["ruleId"] == descriptor["id"] == "GL000"
    assert descriptor["name"] == "syntax-error"
    assert result["level"] == "error"
    assert "'(' was never closed" in result["message"]["text"]
    assert where(result) == ("broken.py", {"startLine": 4, "startColumn": 16, "endLine": 4, "endColumn": 16})


def test_a_clean_file_gives_a_valid_log_with_no_results(clean_file, validator):
    log = gradlint_sarif("clean_op.py", cwd=clean_file.parent)
    assert_valid(validator, log)
    run = log["runs"][0]
    assert run["results"] == []
    assert len(run["tool"]["driver"]["rules"]) == len(all_rules()) + 3


def test_paths_with_spaces_and_non_ascii_are_uri_references_that_resolve_to_the_file(project, validator):
    folder = project / "my ops" / "ünïcode"
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "leaky_op.py", folder / "scatter sum #1.py")
    log = gradlint_sarif(".", cwd=project)
    assert_valid(validator, log)
    run = log["runs"][0]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert uris == {"my%20ops/%C3%BCn%C3%AFcode/scatter%20sum%20%231.py"}
    (uri,) = uris
    assert RELATIVE_PATH_REFERENCE.fullmatch(uri) and urlsplit(uri).scheme == ""
    base = run["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert urljoin(base, uri) == (project.resolve() / "my ops" / "ünïcode" / "scatter sum #1.py").as_uri()


def test_a_colon_in_the_first_segment_is_not_read_as_a_uri_scheme():
    log = json.loads(sarif([Finding(path="c:leaky.py", line=1, column=1, code="GL101", message="m")]))
    uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "c%3Aleaky.py" and RELATIVE_PATH_REFERENCE.fullmatch(uri)


def test_an_absolute_path_under_the_current_directory_is_made_relative(project):
    inside = Finding(path=str(project / "pkg" / "op.py"), line=1, column=1, code="GL101", message="m")
    outside = Finding(path=str(project.parent / "other op.py"), line=1, column=1, code="GL101", message="m")
    results = json.loads(sarif([inside, outside]))["runs"][0]["results"]
    locations = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in results]
    assert locations[0] == {"uri": "pkg/op.py", "uriBaseId": "%SRCROOT%"}
    assert locations[1] == {"uri": (project.parent / "other op.py").as_uri()}


def test_a_fix_becomes_a_sarif_fix_with_its_replacements(validator):
    edits = (
        Edit(start=120, end=137, content="ctx.save_for_backward(out)", line=8, column=9, end_line=8, end_column=26),
        Edit(start=200, end=200, content="    out, = ctx.saved_tensors\n", line=12, column=1, end_line=12, end_column=1),
    )
    finding = Finding(path="ops/leaky op.py", line=8, column=9, code="GL101", name="ctx-tensor-attribute",
                      message="ctx.out holds its own output", severity=Severity.ERROR, end_line=8, end_column=16,
                      fix=Fix("Save the output with ctx.save_for_backward", Applicability.UNSAFE, edits))
    log = json.loads(sarif([finding]))
    assert_valid(validator, log)
    (fix,) = log["runs"][0]["results"][0]["fixes"]
    assert fix["description"] == {"text": "Save the output with ctx.save_for_backward"}
    assert fix["properties"] == {"applicability": "unsafe"}
    (change,) = fix["artifactChanges"]
    assert change["artifactLocation"] == {"uri": "ops/leaky%20op.py", "uriBaseId": "%SRCROOT%"}
    assert change["replacements"] == [
        {"deletedRegion": {"startLine": 8, "startColumn": 9, "endLine": 8, "endColumn": 26},
         "insertedContent": {"text": "ctx.save_for_backward(out)"}},
        {"deletedRegion": {"startLine": 12, "startColumn": 1, "endLine": 12, "endColumn": 1},
         "insertedContent": {"text": "    out, = ctx.saved_tensors\n"}},
    ]
    without_fix = json.loads(sarif([Finding(path="a.py", line=1, column=1, code="GL101", message="m")]))
    assert "fixes" not in without_fix["runs"][0]["results"][0]


def test_a_rule_off_by_default_is_described_as_disabled(monkeypatch):
    rule = next(r for r in all_rules() if r.code == "GL301")
    monkeypatch.setattr(rule, "default_enabled", False)
    rules = json.loads(sarif([]))["runs"][0]["tool"]["driver"]["rules"]
    configuration = {d["id"]: d["defaultConfiguration"] for d in rules}
    assert configuration["GL301"] == {"level": "note", "enabled": False}
    assert "enabled" not in configuration["GL101"]


def test_the_same_run_gives_the_same_bytes():
    first = gradlint("--output-format", "sarif", "--exit-zero", "examples/", cwd=REPO)
    second = gradlint("--output-format", "sarif", "--exit-zero", "--jobs", "1", "examples/", cwd=REPO)
    assert first == second


def test_a_file_name_that_is_not_utf8_is_a_percent_encoded_uri_of_its_bytes(project, validator):
    # The name's raw bytes (os.fsencode), percent-encoded: a URI no encoder rejects, that resolves
    # to the file; the run used to end in UnicodeEncodeError with nothing on stdout.
    raw = os.fsencode(project) + b"/ops \xff\xfe/bad\xff.py"
    try:
        os.makedirs(os.path.dirname(raw))
        with open(raw, "wb") as handle:
            handle.write((FIXTURES / "leaky_op.py").read_bytes())
    except (OSError, UnicodeError):
        pytest.skip("this file system does not take a file name that is not UTF-8")
    log = gradlint_sarif(".", cwd=project)
    assert_valid(validator, log)
    run = log["runs"][0]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert uris == {"ops%20%FF%FE/bad%FF.py"}
    (uri,) = uris
    assert RELATIVE_PATH_REFERENCE.fullmatch(uri)
    resolved = urljoin(run["originalUriBaseIds"]["%SRCROOT%"]["uri"], uri)
    assert unquote_to_bytes(urlsplit(resolved).path) == os.fsencode(project.resolve()) + b"/ops \xff\xfe/bad\xff.py"


def test_control_characters_and_lone_surrogates_in_a_message_stay_valid_json(project, validator):
    (project / "op.py").write_text(
        "import torch\n\n\nclass F(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        out = x * 2\n        setattr(ctx, 'a\\x1b[2J\\n\\udcff', out)\n        return out\n", encoding="utf-8")
    out = gradlint("--output-format", "sarif", "--exit-zero", "op.py", cwd=project)
    assert out.isascii() and all(c >= " " or c == "\n" for c in out)  # json.dumps escaped the controls
    log = json.loads(out)
    assert_valid(validator, log)
    (message,) = {r["message"]["text"] for r in log["runs"][0]["results"] if r["ruleId"] == "GL101"}
    assert message.startswith("ctx.a\x1b[2J\n\\xff ")  # the surrogate as a visible escape, valid UTF-8
    message.encode("utf-8")
