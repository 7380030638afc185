"""Environments: the image a sandbox starts from, set up once per cache key and reused.

An environment (a policy's ``[environment]`` section, translated by the front-end into a plain
:class:`~sandbox.environment.spec.EnvironmentSpec`) names an image or a Dockerfile, system
packages, setup commands and the network setup may use. :func:`sandbox.environment.prepare.prepare`
turns it into the image a session starts from:

* ``spec``     — the plain configuration, the labels and names environments carry
* ``key``      — the cache key: workspace files (no link followed) and everything setup depends on
* ``ca``       — the host's CA bundle, mounted read-only at a private path, and its variables
* ``registries`` — the hosts pip, npm and the image's package manager need, from their own
  configuration, never from a list written into sandloop
* ``probe``    — what an image has (python3, a shell, a package manager, package sources)
* ``setup``    — the setup container: hardened like a session, root file system writable,
  commands streamed, the result committed with nothing of the run in it
* ``build``    — running steps in it behind the setup's egress proxy, reporting, failing cleanly
* ``base``     — the image to start from: named, pulled, or built from a Dockerfile offline
* ``python``   — python3 added once to an image without it, or a one-line refusal
* ``store``    — cached environments: lookup, last use, the per-key build lock, listing, pruning
* ``prepare``  — the whole: reuse the cached image, or build it once (python3 first if missing)

Nothing is imported here: :mod:`sandbox.docker` imports :mod:`.ca`, and the builder imports
:mod:`sandbox.docker`.
"""
