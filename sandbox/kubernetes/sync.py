"""The workspace of a pod: the host checkout copied in at start, the sandbox's changes copied
back at close (and on demand), through the helper's ordinary operations.

A pod cannot mount the host's checkout, so the host sends it:

* **in** — a tar of the checkout (regular files, directories and symlinks as they are; nothing
  outside it is followed) is committed into the empty workspace in parts through the helper's
  ``commit`` (all or nothing, ``O_NOFOLLOW``), then unpacked there by ``python3`` (``tarfile``),
  which every sandbox image has. The host keeps a snapshot: each file's mode and sha256.
* **back** — the pod lists its workspace (path, kind, mode, sha256; symlinks not followed); the
  host compares that with its snapshot, reads each changed file through the helper's ``read``
  (which refuses symlinks and paths leaving the workspace), and applies all changes to the host
  checkout at once with the helper's own all-or-nothing commit (:mod:`sandbox.helper.files`,
  run on the host): the validation patches get. The pod's answers are never trusted for more
  than a hint: what is written is what ``read`` returned.

Where the checkout has read-only paths (``.git`` and the policy's whole-path ``[files]
read_only`` globs, the hooks directory ``core.hooksPath`` names, submodules' and nested
repositories' ``.git``), the tar goes whole to the pod's ``copy-in`` init container instead
(:func:`unpack`, :mod:`.untar`), laid out for the read-only volume mounts of the helper's
container (:meth:`~.manifest.Plan.pod`): commands there meet a read-only file system, as on
Docker.

Never copied back: anything under a read-only path (read-only in the pod anyway) or under any
other ``.git`` (one past the bound of the search for nested repositories, or one the sandbox
made), new symlinks (the host would follow them), and anything whose host copy changed since the
snapshot (a conflict: the whole copy-back is refused, nothing is written).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import json
import os
import shlex
import stat
import tarfile
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from sandloop.errors import PathRefused, SandboxError, SandboxUnavailable
from sandloop.files import FileChange
from sandloop.matching import glob_match

from ..helper.client import HelperClient
from ..helper.files import Workspace
from ..helper.wire import Change, OpError
from ..patch.paths import validate
from . import untar
from .manifest import CHECKOUT, read_only_subpath

__all__ = ["SYNC_DIR", "Entry", "Snapshot", "SyncResult", "copy_back", "copy_in", "snapshot", "unpack"]

T = TypeVar("T")

#: Where the parts of the incoming tar wait to be unpacked (gone once they are).
SYNC_DIR = ".sandloop-sync"
PART_BYTES = 16 << 20
READ_CONCURRENCY = 16
MAX_FILE_BYTES = 64 << 20  # what the helper reads in one piece
SCRIPT_TIMEOUT_S = 1800.0
#: What one copy-back may bring home: the pod is untrusted, and everything it sends is held in
#: memory and written to the host's disk (hard links and sparse files cost the pod nothing).
MAX_COPY_BACK_BYTES = 512 << 20
MAX_COPY_BACK_FILES = 100_000
#: How long the host waits for one file's content, or beyond a script's own time limit.
READ_TIMEOUT_S = 120.0

#: Runs in the pod: unpack the parts into the workspace, then remove them.
UNPACK = """\
import glob, os, shutil, sys, tarfile
parts = sorted(glob.glob(sys.argv[1] + '/in.*'))
class Parts:
    def __init__(self): self.files = [open(p, 'rb') for p in parts]
    def read(self, n=-1):
        out = b''
        while self.files and (n < 0 or len(out) < n):
            chunk = self.files[0].read(-1 if n < 0 else n - len(out))
            if chunk: out += chunk
            else: self.files.pop(0).close()
        return out
with tarfile.open(fileobj=Parts(), mode='r|') as tar:
    kwargs = {'filter': 'tar'} if hasattr(tarfile, 'tar_filter') else {}
    tar.extractall('.', **kwargs)
shutil.rmtree(sys.argv[1])
"""

#: Runs in the pod: one JSON line per entry of the workspace (symlinks not followed), skipping
#: the directories named in argv.
LIST = """\
import hashlib, json, os, stat, sys
skip = set(sys.argv[1:])
out = sys.stdout
for root, dirs, files in os.walk('.'):
    rel = os.path.relpath(root, '.')
    rel = '' if rel == '.' else rel + '/'
    keep = []
    for d in dirs:
        path = rel + d
        if path in skip: continue
        if os.path.islink(os.path.join(root, d)): files.append(d)
        else: keep.append(d)
    dirs[:] = keep
    for f in files:
        path = rel + f
        if path in skip: continue
        full = os.path.join(root, f)
        try:
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                row = {'p': path, 't': 'l', 'h': os.readlink(full)}
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(full, 'rb') as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b''): h.update(chunk)
                row = {'p': path, 't': 'f', 'm': stat.S_IMODE(st.st_mode), 's': st.st_size, 'h': h.hexdigest()}
            else:
                continue
        except OSError:
            continue
        out.write(json.dumps(row, ensure_ascii=True) + '\\n')
"""


@dataclass(frozen=True)
class Entry:
    kind: str  # "f" file, "l" symlink
    digest: str  # sha256 of a file; a link's target
    mode: int = 0


@dataclass
class Snapshot:
    """The host checkout as the pod has it: path -> entry, and the paths never copied back."""

    root: Path
    entries: dict[str, Entry]
    protected: tuple[str, ...]  # workspace-relative paths (``.git``): never copied back

    @property
    def read_only_globs(self) -> tuple[str, ...]:
        return tuple(g for p in self.protected for g in (p, f"{p}/**"))

    def is_protected(self, path: str) -> bool:
        # Nothing under any .git comes home, read-only in the pod or not: one past the bound of
        # the search for nested repositories, or one the sandbox made, is the sandbox's. Without
        # case, as the globs: .GIT is .git on a case-insensitive disk.
        return ".git" in path.casefold().split("/") or \
            any(glob_match(g, path, fold_case=True) for g in self.read_only_globs)

    def refusal(self, path: str) -> str | None:
        """Why ``path`` may not be written on the host (the checks a patch's paths get), or None."""
        try:
            path.encode("utf-8")
        except UnicodeError:
            return "the name is not valid UTF-8"
        try:
            clean = validate(path, self.read_only_globs)
        except PathRefused as exc:
            return str(exc)
        return None if clean == path else f"{path!r} is not in its normal form ({clean!r})"


@dataclass
class SyncResult:
    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "path: why"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def snapshot(root: Path, protected: Iterable[str], staged: Sequence[str] | None = None) -> tuple[Snapshot, bytes]:
    """The tar the pod unpacks, and the snapshot of what it holds. Blocking.

    ``staged``: the tar is for the copy-in init container, which sees the whole workspace volume
    (:data:`~.manifest.CHECKOUT` and the read-only parts beside it): the content of each path of
    ``staged`` goes to its :func:`~.manifest.read_only_subpath` — an empty placeholder of the
    same kind stays in its place, so the pod's runtime finds the mount point there and makes no
    folder of its own on the way —, everything else under ``checkout/``."""
    root = root.resolve()
    entries: dict[str, Entry] = {}
    name = _tar_name(staged)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if staged is not None:
            _add_dir(tar, root, CHECKOUT)
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = Path(dirpath).relative_to(root).as_posix()
            prefix = "" if rel_dir == "." else rel_dir + "/"
            for dirname in sorted(dirnames):
                full = Path(dirpath, dirname)
                if full.is_symlink():
                    filenames.append(dirname)  # a link to a directory is a link, never followed
                    continue
                _add_dir(tar, full, name(prefix + dirname))
            dirnames[:] = [d for d in dirnames if not Path(dirpath, d).is_symlink()]
            for filename in sorted(filenames):
                rel = prefix + filename
                try:
                    _add(tar, Path(dirpath, filename), rel, name(rel), entries)
                except OSError:
                    continue  # gone meanwhile, or unreadable: not part of the copy
        for rel in staged or ():
            placeholder = tarfile.TarInfo(f"{CHECKOUT}/{rel}")
            if (root / rel).is_dir():
                placeholder.type, placeholder.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(placeholder)
    return Snapshot(root, entries, tuple(protected)), buf.getvalue()


def _tar_name(staged: Sequence[str] | None) -> Callable[[str], str]:
    """Where a checkout path goes in the tar: as it is, or laid out for the copy-in container."""
    if staged is None:
        return lambda rel: rel

    def name(rel: str) -> str:
        for i, path in enumerate(staged):
            if rel == path or rel.startswith(path + "/"):
                return read_only_subpath(i) + rel[len(path):]
        return f"{CHECKOUT}/{rel}"

    return name


def _add_dir(tar: tarfile.TarFile, full: Path, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, stat.S_IMODE(full.lstat().st_mode) | 0o700
    tar.addfile(info)


def _add(tar: tarfile.TarFile, full: Path, rel: str, name: str, entries: dict[str, Entry]) -> None:
    st = full.lstat()
    info = tarfile.TarInfo(name)
    info.mtime = int(st.st_mtime)
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(full)
        info.type, info.linkname = tarfile.SYMTYPE, target
        tar.addfile(info)
        entries[rel] = Entry("l", target)
    elif stat.S_ISREG(st.st_mode):
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read()
        info.size, info.mode = len(data), stat.S_IMODE(st.st_mode) & 0o777
        tar.addfile(info, io.BytesIO(data))
        entries[rel] = Entry("f", _digest(data), info.mode)


async def _script(client: HelperClient, script: str, args: Sequence[str], *, output: int) -> str:
    command = " ".join(["python3", "-I", "-c", shlex.quote(script), *map(shlex.quote, args)])
    result = await _bounded(client, client.run(command, timeout_s=SCRIPT_TIMEOUT_S, max_output_bytes=output, env={}),
                            SCRIPT_TIMEOUT_S + READ_TIMEOUT_S)
    if result.exit_code != 0:
        raise SandboxError(f"the workspace copy failed in the pod (exit {result.exit_code}): "
                           f"{result.stderr.text.strip()[-500:]}")
    if result.stdout.dropped_bytes:
        raise SandboxError("the pod's workspace listing was too large to copy back")
    return result.stdout.text


async def copy_in(client: HelperClient, tar: bytes) -> None:
    """Unpack ``tar`` into the pod's (empty) workspace."""
    for n, start in enumerate(range(0, max(len(tar), 1), PART_BYTES)):
        await client.commit([FileChange(f"{SYNC_DIR}/in.{n:06d}", tar[start:start + PART_BYTES], 0o600)])
    await _script(client, UNPACK, [SYNC_DIR], output=65536)


async def unpack(send: Callable[[bytes], None], recv: Callable[[int], bytes], tar: bytes) -> None:
    """Send ``tar`` to the copy-in container's program (:mod:`.untar`) over its attach stream
    (``send``, ``recv``: its stdin and stdout) and wait for its word that all of it is in place."""
    await asyncio.to_thread(send, untar.frame(tar))
    said = b""
    while untar.DONE not in said:
        try:
            chunk = await asyncio.wait_for(asyncio.to_thread(recv, 4096), SCRIPT_TIMEOUT_S)
        except TimeoutError:
            raise SandboxUnavailable(f"the copy-in container did not finish within {SCRIPT_TIMEOUT_S:.0f}s") from None
        if not chunk:
            raise SandboxError("the copy-in container ended before the checkout was in")
        said = (said + chunk)[-4096:]


def _listing(text: str) -> dict[str, Entry]:
    found: dict[str, Entry] = {}
    for line in text.splitlines():
        try:
            row = json.loads(line)
            path, kind = str(row["p"]), str(row["t"])
            found[path] = Entry(kind, str(row["h"]), int(row.get("m", 0)) & 0o777)
        except (ValueError, KeyError, TypeError):
            continue  # a line a command forged or broke: ignored, it only hints at changes
    return found


def _host_entry(root: Path, rel: str) -> Entry | None:
    """The host's current entry at ``rel`` (never following a link, on the way either), for the
    conflict check. Under a folder that is a link on the host, nothing is there: what the pod
    would write there is refused by the commit, and nothing outside is read or compared."""
    full = root / rel
    parent = root
    for part in Path(rel).parts[:-1]:
        parent = parent / part
        try:
            if not stat.S_ISDIR(parent.lstat().st_mode):
                return None
        except OSError:
            return None
    try:
        st = full.lstat()
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return Entry("l", os.readlink(full))
    if stat.S_ISREG(st.st_mode):
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as fh:
            return Entry("f", _digest(fh.read()), stat.S_IMODE(st.st_mode) & 0o777)
    return Entry("?", "")


async def copy_back(client: HelperClient, snap: Snapshot) -> SyncResult:
    """Bring the pod's changes to the host checkout (all or nothing) and move the snapshot on."""
    skip = [SYNC_DIR, *snap.protected]
    pod = _listing(await _script(client, LIST, skip, output=256 << 20))
    result = SyncResult()
    wanted: list[str] = []
    for path, entry in sorted(pod.items()):
        old = snap.entries.get(path)
        if old == entry or snap.is_protected(path) or path.startswith(SYNC_DIR + "/"):
            continue
        why = "a symlink (never copied back)" if entry.kind == "l" else snap.refusal(path)
        if why is not None:
            result.skipped.append(f"{path}: {why}")
        else:
            wanted.append(path)
    gone = sorted(p for p in snap.entries
                  if p not in pod and not snap.is_protected(p) and not p.startswith(SYNC_DIR + "/"))
    if len(wanted) + len(gone) > MAX_COPY_BACK_FILES:
        raise SandboxError(f"copy-back refused, nothing written: {len(wanted) + len(gone)} changed files "
                           f"(at most {MAX_COPY_BACK_FILES})")
    contents = await _read_all(client, wanted, result)
    changes: list[Change] = []
    new_entries = dict(snap.entries)
    for path in wanted:
        if path not in contents:
            continue
        data = contents[path]
        mode = pod[path].mode
        changes.append({"path": path, "data": base64.b64encode(data).decode(), "mode": mode})
        new_entries[path] = Entry("f", _digest(data), mode)
        result.written.append(path)
    for path in gone:
        changes.append({"path": path, "data": None, "mode": None})
        new_entries.pop(path, None)
        result.deleted.append(path)
    if not changes:
        return result
    await asyncio.to_thread(_apply, snap, changes, new_entries)
    snap.entries = new_entries
    return result


async def _bounded(client: HelperClient, call: Awaitable[T], timeout_s: float) -> T:
    """``call`` within ``timeout_s``, or the helper is taken as dead (a pod that stops answering
    must not hold the front-end, its close included)."""
    try:
        return await asyncio.wait_for(call, timeout_s)
    except TimeoutError:
        client.mark_dead("no answer during the workspace copy")
        raise SandboxUnavailable(f"the pod did not answer within {timeout_s:.0f}s during the workspace copy") \
            from None


async def _read_all(client: HelperClient, paths: list[str], result: SyncResult) -> dict[str, bytes]:
    gate = asyncio.Semaphore(READ_CONCURRENCY)
    contents: dict[str, bytes] = {}
    total = 0

    async def one(path: str) -> None:
        nonlocal total
        async with gate:
            try:
                data = await _bounded(client, client.read_file(path), READ_TIMEOUT_S)
            except SandboxUnavailable:
                raise  # the pod is gone: nothing is copied back, not a part of it
            except SandboxError as exc:  # gone, turned into a link, too large: reported, not copied
                result.skipped.append(f"{path}: {exc}")
                return
            if not isinstance(data, bytes) or len(data) > MAX_FILE_BYTES:
                raise SandboxError(f"copy-back refused, nothing written: the pod sent {path} larger than "
                                   f"{MAX_FILE_BYTES >> 20} MiB")
            total += len(data)
            if total > MAX_COPY_BACK_BYTES:
                raise SandboxError(f"copy-back refused, nothing written: more than {MAX_COPY_BACK_BYTES >> 20} "
                                   "MiB of changed files")
            contents[path] = data

    await asyncio.gather(*(one(p) for p in paths))
    return contents


def _apply(snap: Snapshot, changes: list[Change], new: dict[str, Entry]) -> None:
    """The host side: refuse everything if the host changed a file we would write (unless it
    already holds what we would write); else commit."""
    conflicts = []
    for change in list(changes):
        path = change["path"]
        now = _host_entry(snap.root, path)
        if now == new.get(path):
            changes.remove(change)  # the host has it already
        elif now != snap.entries.get(path):
            conflicts.append(path)
    if conflicts:
        shown = ", ".join(conflicts[:5]) + (" …" if len(conflicts) > 5 else "")
        raise SandboxError(f"copy-back refused, nothing written: changed on the host since the session "
                           f"started: {shown}")
    if not changes:
        return
    try:
        Workspace(str(snap.root), max_read_bytes=MAX_FILE_BYTES).commit(changes)
    except OpError as exc:
        raise SandboxError(f"copy-back refused, nothing written: {exc}") from None
    with contextlib.suppress(OSError):
        os.utime(snap.root)  # tools watching the checkout see it changed
