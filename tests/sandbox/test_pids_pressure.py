"""When the helper decides the pids limit is under pressure (and reclaims background processes).

The fork bomb test in test_docker_session.py shows the effect in a real container; this pins the
decision itself, since a bomb's count swings and the container test meets each branch only by luck.
"""

from __future__ import annotations

import pytest

from sandbox.helper import procs


@pytest.fixture
def cgroup(monkeypatch: pytest.MonkeyPatch) -> dict[str, int | None]:
    state: dict[str, int | None] = {"max": 256, "current": 10, "hits": 0}
    monkeypatch.setattr(procs, "_pids_max", lambda: state["max"])
    monkeypatch.setattr(procs, "_read_int", lambda *paths: state["current"])
    monkeypatch.setattr(procs, "_pids_limit_hits", lambda: state["hits"])
    monkeypatch.setattr(procs, "_last_hits", [None])
    return state


def test_nearly_full_is_pressure(cgroup: dict[str, int | None]) -> None:
    cgroup["current"] = 240
    assert procs.pids_exhausted()


def test_a_bomb_below_the_threshold_but_hitting_the_limit_is_pressure(cgroup: dict[str, int | None]) -> None:
    assert not procs.pids_exhausted()  # the first look only records the count of failed forks
    cgroup["current"], cgroup["hits"] = 208, 57  # 81% taken, forks failing since the last look
    assert procs.pids_exhausted()


def test_an_old_hit_alone_is_no_pressure(cgroup: dict[str, int | None]) -> None:
    procs.pids_exhausted()
    cgroup["hits"] = 3  # a build once hit the limit, and little is running now
    assert not procs.pids_exhausted()
    cgroup["current"] = 208  # and no new failure since: a busy but working background
    assert not procs.pids_exhausted()


def test_no_limit_no_pressure(cgroup: dict[str, int | None]) -> None:
    cgroup["max"], cgroup["current"] = None, 10_000
    assert not procs.pids_exhausted()


def test_no_events_file_falls_back_to_the_threshold(cgroup: dict[str, int | None]) -> None:
    cgroup["hits"], cgroup["current"] = None, 208
    procs.pids_exhausted()
    assert not procs.pids_exhausted()
