"""Shared helpers for the patch tests."""

from __future__ import annotations

from pathlib import Path

from sandloop.files import PatchKind
from sandloop.verdict import Decision, Verdict


async def allow_all(path: str, kind: PatchKind) -> Verdict:
    return Verdict(Decision.ALLOW, "tests allow every file operation")


def tree(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (relative path → bytes); symlinks as 'link -> target'."""
    out: dict[str, bytes] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = f"symlink -> {p.readlink()}".encode()
        elif p.is_file():
            out[rel] = p.read_bytes()
    return out
