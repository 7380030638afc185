"""A fake Kubernetes API server whose pods are local Docker containers (see :mod:`.server`).

Shipped for the same reason as :mod:`executor.testing`: a harness built on the Kubernetes
back-end can be tested offline, with the real client, websocket and helper.
"""

from .server import V4, V5, FakeKubernetes

__all__ = ["V4", "V5", "FakeKubernetes"]
