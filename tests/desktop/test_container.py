"""The desktop's container is the shell's: every hardening kept (checked by its real effect
inside, and against a shell session's own container), and nothing of the host's X reaches it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sandbox.desktop import Desktop
from sandbox.docker import DockerConfig, DockerSession

_SAME = ("CapDrop", "CapAdd", "SecurityOpt", "ReadonlyRootfs", "PidsLimit", "NetworkMode", "Privileged",
         "MemorySwap", "NanoCpus", "Tmpfs", "Runtime")


async def test_every_hardening_of_the_shell_container_is_kept(desktop: Desktop, workspace: Path,
                                                              docker_client: Any) -> None:
    assert isinstance(desktop.session, DockerSession)
    mine = desktop.session.inspect()["HostConfig"]
    shell = await DockerSession.create(workspace, DockerConfig(memory="2g", pids_limit=512), client=docker_client)
    try:
        theirs = shell.inspect()["HostConfig"]
    finally:
        await shell.close()
    assert {k: mine.get(k) for k in _SAME} == {k: theirs.get(k) for k in _SAME}
    assert mine["CapDrop"] == ["ALL"] and mine["ReadonlyRootfs"] and mine["NetworkMode"] == "none"
    assert any(o.startswith("seccomp=") for o in mine["SecurityOpt"]) and "no-new-privileges" in mine["SecurityOpt"]


async def test_inside_no_capability_no_setid_read_only_root_no_network(desktop: Desktop) -> None:
    status = (await desktop.session.run("grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status")).stdout.text
    assert "CapEff:\t0000000000000000" in status and "NoNewPrivs:\t1" in status and "Seccomp:\t2" in status
    setid = await desktop.session.run("cp /bin/true /tmp/t && chmod u+s /tmp/t")
    assert setid.exit_code != 0 and "Operation not permitted" in setid.stderr.text
    root = await desktop.session.run("touch /usr/planted")
    assert root.exit_code != 0
    links = await desktop.session.run("ls /sys/class/net")
    assert links.stdout.text.split() == ["lo"]


async def test_no_host_display_socket_or_authority_reaches_the_container(desktop: Desktop) -> None:
    assert isinstance(desktop.session, DockerSession)
    attrs = desktop.session.inspect()
    env = attrs["Config"]["Env"] or []
    assert not [e for e in env if e.split("=")[0] in ("DISPLAY", "XAUTHORITY", "WAYLAND_DISPLAY")]
    assert not [m for m in attrs["Mounts"] if "X11" in m["Source"] or ".Xauthority" in m["Source"]]
    # The only X socket inside is the desktop's own, made by its Xvfb; the only display its
    # commands are given is that one.
    inside = await desktop.session.run("ls -A /tmp/.X11-unix; echo $DISPLAY; ls -A $HOME /home/sandbox 2>&1")
    lines = inside.stdout.text.split("\n")
    assert lines[0] == "X0" and lines[1] == ":0"
    assert ".Xauthority" not in inside.stdout.text
    assert not os.environ.get("DISPLAY") or os.environ["DISPLAY"] not in inside.stdout.text.split("\n")[2:]
