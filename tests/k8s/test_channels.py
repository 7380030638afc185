"""The attach stream as the helper's client reads it: every byte the websocket has delivered is
handed over without waiting for more, whatever the timing of the messages and of the reader."""

from __future__ import annotations

import secrets
import select
import threading
from collections.abc import Callable
from typing import Any

import pytest

from sandbox.docker import DockerConfig
from sandbox.kubernetes.channels import attach
from sandbox.kubernetes.cluster import Cluster, pod_running
from sandbox.kubernetes.manifest import pod_image
from sandbox.kubernetes.options import KubernetesOptions

pytestmark = [pytest.mark.docker]

#: The pod: on the first byte of stdin, two parts of one reply 0.2 s apart (two websocket
#: messages), then a stream that stays open and silent.
TWO_PARTS = """\
import os, time
os.read(0, 1)
os.write(1, b'A' * 3000)
time.sleep(0.2)
os.write(1, b'B' * 3000)
time.sleep(120)
"""


class SlowReader:
    """Stands for the websocket client (and its socket layer) as the reader thread sees it under
    load: each call it makes starts only once the server's next message is there (at most 2 s),
    as when the server's thread runs first. The message then lands between two of the reader's
    steps: where a reader that looks for it in the wrong place misses it."""

    def __init__(self, target: Any, raw: Any) -> None:
        self._target = target
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name == "sock":
            return SlowReader(value, self._raw)
        if not callable(value) or name in ("is_open", "write_stdin", "write_channel", "send"):
            return value

        def late(*args: Any, **kwargs: Any) -> Any:
            select.select([self._raw], [], [], 2.0)
            return value(*args, **kwargs)

        return late


def _pod(name: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"sandloop.test": "channels"}},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": image, "command": ["python3", "-I", "-c", TWO_PARTS],
                                     "stdin": True, "stdinOnce": True,
                                     "securityContext": {"runAsUser": 1000, "runAsNonRoot": True,
                                                         "allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]},
                                                         "seccompProfile": {"type": "RuntimeDefault"}}}]}}


def _read(recv: Callable[[int], bytes], want: int, into: bytearray) -> None:
    while len(into) < want:
        chunk = recv(65536)
        if not chunk:
            return
        into += chunk


def test_a_reply_in_two_messages_reaches_a_slow_reader(options: KubernetesOptions, config: DockerConfig) -> None:
    """The once-seen copy-back stall: the second message of a reply arrived while the reader was
    still handling the first, landed in the client library's channel buffer, and the reader then
    waited on the socket for bytes it already had — for ever, when nothing else was coming."""
    cluster = Cluster(options)
    name = f"channels-{secrets.token_hex(3)}"
    try:
        cluster.create_pod(_pod(name, pod_image(config, options)))
        cluster.wait_pod(name, pod_running("c"), options.start_timeout_s)
        stream = attach(cluster, name, "c")
        real = stream.ws
        stream.ws = SlowReader(real, real.sock.sock)
        got = bytearray()
        reader = threading.Thread(target=_read, args=(stream.recv, 6000, got), daemon=True)
        reader.start()
        stream.send(b"go")
        reader.join(20)
        stream.ws = real
        stream.close()
        reader.join(10)
        assert bytes(got) == b"A" * 3000 + b"B" * 3000, f"{len(got)} of 6000 bytes"
    finally:
        cluster.delete_pod(name)
        cluster.close()
