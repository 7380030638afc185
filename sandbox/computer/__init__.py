"""What every computer placement shares: the interface, the actions, the keys, the screenshot.

A placement (Chromium: :mod:`sandbox.browser`) implements :class:`Computer` and plays validated
actions on its own :class:`~sandbox.computer.input.InputDevice`; the front-end knows only this.

    base      Computer: actions in, one screenshot out; its environment; close
    input     InputDevice, and what each action does with it (held keys, drag paths, chords)
    actions   both tools' action shapes, parsed and checked (bounds, key names) before any runs
    keys      the key names models send -> canonical names
    screen    Screenshot, sizes, the capture fitted to the declared display
    notes     the wording of what the model reads beside a screenshot (restarts included)
"""

from sandbox.computer.actions import ActionLike
from sandbox.computer.base import Computer, Environment
from sandbox.computer.screen import Screenshot, Size

__all__ = ["ActionLike", "Computer", "Environment", "Screenshot", "Size"]
