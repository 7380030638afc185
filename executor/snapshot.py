"""A whole session's snapshot — the sandbox's own files and the conversation — and its resume.

:class:`Snapshotter` takes a run's snapshots into ``<run folder>/snapshot/``: the sandbox's
``/tmp`` tar and, with ``[session] writable_root``, its root committed to an image
(:meth:`sandbox.base.Session.capture`); the loop's state (``state-N.json``: the chain's last
response id and what the next request sends, or the stateless history with its reasoning items;
the budgets used); a listing of the checkout (for drift, never its contents: the checkout is the
host's); and ``manifest.json`` last, naming those files, whose ``count`` going up is the sign a
snapshot is complete.

:func:`load` reads one back for ``sandloop run --resume``, and every way it can be unusable is a
one-line :class:`SnapshotError` that says what to do. :func:`link_audit` starts the resumed
run's audit log with the previous run's records up to the snapshot's head (checked against it),
so one ``sandloop audit verify`` covers both runs.

Never in a snapshot: the API key (the state holds the conversation, not the client), the host's
environment (no sandbox ever had it), the egress proxy's settings (given per command, never
written into the sandbox).
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from executor.environment import environment_config
from executor.loop import LoopState, TurnRecord
from policies.audit import Head, check
from policies.engine import PolicyEngine, load_policy
from policies.model import SessionSection
from sandbox.backends import open_session
from sandbox.base import Session
from sandbox.snapshots import FOLDER, HOME_TAR, MANIFEST, image_labels, image_tag
from sandloop import __version__
from sandloop.errors import ConfigError
from sandloop.hostfiles import HostDir, state_dir

__all__ = ["ANSWERED", "FORMAT", "STATE", "LoadedSnapshot", "PolicyChanged", "RunFacts", "SnapshotError", "Snapshotter",
           "checkout_listing",
           "copy_tar", "drift", "link_audit", "load", "require_image", "run_folder_of", "session_factory"]

#: why a resume of an answered conversation needs a TASK (nothing is left for the model to answer)
ANSWERED = "the snapshot's conversation was answered: give a TASK (the next user message) to continue it"
#: the layout this sandloop writes and reads; another one is refused, naming the version that wrote it
FORMAT = 1
#: each snapshot's files carry its count (``tmp-3.tar``): the manifest, replaced last, names the
#: ones it is made of, so a snapshot cut short (a failure, a SIGKILL) leaves the one before whole
STATE = "state-{n}.json"
CHECKOUT = "checkout-{n}.json"
TAR = "tmp-{n}.tar"
_GENERATIONS = re.compile(r"(state|checkout)-\d+\.json|tmp-\d+\.tar")
#: what a snapshot killed while writing leaves (HostDir's temporary names for them)
_LEFT_OVER = re.compile(r"\.((state|checkout)-\d+\.json|tmp-\d+\.tar)\.[0-9a-f]+\.tmp")
#: calls that can change the sandbox or the checkout: after a turn with none, nothing is re-taken
_CHANGING = frozenset({"shell_call", "local_shell_call", "apply_patch_call", "custom_tool_call"})
#: what /tmp holds (names, sizes, times, modes), one process (no shell pipeline: every turn pays
#: for it); hashed on the host: the same listing, nothing changed
_FINGERPRINT = "find {names} -xdev -printf '%p %s %T@ %m\\n'"


class SnapshotError(ConfigError):
    """A snapshot that cannot be resumed (missing, corrupt, another format, its image gone)."""


class PolicyChanged(SnapshotError):
    """The policy file changed since the snapshot; ``difference`` is a unified diff."""

    def __init__(self, message: str, difference: str) -> None:
        super().__init__(message)
        self.difference = difference


def checkout_listing(repo: Path) -> dict[str, list[int]]:
    """Every file and link of the checkout (``.git`` left out: the host's git changes it), with
    its size and modification time, no link followed."""
    listing: dict[str, list[int]] = {}
    for dirpath, dirs, files in os.walk(repo, followlinks=False):
        dirs[:] = [d for d in dirs if d.lower() != ".git"]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            listing[os.path.relpath(path, repo)] = [st.st_size, st.st_mtime_ns]
    return listing


def drift(before: Mapping[str, list[int]], repo: Path) -> int:
    """How many paths of the checkout were added, removed or changed since ``before``."""
    now = checkout_listing(repo)
    return sum(1 for path in before.keys() | now.keys() if before.get(path) != now.get(path))


@dataclass
class RunFacts:
    """What a snapshot records about its run besides the sandbox: enough to open it again."""

    run_id: str
    repo: Path
    policy: str | None
    engine: PolicyEngine
    model: str
    base_url: str | None
    instructions: str
    backend: str
    base_image: str | None


@dataclass
class Snapshotter:
    """Takes one run's snapshots (one at a time) into its folder."""

    folder: Path  # the run's folder
    session: Session
    facts: RunFacts
    audit_head: Any  # () -> the audit chain's head now
    count: int = 0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _fingerprint: str | None = None
    _image: str | None = None
    _tar: dict[str, Any] = field(default_factory=dict)
    _checkout: str = ""

    @property
    def settings(self) -> SessionSection:
        return self.facts.engine.policy.session

    @property
    def names(self) -> list[str]:
        return ["."] if self.settings.snapshot_tmp else ["home"]

    async def take(self, state: LoopState, *, reason: str, turn: TurnRecord | None = None) -> Path:
        """Snapshot the session at ``state``. After a ``turn`` (every_turn), only what may have
        changed is taken again: /tmp when its listing (names, sizes, times) changed, the root
        when the turn ran a command, the checkout's listing when it ran a command or a patch;
        the state always. Returns the snapshot's folder."""
        async with self._lock:
            into = HostDir(self.folder).subdir(FOLDER)
            try:
                n = self.count + 1
                whole = turn is None or self.count == 0
                changing = whole or any(call.type in _CHANGING for call in (turn.calls if turn else []))
                fingerprint = await self._tmp_fingerprint()
                tar_too = whole or fingerprint != self._fingerprint
                root_too = self.settings.writable_root and changing
                before = self._image
                if tar_too or root_too:
                    await self._sandbox(into, n, tar=tar_too, root=root_too)
                if changing:
                    listing = await asyncio.to_thread(checkout_listing, self.facts.repo)
                    self._checkout = CHECKOUT.format(n=n)
                    into.replace(self._checkout, json.dumps(listing).encode())
                into.replace(STATE.format(n=n), json.dumps(state.to_json(), ensure_ascii=False).encode())
                into.replace(MANIFEST, json.dumps(self._manifest(state, reason, n), indent=2).encode())
                # only now is the new snapshot whole: what the one before was made of can go
                self.count, self._fingerprint = n, fingerprint
                kept = {self._tar.get("name"), self._checkout, STATE.format(n=n)}
                for name in into.names():
                    if (_GENERATIONS.fullmatch(name) and name not in kept) or _LEFT_OVER.fullmatch(name):
                        into.remove(name)
                if before not in (None, self._image):
                    await asyncio.to_thread(_forget_image, str(before))  # only the latest commit is resumed
            finally:
                into.close()
            return self.folder / FOLDER

    async def _tmp_fingerprint(self) -> str:
        names = " ".join(shlex.quote(f"/tmp/{name}") for name in self.names)
        result = await self.session.run(_FINGERPRINT.format(names=names), timeout_s=30)
        if result.stdout.truncated:  # a listing too long to keep whole: taken as changed
            return secrets.token_hex(8)
        return hashlib.sha256(result.stdout.text.encode()).hexdigest()

    async def _sandbox(self, into: HostDir, n: int, *, tar: bool, root: bool) -> None:
        commit = None
        if root:
            labels = image_labels(self.facts.run_id, self.facts.base_image or "")
            commit = (image_tag(self.facts.run_id, n), labels)
        name = TAR.format(n=n)
        kept = await self.session.capture(into, name, names=self.names if tar else None, commit=commit)
        if kept.image is not None:
            self._image = kept.image
        if tar:
            self._tar = {"name": name, "bytes": kept.tar_bytes, "sha256": kept.tar_sha256}

    def _manifest(self, state: LoopState, reason: str, n: int) -> dict[str, Any]:
        facts, loaded = self.facts, self.facts.engine.loaded
        return {
            "format": FORMAT, "sandloop": __version__, "created": time.time(), "count": n,
            "state": STATE.format(n=n), "checkout": self._checkout,
            "reason": reason, "run_id": facts.run_id, "repo": str(facts.repo), "backend": facts.backend,
            "policy": {"spec": facts.policy, "sha256": facts.engine.sha256,
                       "layers": [{"name": layer.name, "text": layer.text} for layer in loaded.layers]},
            "model": facts.model, "base_url": facts.base_url, "instructions": facts.instructions,
            "stateless": state.stateless, "turns": state.turns, "image": self._image,
            "base_image": facts.base_image, "tar": self._tar, "names": self.names,
            "audit_head": str(self.audit_head()),
        }


def _forget_image(image: str) -> None:
    import docker
    import docker.errors

    client = docker.from_env()
    try:
        client.images.remove(image)
    except docker.errors.APIError:
        pass  # in use (a fork resumed from it) or gone: the prune takes it later
    finally:
        client.close()


# -- resume ----------------------------------------------------------------------------------


def run_folder_of(run: str | Path) -> Path:
    """RUN as ``sandloop run --resume`` takes it: a run id under the state directory, a run
    folder, or its snapshot folder."""
    path = Path(run)
    if path.name == FOLDER and (path / MANIFEST).exists():
        return path.parent
    if path.is_dir():
        return path
    by_id = state_dir() / "runs" / str(run)
    if "/" not in str(run) and by_id.is_dir():
        return by_id
    raise SnapshotError(f"no run {run}: give a run id (`sandloop snapshot ls` lists them) or a run folder")


@dataclass(frozen=True)
class LoadedSnapshot:
    """A snapshot read back and checked: what a resume needs."""

    folder: Path  # the snapshot's folder
    manifest: dict[str, Any]
    state: LoopState
    checkout: dict[str, list[int]]

    @property
    def tar(self) -> Path:
        return self.folder / str(self.manifest["tar"]["name"])

    @property
    def run_id(self) -> str:
        return str(self.manifest["run_id"])

    @property
    def image(self) -> str | None:
        image = self.manifest.get("image")
        return image if isinstance(image, str) else None

    def check_policy(self, engine: PolicyEngine, *, changed_ok: bool) -> str | None:
        """None when the policy is the snapshot's; else the difference (``changed_ok``), or
        PolicyChanged."""
        recorded = self.manifest["policy"]
        if engine.sha256 == recorded["sha256"]:
            return None
        old = "".join(layer["text"] for layer in recorded["layers"]).splitlines(keepends=True)
        new = "".join(layer.text for layer in engine.loaded.layers).splitlines(keepends=True)
        difference = "".join(difflib.unified_diff(old, new, "policy at the snapshot", "policy now"))
        if changed_ok:
            return difference
        changed = sum(1 for line in difference.splitlines()
                      if line[:1] in "+-" and not line.startswith(("+++", "---")))
        raise PolicyChanged(f"the policy changed since the snapshot of {self.run_id} ({changed} line(s) differ): "
                            "resume with --policy-changed-ok to accept it, or restore the policy file", difference)


def load(run: str | Path) -> LoadedSnapshot:
    """Read RUN's snapshot and check it whole; a one-line SnapshotError otherwise."""
    folder = run_folder_of(run) / FOLDER
    where = folder / MANIFEST
    if not where.is_file():
        raise SnapshotError(f"no snapshot in {folder.parent}: take one with `sandloop snapshot RUN` while it runs, "
                            "or set [session] snapshot = \"on_stop\" in its policy")
    try:
        manifest = json.loads(where.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"the snapshot in {folder} is corrupt ({MANIFEST}: {exc}); resume an older copy or "
                            "start a new run") from None
    if manifest.get("format") != FORMAT:
        raise SnapshotError(f"the snapshot in {folder} has format {manifest.get('format')!r} (written by sandloop "
                            f"{manifest.get('sandloop', '?')}); this sandloop {__version__} reads format {FORMAT}: "
                            "resume it with the sandloop that took it, or start a new run")
    try:
        files = [str(manifest[key]) for key in ("state", "checkout")] + [str(manifest["tar"]["name"])]
        if not all(_GENERATIONS.fullmatch(name) for name in files):
            raise ValueError(f"the manifest names files no snapshot writes: {files}")
        state = LoopState.from_json(json.loads((folder / files[0]).read_text(encoding="utf-8")))
        checkout = json.loads((folder / files[1]).read_text(encoding="utf-8"))
        tar = manifest["tar"]
        size = (folder / files[2]).stat().st_size
        if size != tar["bytes"]:
            raise ValueError(f"{files[2]} holds {size} bytes, the manifest says {tar['bytes']}")
        for key in ("policy", "run_id", "audit_head", "repo"):
            manifest[key]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SnapshotError(f"the snapshot in {folder} is corrupt ({type(exc).__name__}: {exc}); "
                            "start a new run") from None
    return LoadedSnapshot(folder, manifest, state, checkout)


def require_image(snapshot: LoadedSnapshot, client: Any) -> None:
    """The snapshot's root image must still be there (``sandloop snapshot prune`` removes it)."""
    import docker.errors

    if snapshot.image is None:
        return
    try:
        client.images.get(snapshot.image)
    except docker.errors.ImageNotFound:
        raise SnapshotError(f"the snapshot of {snapshot.run_id} needs its root image {snapshot.image}, which "
                            "was removed (pruned): it cannot be resumed; start a new run") from None


def link_audit(snapshot: LoadedSnapshot, folder: Path, name: str) -> Head:
    """Start ``folder/name`` (the resumed run's audit log) with the previous run's records up to
    the snapshot's head, checked against it: the new records chain on from there."""
    previous = snapshot.folder.parent / name
    head = Head.parse(snapshot.manifest["audit_head"])
    try:
        found = check(previous, head=head)
    except OSError as exc:
        raise SnapshotError(f"the audit log of {snapshot.run_id} cannot be read ({exc}): resume needs it") from None
    if found.problems:
        raise SnapshotError(f"the audit log of {snapshot.run_id} does not verify up to the snapshot's head "
                            f"({found.problems[0]}): it cannot be continued; start a new run")
    # no log: the run decided nothing (check() refused it otherwise)
    lines = previous.read_bytes().splitlines(keepends=True)[: head.records] if previous.exists() else []
    with HostDir(folder) as target:
        if target.exists(name):
            raise SnapshotError(f"{folder / name} exists: a resumed run starts a new audit log")
        target.replace(name, b"".join(lines))
    return head


def copy_tar(snapshot: LoadedSnapshot, folder: Path) -> Path:
    """The snapshot's tar beside the resumed run's files (a link where the disk allows), so that
    the session restores from a file a prune of the old run cannot take away."""
    with HostDir(folder) as target:
        target.subdir("resumed").close()
    path = folder / "resumed" / HOME_TAR
    try:
        os.link(snapshot.tar, path, follow_symlinks=False)
    except OSError:
        shutil.copyfile(snapshot.tar, path, follow_symlinks=False)
    # Mounted read-only for the sandbox's user, who wrote it: readable by it. The folders above
    # stay the host's own (0700), so no other local user reaches it.
    os.chmod(path, 0o644, follow_symlinks=False)
    return path


async def session_factory(run: str | Path, *, repo: str | Path | None = None) -> Callable[[], Awaitable[Session]]:
    """A factory of sessions that each start from RUN's snapshot — its $HOME, its root image —
    under the snapshot's policy (refused if it changed), for :class:`sandbox.pool.SessionPool`:
    branch many sandboxes from one point (evaluations, rollouts). Each is independent of the
    others; a pool hands out sandboxes, not the conversation (``open_run(resume=...)`` continues
    that). The snapshot must stay while the pool starts sessions from it."""
    loaded = await asyncio.to_thread(load, run)
    engine = await asyncio.to_thread(load_policy, loaded.manifest["policy"]["spec"])
    loaded.check_policy(engine, changed_ok=False)
    if loaded.image is not None:
        import docker

        client = await asyncio.to_thread(docker.from_env)
        try:
            await asyncio.to_thread(require_image, loaded, client)
        finally:
            client.close()
    workspace = Path(repo or loaded.manifest["repo"]).resolve()
    backend = engine.policy.backend.type
    config = await environment_config(engine.loaded, workspace, backend=backend, image=None, log_dir=None,
                                      on_event=None)
    config = replace(config, restore=str(loaded.tar), image=loaded.image or config.image)
    options = engine.policy.backend.options(backend)

    async def open_one() -> Session:
        return await open_session(backend, workspace, config, options, where=engine.loaded.where)

    return open_one
