"""The helper's desktop: an X display it starts, drives and captures itself. Standard library,
plus python3-xlib where the image has it (the desktop image does; imported only when a desktop
request comes).

One ``desktop`` request (:mod:`sandbox.helper.wire`) is one batch: its input steps played
in-process over XTEST (no program started per action), then one capture. The screen is Xvfb's
own memory: Xvfb keeps it in a file (``-fbdir``, XWD format) that the helper maps, so a capture
is a copy of that memory and a PNG encoded here — no X round trip for the pixels.

Instead of a flat delay after the actions, the capture waits until the screen stops changing:
a frame is copied and encoded, and kept if the screen still shows exactly it afterwards (and at
least :data:`QUIET_S` after it was copied) — the encoding's own time is the quiet window. After
clicks and keys, a screen that has not changed at all gets up to :data:`REACT_S` for the
applications to start drawing. The wait is bounded by the request's ``settle_s`` (a policy
setting on the host).

Xvfb, the window manager and a terminal run as the helper's children. Before each batch the
helper looks at them; an X server that died (before or during the batch) is started afresh
with the rest, a window manager that died is started again, and the reply says so, for the host
to tell the model.

Steps (screen pixels; ``a`` is the index of the model's action the step belongs to):
``[a, "move", x, y]``, ``[a, "button", n, down]`` (1 left, 2 middle, 3 right, 4-7 the wheel,
8/9 back/forward), ``[a, "key", name, down]`` (a canonical key name: ``Enter``, ``Control``, ``a``),
``[a, "type", text]``, ``[a, "wait", seconds]``.
"""

from __future__ import annotations

import base64
import contextlib
import os
import select
import socket
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sandbox.helper.framebuffer import Framebuffer, encode_png
from sandbox.helper.wire import DesktopFailure, DesktopResult, DesktopTiming, OpError

__all__ = ["DISPLAY", "FB_DIR", "Desktop", "keysym_for"]

#: The display the desktop is, inside the container (nothing else there has one).
DISPLAY = ":0"
_SOCKET = "/tmp/.X11-unix/X0"
FB_DIR = "/tmp/.sandloop-fb"
#: A frame is kept once the screen has shown exactly it for at least this long (its encoding
#: usually takes longer).
QUIET_S = 0.015
#: How far apart two looks at the screen are before a frame is encoded.
LOOK_S = 0.001
#: The longest typing waits for the screen to stop changing before spare keycodes are reused,
#: and how long it must have stayed unchanged.
REMAP_WAIT_S = 2.0
REMAP_QUIET_S = 0.15
#: How long applications get to start drawing after input before the screen counts as unchanged.
REACT_S = 0.1
_REACTED_TO = ("button", "key", "type")
_MODIFIERS = ("Shift", "Control", "Alt", "Meta", "AltGraph")
_TERMINAL_LOG = "/tmp/.sandloop-xterm.log"
#: How long a start may take before the desktop counts as failed.
START_S = 10.0
#: Where Debian's python3-xlib lives; the helper runs with -I -S, without site's path.
_DIST_PACKAGES = "/usr/lib/python3/dist-packages"

# canonical key names (UI Events) -> X keysym names
_KEYSYM_NAMES = {
    "Enter": "Return", "Escape": "Escape", "Tab": "Tab", "Space": "space", "Backspace": "BackSpace",
    "Delete": "Delete", "Insert": "Insert", "Home": "Home", "End": "End", "PageUp": "Prior",
    "PageDown": "Next", "ArrowLeft": "Left", "ArrowRight": "Right", "ArrowUp": "Up", "ArrowDown": "Down",
    "CapsLock": "Caps_Lock", "NumLock": "Num_Lock", "ScrollLock": "Scroll_Lock", "PrintScreen": "Print",
    "Pause": "Pause", "ContextMenu": "Menu", "Control": "Control_L", "Meta": "Super_L", "Alt": "Alt_L",
    "AltGraph": "ISO_Level3_Shift", "Shift": "Shift_L",
    **{f"F{n}": f"F{n}" for n in range(1, 25)},
}
_CONTROL_CHARS = {"\n": "Return", "\r": "Return", "\t": "Tab", "\b": "BackSpace"}


def keysym_for(key: str, string_to_keysym: Any) -> int:
    """The keysym of a canonical key name or of one character. X's rule for characters: Latin-1
    is its own keysym, anything else is 0x01000000 + its code point (so every character has one,
    on any layout)."""
    name = _KEYSYM_NAMES.get(key) or _CONTROL_CHARS.get(key)
    if name is not None:
        return int(string_to_keysym(name))
    if len(key) != 1:
        raise OpError("bad_request", f"desktop: unknown key {key!r}")
    code = ord(key)
    return code if 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xFF else 0x01000000 | code


def _xlib() -> Any:
    if _DIST_PACKAGES not in sys.path:
        sys.path.append(_DIST_PACKAGES)
    try:
        import Xlib.display  # type: ignore[import-not-found,unused-ignore]
        import Xlib.error  # type: ignore[import-not-found,unused-ignore]
        import Xlib.ext.xtest  # type: ignore[import-not-found,unused-ignore]
        import Xlib.protocol.event  # type: ignore[import-not-found,unused-ignore]
        import Xlib.X  # type: ignore[import-not-found,unused-ignore]
        import Xlib.XK  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise OpError("spawn", f"desktop: this image has no python3-xlib ({exc}); use the desktop image") from None
    return Xlib


def _keep_frames_in_the_heap() -> None:
    """A frame is 4 MB, and a capture allocates several (copies, the encoder's buffers). glibc
    serves blocks that large from a fresh mmap each time — in the helper its adaptive threshold
    does not keep up — and writing one faults it in page by page, ≈2 ms a frame. With the mmap
    and trim thresholds raised they come from the heap, reused. Only this process: a program it
    starts begins with glibc's defaults."""
    # Imported here: the helper module loads in every image, and an image whose python3 lacks
    # ctypes must still reach the seccomp step's own clear refusal (sandbox/helper/confine.py).
    with contextlib.suppress(OSError, AttributeError, ImportError):
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (its maximum on 64-bit)
        libc.mallopt(-1, 128 << 20)  # M_TRIM_THRESHOLD: freed frames stay for the next capture


class _Died(Exception):
    """The X server went away under a step."""


class Desktop:
    """The display, its window manager and a terminal; one batch at a time."""

    def __init__(self, workspace: str, env: Mapping[str, str]) -> None:
        self.workspace = workspace
        self.env = {**env, "DISPLAY": DISPLAY}
        self._lock = threading.Lock()
        self._x: Any = None
        self._display: Any = None
        self._fb: Framebuffer | None = None
        self._server: subprocess.Popen[bytes] | None = None
        self._wm: subprocess.Popen[bytes] | None = None
        self._size = (0, 0)
        self._spare: list[int] = []  # keycodes with no keysym, for characters the layout lacks
        self._bound: dict[int, int] = {}  # keysym -> spare keycode it is mapped to now
        self._clicked = False  # a click since the last key: the focus may be moving
        self.starts = 0
        #: how long the last start took, step by step (for the bench)
        self.start_timing: DesktopTiming = {}

    # --- the processes ---------------------------------------------------------------------

    def _spawn(self, argv: Sequence[str], log: str | None = None, keep: Sequence[int] = ()
               ) -> subprocess.Popen[bytes]:
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
        try:
            return subprocess.Popen(argv, cwd=self.workspace, env=self.env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=out, start_new_session=True, pass_fds=keep)
        finally:
            if log:
                out.close()  # type: ignore[union-attr]

    def _terminal(self, deadline: float) -> subprocess.Popen[bytes]:
        """xterm with a shell in the workspace. As uid 0 (a root-owned checkout) xterm cannot
        start a shell itself — it calls initgroups(), which needs a capability the container does
        not have — so the shell is started here on a pty that xterm drives in its slave mode."""
        argv = ["xterm", "-u8", "-geometry", "100x30+40+40"]
        if os.getuid() != 0:
            return self._spawn(argv, log=_TERMINAL_LOG)
        master, slave = os.openpty()
        try:
            saved = termios.tcgetattr(slave)
            quiet = termios.tcgetattr(slave)
            quiet[3] &= ~termios.ECHO  # the window id xterm writes first is not shown back
            termios.tcsetattr(slave, termios.TCSANOW, quiet)
            terminal = self._spawn([*argv, f"-S{os.ttyname(slave)}/{master}"], log=_TERMINAL_LOG, keep=(master,))
            line = b""
            while not line.endswith(b"\n") and time.monotonic() < deadline and terminal.poll() is None:
                if select.select([slave], [], [], 0.05)[0]:
                    line += os.read(slave, 256)
            termios.tcsetattr(slave, termios.TCSANOW, saved)
            # setsid --ctty: the shell's own session, the pty its controlling terminal
            subprocess.Popen(["setsid", "--ctty", "bash", "-i"], cwd=self.workspace, env={**self.env, "TERM": "xterm"},
                             stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
        finally:
            os.close(master)
            os.close(slave)
        return terminal

    def _stop(self) -> None:
        for proc in (self._wm, self._server):
            if proc is not None and proc.poll() is None:
                proc.kill()
        if self._display is not None:
            with contextlib.suppress(Exception):
                self._display.close()
        if self._fb is not None:
            self._fb.close()
        self._display = self._fb = self._server = self._wm = None
        self._bound.clear()

    def _start(self, size: tuple[int, int]) -> None:
        """Xvfb, then the window manager and a terminal; back once the terminal is managed."""
        self._stop()
        began = time.monotonic()
        if self._x is None:
            _keep_frames_in_the_heap()
        x = self._x = self._x or _xlib()
        self.starts += 1
        os.makedirs(FB_DIR, exist_ok=True)
        for stale in (_SOCKET, "/tmp/.X0-lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)
        width, height = size
        self._server = self._spawn(["Xvfb", DISPLAY, "-screen", "0", f"{width}x{height}x24", "-fbdir", FB_DIR,
                                    "-nolisten", "tcp", "-noreset"], log="/tmp/.sandloop-xvfb.log")
        deadline = time.monotonic() + START_S
        while not self._accepts():
            if self._server.poll() is not None or time.monotonic() > deadline:
                raise OpError("spawn", f"desktop: the X server did not start ({self._log_tail()})")
            time.sleep(0.01)
        server = time.monotonic()
        self._display = x.display.Display(DISPLAY)
        self._fb = Framebuffer(f"{FB_DIR}/Xvfb_screen0")
        self._size = size
        self._find_spare_keycodes()
        # A plain slate background instead of X's black: windows stand out in a screenshot.
        root = self._display.screen().root
        root.change_attributes(background_pixel=0x3B4252)
        root.clear_area()
        # The terminal first, mapped before the window manager starts: a window that maps while
        # the window manager is starting up can wait seconds to be managed; one that is already
        # there is managed as the window manager starts. Then the terminal is activated as a
        # pager would (a new window's focus is not the window manager's first thought).
        terminal = self._terminal(deadline)
        self._until(lambda: self._mapped_window() or terminal.poll() is not None, deadline)
        mapped = time.monotonic()
        self._wm = self._spawn(["openbox"])
        if terminal.poll() is not None:  # no window to manage: ready once it has taken the screen
            self._until(lambda: self._root_property("_NET_SUPPORTING_WM_CHECK"), deadline)
        self._until(lambda: self._clients() or terminal.poll() is not None, deadline)
        clients = self._clients()
        if clients and not self._active_client():
            self._activate(clients[-1])
            self._until(self._active_client, deadline)
        wm = time.monotonic()
        self.start_timing = {"server_s": server - began, "terminal_s": mapped - server,
                             "window_manager_s": wm - mapped}

    def _accepts(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(_SOCKET)
            except OSError:
                return False
        return True

    def _log_tail(self) -> str:
        try:
            with open("/tmp/.sandloop-xvfb.log", "rb") as f:
                return f.read()[-300:].decode(errors="replace").strip() or "no output"
        except OSError:
            return "no output"

    def _until(self, ready: Any, deadline: float) -> None:
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.01)

    def _root_property(self, name: str) -> Any:
        d = self._display
        return d.screen().root.get_full_property(d.intern_atom(name), self._x.X.AnyPropertyType)

    def _mapped_window(self) -> bool:
        """Whether a window shows on the screen (the terminal's, at start)."""
        root = self._display.screen().root
        for child in root.query_tree().children:
            try:
                if child.get_attributes().map_state == self._x.X.IsViewable:
                    return True
            except self._x.error.BadWindow:  # gone since the tree was read
                continue
        return False

    def _clients(self) -> list[int]:
        """The windows the window manager manages, oldest first."""
        listed = self._root_property("_NET_CLIENT_LIST")
        return [] if listed is None else list(listed.value)

    def _activate(self, window_id: int) -> None:
        x, d = self._x, self._display
        root = d.screen().root
        message = x.protocol.event.ClientMessage(
            window=d.create_resource_object("window", window_id), client_type=d.intern_atom("_NET_ACTIVE_WINDOW"),
            data=(32, [2, x.X.CurrentTime, 0, 0, 0]))  # 2: asked by a pager, which it always honours
        root.send_event(message, event_mask=x.X.SubstructureRedirectMask | x.X.SubstructureNotifyMask)
        d.flush()

    def _active_client(self) -> bool:
        """Whether the window manager has made a client window active (the terminal, at start)."""
        active = self._root_property("_NET_ACTIVE_WINDOW")
        return active is not None and len(active.value) > 0 and active.value[0] != 0

    def _focused_window(self) -> Any:
        """The window with the keyboard focus, or None (no focus, or the pointer's root)."""
        focus = self._display.get_input_focus().focus
        return None if isinstance(focus, int) or focus == self._display.screen().root else focus

    def _await_focus(self) -> None:
        """After a click, until the window clicked (its top-level: the window manager's frame)
        has the focus: the window manager gives it in its own time, and keys typed before then
        would go to the window that had it. Bounded: a window may never take the focus."""
        d = self._display
        d.sync()
        root = d.screen().root
        frame = root.query_pointer().child
        if not frame:
            return
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            window = self._focused_window()
            while window is not None and window != root:
                if window == frame:
                    return
                window = window.query_tree().parent
            time.sleep(0.005)

    def _find_spare_keycodes(self) -> None:
        d = self._display
        first, last = d.display.info.min_keycode, d.display.info.max_keycode
        mapping = d.get_keyboard_mapping(first, last - first + 1)
        self._spare = [first + i for i, syms in enumerate(mapping) if not any(syms)]

    def _health(self, size: tuple[int, int]) -> str | None:
        """Start what is not running; why the desktop was restarted, or None."""
        if self._server is None:
            self._start(size)
            return None
        if self._server.poll() is not None or size != self._size:
            why = "X server died" if self._server.poll() is not None else "screen size changed"
            self._start(size)
            return why
        if self._wm is not None and self._wm.poll() is not None:
            self._wm = self._spawn(["openbox"])
            return "window manager died"
        return None

    # --- a batch -----------------------------------------------------------------------------

    def request(self, steps: Sequence[Sequence[Any]], settle_s: float, size: tuple[int, int]) -> DesktopResult:
        with self._lock:
            started = time.monotonic()
            restarted = self._health(size)
            assert self._fb is not None
            # what the screen showed before input the applications may react to
            before = self._fb.pixels() if any(step[1] in _REACTED_TO for step in steps) else None
            failed: DesktopFailure | None = None
            done = 0
            try:
                for i, step in enumerate(steps):
                    self._play(step)
                    done += 1
                    if i + 1 == len(steps) or steps[i + 1][0] != step[0]:
                        # an action's steps sent together (one write, not one per event): an X
                        # server gone is seen at the action it took
                        self._display.flush()
                self._display.sync()
                if before is not None and not self._reaction_expected(steps):
                    before = None
            except OpError as exc:
                failed = {"index": steps[done][0], "message": str(exc), "died": False}
            except (_Died, OSError, self._x.error.ConnectionClosedError) as exc:
                index = steps[done][0] if done < len(steps) else (steps[-1][0] if steps else 0)
                failed = {"index": index, "message": f"the X server went away ({type(exc).__name__})", "died": True}
                restarted = "X server died"
                self._start(size)
            if failed is not None and failed["died"]:
                before = None  # a fresh screen: nothing there answers the input
            played = time.monotonic()
            png, waited = self._capture(settle_s, before)
            timing: DesktopTiming = {**self.start_timing, "input_s": played - started, "settle_s": waited,
                                     "total_s": time.monotonic() - started}
            return {"png": base64.b64encode(png).decode(), "width": self._size[0], "height": self._size[1],
                    "done": done, "failed": failed, "restarted": restarted, "starts": self.starts, "timing": timing}

    def _play(self, step: Sequence[Any]) -> None:
        x, d = self._x, self._display
        kind = step[1]
        try:
            if kind in ("key", "type") and self._clicked:
                self._clicked = False
                self._await_focus()
            if kind == "move":
                x.ext.xtest.fake_input(d, x.X.MotionNotify, x=int(step[2]), y=int(step[3]))
            elif kind == "button":
                x.ext.xtest.fake_input(d, x.X.ButtonPress if step[3] else x.X.ButtonRelease, detail=int(step[2]))
                self._clicked = self._clicked or (not step[3] and int(step[2]) <= 3)
            elif kind == "key":
                self._key(keysym_for(str(step[2]), x.XK.string_to_keysym), bool(step[3]))
            elif kind == "type":
                for char in str(step[2]):
                    self._key(keysym_for(char, x.XK.string_to_keysym), True)
                    self._key(keysym_for(char, x.XK.string_to_keysym), False)
            elif kind == "wait":
                d.sync()
                time.sleep(max(0.0, min(float(step[2]), 30.0)))
            else:
                raise OpError("bad_request", f"desktop: unknown step {kind!r}")
        except (x.error.ConnectionClosedError, OSError) as exc:
            raise _Died(f"the X server went away ({type(exc).__name__})") from None

    def _key(self, keysym: int, down: bool) -> None:
        """One key by keysym: its keycode on the layout (with Shift where the keysym is the
        shifted one), else a spare keycode mapped to it for as long as the spares last."""
        x, d = self._x, self._display
        code, shifted = self._keycode(keysym)
        shift = d.keysym_to_keycode(x.XK.string_to_keysym("Shift_L")) if shifted else 0
        event = x.X.KeyPress if down else x.X.KeyRelease
        if shift and down:
            x.ext.xtest.fake_input(d, x.X.KeyPress, detail=shift)
        x.ext.xtest.fake_input(d, event, detail=code)
        if shift and not down:
            x.ext.xtest.fake_input(d, x.X.KeyRelease, detail=shift)

    def _keycode(self, keysym: int) -> tuple[int, bool]:
        for code, index in self._display.keysym_to_keycodes(keysym):
            if index in (0, 1):
                return code, index == 1
        if keysym in self._bound:
            return self._bound[keysym], False
        if not self._spare:
            raise OpError("internal", "desktop: no spare keycode for a character the layout lacks")
        if len(self._bound) >= len(self._spare):
            # Every spare is taken: let the applications read the keys already sent with the
            # old mapping before any spare is mapped again (an Xlib client looks a key up in the
            # mapping it fetches when it reads the key, not in the one it was sent with): until
            # the screen has stopped showing the typing, bounded.
            self._display.sync()
            self._drawn(time.monotonic() + REMAP_WAIT_S)
            self._bound.clear()
        code = self._spare[len(self._bound)]
        self._display.change_keyboard_mapping(code, [(keysym, keysym)])
        self._display.sync()
        self._bound[keysym] = code
        return code, False

    def _reaction_expected(self, steps: Sequence[Sequence[Any]]) -> bool:
        """Whether an application will draw in answer to the batch: keys other than modifiers
        reach the window with the focus, a click the window under the pointer — none when that
        is the bare desktop."""
        typed = any(step[1] == "type" or (step[1] == "key" and step[2] not in _MODIFIERS) for step in steps)
        if typed and self._focused_window() is not None:
            return True
        clicked = any(step[1] == "button" for step in steps)
        return clicked and bool(self._display.screen().root.query_pointer().child)

    def _capture(self, settle_s: float, before: bytes | None) -> tuple[bytes, float]:
        """One PNG of a screen that stopped changing (or of the last frame when ``settle_s`` ran
        out); and how long that took. ``before``: the screen before input the applications react
        to — while it still shows exactly that, they get up to :data:`REACT_S` to start drawing
        (the encoding's time counts), so the capture is not of the moment before they did."""
        fb = self._fb
        assert fb is not None
        started = time.monotonic()
        deadline = started + settle_s
        react_until = min(deadline, started + REACT_S) if before is not None else 0.0
        while True:
            frame = self._still(deadline)
            taken = time.monotonic()
            png = encode_png(frame, fb.width, fb.height, fb.stride)
            quiet = QUIET_S - (time.monotonic() - taken)
            if quiet > 0:
                time.sleep(quiet)
            if time.monotonic() >= deadline:
                return png, time.monotonic() - started
            if fb.pixels() != frame:
                continue  # still changing
            if frame != before or not self._changes(frame, react_until):
                return png, time.monotonic() - started

    def _still(self, deadline: float) -> bytes:
        """A frame the screen showed twice, :data:`LOOK_S` apart (or the last one at the
        deadline): a screen still moving — the pointer's picture follows the server's last
        moves, a window redraws — is followed with copies, which cost little, not encodings."""
        assert self._fb is not None
        frame = self._fb.pixels()
        while time.monotonic() < deadline:
            time.sleep(LOOK_S)
            again = self._fb.pixels()
            if again == frame:
                break
            frame = again
        return frame

    def _drawn(self, deadline: float) -> None:
        """Until the screen has not changed for :data:`REMAP_QUIET_S` (or the deadline)."""
        assert self._fb is not None
        frame, since = self._fb.pixels(), time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < REMAP_QUIET_S:
            time.sleep(0.005)
            again = self._fb.pixels()
            if again != frame:
                frame, since = again, time.monotonic()

    def _changes(self, frame: bytes, until: float) -> bool:
        """Whether the screen stops showing ``frame`` before ``until``."""
        assert self._fb is not None
        while time.monotonic() < until:
            time.sleep(0.005)
            if self._fb.pixels() != frame:
                return True
        return False

    def close(self) -> None:
        with self._lock:
            self._stop()
