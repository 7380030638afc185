"""The same image and helper in a pod: the desktop over the Kubernetes back-end, on the fake API
server (pods backed by local Docker containers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox.desktop import Desktop, DesktopConfig
from sandbox.docker import DockerConfig
from sandbox.kubernetes.options import KubernetesOptions
from sandbox.kubernetes.session import KubernetesSession
from tests.k8s.fake import FakeKubernetes

pytestmark = pytest.mark.fake_only


async def test_the_desktop_runs_in_a_pod(docker_client: Any, desktop_image_name: str, workspace: Path) -> None:
    with FakeKubernetes(docker_client) as fake:
        options = KubernetesOptions(kubeconfig=str(fake.kubeconfig()), start_timeout_s=120)
        session = await KubernetesSession.create(workspace, DockerConfig(image=desktop_image_name, memory="2g"),
                                                 options)
        desktop = Desktop(session, DesktopConfig())
        try:
            first = await desktop.start()
            assert first.notes == () and first.size == (1280, 800)
            shot = await desktop.perform([
                {"type": "click", "x": 300, "y": 200, "button": "left"},
                {"type": "type", "text": "echo in a pod > pod.txt"},
                {"type": "keypress", "keys": ["ENTER"]},
                {"type": "wait"},
            ])
            assert shot.notes == ()
            result = await session.run("cat pod.txt")
            assert result.stdout.text == "in a pod\n"
        finally:
            await desktop.close()
