"""sandloop's seccomp filter in a pod. The pod keeps the node's ``RuntimeDefault`` profile (on the
fake, the engine's default one, which lets a process set setid bits on its own files): every
refusal below is the helper's own filter at work. The back-end runs pods as non-root only
(``runAsNonRoot``), so two users stand for "any uid"; uid 0 is tests/security's, on Docker."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from sandbox.docker import DockerConfig
from sandbox.kubernetes.manifest import HELPER_CONTAINER
from sandbox.kubernetes.options import KubernetesOptions
from sandbox.kubernetes.session import KubernetesSession
from tests.k8s.fake import FakeKubernetes
from tests.security.filter_cases import check, prepare, setid_files

pytestmark = [pytest.mark.docker]


@pytest.mark.parametrize("uid", [1000, 2000])
async def test_the_helpers_filter_holds_in_a_pod(user_workspace: Path, config: DockerConfig,
                                                 options: KubernetesOptions, fake: FakeKubernetes | None,
                                                 docker_client: docker.DockerClient, uid: int) -> None:
    prepare(user_workspace)
    options = options.model_copy(update={"run_as_user": uid, "run_as_group": uid})
    async with await KubernetesSession.create(user_workspace, config, options) as session:
        assert session.hello is not None and session.hello["uid"] == uid
        assert session.hello["seccomp"]["filter"] == "installed" and session.hello["seccomp"]["mode"] == 2
        if fake is not None:  # the pod's container has the engine's default profile, no other
            container = docker_client.api.inspect_container(f"fake-k8s-{fake.server_id}-{session.plan.namespace}-"
                                                            f"{session.pod}-{HELPER_CONTAINER}"[:120])
            assert not [o for o in container["HostConfig"]["SecurityOpt"] or [] if o.startswith("seccomp")]
            assert session.hello["seccomp"]["filters"] == 2  # RuntimeDefault's and the helper's
        await check(session)
    assert setid_files(user_workspace) == []  # and nothing of the kind came back
