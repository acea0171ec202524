"""Code, tests and docs cite the Kafka rules by the ids of docs/design/kafka-rules.md, and only by those.

The old ids of the shared reference (``S1``-``S5`` roll, ``R1``-``R9`` retention, ``C-*`` cleaner, ``G1``-``G5``,
``§0``-``§2``, the test marks ``T01``-``T63``/``D01``-``D08``) collided with the manifest protocol's case ids
(``S1``-``S5``, ``R1``-``R6`` of docs/design/manifest-protocol.md), so a bare ``S1`` or ``R2`` is allowed only
where it cites the protocol.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RULES_DOC = ROOT / "docs" / "design" / "kafka-rules.md"
#: Where code and tests may cite rules. docs/design/kafka-rules.md (its old-to-new table) and rule-ids.json
#: are the only places the old ids may still appear.
SCANNED = ["s3stream", "cleaner", "wal", "tests", "docs", "README.md"]
SKIPPED = {"docs/design/kafka-rules.md", "tests/test_rule_ids.py"}
SUFFIXES = {".py", ".md"}

#: Files whose bare S1-S5 / R1-R6 are manifest-protocol case ids (docs/design/manifest-protocol.md section 6);
#: there a Kafka rule must be written in its new form, since the old one cannot be told from a protocol id.
PROTOCOL_FILES = {"s3stream/manifest/versioned.py", "s3stream/manifest/gc.py", "docs/design/manifest-protocol.md"}

_OLD = re.compile(
    r"(?<![\w-])("
    r"C-\*|C-(?:SEL|RANGE|MAP|GRP|KEEP|TOMB|TXN|CKPT|ERR)\d(?:[a-e](?:-[a-e])?)?(?:-\d)?(?:/\d)?"  # C-SEL2b, C-TOMB1-3
    r"|S[1245](?:\([a-d]\)|[a-d])?|S3(?=\([a-d]\)|-S)"           # roll rules (a bare S3 is the storage service)
    r"|R[1-9](?:\([a-c]\))?"                                      # retention rules
    r"|G[1-5]"                                                    # cleaner guarantees
    r"|T(?:0[15-8]|18|2[1348]|35|50|5[56]|6[1-3])|D0[1-8]"        # Kafka test marks
    r"|§[0-2](?![.\d])"                                           # sections of the old reference
    r")(?![\w])")
_ROLL_S3 = re.compile(r"[Rr]ules? S3\b|\(S3[,)]|rules=\"[^\"]*\bS3\b|S1-S3")
_PROTOCOL_SHAPED = re.compile(r"S[1-5]|R[1-6]")  # R7-R9 are never protocol ids
_OLD_TEST_NAME = re.compile(r"\bdef test_((?:[rtd]\d{1,2}_)+)")
_OLD_DOC = re.compile(r"kafka-cleanup-rules\.md|\bchecklist (?:item )?\d")

_NEW = re.compile(
    r"(?<![\w-])((?:CFG|ROLL|RET|KT|KD)-\d+|CLEAN-[A-Z]+-\d+)"
    r"((?:\([a-z]\))?)"                                          # a clause: ROLL-1(a)
    r"(?:\.\.(\d+|\([a-z]\))|/(\d+))?")                          # a range: RET-1..9, CLEAN-SEL-2(a)..(d); CLEAN-SEL-2/3
_NEW_TEST_NAME = re.compile(r"\bdef test_((?:(?:ret|roll|cfg|kt|kd|clean_[a-z]+)\d+[a-z]?_)+)")


def _files() -> Iterator[tuple[str, list[str]]]:
    for top in SCANNED:
        base = ROOT / top
        for path in [base] if base.is_file() else sorted(base.rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts and rel not in SKIPPED:
                yield rel, path.read_text(encoding="utf-8").splitlines()


def old_ids(rel: str, line: str) -> list[str]:
    """The old-style Kafka-rule ids ``line`` of file ``rel`` cites (protocol case ids excluded)."""
    protocol = rel in PROTOCOL_FILES or ("manifest-protocol.md" in line and "kafka" not in line.lower())
    found = []
    for m in _OLD.finditer(line):
        tok = m[1]
        if protocol and _PROTOCOL_SHAPED.fullmatch(tok):
            continue
        found.append(tok)
    if _ROLL_S3.search(line):
        found.append("S3")
    found += [f"test_{m[1]}" for m in _OLD_TEST_NAME.finditer(line)]
    found += _OLD_DOC.findall(line)
    return found


@cache
def defined_rules() -> dict[str, str]:
    """Every id defined in docs/design/kafka-rules.md (a row whose first cell is the id) -> its row."""
    rules: dict[str, str] = {}
    for row in RULES_DOC.read_text(encoding="utf-8").splitlines():
        first = re.match(r"\| (`[A-Z][A-Z-]*-\d+`(?:, `[A-Z][A-Z-]*-\d+`)*) \|", row)
        if first:
            for rid in re.findall(r"`([^`]+)`", first[1]):
                rules[rid] = row
    return rules


def undefined(cited: str) -> list[str]:
    """The parts of a cited new id (``RET-3(c)``, ``CLEAN-TOMB-1..3``, ``KD-01..03``) the rules doc lacks."""
    m = _NEW.fullmatch(cited)
    assert m, cited
    rules = defined_rules()
    head, clause, upto, alt = m[1], m[2], m[3], m[4]
    prefix, first = head.rsplit("-", 1)
    wanted = [head]
    if upto and upto.isdigit():
        wanted += [f"{prefix}-{n:0{len(first)}d}" for n in range(int(first) + 1, int(upto) + 1)]
    if alt:
        wanted.append(f"{prefix}-{alt}")
    missing = [w for w in wanted if w not in rules]
    clauses = [clause] if clause else []
    if upto and upto.startswith("("):
        clauses += [f"({chr(c)})" for c in range(ord(clause[1]) + 1, ord(upto[1]) + 1)] if clause else [upto]
    missing += [f"{head}{c}" for c in clauses if head in rules and c not in rules[head]]
    return missing


def _from_test_name(part: str) -> str:
    """``ret6`` -> ``RET-6``, ``kt55`` -> ``KT-55``, ``clean_sel2b`` -> ``CLEAN-SEL-2(b)``."""
    m = re.fullmatch(r"(ret|roll|cfg|kt|kd|clean_[a-z]+)(\d+)([a-z]?)", part)
    assert m, part
    name = m[1].upper().replace("_", "-")
    return f"{name}-{m[2]}" + (f"({m[3]})" if m[3] else "")


def new_ids(line: str) -> list[str]:
    """The new-style ids ``line`` cites, test-name marks (``test_ret6_kt55_...``) included."""
    out = [m[0] for m in _NEW.finditer(line)]
    for m in _NEW_TEST_NAME.finditer(line):
        out += [_from_test_name(p) for p in re.findall(r"(?:ret|roll|cfg|kt|kd|clean_[a-z]+)\d+[a-z]?", m[1])]
    return out


def test_no_old_kafka_rule_ids_are_cited() -> None:
    hits = [f"{rel}:{n}: {tok}  <- {line.strip()}" for rel, lines in _files()
            for n, line in enumerate(lines, 1) for tok in old_ids(rel, line)]
    assert not hits, ("cite docs/design/kafka-rules.md ids (its last table maps old to new):\n"
                      + "\n".join(hits))


def test_every_cited_rule_id_is_defined_in_kafka_rules_md() -> None:
    hits = [f"{rel}:{n}: {cited} ({', '.join(missing)})" for rel, lines in _files()
            for n, line in enumerate(lines, 1) for cited in new_ids(line) if (missing := undefined(cited))]
    assert not hits, "ids not defined in docs/design/kafka-rules.md:\n" + "\n".join(hits)


def test_the_rules_doc_defines_every_namespace() -> None:
    rules = defined_rules()
    assert {r.split("-")[0] for r in rules} == {"CFG", "ROLL", "RET", "CLEAN", "KT", "KD"}
    assert {"ROLL-1", "RET-9", "CLEAN-SEL-2", "CLEAN-GUAR-5", "KT-63", "KD-08", "CFG-3"} <= set(rules)


@pytest.mark.parametrize(("rel", "line", "old"), [
    ("cleaner/keep.py", "at once (C-TOMB3). Offsets never change (G2, G3).", ["C-TOMB3", "G2", "G3"]),
    ("s3stream/policy/roll.py", "* (S1a) size; (S1(b)) time; topics (S3, computed)", ["S1a", "S1(b)", "S3"]),
    ("s3stream/base/topic_config.py", 'rules="S1(b), S2, S3", x', ["S1(b)", "S2", "S3"]),
    ("tests/retention/test_planner.py", "def test_r5_t62_whole_segments() -> None:", ["test_r5_t62_"]),
    ("tests/x.py", "# see kafka-cleanup-rules.md §2", ["§2", "kafka-cleanup-rules.md"]),
    ("s3stream/manifest/versioned.py", "our commit_id means success (S1); otherwise rebase (R2).", []),
    ("s3stream/manifest/versioned.py", "retention (C-SEL1, G4, R9)", ["C-SEL1", "G4", "R9"]),
    ("cleaner/selection.py", "# C-SEL2b: reset; C-SEL2a-d, C-SEL1-5, C-SEL2/3 (checklist item 1)",
     ["C-SEL2b", "C-SEL2a-d", "C-SEL1-5", "C-SEL2/3", "checklist item 1"]),
    ("s3stream/objectstore/s3.py", "an S3 multipart upload (manifest-protocol.md §4.6), T0, KAFKA-8764", []),
    ("docs/design/manifest-protocol.md", "- **R1, R5:** claims fence older writers.", []),
])
def test_old_ids_are_recognised(rel: str, line: str, old: list[str]) -> None:
    assert old_ids(rel, line) == old


@pytest.mark.parametrize(("line", "missing"), [
    ("rules RET-1..9 and ROLL-1(a), CLEAN-SEL-2(a)..(d), KD-01..03, CLEAN-SEL-2/3", []),
    ("def test_ret6_kt55_deletes_down_to_retention_bytes() -> None:", []),
    ("def test_clean_sel2b_kd05_x() -> None:", []),
    ("def test_clean_sel2f_kt99_x() -> None:", ["CLEAN-SEL-2(f)", "KT-99"]),
    ("RET-10, ROLL-1(e), CLEAN-SEL-9, KT-02", ["RET-10", "ROLL-1(e)", "CLEAN-SEL-9", "KT-02"]),
])
def test_new_ids_are_checked_against_the_doc(line: str, missing: list[str]) -> None:
    assert [m for cited in new_ids(line) for m in undefined(cited)] == missing
