"""The copy-in init container's program (:mod:`sandbox.kubernetes.untar`), run here as the pod runs
it (``python3 -I -c UNTAR`` in the folder to fill, the frame on stdin): what it unpacks, what it
refuses, and that a stream cut short is a failure, never a half checkout taken for a whole."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

from sandbox.kubernetes import untar
from sandbox.kubernetes.sync import snapshot


def _run(folder: Path, data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, *untar.command()[1:]], input=data, cwd=folder, capture_output=True,
                          timeout=60, check=False)


def test_a_checkout_is_unpacked_and_said(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    (checkout / ".git" / "hooks").mkdir(parents=True)
    (checkout / ".git" / "config").write_text("[core]\n")
    (checkout / "src").mkdir()
    (checkout / "src" / "a.py").write_bytes(b"x" * 300_000)  # more than one read
    (checkout / "link").symlink_to("src/a.py")
    _, tar = snapshot(checkout, (".git",), (".git",))
    out = tmp_path / "volume"
    out.mkdir()
    done = _run(out, untar.frame(tar))
    assert done.returncode == 0 and done.stdout == untar.DONE, done.stderr
    assert (out / "checkout" / "src" / "a.py").read_bytes() == b"x" * 300_000
    assert (out / "checkout" / "link").readlink() == Path("src/a.py")
    assert (out / "read-only" / "0" / "config").read_text() == "[core]\n"
    assert (out / "checkout" / ".git").is_dir() and not any((out / "checkout" / ".git").iterdir())  # the mount point


def test_a_stream_cut_short_fails(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "a.txt").write_bytes(b"y" * 100_000)
    _, tar = snapshot(checkout, ())
    cut = _run(tmp_path, untar.frame(tar)[:50_000])
    assert cut.returncode != 0 and untar.DONE not in cut.stdout
    assert b"the stream ended before the checkout did" in cut.stderr


def test_nothing_outside_its_folder(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    folder = tmp_path / "volume"
    folder.mkdir()
    refused = _run(folder, untar.frame(buf.getvalue()))
    assert refused.returncode != 0 and not (tmp_path / "escaped").exists()
