"""Where a session's snapshots are kept, and how they are found, listed and pruned.

A snapshot lives in its run's folder (``<state dir>/runs/<run id>/snapshot/``, where no sandbox
can write): ``manifest.json`` (written by the front-end, :mod:`executor.snapshot`), the loop's
state, and ``tmp-<n>.tar`` — the sandbox's ``$HOME`` (``/tmp/home``; all of ``/tmp`` when the policy
says) as the sandbox itself wrote it. A session whose root file system is writable
(``[session] writable_root``) also has its root committed by the engine to an image,
``sandloop-snapshot:<run id>-<n>``, labelled like the environments (:data:`RUN_LABEL`,
:data:`VERSION_LABEL`, :data:`BASE_LABEL`) so that ``sandloop snapshot ls | prune`` and
``sandloop gc`` find them.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandloop import __version__
from sandloop.hostfiles import state_dir

__all__ = [
    "BASE_LABEL",
    "FOLDER",
    "HOME_TAR",
    "MANIFEST",
    "REPOSITORY",
    "RUN_LABEL",
    "TAR_MODE",
    "VERSION_LABEL",
    "StoredSnapshot",
    "image_labels",
    "image_tag",
    "layer_size",
    "list_snapshots",
    "prune",
    "remove_image",
]

REPOSITORY = "sandloop-snapshot"
RUN_LABEL = "sandloop.snapshot.run"
VERSION_LABEL = "sandloop.snapshot.version"
BASE_LABEL = "sandloop.snapshot.base"
#: a run folder's snapshot
FOLDER = "snapshot"
MANIFEST = "manifest.json"
#: a resumed run's copy of the sandbox's /tmp (its $HOME), as the sandbox wrote it
HOME_TAR = "tmp.tar"
#: the tar's mode: a resumed sandbox's user reads it through a read-only mount; the snapshot's
#: folder (0700, the host's) keeps every other local user out
TAR_MODE = 0o644


def image_tag(run_id: str, count: int) -> str:
    """The engine's name for a run's ``count``-th root commit (tags are lower case)."""
    return f"{REPOSITORY}:{run_id.lower()}-{count}"


def image_labels(run_id: str, base: str) -> dict[str, str]:
    return {RUN_LABEL: run_id, VERSION_LABEL: __version__, BASE_LABEL: base}


@dataclass(frozen=True)
class StoredSnapshot:
    """One run's snapshot as ``sandloop snapshot ls`` shows it."""

    run_id: str
    folder: Path
    created: float
    size: int  # bytes in the run folder (the tar, the state)
    image: str | None  # the root's image, when the root was committed
    turns: int
    #: bytes of the root's committed layer (what the commit added to its base image), when there
    #: is one and the engine was asked; None otherwise (no image, gone, or not looked up)
    layer: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "folder": str(self.folder), "created": self.created,
                "size": self.size, "image": self.image, "turns": self.turns, "layer": self.layer}


def _runs() -> Path:
    return state_dir() / "runs"


def list_snapshots(runs: Path | None = None, *, client: Any = None) -> list[StoredSnapshot]:
    """Every run folder's snapshot, oldest first (a manifest that cannot be read is listed with
    what its folder says, so that prune can still remove it); with an engine ``client``, each
    committed root's layer size too."""
    found = []
    root = runs or _runs()
    for manifest in sorted(root.glob(f"*/{FOLDER}/{MANIFEST}")):
        folder = manifest.parent
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        data = data if isinstance(data, dict) else {}
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and not p.is_symlink())
        created = data.get("created")
        image = data.get("image") if isinstance(data.get("image"), str) else None
        found.append(StoredSnapshot(
            run_id=folder.parent.name, folder=folder,
            created=float(created) if isinstance(created, (int, float)) else manifest.stat().st_mtime,
            size=size, image=image, turns=int(data.get("turns") or 0) if isinstance(data.get("turns"), int) else 0,
            layer=layer_size(client, image) if client is not None and image is not None else None))
    return sorted(found, key=lambda s: s.created)


def layer_size(client: Any, image: str) -> int | None:
    """Bytes the commit of ``image`` added to its base: the newest layer of its history (a
    commit adds exactly one); None when the engine has no such image."""
    import docker.errors

    try:
        history = client.api.history(image)
    except docker.errors.APIError:
        return None
    size = history[0].get("Size") if history else None
    return size if isinstance(size, int) else None


def remove_image(client: Any, image: str) -> bool:
    """Remove a snapshot's image; False when the engine had none by that name, or keeps it
    because a container (a session resumed from it) still uses it."""
    import docker.errors

    try:
        client.images.remove(image, noprune=False)
    except docker.errors.APIError:
        return False
    return True


def prune(*, older_than_days: float | None, everything: bool = False, client: Any = None,
          runs: Path | None = None) -> list[StoredSnapshot]:
    """Remove the snapshots (folder and image) older than ``older_than_days`` (or all); the rest
    of each run folder (logs, audit) stays. Returns what was removed."""
    cutoff = time.time() - (older_than_days or 0) * 86400
    removed = []
    for snap in list_snapshots(runs):
        if not everything and snap.created > cutoff:
            continue
        if snap.image is not None and client is not None:
            remove_image(client, snap.image)
        shutil.rmtree(snap.folder, ignore_errors=True)
        removed.append(snap)
    return removed
