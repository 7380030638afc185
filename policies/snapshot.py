"""Snapshots of compiled policies: decide without loading the schema's models.

Loading a policy file reads its layers, validates them with pydantic and checks every inline
example with the shell parser; the decisions themselves need only the deciding keys
(:class:`~policies.compiled.PolicyView`). :func:`decider` keeps that view on the host the first
time a policy is loaded, and later answers from it — what a script running ``sandloop policy
explain`` 300 times pays for is then the parse of each command, not the schema.

A snapshot is trusted only as far as it is checked, every time, before use:

* it lives under the host's state directory (:func:`sandloop.hostfiles.state_dir`), outside
  every path a sandbox can write, and is opened and written without following a link
  (:class:`~sandloop.hostfiles.HostDir`);
* its name is a hash of the policy file's path and bytes, of sandloop's version and of the
  modules that read a policy (their size and time), so an edited file, another release or an
  edited checkout of sandloop looks for another snapshot;
* its first line is the sha256 of the rest (a torn or corrupted file is not read), and every layer
  it was built from (the file, what it extends, the presets) is read again and must hash as
  recorded.

Anything else — no snapshot, a check that fails, a state directory that cannot be used — loads
the policy in full (with its example checks and its error messages) and writes a fresh snapshot
when it can. Standard library only, besides the engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from policies.compiled import KeyPath, PolicyView, Source
from policies.engine import Decider, PolicyEngine, load_policy
from policies.paths import display, names_preset, preset_file
from sandloop import __version__
from sandloop.errors import HostPathRefused
from sandloop.hostfiles import HostDir, state_dir

__all__ = ["FOLDER", "KEPT", "decider", "snapshot_name"]

FORMAT = 1
FOLDER = "policy-snapshots"
KEPT = 64  # snapshots kept: one per policy file (and version) a person explains against

_CODE = Path(__file__).parent


def _code_stamp() -> str:
    """Size and time of every module of the policy package: an edited checkout of sandloop may
    read the same file differently, although its version has not changed."""
    stamps = []
    for entry in sorted(os.scandir(_CODE), key=lambda e: e.name):
        if entry.name.endswith(".py"):
            st = entry.stat(follow_symlinks=False)
            stamps.append(f"{entry.name}:{st.st_size}:{st.st_mtime_ns}")
    return ",".join(stamps)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file(spec: str | Path | None) -> Path | None:
    """The policy file a ``--policy``-style argument names (None: a preset that does not exist,
    which only the full load can explain)."""
    if spec is None:
        return preset_file("default")
    if names_preset(spec):
        return preset_file(str(spec))
    return Path(spec)


def snapshot_name(path: Path, data: bytes) -> str:
    """The snapshot's file name for the policy file at ``path`` (resolved) holding ``data``."""
    key = "\0".join([str(FORMAT), __version__, _code_stamp(), str(path), _sha256(data)])
    return f"{_sha256(key.encode())}.json"


def _folder(*, create: bool) -> HostDir:
    # The state directory is the user's (a link above it is their layout); the snapshots' own
    # folder is sandloop's, and a link in its place is refused.
    with HostDir(state_dir(), create=create) as state:
        return state.subdir(FOLDER)


def _sources(view: PolicyView) -> list[list[Any]]:
    return [[list(path), layer, line] for path, (layer, line) in view.sources.items()]


def _read(folder: HostDir, name: str, path: Path) -> PolicyView | None:
    """The view in snapshot ``name`` when every check holds, else None."""
    raw = folder.read(name)
    digest, _, body = raw.partition(b"\n")
    if digest.decode("ascii", "replace") != _sha256(body):
        return None
    data = json.loads(body)
    if data.get("format") != FORMAT or data.get("sandloop") != __version__ or data.get("path") != str(path):
        return None
    layers = [Path(p) for p, _ in data["layers"]]
    for layer, (_, sha) in zip(layers, data["layers"], strict=True):
        # as the loader hashes a layer: its text (read with universal newlines), as UTF-8
        if _sha256(layer.read_text(encoding="utf-8").encode()) != sha:
            return None
    sources: dict[KeyPath, Source] = {tuple(p): (layer, line) for p, layer, line in data["sources"]}
    return PolicyView.from_data(data["view"], [display(p) for p in layers], sources)


def _write(folder: HostDir, name: str, path: Path, engine: PolicyEngine) -> None:
    body = json.dumps({
        "format": FORMAT, "sandloop": __version__, "path": str(path),
        "layers": [[str(layer.path), layer.sha256] for layer in engine.loaded.layers],
        "view": engine.view.to_data(), "sources": _sources(engine.view),
    }, ensure_ascii=False, separators=(",", ":")).encode()
    folder.replace(name, _sha256(body).encode() + b"\n" + body)
    _prune(folder)


def _prune(folder: HostDir) -> None:
    """Keep the :data:`KEPT` newest snapshots (a bound: policy files change, old ones pile up)."""
    found = sorted((st.st_mtime_ns, name) for name, st in folder.files() if name.endswith(".json"))
    for _, name in found[:-KEPT]:
        folder.remove(name)


@contextlib.contextmanager
def _state() -> Iterator[HostDir | None]:
    try:
        folder = _folder(create=True)
    except (OSError, HostPathRefused):
        yield None  # no usable state directory: decide from the file itself
        return
    with folder:
        yield folder


def decider(spec: str | Path | None) -> Decider:
    """A :class:`~policies.engine.Decider` for the policy ``spec`` names (a file, a preset name,
    None for the default): from its snapshot when one passes every check, else from the file
    (raising :class:`~policies.model.PolicyLoadError` as :func:`~policies.engine.load_policy`
    does), keeping a snapshot for the next time."""
    file = _file(spec)
    try:
        path = file.resolve(strict=True) if file is not None else None
        data = path.read_bytes() if path is not None else None
    except OSError:
        path = data = None
    if path is None or data is None:
        return load_policy(spec)  # what is wrong with the argument is said by the full load
    name = snapshot_name(path, data)
    with _state() as folder:
        if folder is not None:
            with contextlib.suppress(OSError, HostPathRefused, ValueError, KeyError, TypeError):
                view = _read(folder, name, path)
                if view is not None:
                    return Decider(view)
        engine = load_policy(path)
        if folder is not None:
            with contextlib.suppress(OSError, HostPathRefused):
                _write(folder, name, path, engine)
        return engine
