"""The real-world corpus: pinned PyPI wheels, hand labels, and gradlint's precision and recall on them.

The repository holds facts only (``packages.toml``: name, version, wheel, sha256; ``labels.csv``:
one row per labelled statement). The third-party source is downloaded with ``pip download
--no-deps`` into a cache, checked against its hash, and read from there.

    python tests/realworld/corpus.py fetch            # download and check every wheel
    python tests/realworld/corpus.py show PKG PATH    # print a file with line numbers (for labelling)
    python tests/realworld/corpus.py stamp FILE.csv   # fill in version, sha256, line and line_sha1
    python tests/realworld/corpus.py check            # every label still points at its line
    python tests/realworld/corpus.py score            # precision and recall per family
    python tests/realworld/corpus.py agree A.csv B.csv  # agreement of two labellers

The cache is ``$GRADLINT_REALWORLD_CACHE`` or ``~/.cache/gradlint-realworld``.
"""
from __future__ import annotations

import argparse
import ast
import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import warnings
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
# packages.toml: the current releases; history.toml: older releases, the "before" of real bug
# fixes; any other *.toml here: more packages, one file per labeller that added them.
PACKAGE_FILES = tuple(sorted(p for p in HERE.glob("*.toml") if p.name != "gradcheck.toml"))
# One CSV per group of packages (each written by one labeller); the corpus is all of them.
LABELS_DIR = HERE / "labels"

COLUMNS = ("package", "version", "path", "file_sha256", "line", "line_sha1", "rule", "label",
           "clarity", "scope", "detail", "labeller", "note")
LABELS = ("pos", "neg")
CLARITIES = ("clear", "borderline")
# file: the file alone decides the label; project: it takes another file of the same package.
SCOPES = ("file", "project")
RULE_CODE = re.compile(r"^GL[1-3]\d\d$")

# What a user reads as one kind of mistake. A finding matches a label of its family on the
# same statement (GL103 and GL104 both mean "kept across steps": a user fixes them alike).
FAMILIES = {
    "GL101": "GL101 tensor on ctx",
    "GL107": "GL107 output view saved",
    "GL102": "GL102 graph on module/global",
    "GL103": "GL103/GL104 kept across steps",
    "GL104": "GL103/GL104 kept across steps",
    "GL105": "GL105 retain_graph in step",
    "GL106": "GL106 empty_cache in step",
    "GL201": "GL201 backward count",
    "GL301": "GL301 int64 index saved",
    "GL302": "GL302 nondeterministic accumulate",
    "GL303": "GL303 needs_input_grad",
    "GL304": "GL304 .data in Function",
}


# Where a graph is kept past the step can be read two ways (`self.cache[k] = out` is a module
# attribute and a container): a finding matches a label of any family in its group.
MATCH_GROUPS = ({"GL102", "GL103", "GL104"},)


def match_group(code: str) -> str:
    for group in MATCH_GROUPS:
        if code in group:
            return "+".join(sorted(group))
    return family(code)


def family(code: str) -> str:
    if code in FAMILIES:
        return FAMILIES[code]
    if code.startswith("GL2"):
        return "GL2xx Function API"
    return code


class CorpusError(Exception):
    """Something in the corpus or its download is wrong; the message says what."""


class Unavailable(CorpusError):
    """A wheel cannot be downloaded here (no network, the index is down): a skip, not a pass."""


# --------------------------------------------------------------------------------------------
# Packages and the download cache


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    dist: str
    sha256: str

    def pip_args(self) -> list[str]:
        """`pip download` arguments that fetch exactly ``self.dist`` whatever the local Python is."""
        args = ["--no-deps", "--only-binary=:all:"]
        stem = self.dist[: -len(".whl")]
        py, abi, plat = stem.split("-")[-3:]
        if plat != "any":
            args += ["--implementation", "cp", "--python-version", "3.11", "--abi", abi.split(".")[0]]
            for tag in plat.split("."):
                args += ["--platform", tag]
        return args + [f"{self.name}=={self.version}"]


def load_packages(paths: tuple[Path, ...] = PACKAGE_FILES) -> dict[tuple[str, str], Package]:
    """Every pinned wheel, by (name, version)."""
    packages = {}
    for path in paths:
        if not path.is_file():
            continue
        for entry in tomllib.loads(path.read_text(encoding="utf-8")).get("package", []):
            pkg = Package(entry["name"], entry["version"], entry["dist"], entry["sha256"])
            if not pkg.dist.endswith(".whl"):
                raise CorpusError(f"{path.name}: {pkg.name}: only wheels are used (no sdist build runs here)")
            if (pkg.name, pkg.version) in packages:
                raise CorpusError(f"{path.name}: {pkg.name} {pkg.version} is pinned twice")
            packages[(pkg.name, pkg.version)] = pkg
    return packages


def find_package(packages: dict[tuple[str, str], Package], name: str, version: str = "") -> Package:
    if version:
        if (name, version) not in packages:
            raise CorpusError(f"{name} {version} is not pinned in tests/realworld/*.toml")
        return packages[(name, version)]
    versions = [p for (n, _), p in packages.items() if n == name]
    if len(versions) != 1:
        raise CorpusError(f"{name}: {len(versions)} pinned versions; give the version")
    return versions[0]


def cache_dir() -> Path:
    env = os.environ.get("GRADLINT_REALWORLD_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gradlint-realworld"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch(pkg: Package, cache: Path | None = None) -> Path:
    """The package's wheel in the cache, downloaded if missing; its hash is checked every time."""
    dists = (cache or cache_dir()) / "dists"
    wheel = dists / pkg.dist
    if not wheel.is_file():
        dists.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
               "-d", str(dists), *pkg.pip_args()]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise Unavailable(f"{pkg.name}=={pkg.version}: pip download took over 900 s") from None
        if proc.returncode != 0 or not wheel.is_file():
            errors = [ln for ln in (proc.stderr + proc.stdout).splitlines() if "WARNING" not in ln]
            raise Unavailable(f"{pkg.name}=={pkg.version}: pip download failed: "
                              + (errors[-1].strip() if errors else f"no {pkg.dist}"))
    digest = sha256_of(wheel.read_bytes())
    if digest != pkg.sha256:
        raise CorpusError(f"{pkg.dist}: sha256 {digest} is not the pinned {pkg.sha256}; delete it and fetch again")
    return wheel


def source_root(pkg: Package, cache: Path | None = None) -> Path:
    """The wheel's Python files, unpacked once under the cache (a tree gradlint can be run on)."""
    root = (cache or cache_dir()) / "src" / f"{pkg.name}-{pkg.version}"
    done = root / ".unpacked"
    if not done.is_file():
        wheel = fetch(pkg, cache)
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.namelist():
                if member.endswith(".py") and not member.startswith("/") and ".." not in Path(member).parts:
                    target = root / member
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(member))
        done.write_text(pkg.sha256)
    return root


# --------------------------------------------------------------------------------------------
# Statements: a label and a finding meet on the first line of the statement they point into


def statement_starts(source: str) -> dict[int, int]:
    """Each line of the file mapped to the first line of the innermost statement holding it.

    A compound statement owns its header lines only (a `def` with its signature, a `for` with its
    target), so a finding in a body maps to the body's statement, never to the enclosing `def`.
    """
    with warnings.catch_warnings():  # third-party code: `"\e"` in a string is their business
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        tree = ast.parse(source)
    owner: dict[int, int] = {}

    def visit(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            bodies = [getattr(stmt, name) for name in ("body", "orelse", "finalbody", "handlers", "cases")
                      if isinstance(getattr(stmt, name, None), list) and getattr(stmt, name)]
            first_child = min((b[0].lineno for b in bodies if hasattr(b[0], "lineno")), default=None)
            end = stmt.end_lineno or stmt.lineno
            header_end = end if first_child is None else max(stmt.lineno, first_child - 1)
            if first_child is not None and first_child == stmt.lineno:
                header_end = stmt.lineno  # `if x: y` on one line: the line is the inner statement's
            for row in range(stmt.lineno, header_end + 1):
                owner[row] = stmt.lineno
            for body in bodies:
                for item in body:
                    if isinstance(item, ast.ExceptHandler):
                        owner.setdefault(item.lineno, item.lineno)
                        visit(item.body)
                    elif hasattr(item, "body") and not isinstance(item, ast.stmt):  # match_case
                        visit(item.body)
                visit([s for s in body if isinstance(s, ast.stmt)])

    visit(tree.body)
    return owner


def line_sha1(text: str) -> str:
    return hashlib.sha1(text.strip().encode("utf-8")).hexdigest()


@dataclass
class SourceFile:
    package: Package
    path: str
    text: str
    lines: list[str]
    starts: dict[int, int]

    @property
    def sha256(self) -> str:
        return sha256_of(self.text.encode("utf-8"))

    def statement(self, row: int) -> int:
        return self.starts.get(row, row)


_FILES: dict[tuple[str, str, str], SourceFile] = {}


def source_file(pkg: Package, path: str, cache: Path | None = None) -> SourceFile:
    key = (pkg.name, pkg.version, path)
    if key not in _FILES:
        file = source_root(pkg, cache) / path
        if not file.is_file():
            raise CorpusError(f"{pkg.dist} has no {path}")
        text = file.read_bytes().decode("utf-8")
        _FILES[key] = SourceFile(pkg, path, text, text.splitlines(), statement_starts(text))
    return _FILES[key]


# --------------------------------------------------------------------------------------------
# Labels


@dataclass(frozen=True)
class Label:
    package: str
    version: str
    path: str
    file_sha256: str
    line: int
    line_sha1: str
    rule: str
    label: str
    clarity: str
    scope: str
    detail: str
    labeller: str
    note: str

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (f"{self.package}-{self.version}", self.path, self.line, match_group(self.rule))

    def where(self) -> str:
        return f"{self.package}-{self.version}/{self.path}:{self.line} {self.rule}"


def read_all_labels(directory: Path = LABELS_DIR) -> list[Label]:
    labels = []
    for path in sorted(directory.glob("*.csv")):
        labels += read_labels(path)
    return labels


def read_labels(path: Path) -> list[Label]:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = [row for row in csv.DictReader(fh) if any((v or "").strip() for v in row.values())]
    labels = []
    for n, row in enumerate(rows, 2):
        missing = [c for c in COLUMNS if c not in row]
        if missing:
            raise CorpusError(f"{path.name}: missing columns {missing}")
        try:
            line = int(row["line"])
        except ValueError:
            raise CorpusError(f"{path.name}:{n}: line {row['line']!r} is not a number") from None
        label = Label(**{**{c: (row[c] or "").strip() for c in COLUMNS}, "line": line})
        problems = []
        if row.get(None):  # csv puts what is past the last column here: a note's unquoted comma
            problems.append("more fields than columns (quote a note that holds a comma)")
        if not RULE_CODE.match(label.rule):
            problems.append(f"rule {label.rule!r}")
        if label.label not in LABELS:
            problems.append(f"label {label.label!r} (pos or neg)")
        if label.clarity not in CLARITIES:
            problems.append(f"clarity {label.clarity!r} (clear or borderline)")
        if label.scope not in SCOPES:
            problems.append(f"scope {label.scope!r} (file or project)")
        if not label.note:
            problems.append("an empty note")
        if problems:
            raise CorpusError(f"{path.name}:{n}: {label.where()}: " + ", ".join(problems))
        labels.append(label)
    return labels


def write_labels(labels: list[Label], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for lab in sorted(labels, key=lambda x: (x.package, x.path, x.line, x.rule)):
        writer.writerow({c: getattr(lab, c) for c in COLUMNS})
    path.write_text(buf.getvalue(), encoding="utf-8")


def stamp(labels: list[Label], packages: dict[tuple[str, str], Package]) -> list[Label]:
    """Fill in version, sha256 and line_sha1, and move each line to its statement's first line."""
    out = []
    for lab in labels:
        pkg = find_package(packages, lab.package, lab.version)
        src = source_file(pkg, lab.path)
        if not 1 <= lab.line <= len(src.lines):
            raise CorpusError(f"{lab.where()}: line outside the file ({len(src.lines)} lines)")
        if lab.line not in src.starts:
            raise CorpusError(f"{lab.where()}: no statement on that line: {src.lines[lab.line - 1].strip()!r}")
        row = src.statement(lab.line)
        out.append(replace(lab, version=pkg.version, file_sha256=src.sha256, line=row,
                           line_sha1=line_sha1(src.lines[row - 1])))
    return out


def check(labels: list[Label], packages: dict[tuple[str, str], Package]) -> list[SourceFile]:
    """Every label points at the line it was written for, once; returns the labelled files."""
    seen: dict[tuple, Label] = {}
    files: dict[tuple[str, str], SourceFile] = {}
    for lab in labels:
        if not lab.version:
            raise CorpusError(f"{lab.where()}: not stamped (run `corpus.py stamp` on its file)")
        pkg = find_package(packages, lab.package, lab.version)
        src = source_file(pkg, lab.path)
        if src.sha256 != lab.file_sha256:
            raise CorpusError(f"{lab.where()}: the file's sha256 is {src.sha256}, the label's {lab.file_sha256}")
        if not 1 <= lab.line <= len(src.lines) or line_sha1(src.lines[lab.line - 1]) != lab.line_sha1:
            raise CorpusError(f"{lab.where()}: the line's text does not match its line_sha1")
        if src.statement(lab.line) != lab.line:
            raise CorpusError(f"{lab.where()}: not the first line of its statement ({src.statement(lab.line)})")
        key = (lab.package, lab.version, lab.path, lab.line, lab.rule)
        if key in seen:
            raise CorpusError(f"{lab.where()}: labelled twice")
        seen[key] = lab
        files[(pkg.name, pkg.version, lab.path)] = src
    return list(files.values())


# --------------------------------------------------------------------------------------------
# Running gradlint and scoring


@dataclass(frozen=True)
class Finding:
    package: str
    path: str
    line: int  # the first line of the statement the finding points into
    code: str
    message: str
    fix: str  # "safe", "unsafe" or ""

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.package, self.path, self.line, match_group(self.code))

    def where(self) -> str:
        return f"{self.package}/{self.path}:{self.line} {self.code}"  # package is name-version


def run_gradlint(files: list[SourceFile], extra: list[str] | None = None) -> list[Finding]:
    """gradlint's findings on the labelled files, as a user runs it (the CLI, no configuration)."""
    by_path = {str((source_root(f.package) / f.path).resolve()): f for f in files}
    cmd = [sys.executable, "-m", "gradlint", "check", "--isolated", "--no-cache", "--exit-zero",
           "--output-format", "json", *(extra or []), *sorted(by_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise CorpusError(f"gradlint exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    findings = []
    for item in json.loads(proc.stdout):
        src = by_path.get(str(Path(item["filename"]).resolve()))
        if src is None or not RULE_CODE.match(item["code"] or ""):
            raise CorpusError(f"unexpected finding {item.get('code')} in {item.get('filename')}: {item.get('message')}")
        fix = (item.get("fix") or {}).get("applicability") or ""
        findings.append(Finding(f"{src.package.name}-{src.package.version}", src.path,
                                src.statement(item["location"]["row"]),
                                item["code"], item["message"], fix))
    return findings


@dataclass
class Tally:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    fn_file: int = 0  # misses among labels the file alone decides
    pos: int = 0
    pos_file: int = 0
    neg: int = 0

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / self.pos if self.pos else None

    @property
    def recall_file(self) -> float | None:
        hits = self.pos_file - self.fn_file
        return hits / self.pos_file if self.pos_file else None


@dataclass
class Score:
    tallies: dict[str, Tally]
    false_positives: list[tuple[Finding, Label | None]] = field(default_factory=list)
    false_negatives: list[Label] = field(default_factory=list)

    def total(self) -> Tally:
        t = Tally()
        for x in self.tallies.values():
            for name in ("tp", "fp", "fn", "fn_file", "pos", "pos_file", "neg"):
                setattr(t, name, getattr(t, name) + getattr(x, name))
        return t


def score(labels: list[Label], findings: list[Finding], *, borderline: bool,
          rules: set[str] | None = None) -> Score:
    """Precision and recall per family.

    A finding on a statement labelled positive for its family is a true positive; on one labelled
    negative, or on a statement with no label of its family, a false positive (the files are
    labelled whole). Without ``borderline``, borderline labels and the findings on them count for
    nothing. ``rules`` limits both sides to the rules gradlint ran with.
    """
    labelled: dict[tuple, Label] = {}
    for lab in labels:
        if rules is not None and lab.rule not in rules:
            continue
        prev = labelled.get(lab.key)
        if prev is None or lab.label == "pos":
            labelled[lab.key] = lab  # a statement positive for one rule of the family is positive
    found: dict[tuple, Finding] = {}
    for f in findings:
        found.setdefault(f.key, f)
    tallies: dict[str, Tally] = defaultdict(Tally)
    result = Score(tallies)
    for key, lab in labelled.items():
        if lab.clarity == "borderline" and not borderline:
            continue
        t = tallies[family(lab.rule)]
        if lab.label == "pos":
            t.pos += 1
            t.pos_file += lab.scope == "file"
            if key in found:
                t.tp += 1
            else:
                t.fn += 1
                t.fn_file += lab.scope == "file"
                result.false_negatives.append(lab)
        else:
            t.neg += 1
            if key in found:
                t.fp += 1
                result.false_positives.append((found[key], lab))
    for key, f in found.items():
        lab = labelled.get(key)
        if lab is None:
            tallies[family(f.code)].fp += 1
            result.false_positives.append((f, None))
    return result


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(result: Score, title: str) -> str:
    rows = [f"{title}",
            f"{'family':34} {'pos':>4} {'neg':>4} {'TP':>4} {'FP':>4} {'FN':>4} {'prec':>5} {'rec(file)':>9} {'rec(all)':>8}"]
    for fam in sorted(result.tallies):
        t = result.tallies[fam]
        rows.append(f"{fam:34} {t.pos:4} {t.neg:4} {t.tp:4} {t.fp:4} {t.fn:4} {fmt(t.precision):>5} "
                    f"{fmt(t.recall_file):>9} {fmt(t.recall):>8}")
    t = result.total()
    rows.append(f"{'all':34} {t.pos:4} {t.neg:4} {t.tp:4} {t.fp:4} {t.fn:4} {fmt(t.precision):>5} "
                f"{fmt(t.recall_file):>9} {fmt(t.recall):>8}")
    return "\n".join(rows)


def default_rules() -> set[str]:
    from gradlint.registry import all_rules
    return {r.code for r in all_rules() if r.default_enabled}


def agreement(a: list[Label], b: list[Label]) -> str:
    """How two labellers agree on the files both labelled: per statement and family."""
    files = {x.key[:2] for x in a} & {x.key[:2] for x in b}
    ka = {x.key: x for x in a if x.key[:2] in files}
    kb = {x.key: x for x in b if x.key[:2] in files}
    keys = sorted(set(ka) | set(kb))
    agree = 0
    lines = []
    both_pos = only_a = only_b = 0
    for key in keys:
        la = ka[key].label if key in ka else "neg"
        lb = kb[key].label if key in kb else "neg"
        if la == lb:
            agree += 1
            both_pos += la == "pos"
        else:
            only_a += la == "pos"
            only_b += lb == "pos"
            which = ka.get(key) or kb.get(key)
            lines.append(f"  {key[0]}/{key[1]}:{key[2]} {key[3]}: A={la} B={lb}"
                         f"  A: {ka[key].note if key in ka else '(unlabelled)'}"
                         f" | B: {kb[key].note if key in kb else '(unlabelled)'}")
    n = len(keys)
    pa = sum(1 for k in keys if (ka[k].label if k in ka else "neg") == "pos") / n if n else 0
    pb = sum(1 for k in keys if (kb[k].label if k in kb else "neg") == "pos") / n if n else 0
    pe = pa * pb + (1 - pa) * (1 - pb)
    po = agree / n if n else 0
    kappa = (po - pe) / (1 - pe) if pe < 1 else 1.0
    head = (f"{len(files)} files, {n} labelled statements (a statement one side left unlabelled reads "
            f"as negative): agreement {agree}/{n} = {po:.3f}, Cohen's kappa {kappa:.3f}; positives: "
            f"both {both_pos}, only A {only_a}, only B {only_b}")
    return "\n".join([head, *lines])


# --------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch")
    show = sub.add_parser("show")
    show.add_argument("package", help="NAME or NAME==VERSION")
    show.add_argument("path", help="the file's path inside the wheel")
    st = sub.add_parser("stamp")
    st.add_argument("csv", type=Path)
    sub.add_parser("check")
    sc = sub.add_parser("score")
    sc.add_argument("--labels", type=Path, default=LABELS_DIR, help="a CSV, or a folder of them")
    sc.add_argument("--list", action="store_true", help="list every false positive and false negative")
    ag = sub.add_parser("agree")
    ag.add_argument("a", type=Path)
    ag.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    packages = load_packages()
    try:
        if args.cmd == "fetch":
            for pkg in packages.values():
                fetch(pkg)
                print(f"{pkg.dist}: ok")
        elif args.cmd == "show":
            name, _, version = args.package.partition("==")
            src = source_file(find_package(packages, name, version), args.path)
            for n, text in enumerate(src.lines, 1):
                print(f"{n:5} {text}")
        elif args.cmd == "stamp":
            write_labels(stamp(read_labels(args.csv), packages), args.csv)
            print(f"{args.csv}: stamped")
        elif args.cmd == "check":
            labels = read_all_labels()
            files = check(labels, packages)
            print(f"{len(labels)} labels on {len(files)} files: every one points at its line")
        elif args.cmd == "score":
            labels = read_all_labels(args.labels) if args.labels.is_dir() else read_labels(args.labels)
            files = check(labels, packages)
            findings = run_gradlint(files)
            rules = default_rules()
            for borderline in (False, True):
                result = score(labels, findings, borderline=borderline, rules=rules)
                print(table(result, "clear labels" if not borderline else "clear and borderline labels"))
                print()
            if args.list:
                result = score(labels, findings, borderline=False, rules=rules)
                for f, lab in result.false_positives:
                    print(f"FP {f.where()}: {f.message[:100]}  [{lab.note if lab else 'unlabelled'}]")
                for lab in result.false_negatives:
                    print(f"FN {lab.where()} ({lab.scope}): {lab.note}")
        elif args.cmd == "agree":
            def load(path: Path) -> list[Label]:
                return read_all_labels(path) if path.is_dir() else read_labels(path)
            print(agreement(load(args.a), load(args.b)))
    except CorpusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
