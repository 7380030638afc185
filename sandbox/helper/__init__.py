"""sandloop's helper: the small program that runs commands and file operations in a sandbox.

* :mod:`sandbox.helper.main` — the helper itself (standard library only). In a container it is
  the main process (PID 1), shipped as a zip application bind-mounted read-only; on the host
  (:class:`sandbox.local.LocalSession`) the same archive runs as a subprocess; tests can also
  instantiate :class:`~sandbox.helper.main.Helper` in-process.
* :mod:`sandbox.helper.seccomp_rules` and :mod:`sandbox.helper.confine` — sandloop's seccomp
  rules (one table, turned into a classic-BPF program) and their installation by the helper's
  program entry point, before any command runs (standard library only, shipped with the helper).
* :mod:`sandbox.helper.wire` — the protocol both sides speak: length-prefixed JSON frames, the
  typed requests and replies, and the error kinds (standard library only, shipped with the helper).
* :mod:`sandbox.helper.client` — the host side: :class:`~sandbox.helper.client.HelperClient`
  multiplexes requests over one stream and maps every error kind to an exception of
  :mod:`sandloop.errors`; :class:`~sandbox.helper.client.HelperSession` is the Session built on it.

This package file imports nothing: the helper's zip application carries it.
"""
