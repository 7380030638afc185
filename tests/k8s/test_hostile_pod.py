"""A hostile pod against the host's side of the copy-back: whatever a command (or a replaced
helper) in the pod sends, nothing is written outside the checkout, nothing outside is read, the
host's memory stays bounded, and the session's objects are deleted at close."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from sandbox.docker import DockerConfig
from sandbox.helper import wire
from sandbox.helper.client import HelperClient
from sandbox.kubernetes import sync
from sandbox.kubernetes.options import KubernetesOptions
from sandbox.kubernetes.session import KubernetesSession
from sandloop.errors import SandboxError
from tests.k8s.fake import FakeKubernetes

pytestmark = [pytest.mark.docker]


async def test_a_name_that_is_not_utf8_is_skipped_and_close_still_cleans_up(
        user_workspace: Path, config: DockerConfig, options: KubernetesOptions, fake: FakeKubernetes | None) -> None:
    s = await KubernetesSession.create(user_workspace, config, options)
    pod = s.pod
    await s.run("touch \"$(printf 'x\\377')\"; echo kept > good.txt")
    result = await s.copy_back()
    assert result.written == ["good.txt"]
    assert any("not valid UTF-8" in why for why in result.skipped), result.skipped
    await s.close()
    assert (user_workspace / "good.txt").read_text() == "kept\n"
    assert not [p for p in os.listdir(user_workspace) if p.startswith("x")]
    if fake is not None:
        assert fake.store.get("pods", fake.namespace, str(pod)) is None


@pytest.mark.parametrize("guess", ["right\n", "wrong\n"])
async def test_a_host_folder_link_is_neither_followed_nor_an_oracle(
        guess: str, user_workspace: Path, config: DockerConfig, options: KubernetesOptions,
        tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("right\n")
    (user_workspace / "data").symlink_to(outside)
    async with await KubernetesSession.create(user_workspace, config, options) as s:
        await s.run(f"rm -rf data; mkdir data; printf {guess!r} > data/secret.txt")
        with pytest.raises(SandboxError, match="nothing written"):
            await s.copy_back()  # the same answer whatever the guess: nothing outside is compared
    assert (outside / "secret.txt").read_text() == "right\n"
    assert sorted(os.listdir(outside)) == ["secret.txt"]


async def test_what_a_pod_sends_back_is_bounded(user_workspace: Path, config: DockerConfig,
                                                options: KubernetesOptions, monkeypatch: pytest.MonkeyPatch) -> None:
    # Hard links cost the pod nothing; each would be a whole file in the host's memory and disk.
    monkeypatch.setattr(sync, "MAX_COPY_BACK_BYTES", 1 << 20)
    async with await KubernetesSession.create(user_workspace, config, options) as s:
        await s.run("head -c 300000 /dev/zero > a; for i in 1 2 3 4 5; do ln a l$i; done")
        with pytest.raises(SandboxError, match="nothing written: more than 1 MiB"):
            await s.copy_back()
        assert os.listdir(user_workspace) == []
        monkeypatch.setattr(sync, "MAX_COPY_BACK_FILES", 3)
        monkeypatch.setattr(sync, "MAX_COPY_BACK_BYTES", 512 << 20)
        with pytest.raises(SandboxError, match="nothing written: 6 changed files"):
            await s.copy_back()


async def test_a_reply_no_helper_would_send_kills_the_client_instead_of_hanging_it() -> None:
    # A replaced helper answering a request with {"id": N} (no "ok"): the reader must end the
    # client, so the waiting call fails at once instead of waiting for ever.
    import io
    import queue

    replies: queue.Queue[bytes] = queue.Queue()
    escaped: list[Any] = []

    def send(data: bytes) -> None:
        request = wire.read_frame(io.BytesIO(data).read)
        assert isinstance(request, dict)
        replies.put(wire.encode_frame({"id": request["id"]}))

    def recv(n: int) -> bytes:
        try:
            return replies.get(timeout=60)  # the hostile reply; never the end of the stream here
        except queue.Empty:
            return b""

    hook = threading.excepthook
    threading.excepthook = lambda args: escaped.append(args.exc_value)
    try:
        client = HelperClient(recv, send, name="hostile")
        with pytest.raises(SandboxError, match="stream broke"):
            await asyncio.wait_for(client.stat("."), 10)
        assert not client.alive and escaped == []
    finally:
        threading.excepthook = hook
