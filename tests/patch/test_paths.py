"""Lexical path validation: every refusal names its reason; safe spellings are normalized."""

from __future__ import annotations

import unicodedata

import pytest

from sandbox.patch import paths
from sandloop.errors import PathRefused
from sandloop.matching import glob_match


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "empty"),
        ("../x", "'..' segments"),
        ("a/../../x", "'..' segments"),
        ("a/b/..", "'..' segments"),
        ("/etc/passwd", "absolute paths"),
        ("x\0y", "control character U+0000"),
        ("a\nb", "control character U+000A"),
        ("a\x7fb", "control character U+007F"),
        ("evil\u202etxt.exe", "bidirectional control"),
        ("~/x", "'~'"),
        ("~root/.ssh/authorized_keys", "'~'"),
        ("C:/Windows/x", "drive letters"),
        ("a\\b", "backslashes"),
        ("dir/", "names a directory"),
        (".", "workspace itself"),
        ("./", "names a directory"),
        ("a" * 256, "longer than 255 bytes"),
        ("é" * 128, "longer than 255 bytes"),  # 256 bytes in UTF-8
        ("/".join(["d" * 200] * 21), "longer than 4096 bytes"),
    ],
)
def test_refused_with_reason(path: str, reason: str) -> None:
    with pytest.raises(PathRefused) as info:
        paths.validate(path)
    assert reason in str(info.value)


@pytest.mark.parametrize(
    ("path", "clean"),
    [
        ("src/app.py", "src/app.py"),
        ("./src//app.py", "src/app.py"),
        ("a/./b", "a/b"),
        ("a..b/c", "a..b/c"),  # dots inside a name are fine
        (".gitignore", ".gitignore"),
        ("x~", "x~"),
        ("a" * 255, "a" * 255),
    ],
)
def test_safe_paths_are_normalized(path: str, clean: str) -> None:
    assert paths.validate(path) == clean


def test_unicode_is_nfc_normalized() -> None:
    decomposed = unicodedata.normalize("NFD", "café/ñ.txt")
    assert decomposed != "café/ñ.txt"
    assert paths.validate(decomposed) == "café/ñ.txt"


@pytest.mark.parametrize(
    "path", [".git/hooks/pre-commit", ".git/config", ".git", "./.git/HEAD"]
)
def test_git_is_read_only_by_default(path: str) -> None:
    with pytest.raises(PathRefused, match=r"read-only \(matches '\.git/\*\*'\)"):
        paths.validate(path)


def test_read_only_globs_come_from_the_caller() -> None:
    assert paths.validate(".git/config", read_only_globs=()) == ".git/config"
    globs = ("secrets/*.key", "**/node_modules/**")
    with pytest.raises(PathRefused, match="secrets"):
        paths.validate("secrets/prod.key", globs)
    with pytest.raises(PathRefused, match="node_modules"):
        paths.validate("web/app/node_modules/x/index.js", globs)
    assert paths.validate("secrets/sub/prod.key", globs) == "secrets/sub/prod.key"
    assert paths.validate("sub/.git/config") == "sub/.git/config"  # default covers the root only


@pytest.mark.parametrize(
    ("path", "pattern", "hit"),
    [
        ("a/b/c.py", "**/*.py", True),
        ("c.py", "**/*.py", True),
        ("a/b/c.py", "*.py", False),
        ("a/b/c.py", "a/*/c.py", True),
        ("a/b/x/c.py", "a/**/c.py", True),
        ("a/c.py", "a/**/c.py", True),
        (".gitx/a", ".git/**", False),
    ],
)
def test_glob_matching(path: str, pattern: str, hit: bool) -> None:
    assert glob_match(pattern, path) is hit
