"""Setup output cannot exhaust the host: one endless line is cut in constant memory, and
environment.log stops at its cap while the step goes on."""

from __future__ import annotations

from pathlib import Path

from sandbox.environment import build
from sandbox.environment.setup import MAX_LINE, Lines


def test_lines_are_split_across_chunks_and_an_endless_one_is_cut() -> None:
    out: list[bytes] = []
    lines = Lines(out.append)
    for chunk in (b"one\ntw", b"o\n", b"x" * (MAX_LINE * 4), b"y" * 10, b"\nlast"):
        lines.feed(chunk)
    lines.end()
    assert out[:2] == [b"one", b"two"]
    assert out[2].startswith(b"x" * MAX_LINE) and out[2].endswith(f"[{MAX_LINE * 3 + 10} more bytes of this "
                                                                   "line dropped]".encode())
    assert len(out[2]) < MAX_LINE + 100
    assert out[3] == b"last" and len(out) == 4
    # memory stays bounded however long the line: nothing beyond MAX_LINE is held
    lines = Lines(out.append)
    for _ in range(1000):
        lines.feed(b"z" * 65536)
        assert len(lines._pending) <= MAX_LINE


def test_the_setup_log_stops_at_its_cap(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(build, "LOG_CAP", 1000)
    seen: list[str] = []
    run = build.Reporter(lambda kind, data: seen.append(kind), tmp_path)
    for i in range(500):
        run.line(f"line {i:04d} " + "." * 20)
    log = (tmp_path / "environment.log").read_text()
    assert len(log) < 1200 and log.rstrip().endswith("MiB written]")
    assert len(seen) == 500  # the live view and the failure's tail still see every line
