"""``[backend.kubernetes]``: where and how sessions run on a cluster (never what commands may do).

What a command may do — resources, runtime, network allow-list, environment, limits — comes from
the policy's ``[shell]`` section, as for Docker; these options only place the pod::

    [backend]
    type = "kubernetes"

    [backend.kubernetes]
    context = "kind-sandloop"           # kubeconfig context (default: the current one)
    namespace = "agents"                 # default: the context's namespace, else "default"
    image = "registry.example.com/sandloop-sandbox:shell-0.1.0-8abbb4642e29"
    runtime_class = "gvisor"             # default: "gvisor" when [shell] runtime = "runsc"
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..seam import BackendOptions

__all__ = ["KubernetesOptions"]

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"


class KubernetesOptions(BackendOptions):
    kubeconfig: str | None = Field(default=None, description="kubeconfig file (default: $KUBECONFIG, "
                                   "~/.kube/config, else the in-cluster service account)")
    context: str | None = Field(default=None, description="kubeconfig context (default: the current one)")
    namespace: Annotated[str, Field(pattern=_DNS_LABEL, max_length=63)] | None = Field(
        default=None, description="default: the context's namespace, else \"default\"")
    image: str | None = Field(default=None, description="the environment image, pushed to a registry the "
                              "cluster pulls from (default: the policy's image, as on Docker)")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    proxy_image: str | None = Field(default=None, description="the egress proxy's image (default: image)")
    runtime_class: Annotated[str, Field(pattern=_DNS_SUBDOMAIN)] | None = Field(
        default=None, description="RuntimeClass of the pod (default: \"gvisor\" when [shell] runtime = \"runsc\")")
    run_as_user: Annotated[int, Field(gt=0)] = Field(default=1000, description="non-root uid of the pod")
    run_as_group: Annotated[int, Field(gt=0)] = 1000
    workspace_size: Annotated[str, Field(pattern=_QUANTITY)] = Field(
        default="4Gi", description="sizeLimit of the /workspace emptyDir")
    node_selector: dict[str, str] = Field(default_factory=dict)
    warm_pool: Annotated[str, Field(pattern=_DNS_SUBDOMAIN)] | None = Field(
        default=None, description="claim sessions from this agent-sandbox SandboxWarmPool (when its "
        "CRDs are installed); plain Pods otherwise")
    start_timeout_s: Annotated[float, Field(gt=0)] = Field(
        default=300.0, description="how long a pod may take to start (image pull included)")
