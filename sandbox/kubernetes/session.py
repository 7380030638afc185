"""KubernetesSession: one pod per session, the helper over one attach websocket.

Start-up: the session's NetworkPolicies first (so no pod of it ever runs unconfined), then —
with a network allow-list — its egress proxy pod; then the session pod (or one claimed from an
agent-sandbox warm pool), watched until its container runs; one attach websocket; the helper's
code as the stream's first bytes (:mod:`.loader`); ``hello``; the host checkout copied in
(:mod:`.sync`). Every operation then goes to the helper exactly as on Docker.

A checkout with read-only paths (``.git`` & co., found by :mod:`sandbox.protected` at each start,
as on Docker) is copied in before the helper's container starts instead: the tar goes over the
attach stream of the pod's ``copy-in`` init container (:mod:`.untar`), which unpacks it and
exits; the helper's container then mounts those paths read-only (:meth:`.manifest.Plan.pod`).
Such a checkout never takes a warm-pool pod, which was started before anyone knew what to mount.

A broken stream is a dead container: the call that was running is answered with the error, the
next call deletes the pod and starts a fresh one, copying the host checkout in again — changes
made in the dead pod since the last copy-back are lost with it (``notes`` says so). At close the
sandbox's changes are copied back (all or nothing), then everything the session created is
deleted; the stream's end alone makes the helper exit and the pod complete, so a front-end that
dies (even SIGKILLed) leaves only completed pods, which ``sandloop gc --backend kubernetes`` and
the next session's start remove by their labels.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import shlex
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

from sandloop.errors import SandboxError, SandboxUnavailable, SandloopError
from sandloop.files import FileChange
from sandloop.hostfiles import HostDir

from ..base import Snapshotted
from ..ca import CA_VARIABLES, host_bundle
from ..docker import DockerConfig
from ..helper import archive
from ..helper.client import HelperClient, ReplaceableSession
from ..helper.wire import HelloResult
from ..injection import resolve_all
from ..lifecycle import owner_labels
from ..protected import find
from ..seccomp import require_filter
from ..snapshots import TAR_MODE
from . import egress, loader, sync
from .channels import AttachStream, attach
from .cluster import Cluster, Obj, one_line, pod_running, pod_state
from .manifest import COPY_IN_CONTAINER, HELPER_CONTAINER, WORKSPACE, Plan, plan, pod_image
from .options import KubernetesOptions
from .reaper import reap
from .warmpool import Claim, claim_pod

__all__ = ["KubernetesSession"]

#: Where a session whose proxy adds secrets finds its CA bundle (the pod's memory-backed /tmp).
TRUST_PATH = "/tmp/.sandloop-trust.crt"
TRUST_COMMAND = (
    "umask 022; { for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; "
    'do if [ -r "$f" ]; then cat "$f"; break; fi; done; printf \'%s\\n\' "$SANDLOOP_SESSION_CA"; } > '
    + TRUST_PATH)

log = logging.getLogger("sandloop.kubernetes")

#: How long the account of a dead pod waits for the kubelet to report why it ended.
DEATH_REPORT_S = 5.0
#: A snapshot's tar of /tmp while it crosses the pod's workspace (the helper reads and writes
#: files there only), removed at once: it is never part of the checkout or its copy-back.
PASSING = ".sandloop-snapshot.tar"
#: what a tar of /tmp may take to make or unpack in a pod
ARCHIVE_TIMEOUT_S = 300.0


def _archive_program(call: str, *args: str) -> str:
    """:mod:`sandbox.helper.archive` and ``call`` of it, as a command for the pod's python3 (the
    helper's code reaches a pod over its stream, never its disk); it runs under the helper's
    seccomp filter, like any command."""
    source = Path(archive.__file__).read_text(encoding="utf-8")
    return shlex.join(["python3", "-I", "-S", "-c", f"{source}\nimport sys\n{call}\n", *args])


def _ended(pod: Obj) -> bool:
    """A pod whose end has been reported (or that is being deleted)."""
    status = pod.get("status") or {}
    return bool((pod.get("metadata") or {}).get("deletionTimestamp")) or status.get("phase") != "Running" \
        or any("terminated" in (cs.get("state") or {}) for cs in status.get("containerStatuses") or [])


class KubernetesSession(ReplaceableSession):
    """The workspace is a copy in the pod; :meth:`copy_back` (and :meth:`close`) bring changes home."""

    sandbox_name = "sandbox pod"
    replaced = " from the host checkout (changes since the last copy-back are lost)"

    def __init__(self, cluster: Cluster, workspace: Path, config: DockerConfig, options: KubernetesOptions) -> None:
        super().__init__(config.limits, config.env)
        self.cluster = cluster
        self.host_workspace = workspace.resolve()
        self.config = config
        self.options = options
        self.workspace = WORKSPACE
        self.session_id = secrets.token_hex(6)
        self.image = pod_image(config, options)
        self.plan: Plan = plan(config, options, session_id=self.session_id,
                               labels=owner_labels(self.session_id, config.max_lifetime_s, config.idle_expiry_s),
                               namespace=cluster.namespace, image=self.image)
        #: never copied back: .git and the other read-only paths, as on Docker (found at each start)
        self.protected: tuple[str, ...] = tuple(config.read_only_paths)
        #: the paths mounted read-only in the current pod (workspace-relative)
        self.read_only: tuple[str, ...] = ()
        self.pod: str | None = None
        self.snapshot: sync.Snapshot | None = None
        self.last_sync: sync.SyncResult | None = None
        #: seconds the last start spent copying the checkout in once its helper answered (what was
        #: left of making the tar, then commit and unpack)
        self.copy_in_s = 0.0
        self.egress: egress.EgressPod | None = None
        self._claim: Claim | None = None
        self._stream: AttachStream | None = None
        self._starts = 0
        self._sync_lock = asyncio.Lock()
        self._policies: list[str] = []
        self._keeper: asyncio.Task[None] | None = None

    @classmethod
    async def create(cls, workspace: Path, config: DockerConfig | None = None,
                     options: KubernetesOptions | None = None, *, cluster: Cluster | None = None,
                     reap_stale: bool = True) -> KubernetesSession:
        """Start a session (and, first, remove what dead front-ends left in the namespace)."""
        if not workspace.is_dir():
            raise SandboxUnavailable(f"workspace {workspace} is not a directory")
        options = options or KubernetesOptions()
        if cluster is None:
            cluster = await asyncio.to_thread(Cluster, options)
        if reap_stale:
            for name, reason in await asyncio.to_thread(reap, cluster):
                log.info("reaped %s (%s)", name, reason)
        session = cls(cluster, workspace, config or DockerConfig(), options)
        try:
            await asyncio.to_thread(session._create_policies)
            if session.config.network_allow is not None:
                # Each secret read first: a missing one is a one-line error before any pod starts.
                injections = resolve_all(session.config.secrets)
                trust = host_bundle().read_text(errors="replace") if injections else ""
                session.egress = await egress.start(session.cluster, session.plan, session.config.on_egress,
                                                    injections, trust)
                session.base_env = {**session.base_env, **session.egress.env}
                if injections:
                    session.base_env = {**dict.fromkeys(CA_VARIABLES, TRUST_PATH), **session.base_env}
            await session._client()
        except BaseException:
            await session.close(copy_back=False)
            raise
        session._keeper = asyncio.get_running_loop().create_task(session._keep_alive())
        return session

    async def _keep_alive(self) -> None:
        """Keep the helper from idling out while this session is open. On Docker an idle exit
        costs nothing (the checkout is the host's); here it would take every change not yet
        copied back with the pod, say while a person takes their time over an approval. An
        abandoned pod still ends: its stream closes with the front-end, and
        ``activeDeadlineSeconds`` bounds it."""
        period = max(0.5, self.config.idle_expiry_s / 3)
        while not self._closed:
            await asyncio.sleep(period)
            helper = self._helper
            if helper is not None and helper.alive:
                with contextlib.suppress(SandloopError):
                    await helper.stat(".")

    def _create_policies(self) -> None:
        for body in self.plan.network_policies():
            self.cluster.create_network_policy(body)
            self._policies.append(body["metadata"]["name"])

    # --- the pod ---------------------------------------------------------------------------

    def _create_pod(self, copy_in: bool) -> None:
        """Claim or create this session's next pod (blocking): one with a copy-in container when
        ``copy_in`` (never a warm one, then)."""
        self._starts += 1
        if self.options.warm_pool and copy_in:
            staged = self.plan.staged(self.read_only)
            what = f"this checkout has read-only paths ({', '.join(staged)})" if staged else \
                "this policy's workspace is read-only"
            log.warning("warm pool %s not used: %s, which only a pod made for it can mount; starting a plain pod",
                        self.options.warm_pool, what)
        elif self.options.warm_pool:
            self._claim = claim_pod(self.cluster, self.plan, self.options.warm_pool,
                                    timeout_s=self.options.start_timeout_s)
        if self._claim is not None:
            self.pod = self._claim.pod
        else:
            body = self.plan.pod(self._starts, self.read_only)
            self.pod = body["metadata"]["name"]
            self.cluster.create_pod(body)

    def _attach(self, container: str, *, init: bool = False) -> AttachStream:
        """``container`` of the pod, running and attached (blocking)."""
        assert self.pod is not None
        self.cluster.wait_pod(self.pod, pod_running(container, init=init), self.options.start_timeout_s)
        stream = attach(self.cluster, self.pod, container)
        self._stream = stream
        return stream

    @contextlib.asynccontextmanager
    async def _speaking(self, stream: AttachStream) -> AsyncIterator[None]:
        """What goes wrong while the helper is spoken to at start is one line, with its last words."""
        try:
            yield
        except (SandboxError, TimeoutError) as exc:
            tail = stream.stderr_text()
            raise SandboxUnavailable(f"the sandbox helper did not start in pod {self.pod}: {exc} {tail}".strip()) \
                from exc

    async def _hello(self, stream: AttachStream) -> tuple[HelperClient, HelloResult]:
        await asyncio.to_thread(stream.send, loader.frame(self.plan.helper))
        helper = HelperClient(stream.recv, stream.send, name=f"pod {self.pod}")
        hello = await asyncio.wait_for(helper.hello(), 60)
        require_filter(hello, helper.name)  # the pod's RuntimeDefault does not refuse setid bits
        return helper, hello

    async def _copy_in(self, packing: asyncio.Future[tuple[sync.Snapshot, bytes]],
                       into: Callable[[bytes], Awaitable[None]]) -> None:
        started = time.perf_counter()
        self.snapshot, tar = await packing
        await into(tar)
        self.copy_in_s = time.perf_counter() - started

    async def _start(self) -> tuple[HelperClient, HelloResult]:
        ws = self.host_workspace
        found = await asyncio.to_thread(find, ws, self.config.read_only_paths)
        self.read_only = tuple(p.relative_to(ws).as_posix() for p in found.paths)
        self.protected = tuple(dict.fromkeys([*self.config.read_only_paths, *self.read_only]))
        staged = self.plan.staged(self.read_only)
        copy_in = self.plan.copy_in(self.read_only)
        # The tar is made while the pod starts: it needs nothing from it.
        packing = asyncio.ensure_future(asyncio.to_thread(sync.snapshot, ws, self.protected,
                                                          staged if copy_in else None))
        try:
            await asyncio.to_thread(self._create_pod, copy_in)
            if copy_in:
                stream = await asyncio.to_thread(self._attach, COPY_IN_CONTAINER, init=True)
                async with self._speaking(stream):
                    await self._copy_in(packing, partial(sync.unpack, stream.send, stream.recv))
                await asyncio.to_thread(stream.close)  # it has exited, or does now: the kubelet starts the next
            stream = await asyncio.to_thread(self._attach, HELPER_CONTAINER)
            async with self._speaking(stream):
                helper, hello = await self._hello(stream)
                if not copy_in:
                    await self._copy_in(packing, partial(sync.copy_in, helper))
                if self.config.restore:
                    await self._restore(helper, Path(self.config.restore))
                if self.egress is not None and self.egress.ca_pem:
                    await self._trust_session_ca(helper, self.egress.ca_pem)
        except BaseException:
            await asyncio.gather(packing, return_exceptions=True)
            await asyncio.to_thread(self._teardown)
            raise
        return helper, hello

    @staticmethod
    async def _trust_session_ca(helper: HelperClient, ca_pem: str) -> None:
        """The image's own bundle plus the session CA, at TRUST_PATH in the pod's /tmp (every
        start: a replaced pod has a fresh /tmp). A certificate is no secret, so a command may
        write it; what the sandbox trusts is its own affair, and it never sees a key."""
        result = await helper.run(TRUST_COMMAND, timeout_s=30, max_output_bytes=4096,
                                  env={"SANDLOOP_SESSION_CA": ca_pem}, within=60)
        if result.exit_code != 0:
            raise SandboxUnavailable(f"cannot write the session CA bundle in the pod: {result.stderr.text[:200]}")

    def dead_reason(self) -> str:
        if self.pod is None:
            return "never started"
        said = self._stream.status if self._stream is not None else None
        last = f"; the attach ended: {said.get('message') or said.get('status')}" if said else ""
        # The kubelet reports a container's end a moment after its stream closes: watch (bounded)
        # for the reason, an OOM kill's exit code 137 for one.
        pod: Obj | None
        try:
            try:
                pod = self.cluster.wait_pod(self.pod, _ended, DEATH_REPORT_S)
            except SandboxUnavailable:
                pod = self.cluster.get_pod(self.pod)  # gone, or still reported running at the deadline
        except SandboxUnavailable as exc:
            return str(exc)
        if pod is None:
            return f"pod gone{last}"
        deleting = ", being deleted" if (pod.get("metadata") or {}).get("deletionTimestamp") else ""
        return f"{pod_state(pod)}{deleting}{last}"

    def _teardown(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        if self._helper is not None:
            self._helper.mark_dead("session closed")
        claim, self._claim = self._claim, None
        pod, self.pod = self.pod, None
        try:
            if claim is not None:
                claim.release()
            elif pod is not None:
                self.cluster.delete_pod(pod)
        except SandboxUnavailable as exc:
            log.warning("could not delete pod %s: %s", pod, exc)

    # --- the workspace ----------------------------------------------------------------------

    @property
    def writes_back(self) -> bool:
        return not self.config.read_only_workspace

    async def copy_back(self) -> sync.SyncResult:
        """Bring the sandbox's changes to the host checkout now (all or nothing)."""
        if not self.writes_back:
            return sync.SyncResult()
        async with self._sync_lock:
            helper = await self._client()
            assert self.snapshot is not None
            result = await sync.copy_back(helper, self.snapshot)
            self.last_sync = result
            for skipped in result.skipped:
                log.info("not copied back: %s", skipped)
            return result

    async def close(self, *, copy_back: bool = True) -> None:
        """Copy the changes back (unless told not to), then delete everything the session made —
        whatever the copy-back did: a pod must not keep its objects alive by breaking it."""
        if self._closed:
            return
        try:
            if copy_back and self.writes_back and self._helper is not None:
                await self._last_copy_back(self._helper)
        finally:
            self._closed = True
            if self._keeper is not None:
                self._keeper.cancel()
                await asyncio.gather(self._keeper, return_exceptions=True)
            async with self._start_lock:
                await asyncio.to_thread(self._teardown)
            if self.egress is not None:
                await self.egress.close()
            await asyncio.to_thread(self._delete_policies)
            self.cluster.close()

    async def _last_copy_back(self, helper: HelperClient) -> None:
        note = None
        if not helper.alive:
            note = (f"the sandbox pod had ended before the session closed ({helper.name}): the changes "
                    "made in it since the last copy-back are lost")
        else:
            try:
                await self.copy_back()
            except Exception as exc:  # the pod is untrusted: whatever it sent, the session still closes
                note = f"the sandbox's changes were NOT copied back: {one_line(exc)}"
        if note is not None:
            self.notes.append(note)
            log.error(note)

    def _delete_policies(self) -> None:
        for name in self._policies:
            with contextlib.suppress(SandboxUnavailable):
                self.cluster.delete_network_policy(name)
        self._policies.clear()

    # --- snapshots: /tmp as a tar, through the workspace ------------------------------------

    async def capture(self, into: HostDir, tar: str, *, names: Sequence[str] | None,
                      commit: tuple[str, Mapping[str, str]] | None = None) -> Snapshotted:
        """/tmp's ``names`` as a tar in ``into``: made in the pod (under the seccomp filter) into
        the workspace, read back through the helper (at most its read limit, 64 MB), removed. A
        pod's root file system cannot be committed from here: ``commit`` is refused."""
        if commit is not None:
            raise SandboxError("a pod's root file system cannot be committed: on Kubernetes a snapshot keeps /tmp "
                               "($HOME) only; [session] writable_root is for the Docker back-end")
        if not names:
            return Snapshotted(0, "")
        if self.config.read_only_workspace:
            raise SandboxError("a snapshot on Kubernetes passes through the workspace, which this policy makes "
                               "read-only")
        async with self._sync_lock:
            helper = await self._client()
            made = _archive_program("archive(sys.argv[1:], sys.stdout.buffer)", *names)
            try:
                await self._in_pod(helper, f"{made} > {WORKSPACE}/{PASSING}", "make the snapshot's tar")
                data = await helper.read_file(PASSING)
            finally:
                with contextlib.suppress(SandloopError):
                    await helper.commit([FileChange(PASSING, None)])
        size = await asyncio.to_thread(partial(into.replace_from, tar, [data], mode=TAR_MODE))
        return Snapshotted(size, hashlib.sha256(data).hexdigest())

    async def _restore(self, helper: HelperClient, tar: Path) -> None:
        """A resumed session's /tmp, unpacked in the pod before its first command."""
        data = await asyncio.to_thread(tar.read_bytes)
        await helper.commit([FileChange(PASSING, data)])
        unpack = _archive_program("restore(sys.argv[1])", f"{WORKSPACE}/{PASSING}")
        try:
            await self._in_pod(helper, unpack, "unpack the snapshot's tar")
        finally:
            with contextlib.suppress(SandloopError):
                await helper.commit([FileChange(PASSING, None)])

    async def _in_pod(self, helper: HelperClient, command: str, doing: str) -> None:
        result = await helper.run(command, timeout_s=ARCHIVE_TIMEOUT_S, max_output_bytes=1 << 16, env={},
                                  within=ARCHIVE_TIMEOUT_S + self.REPLY_MARGIN_S)
        if result.exit_code != 0:
            raise SandboxError(f"could not {doing} in pod {self.pod} (exit {result.exit_code}): "
                               f"{one_line(result.stderr.text[-300:])}")

    # --- facts for doctor and tests --------------------------------------------------------

    def inspect(self) -> Obj:
        if self.pod is None:
            return {}
        return self.cluster.get_pod(self.pod) or {}

    @property
    def protocol(self) -> str:
        """The channel protocol the API server chose (v5.channel.k8s.io or v4.channel.k8s.io)."""
        return self._stream.protocol if self._stream is not None else ""
