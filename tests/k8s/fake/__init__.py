"""A fake Kubernetes API server whose pods are local Docker containers (see :mod:`.server`).

Test infrastructure, not part of the wheel: the Kubernetes back-end's tests (``tests/k8s``) and
its bench (``bench/kubernetes.py``) import it from the checkout. It answers exactly the calls the
back-end makes, on the local Docker engine — a promise about sandloop's own code, not a cluster
anyone else should test against (``docs/architecture.md``, "Where the fake API server lives").
"""

from .server import V4, V5, FakeKubernetes

__all__ = ["V4", "V5", "FakeKubernetes"]
