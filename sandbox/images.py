"""The sandbox images: names, and building them from Dockerfile.sandbox with the docker SDK.

Each image is tagged with the package version and labelled with the sha256 of the Dockerfile,
so an edited Dockerfile is rebuilt and an unchanged one never is.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tarfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import docker
import docker.errors

__all__ = ["DOCKERFILE", "ON_DEMAND", "TARGETS", "build", "ensure", "image_name", "package_version", "size_mb"]

# Inside the package (a link to the top-level file in a checkout, a copy in a wheel).
DOCKERFILE = Path(__file__).resolve().parent / "Dockerfile.sandbox"
#: ``shell`` is the default sandbox, ``minimal`` the small alternative, ``browser`` Chromium:
#: what bootstrap builds.
TARGETS = ("shell", "minimal", "browser")
#: Built only when a policy or a test asks for one (``ensure``), never by bootstrap: ``desktop``
#: (a whole Linux desktop, :mod:`sandbox.desktop`) is large, and a demo needs none of it.
ON_DEMAND = ("desktop",)
REPOSITORY = "sandloop-sandbox"
_HASH_LABEL = "sandloop.dockerfile-sha256"


def package_version() -> str:
    try:
        return version("sandloop")
    except PackageNotFoundError:  # running from a checkout that is not installed
        return "0.0.0"


def image_name(target: str) -> str:
    # The Dockerfile's hash is in the tag, so two checkouts (or versions) with different
    # Dockerfiles each keep their own images instead of rebuilding each other's.
    return f"{REPOSITORY}:{target}-{package_version()}-{_dockerfile_hash()[:12]}"


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


def build(client: docker.DockerClient, target: str) -> str:
    """Build one target; returns the image name. Raises docker.errors.BuildError with the log."""
    name = image_name(target)
    started = time.monotonic()
    print(f"bootstrap: building {name} from {DOCKERFILE.name} (target {target})", flush=True)
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
    print(f"bootstrap: built {name} in {time.monotonic() - started:.1f}s ({size_mb(client, target)} MB)",
          flush=True)
    return name


def ensure(client: docker.DockerClient, target: str) -> str:
    """The image name for target, building it first when missing or stale."""
    if not is_current(client, target):
        build(client, target)
    return image_name(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.images")
    parser.add_argument("command", choices=["build", "list"])
    parser.add_argument("--target", choices=TARGETS + ON_DEMAND, action="append")
    args = parser.parse_args(argv)
    client = docker.from_env()
    for target in args.target or TARGETS:
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
        print(f"bootstrap: image {name} ready ({size_mb(client, target)} MB)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
