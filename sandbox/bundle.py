"""The programs sandloop runs inside a sandbox, packed as one file each.

The in-sandbox helper and the egress proxy are standard-library programs that share modules
with the host side (the error tree, the host matcher, the helper's wire types): one definition,
used on both sides of the wire. Each is shipped as a Python zip application (PEP 441) holding
exactly its modules, so any image with a ``python3`` runs it (``python3 -I /opt/sandloop/x.pyz``)
and nothing has to be installed in the image. The archive is built deterministically (fixed
timestamps) and once per process.
"""

from __future__ import annotations

import importlib.util
import io
import tarfile
import zipfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

__all__ = ["PROXY_MODULES", "file_archive", "zipapp"]

#: What the egress proxy carries (its entry point first).
PROXY_MODULES = ("sandbox.egress_proxy", "sandloop.matching", "sandloop.errors")

_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest date: the same bytes on every build


def _source(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"no source for {module}")
    return Path(spec.origin)


def _files(modules: Sequence[str]) -> dict[str, Path]:
    """Archive name -> source file: each module and the ``__init__`` of every package above it."""
    files: dict[str, Path] = {}
    for module in modules:
        parts = module.split(".")
        for depth in range(1, len(parts)):
            package = ".".join(parts[:depth])
            files["/".join(parts[:depth]) + "/__init__.py"] = _source(package)
        files["/".join(parts) + ".py"] = _source(module)
    return files


@cache
def zipapp(modules: tuple[str, ...]) -> bytes:
    """A zip application running ``modules[0]``'s ``main()``, with every module it needs."""
    entry = modules[0]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        main = f"import sys\nfrom {entry} import main\nsys.exit(main())\n"
        archive.writestr(zipfile.ZipInfo("__main__.py", _EPOCH), main)
        for name, path in sorted(_files(modules).items()):
            archive.writestr(zipfile.ZipInfo(name, _EPOCH), path.read_bytes())
    return buf.getvalue()


def file_archive(name: str, data: bytes, mode: int = 0o444) -> bytes:
    """A tar holding one read-only file, for ``put_archive`` into a container."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
