"""The Kubernetes back-end: the same session, policy and helper, in a Pod.

One Pod per session runs the helper as its main process; the host reaches it over ONE attach
websocket (``v5.channel.k8s.io``, falling back to ``v4``) and speaks the helper's usual protocol
(:mod:`sandbox.helper.wire`) through :class:`~sandbox.helper.client.HelperClient`. The parts:

* :mod:`.options` — ``[backend.kubernetes]`` in a policy (context, namespace, RuntimeClass …);
* :mod:`.loader` — how the helper's code gets into the pod: over the attach stream, into a
  sealed memfd, checked against the sha256 the pod pins;
* :mod:`.manifest` — every object a session creates (Pod, NetworkPolicies, egress proxy), as
  plain dicts: what the session sends and what ``sandloop k8s manifest`` prints;
* :mod:`.cluster` — the REST calls, through the official ``kubernetes`` client;
* :mod:`.channels` — the attach websocket as a byte stream (channel bytes, v5 close);
* :mod:`.sync` — the workspace copied in at start and changes copied back;
* :mod:`.egress`, :mod:`.warmpool`, :mod:`.session`, :mod:`.backend`.

Its tests and bench run against a fake API server that is not part of this package
(``tests/k8s/fake`` in the checkout).

Only :mod:`.cluster`, :mod:`.channels` and :mod:`.warmpool` import the optional ``kubernetes``
client, and the modules above them through them (``pip install 'sandloop[kubernetes]'``).
"""
