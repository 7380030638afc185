"""How the helper's code gets into a pod: over the attach stream, into a sealed memfd.

On Docker the helper is a file of the host's cache, bind-mounted read-only. A pod cannot mount
host files, so its main container runs this loader instead (``python3 -I -c LOADER SHA256
ARGS...``, in the pod spec for every auditor to read): it reads one length-prefixed program from
stdin — the host sends it as the first bytes of the session's attach stream — checks its
sha256 against the one the pod pins, writes it into a memfd sealed against every change, and
execs ``python3 -I -u /proc/self/fd/N ARGS...`` with stdin still the attach stream. The helper
is then PID 1, as on Docker, installs sandloop's seccomp filter on itself and makes itself
non-dumpable at once, before it reads a request.

Why this and not an init container writing the helper into a volume, or an image with the
helper baked in:

* the code never lies on a file system of the pod: no command can change it (the memfd is
  sealed) or even open it (``/proc/1/fd`` of a non-dumpable process is closed to them);
* the pod spec pins exactly which code may run (its sha256): a client that attaches first
  cannot substitute its own, and an auditor reads the pin in ``sandloop k8s manifest``;
* any image with ``python3`` works, unchanged (nothing to rebuild per sandloop version), and a
  warm pool's pods wait in the loader until a session claims them;
* one attach stream for the session's work (an init container would need one more, at every
  start). A checkout with read-only paths does get an init container, ``copy-in``, whose
  content must be in place before the helper's container starts (:meth:`.manifest.Plan.pod`);
  it runs :mod:`.untar`, not the helper.

The trade-off: the subreaper program (:mod:`sandbox.helper.subreaper`) cannot be exec'd from a
memfd by the helper's children, so in a pod each command's shell becomes a subreaper through
``preexec_fn`` (the helper's fallback): about 3 ms more per command start. And the container's
stdout is the protocol, which the kubelet also keeps as the container's log (``kubectl logs``):
what commands print and files the host reads pass through the node's log files.
"""

from __future__ import annotations

import hashlib
import struct

__all__ = ["LOADER", "command", "frame", "sha256"]

#: The loader, as ``python3 -I -c`` runs it. ``sys.argv``: ``-c``, the pinned sha256, then the
#: program's own arguments. Standard library only; it writes nothing on stdout (that is the
#: protocol's) and says why it stops on stderr.
LOADER = """\
import fcntl, hashlib, os, sys
def take(n):
    data = b''
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            sys.exit('sandloop loader: the stream ended before the program arrived')
        data += chunk
    return data
code = take(int.from_bytes(take(8), 'big'))
if hashlib.sha256(code).hexdigest() != sys.argv[1]:
    sys.exit('sandloop loader: refused a program whose sha256 is not the pinned ' + sys.argv[1])
fd = os.memfd_create('sandloop', os.MFD_ALLOW_SEALING)
view = memoryview(code)
while view:
    view = view[os.write(fd, view):]
fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
os.set_inheritable(fd, True)
os.execv(sys.executable, [sys.executable, '-I', '-u', '/proc/self/fd/%d' % fd] + sys.argv[2:])
"""

_LENGTH = struct.Struct(">Q")


def sha256(program: bytes) -> str:
    return hashlib.sha256(program).hexdigest()


def command(program: bytes, args: list[str]) -> list[str]:
    """The container command that loads ``program`` and runs it with ``args``."""
    return ["python3", "-I", "-c", LOADER, sha256(program), *args]


def frame(program: bytes) -> bytes:
    """What the host writes first on the attach stream."""
    return _LENGTH.pack(len(program)) + program
