"""The desktop placement: a :class:`~sandbox.computer.Computer` over the X display of a hardened
container's helper.

A batch is validated (:func:`sandbox.computer.actions.validate`), each action played on a
:class:`~sandbox.desktop.steps.StepRecorder` by the shared
:func:`~sandbox.computer.input.perform_action`, and the recorded steps go to the helper in ONE
request, which answers with one capture taken once the screen stopped changing. What went wrong
(an action refused, one that failed, an X server that died and was restarted) is worded by
:mod:`sandbox.computer.notes`.

The container is a :class:`~sandbox.docker.DockerSession` on the ``desktop`` image: every
hardening of the shell's container (no capabilities, the no-setid seccomp filter, read-only root,
pid / memory / CPU limits, no network unless the policy's allow-list, through the same egress
proxy), the workspace at /workspace. A container that dies is replaced by the session; the next
output says so.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from openai.types.responses import computer_action as ca

from sandbox.computer import notes
from sandbox.computer.actions import ActionLike, Batch, validate
from sandbox.computer.base import Computer, Environment
from sandbox.computer.input import perform_action
from sandbox.computer.screen import Screenshot, Size, declared, fitted, scale
from sandbox.desktop.steps import StepRecorder
from sandbox.docker import DockerConfig, DockerSession
from sandbox.helper.client import HelperSession
from sandbox.helper.wire import DesktopTiming
from sandloop.errors import SandboxError

__all__ = ["MAX_TYPED_CHARS", "NO_ACTIONS", "Desktop", "DesktopConfig", "desktop_image", "open_desktop"]

#: The most characters one ``type`` action may type (each is two key events for X).
MAX_TYPED_CHARS = 10_000
_LOST = "its open windows and anything unsaved in them"
#: The note for a call without actions.
NO_ACTIONS = "the call has no actions: nothing was run (send a screenshot action to look at the screen)"


@dataclass(frozen=True)
class DesktopConfig:
    screen: Size = (1280, 800)
    #: the longest the capture waits for the screen to stop changing after a batch
    settle_s: float = 2.0
    wait_s: float = 1.0  # how long the `wait` action waits (the API gives no duration)
    #: the container: the shell's hardening; the desktop image, and room for a browser window
    docker: DockerConfig = field(default_factory=lambda: DockerConfig(memory="2g", pids_limit=512))


class Desktop(Computer):
    """A Linux desktop in a container: actions in, one screenshot out."""

    environment: ClassVar[Environment] = "linux"

    def __init__(self, session: HelperSession, config: DesktopConfig | None = None) -> None:
        self.session = session
        self.config = config or DesktopConfig()
        self.screen = self.config.screen
        #: where the last batch's time went in the helper (input, settle and capture, a start)
        self.timing: DesktopTiming = {}
        self._closed = False

    async def start(self) -> Screenshot:
        """The desktop up (X, the window manager, a terminal): its first screenshot."""
        return await self.screenshot()

    async def screenshot(self, *, display: Size | None = None) -> Screenshot:
        return await self._run([], display, [])

    async def perform(self, actions: Sequence[ActionLike], *, display: Size | None = None) -> Screenshot:
        # A call with nothing to do is a model's mistake worth telling (a screenshot is an action)
        return await self._run(actions, display, [] if actions else [NO_ACTIONS])

    async def _run(self, actions: Sequence[ActionLike], display: Size | None, said: list[str]) -> Screenshot:
        display = declared(display, self.screen)
        batch = _bounded(validate(actions, display))
        recorder = StepRecorder()
        ratio = scale(self.screen, display)
        for recorder.index, action in enumerate(batch.actions, 1):
            if isinstance(action, ca.Wait):
                recorder.wait(self.config.wait_s)  # in the helper, between the steps around it
            else:
                await perform_action(recorder, action, ratio, wait_s=0)
        said.extend(self.session.take_notes())  # a container that died since the last call
        try:
            result = await self.session.desktop(recorder.steps, settle_s=self.config.settle_s, size=self.screen)
        except SandboxError as exc:
            # The container went under the batch (OOM, killed): the session starts another.
            result = await self.session.desktop([], settle_s=self.config.settle_s, size=self.screen)
            said.extend(self.session.take_notes())
            said.append(notes.restarted("desktop", f"container died during this batch ({notes.first_line(exc)})",
                                        "in a fresh container", _LOST))
        self.timing = result["timing"]
        failed, restarted = result["failed"], result["restarted"]
        if failed is not None and failed["died"]:
            said.append(notes.died("desktop", failed["index"]))
        elif failed is not None:
            said.append(batch.failed(failed["index"], failed["message"]))
        if restarted is not None:
            said.append(notes.restarted("desktop", restarted, "on a fresh display" if "X server" in restarted
                                        else "on the same display", _LOST if "X server" in restarted
                                        else "no windows"))
        if batch.refused is not None and failed is None:
            said.append(batch.refused)
        png = await fitted(base64.b64decode(result["png"]), display)
        return Screenshot(png, display, notes=tuple(said))

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self.session.close()


def _bounded(batch: Batch) -> Batch:
    """The batch up to a ``type`` action longer than :data:`MAX_TYPED_CHARS`, refused with a note."""
    for index, action in enumerate(batch.actions, 1):
        if isinstance(action, ca.Type) and len(action.text) > MAX_TYPED_CHARS:
            why = f"type text of {len(action.text)} characters; one action may type {MAX_TYPED_CHARS}"
            return Batch(batch.actions[:index - 1], batch.total, notes.not_run(index, batch.total, why))
    return batch


def desktop_image() -> str:
    """The desktop image's name, built first when missing or stale (it is large: only on demand)."""
    import docker

    from sandbox import images

    client = docker.from_env()
    try:
        return images.ensure(client, "desktop")
    finally:
        client.close()


async def open_desktop(workspace: Path, config: DesktopConfig | None = None) -> Desktop:
    """A desktop container for ``workspace`` (the desktop image, built first if missing), started
    and showing its first screen."""
    config = config or DesktopConfig()
    image = await asyncio.to_thread(desktop_image)
    session = await DockerSession.create(workspace, replace(config.docker, image=image))
    desktop = Desktop(session, config)
    try:
        await desktop.start()
    except BaseException:
        await desktop.close()
        raise
    return desktop
