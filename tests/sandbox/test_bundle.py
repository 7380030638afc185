"""Where the helper's zip application is put for containers to bind-mount: a private cache
directory outside every sandbox-writable path, a read-only file named by its sha256."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import pytest

from sandbox.bundle import HELPER_MODULES, installed, zipapp
from sandloop.errors import SandboxUnavailable


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    xdg, home = tmp_path / "xdg", tmp_path / "home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    monkeypatch.setenv("HOME", str(home))
    return xdg, home


def _expected() -> tuple[bytes, str]:
    data = zipapp(HELPER_MODULES, bytecode=True)
    return data, f"helper-{hashlib.sha256(data).hexdigest()}.pyz"


def test_the_helper_archive_carries_its_modules_and_nothing_else() -> None:
    names = set(zipfile.ZipFile(BytesIO(zipapp(HELPER_MODULES))).namelist())
    assert {"__main__.py", "sandbox/__init__.py", "sandbox/helper/__init__.py", "sandbox/helper/main.py",
            "sandbox/helper/wire.py"} <= names
    assert "sandbox/helper/client.py" not in names and "sandbox/docker.py" not in names
    assert not [n for n in names if n.endswith(".pyc")]  # sources only: the same bytes on any Python


def test_bytecode_is_used_where_the_python_matches_and_ignored_where_not(tmp_path: Path) -> None:
    # A zip import compiles from source on every start unless a .pyc sits beside the source;
    # one for another Python (another magic number) must be passed over for the source.
    import importlib.util

    archive = zipapp(HELPER_MODULES, bytecode=True)
    with zipfile.ZipFile(BytesIO(archive)) as z:
        names = set(z.namelist())
        assert {"sandbox/helper/main.pyc", "sandbox/helper/wire.pyc", "sandbox/helper/__init__.pyc"} <= names
        assert z.read("sandbox/helper/main.pyc")[:4] == importlib.util.MAGIC_NUMBER
    good = tmp_path / "good.pyz"
    good.write_bytes(archive)
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import sandbox.helper.main as m; "
             "print(m.__loader__.get_code('sandbox.helper.main').co_filename)")
    out = subprocess.run([sys.executable, "-I", "-c", probe, str(good)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "sandbox/helper/main.py"  # our compiled code, not the zip's own
    # The same archive with every .pyc stamped for another Python: still runs, from source.
    stale = tmp_path / "stale.pyz"
    with zipfile.ZipFile(BytesIO(archive)) as src, zipfile.ZipFile(stale, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"\x00\x00\r\n" + data[4:] if info.filename.endswith(".pyc") else data)
    out = subprocess.run([sys.executable, "-I", str(stale), "--help"], capture_output=True, text=True, check=True)
    assert "--workspace" in out.stdout


def test_installed_is_private_read_only_and_named_by_its_hash(homes: tuple[Path, Path]) -> None:
    xdg, _ = homes
    data, name = _expected()
    path = installed(HELPER_MODULES, "helper")
    assert path == xdg / "sandloop" / name
    assert path.read_bytes() == data
    assert stat.S_IMODE(path.stat().st_mode) == 0o444 and path.stat().st_uid == os.geteuid()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # It runs as a program with only the standard library (-I: no site, no cwd on the path).
    out = subprocess.run([sys.executable, "-I", str(path), "--help"], capture_output=True, text=True, check=True)
    assert "--workspace" in out.stdout


def test_a_tampered_or_planted_file_is_replaced(homes: tuple[Path, Path], tmp_path: Path) -> None:
    xdg, _ = homes
    data, name = _expected()
    target = installed(HELPER_MODULES, "helper")
    target.chmod(0o644)
    target.write_bytes(b"planted")
    assert installed(HELPER_MODULES, "helper").read_bytes() == data
    # A symlink in its place is replaced, never followed: the file it points at stays as it is.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"not yours")
    target.unlink()
    target.symlink_to(elsewhere)
    path = installed(HELPER_MODULES, "helper")
    assert not path.is_symlink() and path.read_bytes() == data
    assert elsewhere.read_bytes() == b"not yours"
    assert [p.name for p in (xdg / "sandloop").iterdir()] == [name]  # no temp file left


def test_never_inside_a_sandbox_writable_path(homes: tuple[Path, Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _, home = homes
    workspace = tmp_path / "ws"
    monkeypatch.setenv("XDG_CACHE_HOME", str(workspace / ".cache"))
    path = installed(HELPER_MODULES, "helper", outside=[workspace])
    assert path.parent == home / ".cache" / "sandloop"
    assert not (workspace / ".cache").exists()


def test_a_cache_directory_someone_else_owns_is_not_used(homes: tuple[Path, Path]) -> None:
    xdg, home = homes
    (xdg / "sandloop").mkdir(parents=True)
    os.chown(xdg / "sandloop", 1000, 1000)
    path = installed(HELPER_MODULES, "helper")
    assert path.parent == home / ".cache" / "sandloop"
    assert list((xdg / "sandloop").iterdir()) == []


def test_no_place_at_all_is_a_clear_error(homes: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sandbox.bundle.cache_dirs", lambda: [Path("/")])
    with pytest.raises(SandboxUnavailable, match="no private place"):
        installed(HELPER_MODULES, "helper", outside=[Path("/")])
