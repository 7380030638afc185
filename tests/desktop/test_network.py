"""The desktop's network is the shell's: none by default (see test_container), else the policy's
allow-list through the same egress proxy — and the programs on the desktop are given the proxy,
while nothing else leads out. The only traffic here is to the session's own proxy container."""

from __future__ import annotations

from pathlib import Path

from sandbox.desktop import DesktopConfig, open_desktop
from sandbox.docker import DockerConfig
from sandbox.egress import EgressDecision
from tests.desktop.conftest import file_appears, run_in_terminal

_REQUEST = "import urllib.request as u; u.urlopen('http://blocked.test:8000/')"


async def test_programs_on_the_desktop_go_out_only_through_the_allow_list(desktop_image_name: str,
                                                                           workspace: Path) -> None:
    decisions: list[EgressDecision] = []
    config = DesktopConfig(docker=DockerConfig(memory="2g", pids_limit=512, network_allow=("allowed.test",),
                                               on_egress=decisions.append))
    desktop = await open_desktop(workspace, config)
    try:
        egress = desktop.session.egress  # type: ignore[attr-defined]
        assert egress is not None
        assert desktop.session.inspect()["HostConfig"]["NetworkMode"] == egress.network  # type: ignore[attr-defined]
        # typed into the terminal the desktop started: its shell has the proxy, and the proxy
        # refuses what the list does not name
        await run_in_terminal(desktop, f'python3 -c "{_REQUEST}" 2> refused.txt; printenv HTTPS_PROXY > proxy.txt')
        assert await file_appears(workspace / "proxy.txt") == egress.env["HTTPS_PROXY"] + "\n"
        refused = (workspace / "refused.txt").read_text()
        assert "HTTP Error 403" in refused, refused
    finally:
        await desktop.close()
    assert any(not d.allowed and d.target == "blocked.test:8000" and d.rule == "shell.network" for d in decisions)
