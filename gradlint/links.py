"""Where gradlint's documentation lives: one address, used by every finding's `url`, SARIF and
the generated rule pages (gradlint/ruledocs.py). It imports nothing, so anything may use it."""

from __future__ import annotations

# The one place the repository's address is written; the docs, SARIF's informationUri and the
# packaging metadata's rule links all derive from it.
REPOSITORY_URL = "https://github.com/gradlint/gradlint"
DOCS_DIR = "docs/rules"  # relative to the repository root
BRANCH = "main"


def rule_url(code: str) -> str:
    """Where a code's page is on the repository host: every finding's `url`."""
    return f"{REPOSITORY_URL}/blob/{BRANCH}/{DOCS_DIR}/{code.upper()}.md"
