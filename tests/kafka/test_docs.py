"""docs/kafka.md agrees with the code: the API table is ApiVersions' table, the options table BrokerConfig's.

Regenerate the tables between the ``GENERATED`` markers with ``python -m tests.kafka.test_docs`` (from the
repository root) after adding an API, a version or an option.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from s3stream.apps.kafka.config import OPTION_DOCS, BrokerConfig
from s3stream.apps.kafka.handlers import all_apis

DOC = Path(__file__).resolve().parents[2] / "docs" / "kafka.md"
_BLOCK_RE = r"(<!-- BEGIN GENERATED: {name} -->\n)(.*?)(<!-- END GENERATED: {name} -->)"


def render_apis() -> str:
    rows = ["| Key | API | Versions |", "|---|---|---|"]
    rows += [f"| {s.api_key} | {s.name} | {s.min_version}-{s.max_version} |" for s in all_apis()]
    return "\n".join(rows) + "\n"


def render_options() -> str:
    rows = ["| Option | Default | What it does |", "|---|---|---|"]
    for f in dataclasses.fields(BrokerConfig):
        default = "" if f.default is dataclasses.MISSING else f.default
        shown = "unset" if default is None or default == () else str(default).lower() if isinstance(default, bool) \
            else str(default)
        rows.append(f"| `{f.name.replace('_', '.')}` | `{shown}` | {OPTION_DOCS[f.name].replace('|', '/')} |")
    return "\n".join(rows) + "\n"


BLOCKS = {"apis": render_apis, "options": render_options}


def _block(text: str, name: str) -> re.Match[str]:
    found = re.search(_BLOCK_RE.format(name=name), text, re.S)
    assert found is not None, f"docs/kafka.md lacks the GENERATED: {name} markers"
    return found


def test_every_option_is_documented() -> None:
    assert {f.name for f in dataclasses.fields(BrokerConfig)} == set(OPTION_DOCS)


def test_generated_tables_are_current() -> None:
    text = DOC.read_text()
    for name, render in BLOCKS.items():
        assert _block(text, name).group(2) == render(), \
            f"docs/kafka.md's {name} table is stale: run python -m tests.kafka.test_docs"


def main() -> None:
    text = DOC.read_text()
    for name, render in BLOCKS.items():
        found = _block(text, name)
        text = text[:found.start(2)] + render() + text[found.end(2):]
    DOC.write_text(text)


if __name__ == "__main__":
    main()
