"""What the fuzz tests share: one reproducible hypothesis profile and byte mutations of valid encodings.

``FUZZ`` is derandomized (the same examples on every run, so CI is reproducible and a failure is
re-found by re-running) with no example database (nothing written next to the tests); raise
``max_examples`` locally with ``S3STREAM_FUZZ_EXAMPLES=5000`` for a longer campaign.

:func:`mutations` draws what damage looks like: bit flips, bytes overwritten, truncations, bytes
inserted or deleted, ranges duplicated or zeroed. Format-specific tests add the structure-aware ones
(a length field changed with its checksum patched, so the check *behind* the checksum is reached).

Importing this module also works around one environment quirk: when a hypothesis test fails, its pytest
plugin imports ``hypothesis.extra._patching`` (libcst) to suggest a patch, and libcst sets off
mypy_extensions' TypedDict DeprecationWarning, which ``filterwarnings = error`` turns into an INTERNALERROR
hiding the falsifying example. Importing it here first, with that warning ignored, keeps failures readable.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = ["FUZZ", "SLOW_FUZZ", "edited_json", "fuzz", "json_values", "mutated", "mutations", "typed_or_value"]

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import hypothesis.extra._patching  # noqa: F401
    except ImportError:  # libcst absent: the plugin skips patch suggestions by itself
        pass

_EXAMPLES = int(os.environ.get("S3STREAM_FUZZ_EXAMPLES", "0"))
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
           HealthCheck.function_scoped_fixture]


def fuzz(examples: int) -> settings:
    """The fuzz profile with ``examples`` examples (``S3STREAM_FUZZ_EXAMPLES`` overrides it)."""
    return settings(max_examples=_EXAMPLES or examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=_HEALTH, print_blob=True)


#: cheap targets (pure decoders)
FUZZ = fuzz(150)
#: targets that open stores or run commands
SLOW_FUZZ = fuzz(25)

T = TypeVar("T")


def typed_or_value(call: Callable[[], T], *errors: type[BaseException]) -> T | BaseException:
    """``call()``'s value, or the exception it raised if that is one of ``errors``; anything else propagates
    (and fails the test with its own traceback)."""
    try:
        return call()
    except errors as exc:
        return exc


def _apply(data: bytearray, op: tuple[str, int, int, int]) -> bytearray:
    kind, pos, size, value = op
    if not data and kind != "insert":
        return data
    pos %= max(1, len(data))
    if kind == "flip":
        data[pos] ^= 1 << (value % 8)
    elif kind == "set":
        data[pos] = value % 256
    elif kind == "truncate":
        del data[pos:]
    elif kind == "drop_head":
        del data[: pos + 1]
    elif kind == "insert":
        data[pos:pos] = bytes([value % 256]) * size
    elif kind == "delete":
        del data[pos: pos + size]
    elif kind == "duplicate":
        data[pos:pos] = data[pos: pos + size]
    elif kind == "zero":
        data[pos: pos + size] = bytes(len(data[pos: pos + size]))
    return data


_OP = st.tuples(st.sampled_from(["flip", "flip", "set", "truncate", "drop_head", "insert", "delete", "duplicate",
                                 "zero"]),
                st.integers(0, 1 << 30), st.integers(1, 64), st.integers(0, 255))


def mutations(max_ops: int = 4) -> st.SearchStrategy[list[tuple[str, int, int, int]]]:
    """Lists of damage operations (apply them with :func:`mutated`)."""
    return st.lists(_OP, min_size=1, max_size=max_ops)


def mutated(data: bytes, ops: list[tuple[str, int, int, int]]) -> bytes:
    """``data`` damaged by ``ops`` (positions wrap around the current length)."""
    out = bytearray(data)
    for op in ops:
        out = _apply(out, op)
    return bytes(out)


#: arbitrary JSON values (what a damaged or forged document may hold anywhere)
_chars = st.one_of(st.characters(), st.sampled_from(["\ud800", "\udfff", "\x00", "/", "."]))  # lone surrogates too
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(_chars, max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12)


@st.composite
def edited_json(draw: st.DrawFn, doc: Any, depth: int = 0) -> Any:
    """``doc`` (decoded JSON) with one value somewhere replaced by arbitrary JSON, an integer nudged across a
    range boundary, or a key dropped."""
    if isinstance(doc, dict) and doc and depth < 6 and draw(st.integers(0, 9)):
        key = draw(st.sampled_from(sorted(doc)))
        out = dict(doc)
        if draw(st.integers(0, 9)) == 0:
            del out[key]
        else:
            out[key] = draw(edited_json(doc[key], depth + 1))
        return out
    if isinstance(doc, list) and doc and depth < 6 and draw(st.integers(0, 9)):
        i = draw(st.integers(0, len(doc) - 1))
        return [*doc[:i], draw(edited_json(doc[i], depth + 1)), *doc[i + 1:]]
    if type(doc) is int and draw(st.booleans()):
        return doc + draw(st.sampled_from([-1, 1, -(2**31), 2**31, 2**63, -(2**63)]))
    return draw(json_values)
