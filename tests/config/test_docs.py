"""docs/configuration.md agrees with the Python definitions (TOPIC_CONFIGS, StoreSettings).

The tables between the ``GENERATED`` markers are rendered from the definitions; regenerate them with
``python -m tests.config.test_docs`` (from the repository root) after changing a config or setting.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from s3stream.base.settings import BROKER_SYNONYMS, StoreSettings
from s3stream.base.topic_config import TOPIC_CONFIGS

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
_MiB = 1024 * 1024
_BLOCK_RE = r"(<!-- BEGIN GENERATED: {name} -->\n)(.*?)(<!-- END GENERATED: {name} -->)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_topic_configs() -> str:
    rows = ["| Config | Default | Validation | Broker synonym | Rules | What it does in s3stream |",
            "|---|---|---|---|---|---|"]
    for d in TOPIC_CONFIGS.values():
        rows.append(f"| `{d.name}` | `{d.default}` | {_cell(d.validation)} | "
                    f"{f'`{d.broker_synonym}`' if d.broker_synonym else '-'} | {d.rules or '-'} | "
                    f"{'' if d.honoured else '*(compatibility)* '}{_cell(d.doc)} |")
    return "\n".join(rows) + "\n"


def _default(f: dataclasses.Field[object]) -> str:
    if f.default is dataclasses.MISSING:
        return "`{}`"
    value = f.default
    if isinstance(value, bool) or value is None:
        return f"`{str(value).lower() if value is not None else 'unset'}`"
    if isinstance(value, int) and value >= _MiB and value % _MiB == 0:
        return f"`{value}` ({value // _MiB} MiB)"
    return f"`{value}`"


def _rule(kind: str, minimum: int, choices: tuple[str, ...]) -> str:
    return {"int": f"integer >= {minimum}", "bool": "true / false", "ratio": "number in (0, 1]",
            "choice": " or ".join(f"`{c}`" for c in choices), "path": "non-empty path, or unset",
            "topic_config": "valid topic configs"}[kind]


def render_settings() -> str:
    rows = ["| Setting | Option name | Default | Validation | What it does |", "|---|---|---|---|---|"]
    for f in dataclasses.fields(StoreSettings):
        spec = f.metadata["spec"]
        rows.append(f"| `{f.name}` | `{f.name.replace('_', '.')}` | {_default(f)} | "
                    f"{_rule(spec.kind, spec.minimum, spec.choices)} | {_cell(spec.doc)} |")
    return "\n".join(rows) + "\n"


def render_synonyms() -> str:
    rows = ["| Option | Sets topic default | Unit |", "|---|---|---|"]
    for option, (key, unit_ms) in sorted(BROKER_SYNONYMS.items()):
        unit = {1: "as the topic config", 60_000: "minutes", 3_600_000: "hours"}[unit_ms]
        rows.append(f"| `{option}` | `{key}` | {unit} |")
    return "\n".join(rows) + "\n"


RENDERERS = {"topic-configs": render_topic_configs, "store-settings": render_settings,
             "broker-synonyms": render_synonyms}


def _blocks(text: str) -> dict[str, str]:
    out = {}
    for name in RENDERERS:
        m = re.search(_BLOCK_RE.format(name=name), text, re.S)
        assert m, f"docs/configuration.md lacks the GENERATED block {name}"
        out[name] = m.group(2)
    return out


def regenerate() -> None:
    text = DOC.read_text()
    for name, render in RENDERERS.items():
        m = re.search(_BLOCK_RE.format(name=name), text, re.S)
        assert m, f"docs/configuration.md lacks the GENERATED block {name}"
        text = text[:m.start(2)] + render() + text[m.end(2):]
    DOC.write_text(text)


def test_generated_tables_match_the_definitions() -> None:
    blocks = _blocks(DOC.read_text())
    for name, render in RENDERERS.items():
        assert blocks[name] == render(), f"{name} is stale: run python -m tests.config.test_docs"


def test_every_key_and_setting_is_documented() -> None:
    text = DOC.read_text()
    for key, d in TOPIC_CONFIGS.items():
        assert f"| `{key}` | `{d.default}` |" in text
    for f in dataclasses.fields(StoreSettings):
        assert f"| `{f.name}` |" in text
    for option in BROKER_SYNONYMS:
        assert f"| `{option}` |" in text


def test_honoured_keys_cite_a_rule_and_compat_keys_say_so() -> None:
    for d in TOPIC_CONFIGS.values():
        if d.honoured:
            assert d.rules, d.name
        else:
            assert "no effect" in d.doc, d.name


if __name__ == "__main__":
    regenerate()
