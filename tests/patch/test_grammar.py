"""The custom tool's Lark grammar accepts every envelope our parser accepts, and rejects junk."""

from __future__ import annotations

import re
from pathlib import Path

import lark
import pytest

from executor.handlers.apply_patch import APPLY_PATCH_GRAMMAR
from sandbox.patch import envelope
from sandloop.errors import PatchParseError

SCENARIOS = Path(__file__).with_name("scenarios")


@pytest.fixture(scope="module")
def parser() -> object:
    return lark.Lark(APPLY_PATCH_GRAMMAR)


# A marker line with whitespace around it. The parser tolerates the padding models sometimes
# write; the grammar constrains the model to the canonical form, so those patches are left out.
_PADDED_MARKER = re.compile(r"^(\s+\*\*\* |\*\*\* .*\s$)")


def _envelopes() -> list[str]:
    out = []
    for patch in sorted(SCENARIOS.glob("*/patch")):
        text = patch.read_bytes().decode("utf-8")
        if any(_PADDED_MARKER.match(line) for line in text.splitlines()):
            continue
        try:
            envelope.parse(text)
        except PatchParseError:
            continue
        out.append(text)
    return out


def test_grammar_accepts_what_the_parser_accepts(parser: object) -> None:
    texts = _envelopes()
    assert len(texts) >= 5
    for text in texts:
        parser.parse(text)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text",
    [
        "*** Begin Patch\n*** End Patch\n",
        "*** Update File: a\n@@\n-a\n*** End Patch\n",
        "*** Begin Patch\n*** Update File: a\nno prefix\n*** End Patch\n",
        "*** Begin Patch\n*** Add File: a\n-not an add line\n*** End Patch\n",
    ],
)
def test_grammar_rejects_malformed_patches(parser: object, text: str) -> None:
    with pytest.raises(lark.exceptions.LarkError):
        parser.parse(text)  # type: ignore[attr-defined]
