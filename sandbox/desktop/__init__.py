"""A whole Linux desktop as a computer: Xvfb, a window manager, a terminal, an editor and a
browser window in one hardened container, driven by the helper inside it.

    steps      the computer's InputDevice as steps for the helper: a batch becomes one request
    placement  Desktop: the Computer (validate, record, one round trip, notes), and open_desktop
    live       the optional live view: x11vnc on the container's loopback, a host loopback relay
"""

from sandbox.desktop.placement import Desktop, DesktopConfig, open_desktop

__all__ = ["Desktop", "DesktopConfig", "open_desktop"]
