"""The setup container: where an environment is installed, then committed to an image.

It is a sandbox like the agent's (:func:`sandbox.docker.hardened_host_config`: every capability
dropped, no-new-privileges, the no-setid seccomp profile, pids / memory / CPU limits, the
checkout's ``.git`` read-only) with one difference: its root file system is writable, because
what setup installs must end up in the image.

Steps are started by the engine (``docker exec``), not by the helper, so each goes through the
helper's exec mode (:func:`sandbox.docker.confined`): sandloop's seccomp filter, installed as in
a session, then the step's shell — with the image's python3 found before setup ran. The one
exception is an image that has no python3 yet: the steps that add it (:mod:`.python`) run
under the engine's copy of the rules alone, with no checkout mounted. Who writes what:

* system packages are installed by root — with no capability at all, so root only in name
  (apt needs ``APT::Sandbox::User=root`` to stop it dropping to ``_apt``, which takes
  setuid/setgid) — and never touch the checkout;
* setup commands run as the checkout's owner (uid:gid), so what they write into the checkout
  is the owner's, as if they had run it themselves, and never needs a chown. Their own place
  is :data:`~sandbox.environment.spec.PREFIX` (``/opt/env``), created owned by them before the
  container starts (the engine writes it; nothing in the container ever holds a capability).

The main process only waits for our stdin to close: when sandloop exits, even SIGKILLed, the
container stops and removes itself (``auto_remove``); so the commit happens while it runs (the
engine pauses it). Everything a run adds lives outside the committed configuration: proxy and
CA variables are per command (``exec``), caches go to the tmpfs ``/tmp`` (``HOME=/tmp/home``),
and the commit restores the base image's entrypoint, command, user and working directory, so
the image carries the environment's labels and ``PATH`` and nothing else of the run.
"""

from __future__ import annotations

import collections
import contextlib
import io
import secrets
import shlex
import socket
import tarfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.types import Mount

from sandloop.errors import SandboxUnavailable

from ..ca import ca_mount
from ..docker import (
    WORKSPACE,
    close_attach,
    confined,
    engine_errors,
    hardened_host_config,
    helper_mounts,
    workspace_mounts,
)
from .probe import ImageFacts, Probe
from .spec import PREFIX, EnvironmentSpec

__all__ = ["HOME", "MAX_LINE", "TAIL_LINES", "Lines", "SetupContainer", "StepFailed", "package_commands"]


HOME = "/tmp/home"
TAIL_LINES = 40
_KEEPER = ["/bin/sh", "-c", "while read -r _; do :; done"]  # exits when stdin closes
_TMPFS = "1g"  # pip and npm caches, build trees: gone with the container, never committed


class StepFailed(Exception):
    """One step of setup failed: which, how, and the last lines it printed."""

    def __init__(self, title: str, reason: str, tail: list[str]) -> None:
        super().__init__(f"{title}: {reason}")
        self.title, self.reason, self.tail = title, reason, tail


def package_commands(probe: Probe, packages: list[str]) -> list[str]:
    """Shell lines that install ``packages`` with the image's package manager, as capless root
    (``[]`` when the image has none: the caller refuses it)."""
    names = " ".join(shlex.quote(p) for p in packages)
    if probe.manager == "apt":
        apt = "apt-get -o APT::Sandbox::User=root"
        # Error-Mode=any: `apt-get update` otherwise exits 0 when every source failed.
        return [f"{apt} -o APT::Update::Error-Mode=any update",
                f"DEBIAN_FRONTEND=noninteractive {apt} install -y --no-install-recommends {names}",
                "apt-get clean && rm -rf /var/lib/apt/lists/*"]
    if probe.manager == "apk":
        return [f"apk add --no-cache {names}"]
    if probe.manager == "dnf" and probe.manager_program:
        program = probe.manager_program
        weak = "" if program == "microdnf" else " --setopt=install_weak_deps=False"
        return [f"{program} install -y{weak} {names}", f"{program} clean all"]
    return []


def _dir_archive(entries: list[tuple[str, int, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, uid, gid in entries:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o755, uid, gid
            info.mtime = int(time.time())
            tar.addfile(info)
    return buf.getvalue()


#: The longest line of setup output kept (the rest of it is dropped and counted): a step printing
#: one endless line must not grow the host's memory with it.
MAX_LINE = 16 << 10


class Lines:
    """Setup output cut into lines of at most :data:`MAX_LINE` bytes, in constant memory."""

    def __init__(self, emit: Callable[[bytes], None]) -> None:
        self.emit = emit
        self._pending = b""
        self._dropped = 0  # bytes of the current line beyond MAX_LINE

    def feed(self, chunk: bytes) -> None:
        while chunk:
            head, newline, chunk = chunk.partition(b"\n")
            room = MAX_LINE - len(self._pending)
            self._pending += head[:room]
            self._dropped += max(0, len(head) - room)
            if newline:
                self._flush()

    def end(self) -> None:
        if self._pending or self._dropped:
            self._flush()

    def _flush(self) -> None:
        line, self._pending = self._pending, b""
        if self._dropped:
            line += f" …[{self._dropped} more bytes of this line dropped]".encode()
            self._dropped = 0
        self.emit(line)


class SetupContainer:
    """One setup: start, run steps (streamed line by line), commit, close. Blocking."""

    def __init__(self, client: docker.DockerClient, base: ImageFacts, probe: Probe, spec: EnvironmentSpec, *,
                 workspace: Path | None, prefix_owner: str | None, network: str, ca_bundle: Path | None,
                 labels: Mapping[str, str], on_line: Callable[[str], None],
                 programs: Mapping[str, Path] | None = None) -> None:
        self.client = client
        self.base = base
        self.probe = probe
        self.spec = spec
        self.workspace = workspace
        self.prefix_owner = prefix_owner
        self.network = network
        self.ca_bundle = ca_bundle
        self.labels = dict(labels)
        self.on_line = on_line
        self.programs = dict(programs or {})  # sandloop's own programs setup runs: where → host file
        self.name = f"sandloop-envsetup-{secrets.token_hex(6)}"
        self.container_id: str | None = None
        self._sock: socket.socket | None = None
        self._stream: Any = None  # the attach stream as docker-py hands it over (see close_attach)
        self._aborted: str | None = None

    # --- life ----------------------------------------------------------------------------

    def _mounts(self) -> list[Mount]:
        mounts: list[Mount] = []
        if self.workspace is not None:
            mounts += workspace_mounts(self.workspace, self.spec.read_only_paths)
        if self.probe.python3:
            mounts += helper_mounts([self.workspace] if self.workspace is not None else [], subreaper=False)
        if self.ca_bundle is not None:
            mounts.append(ca_mount(self.ca_bundle))
        # Read-only: the checkout's code runs in here too, and must not change what runs next.
        mounts += [Mount(where, str(host), type="bind", read_only=True) for where, host in self.programs.items()]
        return mounts

    def start(self) -> None:
        api = self.client.api
        spec = self.spec
        with engine_errors("cannot create the setup container"):
            host_config = hardened_host_config(
                api, mounts=self._mounts(), network=self.network, memory=spec.memory, cpus=spec.cpus,
                pids_limit=spec.pids_limit, tmpfs_size=_TMPFS, runtime=spec.runtime,
                read_only=False, init=True, auto_remove=True)
            created = api.create_container(
                self.base.id, entrypoint=_KEEPER, command=[], name=self.name, stdin_open=True, tty=False,
                detach=False, environment={}, labels=self.labels, hostname="setup",
                network_disabled=self.network == "none", host_config=host_config)
            self.container_id = created["Id"]
            if self.prefix_owner is not None:
                uid, gid = (int(x) for x in self.prefix_owner.split(":"))
                entries = [("env", uid, gid)] if self.probe.has_opt else [("opt", 0, 0), ("opt/env", uid, gid)]
                api.put_archive(self.container_id, "/opt" if self.probe.has_opt else "/", _dir_archive(entries))
            raw = api.attach_socket(self.container_id, params={"stdin": 1, "stream": 1})
            self._sock, self._stream = getattr(raw, "_sock", raw), raw
            api.start(self.container_id)

    def abort(self, why: str) -> None:
        """Stop whatever runs now (a deadline, Ctrl-C): the running step ends as failed."""
        self._aborted = why
        if self.container_id is not None:
            with contextlib.suppress(docker.errors.APIError, docker.errors.DockerException, OSError):
                self.client.api.kill(self.container_id)

    def close(self) -> None:
        """Remove the container (its stdin closes too: it would stop and remove itself anyway)."""
        sock, self._sock = self._sock, None
        stream, self._stream = self._stream, None
        close_attach(sock, stream)
        if self.container_id is not None:
            with contextlib.suppress(docker.errors.APIError, docker.errors.DockerException, OSError):
                self.client.api.remove_container(self.container_id, force=True, v=True)
            # A killed container may be on its way out already (auto_remove): gone before we return.
            with contextlib.suppress(docker.errors.APIError, docker.errors.DockerException, OSError):
                self.client.api.wait(self.container_id, timeout=60, condition="removed")

    # --- steps ---------------------------------------------------------------------------

    def shell(self, command: str) -> list[str]:
        """How one command line runs: bash with errexit and pipefail where there is bash, under
        sandloop's seccomp filter where the image has python3 (see the module's docstring)."""
        argv = [self.probe.bash, "-e", "-o", "pipefail", "-c", command] if self.probe.bash \
            else ["/bin/sh", "-e", "-c", command]
        return confined(argv, python=self.probe.python3) if self.probe.python3 else argv

    def run(self, title: str, command: str, *, user: str, env: Mapping[str, str], deadline: float) -> None:
        """Run one step to its end, every output line to ``on_line``; StepFailed when it fails."""
        api = self.client.api
        assert self.container_id is not None
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        remaining = deadline - time.monotonic()
        late = f"setup ran past its {self.spec.setup_timeout_s:.0f} s"
        if remaining <= 0:
            raise StepFailed(title, late, [])
        watchdog = threading.Timer(remaining, self.abort, args=(late,))
        watchdog.daemon = True
        watchdog.start()
        try:
            with engine_errors(f"cannot run setup step {title}"):
                exec_id = api.exec_create(self.container_id, self.shell(command), stdout=True, stderr=True,
                                          user=user, environment=dict(env),
                                          workdir=WORKSPACE if self.workspace is not None else "/")["Id"]
                lines = Lines(lambda raw: self._line(raw, tail))
                for chunk in api.exec_start(exec_id, stream=True):
                    lines.feed(chunk)
                lines.end()
                code = api.exec_inspect(exec_id).get("ExitCode")
        except SandboxUnavailable:
            if self._aborted:  # we killed it: the step failed, the engine did not
                raise StepFailed(title, self._aborted, list(tail)) from None
            raise
        finally:
            watchdog.cancel()
        if self._aborted:
            raise StepFailed(title, self._aborted, list(tail))
        if code != 0:
            raise StepFailed(title, f"exited with {code}", list(tail))

    def _line(self, raw: bytes, tail: collections.deque[str]) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        tail.append(line)
        self.on_line(line)

    def commit(self, repository: str, tags: list[str]) -> str:
        """The container as an image, tagged ``repository:tag`` for each tag; its configuration is
        the base image's (entrypoint, command, user, working directory) with the environment's
        labels and ``PREFIX/bin`` first on PATH."""
        api = self.client.api
        assert self.container_id is not None
        conf: dict[str, Any] = {
            "Entrypoint": self.base.entrypoint or [],
            "Cmd": self.base.cmd,
            "User": self.base.user,
            "WorkingDir": self.base.workdir,
            "Env": [f"PATH={self.path}"],
            "Labels": self.labels,
        }
        with engine_errors("cannot commit the set-up environment"):
            image_id = str(api.commit(self.container_id, repository=repository, tag=tags[0], conf=conf)["Id"])
            for tag in tags[1:]:
                api.tag(image_id, repository, tag)
        return image_id

    @property
    def path(self) -> str:
        """PATH in setup and in the committed image: the environment's prefix first."""
        base = self.base.path or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return f"{PREFIX}/bin:{base}"
