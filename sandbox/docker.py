"""The Docker back-end: one warm, hardened container per session, spoken to through the helper.

Start-up: the helper's zip application (:mod:`sandbox.helper`, packed by :mod:`sandbox.bundle`)
is written once to a private host cache directory, outside every path a sandbox can write, and
bind-mounted read-only at ``/opt/sandloop/helper.pyz``; the container is created (not started),
we attach to its stdin/stdout, and start it. Requests then travel over a unix socket the host
made for this container (:mod:`sandbox.helper_socket`), read by the event loop itself; the
attach stream carries the hello, the helper's stderr and the lifecycle. The helper is the
container's main process — PID 1, with no init in front of it, so nothing else in the container
holds the attach stream — and its life and the container's are one: when the attach stream
closes (the front-end exited, or was SIGKILLed) stdin closes (``stdin_once``), the helper exits,
and ``auto_remove`` deletes the container. Labels let :func:`reap` remove anything left over.

Hardening by default: every capability dropped, no-new-privileges, read-only root, tmpfs /tmp,
pids/memory/CPU limits, no network, no host environment, a non-root user (the workspace owner's
uid:gid — see :func:`container_user`), sandloop's seccomp rules (installed by the helper on
itself, and given to the engine as the container's profile too: :mod:`sandbox.seccomp`), and a
helper no command can reach: its code is read-only and it is non-dumpable (no
``/proc/<pid>/fd``, ``mem`` or ptrace for anyone without CAP_SYS_PTRACE).

Every failure of the Docker engine (down, restarting, refusing) surfaces as
:class:`~sandloop.errors.SandboxUnavailable` with a one-line reason; the next call starts a fresh
container once the engine answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import socket
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container
from docker.types import Mount

from sandloop.errors import ConfigError, SandboxError, SandboxUnavailable
from sandloop.hostfiles import HostDir
from sandloop.limits import Limits

from . import egress, images, seccomp
from .base import Snapshotted
from .bundle import helper_programs, install
from .ca import ca_env, ca_mount, host_bundle, with_session_ca
from .helper.client import HelperClient, ReplaceableSession
from .helper.confine import EXEC
from .helper.main import ARCHIVE
from .helper.wire import HelloResult
from .helper_socket import SOCKET_NAME, HelperListener
from .injection import Injection, SecretSpec, resolve_all
from .lifecycle import HELPER_DIR, LABEL, owner_labels, stale_reason
from .protected import protected_paths
from .snapshots import TAR_MODE

__all__ = ["DockerConfig", "DockerSession", "build_own_image", "close_attach", "confined", "container_user",
           "hardened_host_config", "helper_mounts", "protected_paths", "reap", "workspace_mounts"]

log = logging.getLogger("sandloop.docker")

WORKSPACE = "/workspace"
#: Where the helper's code appears inside the container (a read-only bind mount).
HELPER_PATH = f"{HELPER_DIR}/helper.pyz"
#: What python3 -c runs to start the helper from its archive (its arguments follow).
HELPER_LAUNCH = (f"import sys; sys.path.insert(0, {HELPER_PATH!r}); "
                 "from sandbox.helper.main import main; sys.exit(main())")
#: Where the program that makes each command's shell a subreaper appears (idem), when there is one.
SUBREAPER_PATH = f"{HELPER_DIR}/subreaper"
#: Where the directory of the host's socket for the helper appears (idem).
SOCKET_DIR = f"{HELPER_DIR}/socket"
#: Where a resumed session's snapshot of /tmp appears (idem), for the helper to unpack.
RESTORE_PATH = f"{HELPER_DIR}/restore.tar"


def _one_line(exc: BaseException | str) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


@contextlib.contextmanager
def engine_errors(doing: str) -> Iterator[None]:
    """Every failure of the Docker SDK inside becomes SandboxUnavailable with a one-line reason.

    The SDK lets the transport's own errors through (requests' ConnectionError when the socket
    refuses, a reset attach socket …); all of them are OSErrors.
    """
    try:
        yield
    except SandboxError:
        raise
    except docker.errors.APIError as exc:  # the engine answered, with an error
        raise SandboxUnavailable(f"{doing}: {_one_line(exc.explanation or exc)}") from exc
    except (docker.errors.DockerException, OSError, EOFError) as exc:
        raise SandboxUnavailable(f"the Docker engine does not answer ({_one_line(exc)})") from exc


def build_own_image(client: docker.DockerClient, target: str, say: Callable[[str], None]) -> str:
    """sandloop's image ``target``, built now when it is missing (or waited for while another
    build of it runs); a failed build is SandboxUnavailable in one line."""
    with engine_errors(f"cannot build {images.image_name(target)}"):
        try:
            return images.ensure(client, target, say)
        except docker.errors.BuildError as exc:
            raise SandboxUnavailable(f"building {images.image_name(target)} failed ({exc.msg}): "
                                     "scripts/bootstrap builds it and shows the log") from None


@dataclass(frozen=True)
class DockerConfig:
    image: str | None = None  # None: the shell image for this package version
    read_only_workspace: bool = False
    #: Workspace paths mounted read-only over the writable checkout (a policy's [files]
    #: read_only). ``.git`` by default: the host's git runs hooks and config from it, so a
    #: command that could write there could run code on the host at the user's next commit.
    read_only_paths: tuple[str, ...] = (".git",)
    network: str = "none"  # "none", or a Docker network name
    #: Domains the session may reach (a policy's ``[shell] network`` list). Not None: the
    #: container joins an internal network whose only way out is an allow-list proxy.
    network_allow: tuple[str, ...] | None = None
    #: Let allowed *names* resolve to private addresses (an internal service, an internal
    #: mirror). Off by default: on the engine's bridge a private address can be the host itself.
    network_private_ok: bool = False
    memory: str = "1g"
    cpus: float = 1.0
    pids_limit: int = 256
    tmpfs_size: str = "256m"
    runtime: str | None = None  # None: the engine's default; "runc" or "runsc" to insist
    user: str | None = None  # None: the workspace owner's uid:gid (see container_user)
    env: Mapping[str, str] = field(default_factory=dict)  # passed to every command
    idle_expiry_s: float = 900.0  # the helper exits after this long without a request
    max_lifetime_s: float = 24 * 3600.0  # the reaper removes anything older
    limits: Limits = field(default_factory=Limits)
    #: told of every request the egress proxy allows or refuses (from a background thread);
    #: None: Python logging only
    on_egress: Callable[[egress.EgressDecision], None] | None = None
    #: A host CA bundle to trust (an environment's ``trust_host_ca``): mounted read-only at
    #: :data:`~sandbox.ca.CA_PATH`, never over the image's own bundle, and named by
    #: the variables each client reads (:data:`~sandbox.ca.CA_VARIABLES`).
    ca_bundle: str | None = None
    #: The root file system stays writable (a policy's ``[session] writable_root``), so that a
    #: snapshot can commit what commands installed there; read-only otherwise.
    writable_root: bool = False
    #: A snapshot's tar of /tmp (a host file, mounted read-only), unpacked by the helper inside
    #: the container before its first request: a resumed session's $HOME.
    restore: str | None = None
    #: Secrets the egress proxy adds to HTTPS requests to their hosts (a policy's [secrets]
    #: whose hosts ``network_allow`` allows); read on the host at start, never given to the sandbox.
    secrets: tuple[SecretSpec, ...] = ()


def container_user(workspace: Path) -> tuple[str, str]:
    """The uid:gid the container runs as, and why.

    The bind-mounted checkout must be writable by the container user, and sandloop never chowns
    a user's files. So the container runs as the checkout's owner. A root-owned checkout runs as
    uid 0 — with every capability dropped, so it is root only in name: it cannot override file
    permissions, change ownership, or do anything else a capability would allow. Every sandbox
    gets a seccomp profile that stops it from setting setuid/setgid bits on the host's files.
    """
    st = workspace.stat()
    if st.st_uid == 0:
        return "0:0", ("workspace is owned by root: running as uid 0 with every capability dropped "
                       "and setuid/setgid bits refused by seccomp")
    return f"{st.st_uid}:{st.st_gid}", f"running as the workspace owner {st.st_uid}:{st.st_gid}"


def workspace_mounts(workspace: Path, read_only_paths: tuple[str, ...], *, read_only: bool = False) -> list[Mount]:
    """The checkout at /workspace, with ``.git`` (its hooks path, submodules and nested
    repositories too) and the policy's other read-only paths mounted read-only over it
    (:mod:`sandbox.protected`): every container that sees a checkout — a session, an
    environment's setup, a restore of its saved paths — gets exactly these."""
    mounts = [Mount(WORKSPACE, str(workspace), type="bind", read_only=read_only)]
    for host in protected_paths(workspace, read_only_paths):
        inside = f"{WORKSPACE}/{host.relative_to(workspace).as_posix()}"
        mounts.append(Mount(inside, str(host), type="bind", read_only=True))
    return mounts


def engine_pids_limit(pids_limit: int, runtime: str | None) -> int:
    """The cgroup pids limit to ask the engine for.

    Under gVisor the cgroup also holds the sentry's own threads and (ptrace platform, the
    one that works here) a host stub per sandboxed address space: measured, 8 parallel
    commands against a limit of 256 made the sentry itself fail to start a thread and the
    whole sandbox die. gVisor still isolates the processes; the host limit only has to stop
    a runaway, so it gets head-room there.
    """
    if runtime == "runsc":
        return max(pids_limit * 4, 2048)
    return pids_limit


def security_opt(runtime: str | None) -> list[str]:
    # Every sandbox, whatever its uid: a setuid/setgid file left in the bind-mounted checkout
    # is a program that runs as the checkout's owner for any local user who can reach it. The
    # helper's own seccomp filter refuses every way to set those bits; the engine applies the
    # same rules (one table, seccomp.py) to every process of the container as well, helper or not.
    return ["no-new-privileges", f"seccomp={seccomp.no_setid_profile(runtime)}"]


def helper_mounts(outside: Iterable[Path], *, subreaper: bool = True) -> list[Mount]:
    """The helper's code (and the subreaper program, where there is one), read-only: host files
    no sandbox can write, so no command (not even uid 0 without capabilities, which owns what
    root owns) can change them. ``outside``: the host paths the container can write."""
    helper, reaper = helper_programs(outside=list(outside))
    mounts = [Mount(HELPER_PATH, str(helper), type="bind", read_only=True)]
    if subreaper and reaper is not None:
        mounts.append(Mount(SUBREAPER_PATH, str(reaper), type="bind", read_only=True))
    return mounts


def confined(argv: Sequence[str], *, python: str = "python3") -> list[str]:
    """``argv`` under sandloop's seccomp filter, for a process the helper does not start (an
    environment's setup step, which the engine starts with ``docker exec``; a one-off container):
    the helper's exec mode installs the filter, then execs ``argv``. Needs :func:`helper_mounts`."""
    return [python, "-I", "-S", HELPER_PATH, EXEC, *argv]


def hardened_host_config(
    api: Any,
    *,
    mounts: list[Mount],
    network: str,
    memory: str,
    cpus: float,
    pids_limit: int,
    tmpfs_size: str,
    runtime: str | None,
    read_only: bool = True,
    init: bool = False,
    auto_remove: bool = True,
) -> dict[str, Any]:
    """The one set of hardening every sandbox container gets — the agent's session and an
    environment's setup alike: every capability dropped, no-new-privileges and the no-setid
    seccomp profile, pids / memory / CPU limits, no swap, a tmpfs /tmp.
    Only a setup container has a writable root file system (``read_only=False``): what it
    installs is committed to an image."""
    return dict(api.create_host_config(
        init=init,
        read_only=read_only,
        tmpfs={"/tmp": f"rw,nosuid,nodev,size={tmpfs_size},mode=1777"},
        mounts=mounts,
        cap_drop=["ALL"],
        security_opt=security_opt(runtime),
        pids_limit=engine_pids_limit(pids_limit, runtime),
        mem_limit=memory,
        memswap_limit=memory,  # no swap: a memory bomb meets the limit, not the disk
        nano_cpus=int(cpus * 1e9),
        network_mode=network,
        auto_remove=auto_remove,
        runtime=runtime,
        # On an internal network nothing outside resolves: fail lookups at once, not after 10 s.
        dns_opt=None if network == "none" else ["timeout:1", "attempts:1"],
    ))


def _reap_logged(client: docker.DockerClient) -> None:
    with engine_errors("cannot reap stale sandboxes"):
        for name, reason in reap(client):
            log.info("reaped %s (%s)", name, reason)


def close_attach(sock: socket.socket | None, stream: Any) -> None:
    """Close an engine attach stream for good: the socket, and the SocketIO docker-py wrapped it
    in (``stream``), which holds a reference to the descriptor that closing the socket alone
    leaves open until garbage collection — one descriptor per container otherwise."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
    if stream is not None and stream is not sock:
        with contextlib.suppress(OSError):
            stream.close()


def reap(client: docker.DockerClient, *, everything: bool = False) -> list[tuple[str, str]]:
    """Remove sandloop containers whose owner is dead or whose expiry passed (or all of them).

    Returns (container name, reason) for each one removed.
    """
    removed = []
    # The low-level listing carries labels and state itself: fetching each container afterwards
    # would race with containers that auto-remove while we look.
    for row in client.api.containers(all=True, filters={"label": LABEL}):
        labels = row.get("Labels") or {}
        name = (row.get("Names") or [row["Id"]])[0].lstrip("/")
        reason = "gc --all" if everything else stale_reason(labels, str(row.get("State", "")))
        if reason is None:
            continue
        try:
            client.api.remove_container(row["Id"], force=True, v=True)
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise
        removed.append((name, reason))
    return removed + egress.reap_networks(client, everything=everything)


class _Demux:
    """Reads Docker's multiplexed attach stream: 8-byte headers (stream id, length) + payload.

    stdout payloads are the helper's protocol frames; stderr goes to the log (helper tracebacks).
    """

    def __init__(self, sock: socket.socket, on_stderr: Callable[[bytes], None]) -> None:
        self._sock = sock
        self._buf = b""
        self._on_stderr = on_stderr

    def _exact(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise EOFError("stream closed")
            data += chunk
        return bytes(data)

    def recv(self, n: int) -> bytes:
        while not self._buf:
            try:
                header = self._exact(8)
            except EOFError:
                return b""
            stream, size = header[0], struct.unpack(">I", header[4:])[0]
            payload = self._exact(size)
            if stream == 2:
                self._on_stderr(payload)
            else:
                self._buf = payload
        out, self._buf = self._buf[:n], self._buf[n:]
        return out


class DockerSession(ReplaceableSession):
    """A hardened container with the workspace bind-mounted at /workspace."""

    sandbox_name = "sandbox container"

    def __init__(self, client: docker.DockerClient, workspace: Path, config: DockerConfig) -> None:
        super().__init__(config.limits, {**(ca_env() if config.ca_bundle else {}), **config.env})
        self.client = client
        self.host_workspace = workspace.resolve()
        self.config = config
        self.workspace = WORKSPACE
        self.session_id = secrets.token_hex(6)
        self.image = config.image or images.image_name("shell")
        self.user, self.user_reason = (
            (config.user, "set by configuration") if config.user else container_user(self.host_workspace)
        )
        self.container: Container | None = None
        self._starts = 0  # containers created so far: each gets a fresh name
        self._sock: socket.socket | None = None
        self._stream: Any = None  # the attach stream as docker-py hands it over (see close_attach)
        self._owns_client = False
        self.egress: egress.EgressHandle | None = None
        self._listener: HelperListener | None = None  # until the helper's connection is accepted
        self._attach: HelperClient | None = None  # the attach stream's client: hello, stderr, its end
        self._reaping: asyncio.Future[None] | None = None  # the reap of stale containers started beside it
        self._trust_file: Path | None = None  # this session's bundle with its CA (secrets only)

    @classmethod
    async def create(
        cls,
        workspace: Path,
        config: DockerConfig | None = None,
        *,
        client: docker.DockerClient | None = None,
        reap_stale: bool = True,
    ) -> DockerSession:
        """Start a session (and, first, reap containers left behind by dead front-ends)."""
        if not workspace.is_dir():
            raise SandboxUnavailable(f"workspace {workspace} is not a directory")
        config = config or DockerConfig()
        if config.runtime == "runsc" and config.network_allow is not None:
            # This engine's runsc is registered with --network=none (the only mode that works on
            # this kernel), so the sandbox could not even reach its egress proxy.
            raise ConfigError("a network allow-list cannot be combined with runtime runsc here: "
                              "gVisor runs with --network=none; use runc, or network = \"none\"")
        owns_client = client is None  # ours to close with the session (its connection pool)
        with engine_errors("cannot reach the Docker engine"):
            client = client or await asyncio.to_thread(docker.from_env)
        # The reap runs beside the start and the session's first commands, not before them: it
        # removes only what dead or expired owners left, never this live session's objects, and
        # on a busy engine its listings take as long as a container's start. close() waits for it.
        reaping = asyncio.ensure_future(asyncio.to_thread(_reap_logged, client)) if reap_stale else None
        session = cls(client, workspace, config)
        session._owns_client = owns_client
        session._reaping = reaping
        try:
            if session.config.network_allow is not None:
                # Each secret read first: a missing one is a one-line error before anything starts.
                injections = resolve_all(session.config.secrets)
                await session._attach_egress(list(session.config.network_allow), injections)
            await session._client()
        except BaseException:
            await session.close()  # a failed start leaves no proxy or network behind
            raise
        return session

    async def _attach_egress(self, allow: list[str], injections: tuple[Injection, ...] = ()) -> None:
        cfg = self.config
        trust = await asyncio.to_thread(lambda: host_bundle().read_text(errors="replace")) if injections else ""
        self.egress = await egress.attach_egress(
            self.client, allow, session_id=self.session_id,
            labels=owner_labels(self.session_id, cfg.max_lifetime_s, cfg.idle_expiry_s),
            on_decision=cfg.on_egress, private_ok=cfg.network_private_ok, secrets=injections, trust_pem=trust,
        )
        # The proxy's variables win over the policy's: they are the only way out.
        self.config = replace(cfg, network=self.egress.network)
        self.base_env = {**self.base_env, **self.egress.env}
        if injections:
            # The session CA joins what the sandbox trusts, for this session only: a file of its
            # own (certificates, never a key) outside every sandbox-writable path, removed at close.
            data = with_session_ca(cfg.ca_bundle, self.egress.ca_pem)
            self._trust_file = install(data, "session-trust", ".crt", outside=[self.host_workspace])
            self.config = replace(self.config, ca_bundle=str(self._trust_file))
            self.base_env = {**ca_env(), **self.base_env}

    # --- container life ------------------------------------------------------------------

    def _mounts(self, listener: HelperListener | None) -> list[Mount]:
        cfg = self.config
        mounts = workspace_mounts(self.host_workspace, cfg.read_only_paths, read_only=cfg.read_only_workspace)
        mounts += helper_mounts([self.host_workspace])
        if cfg.ca_bundle:
            mounts.append(ca_mount(cfg.ca_bundle))
        if listener is not None:
            mounts.append(listener.mount(SOCKET_DIR))
        if cfg.restore:
            mounts.append(Mount(RESTORE_PATH, cfg.restore, type="bind", read_only=True))
        return mounts

    def _create_container(self, listener: HelperListener | None) -> Container:
        """Create (not start) the container. The low-level API: only it takes ``stdin_once``."""
        cfg = self.config
        api = self.client.api
        mounts = self._mounts(listener)
        # No init: the helper is PID 1 and reaps orphans itself. An init in front of it would
        # hold the attach stream too, where any command could write into it (/proc/1/fd/1).
        host_config = hardened_host_config(
            api, mounts=mounts, network=cfg.network, memory=cfg.memory, cpus=cfg.cpus,
            pids_limit=cfg.pids_limit, tmpfs_size=cfg.tmpfs_size, runtime=cfg.runtime,
            read_only=not cfg.writable_root)
        # -I: nothing from the environment, the working directory or user site-packages; -S: no
        # site module at all (the helper is standard library only; ≈5 ms of every start). The
        # archive is put on sys.path and its entry point called (-c), not run as a zip
        # application: runpy and the import machinery it loads cost ≈8 ms of a ≈65 ms start
        # (measured in the container). -I keeps the working directory off sys.path for -c too.
        command = ["python3", "-I", "-S", "-u", "-c", HELPER_LAUNCH, "--workspace", WORKSPACE,
                   "--idle", str(cfg.idle_expiry_s), "--contained"]
        if any(m["Target"] == SUBREAPER_PATH for m in mounts):
            command += ["--subreaper", SUBREAPER_PATH]
        if listener is not None:
            command += ["--socket", f"{SOCKET_DIR}/{SOCKET_NAME}"]
        if cfg.restore:
            command += ["--restore", RESTORE_PATH]
        name = f"sandloop-{self.session_id}-{self._starts}"
        created = api.create_container(
            self.image,
            command=command,
            name=name,
            user=self.user,
            working_dir=WORKSPACE,
            stdin_open=True,
            detach=False,  # with stdin_open: StdinOnce, so the helper sees EOF when our stream closes
            tty=False,
            environment={},  # nothing from the host, never the API key
            labels=owner_labels(self.session_id, cfg.max_lifetime_s, cfg.idle_expiry_s),
            hostname="sandbox",
            network_disabled=cfg.network == "none",
            host_config=host_config,
        )
        # The model from what we know, not from an inspect: one engine round trip less a start
        # (what a later reload fills in is asked for when needed).
        return self.client.containers.prepare_model({"Id": created["Id"], "Name": f"/{name}"})

    def _create_after_build(self, missing: SandboxUnavailable) -> Container:
        """sandloop's own image is built on first use (or waited for, while the background build
        a first `make demo` leaves running makes it); any other missing image is an error."""
        target = images.target_of(self.image)
        if target is None:
            raise SandboxUnavailable(
                f"image {self.image} is not there: run scripts/bootstrap (or `python -m sandbox.images build`)"
            ) from missing.__cause__
        build_own_image(self.client, target, lambda text: log.info("%s", text))
        with engine_errors("cannot create the sandbox container"):
            return self._create_container(self._listener)

    def _start_container(self) -> HelperClient:
        self._starts += 1
        # gVisor does not let a sandbox reach a host socket: its helper stays on the attach stream.
        self._listener = None if self.config.runtime == "runsc" else HelperListener(outside=[self.host_workspace])
        try:
            with engine_errors("cannot create the sandbox container"):
                container = self._create_container(self._listener)
        except SandboxUnavailable as exc:
            if not isinstance(exc.__cause__, docker.errors.ImageNotFound):
                raise
            container = self._create_after_build(exc)
        self.container = container
        try:
            with engine_errors("cannot start the sandbox container"):
                raw = self.client.api.attach_socket(
                    container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
                )
                sock: socket.socket = getattr(raw, "_sock", raw)
                sock.settimeout(None)
                self._sock, self._stream = sock, raw
                container.start()
        except SandboxUnavailable as exc:
            self._remove_container(container)
            text = str(exc)
            if "python3" in text and ("not found" in text or "no such file" in text):
                raise SandboxUnavailable(
                    f"image {self.image} has no python3: sandloop's in-container helper needs "
                    "python3 (standard library only) in the image"
                ) from exc
            if "runtime" in text.lower() and self.config.runtime:
                raise SandboxUnavailable(f"the engine has no runtime {self.config.runtime!r}: {text}") from exc
            raise
        name = f"container {container.name}"
        stderr_tail: list[bytes] = []

        def on_stderr(data: bytes) -> None:
            stderr_tail.append(data)
            del stderr_tail[:-20]
            log.debug("%s stderr: %s", name, data.decode(errors="replace").rstrip())

        demux = _Demux(sock, on_stderr)
        self._stderr_tail = stderr_tail
        return HelperClient(demux.recv, sock.sendall, name=name)

    def _remove_container(self, container: Container) -> None:
        """Best effort: a container the engine cannot remove now dies with its attach stream."""
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "already in progress" in str(exc):
                # auto_remove got there first (the helper exited when its stream closed): wait
                # until it is done, so a closed session has no container left when close returns.
                self._wait_removed(container)
            else:
                log.warning("could not remove %s: %s", container.name, exc)
        except (docker.errors.DockerException, OSError) as exc:
            log.warning("could not remove %s: the Docker engine does not answer (%s)", container.name,
                        _one_line(exc))

    def _wait_removed(self, container: Container) -> None:
        try:
            self.client.api.wait(container.id, timeout=30, condition="removed")
        except docker.errors.NotFound:
            pass
        except (docker.errors.DockerException, OSError, requests.exceptions.RequestException) as exc:
            log.warning("%s is still being removed: %s", container.name, _one_line(exc))

    def _close_socket(self) -> None:
        sock, self._sock = self._sock, None
        stream, self._stream = self._stream, None
        close_attach(sock, stream)

    async def _start(self) -> tuple[HelperClient, HelloResult]:
        try:
            helper = self._attach = await asyncio.to_thread(self._start_container)
        except BaseException:
            self._close_listener()
            raise
        try:
            async with self._starting(
                    lambda: b"".join(getattr(self, "_stderr_tail", [])).decode(errors="replace")[-800:]):
                hello = await asyncio.wait_for(helper.hello(), 60)
                seccomp.require_filter(hello, helper.name)
                if hello.get("socket") and self._listener is not None:
                    # The helper connected before it answered: the one connection there can be.
                    conn = await asyncio.to_thread(self._listener.accept)
                    helper = await HelperClient.over_socket(conn, name=helper.name)
                    self._attach.link(helper)
        finally:
            self._close_listener()
        if not hello["non_dumpable"]:
            log.warning("%s: the helper could not make itself non-dumpable (no ctypes in %s?): commands "
                        "running as its uid can reach its descriptors", helper.name, self.image)
        return helper, hello

    def dead_reason(self) -> str:
        container = self.container
        if container is None:
            return "never started"
        try:
            container.reload()
            state = container.attrs.get("State", {})
            if state.get("OOMKilled"):
                return "out of memory"
            return f"status {state.get('Status')}, exit code {state.get('ExitCode')}"
        except docker.errors.NotFound:
            return "container gone"
        except docker.errors.APIError as exc:
            return f"engine error: {_one_line(exc)}"
        except (docker.errors.DockerException, OSError) as exc:
            return f"the Docker engine does not answer ({_one_line(exc)})"

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def _teardown(self) -> None:
        self._close_socket()
        self._close_listener()
        for client in (self._helper, self._attach):
            if client is not None:
                client.mark_dead("session closed")
                client.close()
        self._attach = None
        container, self.container = self.container, None
        if container is not None:
            self._remove_container(container)

    async def close(self) -> None:
        if self._closed:
            return
        await super().close()
        reaping, self._reaping = self._reaping, None
        if reaping is not None:  # it ran beside the session; its failure is only worth a line
            for failure in await asyncio.gather(reaping, return_exceptions=True):
                if isinstance(failure, BaseException):
                    log.warning("the reap of stale sandboxes failed: %s", _one_line(failure))
        if self.egress is not None:
            await self.egress.close()
        if self._trust_file is not None:
            with contextlib.suppress(OSError):
                self._trust_file.unlink()
        if self._owns_client:
            # Otherwise every session leaves its connection pool's sockets open until garbage
            # collection: a harness that opens hundreds of sessions runs out of descriptors.
            await asyncio.to_thread(self.client.close)

    # --- snapshots ------------------------------------------------------------------------

    async def capture(self, into: HostDir, tar: str, *, names: Sequence[str] | None,
                       commit: tuple[str, Mapping[str, str]] | None = None) -> Snapshotted:
        """/tmp's ``names`` (None: not this time) as a tar in ``into`` (written by the helper's
        archive mode inside the container, under the seccomp filter), and, given ``commit`` (tag,
        labels), the root file system committed to that image by the engine."""
        await self._client()  # a live container: a dead one is replaced first, as for a command
        container = self.container
        assert container is not None
        # The tar first, then the commit, never side by side: an exec started while the commit
        # pauses the container waits for the pause, and the engine's commit for the exec (seen:
        # both stuck, the container frozen, until its cgroup was thawed by hand).
        size, digest = await asyncio.to_thread(self._archive, container, into, tar, names) if names else (0, "")
        image = None
        if commit is not None:
            tag, labels = commit
            with engine_errors("cannot commit the sandbox's root file system"):
                repository, _, version = tag.partition(":")
                await asyncio.to_thread(container.commit, repository=repository, tag=version,
                                        conf={"Labels": dict(labels)}, pause=True)
            # by its tag: removing a tag a later snapshot's image builds on leaves the shared
            # layers to that image, where removing the id would fail
            image = tag
        return Snapshotted(tar_bytes=size, tar_sha256=digest, image=image)

    def _archive(self, container: Container, into: HostDir, tar: str, names: Sequence[str]) -> tuple[int, str]:
        api = self.client.api
        errors: list[bytes] = []
        digest = hashlib.sha256()

        def chunks() -> Iterator[bytes]:
            with engine_errors("cannot snapshot the sandbox's files"):
                run = api.exec_create(container.id, ["python3", "-I", "-S", HELPER_PATH, ARCHIVE, *names],
                                      user=self.user, stdout=True, stderr=True)
                for out, err in api.exec_start(run["Id"], stream=True, demux=True):
                    if err:
                        errors.append(err)
                    if out:
                        digest.update(out)
                        yield out
                code = api.exec_inspect(run["Id"]).get("ExitCode")
            if code != 0:
                raise SandboxError(f"the sandbox's files could not be archived (exit {code}): "
                                   f"{_one_line(b''.join(errors).decode(errors='replace')[-300:])}")

        return into.replace_from(tar, chunks(), mode=TAR_MODE), digest.hexdigest()

    # --- facts for doctor and tests --------------------------------------------------------

    def inspect(self) -> dict[str, Any]:
        if self.container is None:
            return {}
        with engine_errors("cannot inspect the sandbox container"):
            self.container.reload()
        return dict(self.container.attrs)

    def runtime_in_force(self) -> str:
        """Which OCI runtime really runs this container (engine-side, not what was asked for)."""
        host = self.inspect().get("HostConfig", {})
        return str(host.get("Runtime") or "runc")
