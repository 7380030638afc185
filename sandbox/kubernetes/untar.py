"""The ``copy-in`` init container's program: the checkout, as one tar from the attach stream,
unpacked into the workspace volume before the helper's container starts (see
:meth:`.manifest.Plan.pod` for why it must be there first).

It is a few lines of Python in the pod spec itself (``python3 -I -c UNTAR``), printed in full by
``sandloop k8s manifest`` like the loader, and nothing else runs in that container: it reads one
length-prefixed tar from stdin (the session writes it as the stream's first and only bytes),
unpacks it where it runs (``tarfile``, with the ``tar`` filter where the image's Python has it:
nothing outside that folder, no device, no setuid bit), says :data:`DONE` on stdout and exits. A
stream that ends early, or a tar that does not unpack, is an exit code other than 0 with the
reason on stderr: the pod fails, and the session with it.

Why not the helper, as the session's own container runs it: a helper needs the loader's exec, a
``hello``, the tar committed in parts to the volume and a shell starting ``python3`` again to
unpack them — three interpreter starts and the checkout written twice, where this is one start
and one write, measured in ``bench/kubernetes.py`` (section 3).
"""

from __future__ import annotations

import struct

__all__ = ["DONE", "UNTAR", "command", "frame"]

#: What the program says on stdout once every file is in place.
DONE = b"sandloop copy-in: done\n"

#: The program, as ``python3 -I -c`` runs it in the folder to fill. Standard library only.
UNTAR = """\
import os, sys, tarfile
def take(n):
    data = os.read(0, n)
    if not data:
        sys.exit('sandloop copy-in: the stream ended before the checkout did')
    return data
class Tar:
    def __init__(self):
        head = b''
        while len(head) < 8:
            head += take(8 - len(head))
        self.left = int.from_bytes(head, 'big')
    def read(self, n=-1):
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = take(n) if n else b''
        self.left -= len(data)
        return data
tar = Tar()
with tarfile.open(fileobj=tar, mode='r|') as archive:
    archive.extractall('.', **({'filter': 'tar'} if hasattr(tarfile, 'tar_filter') else {}))
while tar.read(1 << 16):
    pass
os.write(1, DONE)
""".replace("DONE", repr(DONE))

_LENGTH = struct.Struct(">Q")


def command() -> list[str]:
    return ["python3", "-I", "-c", UNTAR]


def frame(tar: bytes) -> bytes:
    """What the session writes on the copy-in container's attach stream."""
    return _LENGTH.pack(len(tar)) + tar
