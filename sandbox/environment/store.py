"""Cached environments: images ``sandloop-env:<key prefix>`` labelled with their key.

Host-side bookkeeping — when each environment was last used, and the lock that makes two
sessions building the same key build it once — lives in ``<state>/environments`` (the user's
state directory, :func:`sandloop.hostfiles.state_dir`), which no sandbox can write: it is opened
one component at a time without following links (:class:`sandloop.hostfiles.HostDir`), and each
file in it relative to that folder with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from sandloop.hostfiles import HostDir, state_dir

from .. import images
from .spec import BASE_LABEL, KEY_LABEL, KIND_LABEL, REPOSITORY, VERSION_LABEL

__all__ = ["CachedEnvironment", "building", "find", "forget", "list_environments", "mark_used", "prune",
           "stale_sandbox_images", "state_folder", "tag_for"]

_TAG_HEX = 32
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LOCK_POLL_S = 0.2


def tag_for(key: str) -> str:
    return key[:_TAG_HEX]


def state_folder() -> Path:
    return state_dir() / "environments"


def _folder() -> HostDir:
    return HostDir(state_folder())


def find(client: docker.DockerClient, key: str) -> str | None:
    """The cached environment's image id for ``key``, or None."""
    try:
        attrs = client.api.inspect_image(f"{REPOSITORY}:{tag_for(key)}")
    except docker.errors.ImageNotFound:
        return None
    return str(attrs["Id"])


def mark_used(key: str) -> None:
    """Remember now as the environment's last use (``env prune --days`` reads it)."""
    with _folder() as folder:
        folder.replace(f"{tag_for(key)}.used", f"{time.time():.0f}\n".encode())


def last_used(folder: HostDir, key: str) -> float | None:
    try:
        return float(folder.read(f"{tag_for(key)}.used").decode().strip())
    except (OSError, ValueError):
        return None


def forget(key: str) -> None:
    path = state_folder() / f"{tag_for(key)}.used"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


@contextlib.asynccontextmanager
async def building(key: str, on_wait: Callable[[], None]) -> AsyncIterator[None]:
    """Hold the build lock of ``key`` (an flock on ``<key>.lock``, opened without following a
    link). Another session holding it is waited for without blocking the event loop (and a
    cancelled wait leaves nothing behind); ``on_wait`` is called once if it must wait."""
    _folder().close()  # created (checked) once
    dir_fd = os.open(state_folder(), _NOFOLLOW_DIR)
    try:
        fd = os.open(f"{tag_for(key)}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    try:
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    on_wait()
                    told = True
                await asyncio.sleep(_LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock


@dataclass(frozen=True)
class CachedEnvironment:
    image_id: str
    tags: tuple[str, ...]
    key: str
    kind: str
    base: str
    version: str
    created: float
    last_used: float | None
    size_mb: float  # what it adds to its base image (its own layers)

    def to_json(self) -> dict[str, Any]:
        return {"image_id": self.image_id, "tags": list(self.tags), "key": self.key, "kind": self.kind,
                "base": self.base, "version": self.version, "created": self.created,
                "last_used": self.last_used, "size_mb": self.size_mb}


def _created(attrs: dict[str, Any]) -> float:
    created = attrs.get("Created")
    return float(created) if isinstance(created, (int, float)) else 0.0


def _base_size(client: docker.DockerClient, base: str, known: dict[str, int]) -> int:
    """The size of the image an environment was built on (``ref@id`` in its label), 0 if gone."""
    image_id = base.rpartition("@")[2]
    if image_id not in known:
        try:
            known[image_id] = int(client.api.inspect_image(image_id).get("Size") or 0)
        except docker.errors.APIError:
            known[image_id] = 0
    return known[image_id]


def list_environments(client: docker.DockerClient) -> list[CachedEnvironment]:
    """Every cached environment in the engine, newest first."""
    found = []
    sizes: dict[str, int] = {}
    with _folder() as folder:
        for row in client.api.images(filters={"label": KEY_LABEL}):
            labels = row.get("Labels") or {}
            key = str(labels.get(KEY_LABEL, ""))
            base = str(labels.get(BASE_LABEL, ""))
            tags = tuple(t for t in row.get("RepoTags") or () if t.startswith(f"{REPOSITORY}:"))
            own = int(row.get("Size") or 0) - (_base_size(client, base, sizes) if "@" in base else 0)
            found.append(CachedEnvironment(
                image_id=str(row["Id"]), tags=tags, key=key, kind=str(labels.get(KIND_LABEL, "")),
                base=base, version=str(labels.get(VERSION_LABEL, "")),
                created=_created(row), last_used=last_used(folder, key), size_mb=round(max(own, 0) / 1e6, 1)))
    return sorted(found, key=lambda e: -(e.last_used or e.created))


def _remove(client: docker.DockerClient, image: str) -> str | None:
    """Remove an image (every tag); the engine's reason when it cannot (a container uses it)."""
    try:
        client.api.remove_image(image, force=False, noprune=False)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        return str(exc.explanation or exc)
    return None


def prune(client: docker.DockerClient, *, older_than_days: float | None, everything: bool = False,
          now: float | None = None, keys: Collection[str] | None = None,
          ) -> tuple[list[CachedEnvironment], list[tuple[str, str]]]:
    """Remove cached environments not used for ``older_than_days`` (or all of them; only those
    of ``keys`` when given).

    Returns what was removed and (image, reason) for what could not be (still in use)."""
    now = time.time() if now is None else now
    removed, kept = [], []
    for env in list_environments(client):
        if keys is not None and env.key not in keys:
            continue
        used = env.last_used or env.created
        if not everything and (older_than_days is None or now - used < older_than_days * 86400):
            continue
        for tag in env.tags:  # untag first: an image another key also names goes with its last tag
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_image(tag, force=False, noprune=True)
        problem = _remove(client, env.image_id)
        if problem is None:
            removed.append(env)
            forget(env.key)
        else:
            kept.append((env.image_id, problem))
    return removed, kept


def stale_sandbox_images(client: docker.DockerClient, *, remove: bool, older_than_days: float | None = None,
                         now: float | None = None, only: Callable[[str], bool] | None = None,
                         ) -> tuple[list[str], list[tuple[str, str]]]:
    """``sandloop-sandbox:*`` images built from another Dockerfile than this installation's
    (their tag names another hash, or none): listed, and removed when ``remove``.

    ``older_than_days``: only images built that long ago — another checkout or version on the
    same machine keeps its own images (the tag carries the Dockerfile's hash so that checkouts
    never rebuild each other's), and one built recently is most likely in use."""
    now = time.time() if now is None else now
    current = {images.image_name(target) for target in images.TARGETS}
    stale, kept = [], []
    for row in client.api.images(name=images.REPOSITORY):
        tags = [t for t in row.get("RepoTags") or () if t.startswith(f"{images.REPOSITORY}:")]
        if only is not None:
            tags = [t for t in tags if only(t)]
        if not tags or any(t in current for t in tags):
            continue
        if older_than_days is not None and now - _created(row) < older_than_days * 86400:
            continue
        for tag in tags:
            problem = _remove(client, tag) if remove else None
            (kept.append((tag, problem)) if problem else stale.append(tag))
    return stale, kept
