"""The sandbox images: names, and building them from Dockerfile.sandbox with the docker SDK.

Each image is tagged with the package version and labelled with the sha256 of the Dockerfile,
so an edited Dockerfile is rebuilt and an unchanged one never is.

A first ``make demo`` builds only what the demo needs (:data:`DEMO_TARGETS`) and leaves the rest
to a process in the background (:func:`start_background`); whoever needs an image that is still
being built — ``make test``'s bootstrap, a session on the default image — waits for that build
through a per-image, per-engine lock instead of starting a second one (:func:`ensure`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import docker
import docker.errors

from sandloop.hostfiles import HostDir, state_dir

__all__ = ["BACKGROUND_LOG", "DEMO_TARGETS", "DOCKERFILE", "ON_DEMAND", "TARGETS", "background_pid", "build",
           "ensure", "image_name", "package_version", "plan", "size_mb", "start_background", "state_folder",
           "target_of"]

# Inside the package (a link to the top-level file in a checkout, a copy in a wheel).
DOCKERFILE = Path(__file__).resolve().parent / "Dockerfile.sandbox"
#: ``shell`` is the default sandbox, ``minimal`` the small alternative, ``browser`` Chromium:
#: what bootstrap builds.
TARGETS = ("shell", "minimal", "browser")
#: Built only when a policy or a test asks for one (``ensure``), never by bootstrap: ``desktop``
#: (a whole Linux desktop, :mod:`sandbox.desktop`) is large, and a demo needs none of it.
ON_DEMAND = ("desktop",)
#: What ``make demo`` needs built before it can show anything: its task runs in ``minimal`` (its
#: tests need python3 and nothing else). Its screenshot is taken in the host's Chromium until the
#: browser image is there (the demo's own choice), so ``shell`` — the default, and the
#: largest — and ``browser`` come after, in the background.
#: The engine's classic builder builds every stage above the target, so these stay first in
#: Dockerfile.sandbox (tests/sandbox/test_images.py checks it).
DEMO_TARGETS = ("minimal",)
REPOSITORY = "sandloop-sandbox"
_HASH_LABEL = "sandloop.dockerfile-sha256"
BACKGROUND_LOG = "background.log"
BACKGROUND_PID = "background.pid"


def plan(purpose: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The targets built now, in this order, and those left to a background build, for
    ``purpose``: ``demo`` (what the demo runs first) or ``all``."""
    if purpose == "demo":
        return DEMO_TARGETS, tuple(t for t in TARGETS if t not in DEMO_TARGETS)
    return TARGETS, ()


def state_folder() -> Path:
    """Build locks and the background build's log and pid: host state no sandbox can write."""
    return state_dir() / "images"


def package_version() -> str:
    try:
        return version("sandloop")
    except PackageNotFoundError:  # running from a checkout that is not installed
        return "0.0.0"


def image_name(target: str) -> str:
    # The Dockerfile's hash is in the tag, so two checkouts (or versions) with different
    # Dockerfiles each keep their own images instead of rebuilding each other's.
    return f"{REPOSITORY}:{target}-{package_version()}-{_dockerfile_hash()[:12]}"


def target_of(image: str) -> str | None:
    """The target ``image`` is the current build of, when it is one of sandloop's own images."""
    return next((target for target in TARGETS + ON_DEMAND if image == image_name(target)), None)


def size_mb(client: docker.DockerClient, target: str) -> float | None:
    """The image's size in MB (None when it is not built)."""
    try:
        return round(int(client.images.get(image_name(target)).attrs.get("Size", 0)) / 1e6, 1)
    except docker.errors.ImageNotFound:
        return None


def _dockerfile_hash() -> str:
    return hashlib.sha256(DOCKERFILE.read_bytes()).hexdigest()


def is_current(client: docker.DockerClient, target: str) -> bool:
    try:
        image = client.images.get(image_name(target))
    except docker.errors.ImageNotFound:
        return False
    labels = image.labels or {}
    return labels.get(_HASH_LABEL) == _dockerfile_hash()


def _context() -> io.BytesIO:
    data = DOCKERFILE.read_bytes()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        entry = tarfile.TarInfo("Dockerfile")
        entry.size, entry.mode = len(data), 0o644
        tar.addfile(entry, io.BytesIO(data))
    archive.seek(0)
    return archive


def _print(text: str) -> None:
    print(f"bootstrap: {text}", flush=True)


Say = Callable[[str], None]


def build(client: docker.DockerClient, target: str, say: Say = _print) -> str:
    """Build one target; returns the image name. Raises docker.errors.BuildError with the log."""
    name = image_name(target)
    started = time.monotonic()
    say(f"building {name} from {DOCKERFILE.name} (target {target})")
    # The Dockerfile copies nothing in, so the build context is the Dockerfile alone: no checkout
    # (or site-packages) is ever sent to the engine, wherever sandloop is installed.
    client.images.build(
        fileobj=_context(),
        custom_context=True,
        dockerfile="Dockerfile",
        target=target,
        tag=name,
        labels={_HASH_LABEL: _dockerfile_hash()},
        rm=True,
        forcerm=True,
        pull=False,
    )
    say(f"built {name} in {time.monotonic() - started:.1f}s ({size_mb(client, target)} MB)")
    return name


@contextlib.contextmanager
def _build_lock(client: docker.DockerClient, target: str, say: Say) -> Iterator[None]:
    """Hold the build lock of ``target`` on this engine (an flock, so a build that dies releases
    it); a build already running (the background one) is waited for, and said so."""
    engine = hashlib.sha256(str(client.info().get("ID", "")).encode()).hexdigest()[:12]
    with HostDir(state_folder()) as folder:
        fd = folder.open_regular(f"{image_name(target).partition(':')[2]}-{engine}.lock", os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for the build of {image_name(target)} that is already running "
                f"(log: {state_folder() / BACKGROUND_LOG})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def ensure(client: docker.DockerClient, target: str, say: Say = _print) -> str:
    """The image name for target, building it first when missing or stale — or waiting for the
    build of it that is already running, then using what it built."""
    if not is_current(client, target):
        with _build_lock(client, target, say):
            if not is_current(client, target):
                build(client, target, say)
    return image_name(target)


def background_pid() -> int | None:
    """The PID of the background build when it is still running (a second ``make demo`` while
    the first one's build runs starts no other)."""
    try:
        with HostDir(state_folder()) as folder:
            pid = int(folder.read(BACKGROUND_PID).decode().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
        os.readlink(f"/proc/{pid}/exe")  # a kernel thread (a reused PID) has none
    except (OSError, ValueError, IndexError):
        return None
    if state == b"Z":  # ended, not yet reaped
        return None
    # An empty command line: a process still starting (between fork and exec), ours.
    return pid if cmdline == [b""] or (b"sandbox.images" in cmdline and b"build" in cmdline) else None


def start_background(targets: tuple[str, ...]) -> int:
    """Build ``targets`` in a detached process (its own session: the end of ``make demo`` or a
    Ctrl-C there does not stop it), its output in the state folder; returns its PID."""
    with HostDir(state_folder()) as folder:
        log = folder.open_regular(BACKGROUND_LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "sandbox.images", "build", *(f"--target={t}" for t in targets)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            os.close(log)
        folder.replace(BACKGROUND_PID, f"{child.pid}\n".encode())
    return child.pid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.images")
    parser.add_argument("command", choices=["build", "list"])
    parser.add_argument("--target", choices=TARGETS + ON_DEMAND, action="append")
    parser.add_argument("--for", dest="purpose", choices=("all", "demo"), default="all",
                        help="demo: build what the demo needs now and the rest in the background")
    args = parser.parse_args(argv)
    client = docker.from_env()
    now, later = (tuple(args.target), ()) if args.target else plan(args.purpose)
    if args.command == "list":
        now, later = tuple(args.target or TARGETS), ()
    for target in now:
        if args.command == "list":
            state = f"{size_mb(client, target)} MB" if is_current(client, target) else "missing or stale"
            print(f"{image_name(target)}: {state}")
            continue
        try:
            name = ensure(client, target)
        except docker.errors.BuildError as exc:
            for chunk in exc.build_log:
                sys.stderr.write(str(chunk.get("stream", "")) if isinstance(chunk, dict) else str(chunk))
            print(f"bootstrap: building {target} failed: {exc}", file=sys.stderr)
            return 1
        _print(f"image {name} ready ({size_mb(client, target)} MB)")
    if args.command == "build" and (missing := tuple(t for t in later if not is_current(client, t))):
        if (running := background_pid()) is not None:
            _print(f"the background build of {', '.join(missing)} is still running (pid {running}, log "
                   f"{state_folder() / BACKGROUND_LOG})")
            return 0
        pid = start_background(missing)
        _print(f"building {', '.join(missing)} in the background (pid {pid}, log {state_folder() / BACKGROUND_LOG});"
               " make test, and a session that needs one of them, wait for it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
