"""The programs sandloop runs inside a sandbox, packed as one file each.

The in-sandbox helper and the egress proxy are standard-library programs that share modules
with the host side (the error tree, the host matcher, the helper's wire types): one definition,
used on both sides of the wire. Each is shipped as a Python zip application (PEP 441) holding
exactly its modules, so any image with a ``python3`` runs it (``python3 -I /opt/sandloop/x.pyz``)
and nothing has to be installed in the image. The archive is built deterministically (fixed
timestamps) and once per process.

:func:`install` puts a program where a container can bind-mount it read-only: a file named by
its sha256 in a private (0700) directory of the user's cache, never inside a workspace, so no
command can change the code that serves it. :func:`helper_programs` installs the helper's two:
its zip application and the 200-byte program that makes each command's shell a subreaper.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import marshal
import os
import secrets
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

from sandloop.errors import SandboxUnavailable

from .helper import subreaper

__all__ = ["HELPER_MODULES", "PROXY_MODULES", "cache_dirs", "file_archive", "helper_programs", "install", "installed",
           "private_dir", "zipapp"]

#: What the in-sandbox helper carries (its entry point first).
HELPER_MODULES = (
    "sandbox.helper.main",
    "sandbox.helper.wire",
    "sandbox.helper.shells",
    "sandbox.helper.procs",
    "sandbox.helper.files",
    "sandbox.helper.desktop",
    "sandbox.helper.framebuffer",
    "sandbox.helper.confine",
    "sandbox.helper.seccomp_rules",
    "sandbox.helper.archive",
)
#: What the egress proxy carries (its entry point first).
PROXY_MODULES = ("sandbox.egress_proxy", "sandbox.egress_inject", "sandloop.matching", "sandloop.errors")

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


def _bytecode(source: bytes, name: str) -> bytes:
    """``source`` compiled for this Python, as a ``.pyc`` that is never checked against its
    source (PEP 552: an unchecked hash-based pyc: magic, flags, source hash, marshalled code)."""
    code = compile(source, name, "exec", dont_inherit=True)
    flags = (0b01).to_bytes(4, "little")  # hash-based, unchecked
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code)


@cache
def zipapp(modules: tuple[str, ...], *, bytecode: bool = False) -> bytes:
    """A zip application running ``modules[0]``'s ``main()``, with every module it needs.

    ``bytecode``: also each module compiled for this Python. Python imports from a zip without
    caching what it compiles, so a helper started from source compiles its modules on every
    start (≈30 ms of a session's start, measured); a container whose Python has another magic
    number ignores the ``.pyc`` files and reads the sources. The bytes then depend on this
    Python's version, which is why a program whose hash is pinned elsewhere (a Kubernetes warm
    pool's template) is built without."""
    entry = modules[0]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        main = f"import sys\nfrom {entry} import main\nsys.exit(main())\n"
        archive.writestr(zipfile.ZipInfo("__main__.py", _EPOCH), main)
        for name, path in sorted(_files(modules).items()):
            source = path.read_bytes()
            archive.writestr(zipfile.ZipInfo(name, _EPOCH), source)
            if bytecode:
                archive.writestr(zipfile.ZipInfo(name + "c", _EPOCH), _bytecode(source, name))
    return buf.getvalue()


def file_archive(name: str, data: bytes, mode: int = 0o444) -> bytes:
    """A tar holding one read-only file, for ``put_archive`` into a container."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def cache_dirs() -> list[Path]:
    """Where :func:`installed` may put archives, best first."""
    found = []
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        found.append(Path(xdg) / "sandloop")
    found.append(Path.home() / ".cache" / "sandloop")
    found.append(Path(tempfile.gettempdir()) / f"sandloop-{os.geteuid()}")
    return found


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def private_dir(path: Path) -> int:
    """An O_NOFOLLOW descriptor of ``path``, a directory only we can enter (made 0700 if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        os.close(fd)
        raise PermissionError(f"{path} belongs to uid {st.st_uid}, not to us")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.fchmod(fd, 0o700)
    return fd


def _holds(dir_fd: int, name: str, data: bytes, mode: int) -> bool:
    """Is ``name`` our regular file with exactly ``data`` and ``mode`` (not a symlink)?"""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != mode:
            return False
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(len(data) + 1) == data
    finally:
        os.close(fd)


def _write(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Atomically: a fresh temp file (O_EXCL, O_NOFOLLOW), filled, given ``mode``, renamed."""
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
        os.fsync(fd)
        os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def install(data: bytes, stem: str, suffix: str = "", *, mode: int = 0o444, outside: Iterable[Path] = ()) -> Path:
    """``data`` as a read-only file ``<stem>-<sha256><suffix>`` in a private cache directory that
    lies outside every path in ``outside`` (the directories a sandbox can write: bind-mounting
    the file read-only only helps if no other way leads to it).

    An existing file is reused only if it is ours, with exactly these bytes and ``mode``;
    otherwise it is replaced atomically. Raises SandboxUnavailable when no cache directory fits.
    """
    if mode & 0o222:
        raise ValueError("installed files are read-only")
    name = f"{stem}-{hashlib.sha256(data).hexdigest()}{suffix}"
    avoid = [Path(p).resolve() for p in outside]
    problems = []
    for candidate in cache_dirs():
        where = candidate.resolve()
        if any(_inside(where, root) for root in avoid):
            problems.append(f"{candidate} is inside a sandbox-writable directory")
            continue
        try:
            dir_fd = private_dir(candidate)
        except OSError as exc:
            problems.append(f"{candidate}: {exc}")
            continue
        try:
            if not _holds(dir_fd, name, data, mode):
                _write(dir_fd, name, data, mode)
        except OSError as exc:
            problems.append(f"{candidate / name}: {exc}")
            continue
        finally:
            os.close(dir_fd)
        return where / name
    raise SandboxUnavailable(f"no private place to put the sandbox's {stem} program: {'; '.join(problems)}")


def installed(modules: tuple[str, ...], stem: str, *, outside: Iterable[Path] = ()) -> Path:
    """The zip application of ``modules`` (with bytecode), installed (see :func:`install`) as
    ``<stem>-<sha256>.pyz``."""
    return install(zipapp(modules, bytecode=True), stem, ".pyz", outside=outside)


def helper_programs(outside: Iterable[Path] = ()) -> tuple[Path, Path | None]:
    """The helper's zip application and, where this machine has one, the program that makes a
    command's shell a subreaper (:mod:`sandbox.helper.subreaper`), both installed."""
    avoid = list(outside)
    helper = installed(HELPER_MODULES, "helper", outside=avoid)
    code = subreaper.program()
    return helper, None if code is None else install(code, "subreaper", mode=0o555, outside=avoid)
