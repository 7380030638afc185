"""The progress view shows calls as what they are."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from executor.dispatch import Dispatcher
from executor.handlers.computer import ComputerCallKind
from executor.kinds import Answer
from executor.progress import Progress
from executor.testing import computer_call, shell_call
from executor.toolbox import Toolbox


async def test_a_shell_call_of_several_commands_is_a_list_not_one_shell_line() -> None:
    # Two commands run one after the other with an exit code each: `cd src && make && pytest -q`
    # (or `;`) would be another command line, which the second one never ran as.
    buf = io.StringIO()
    dispatcher = Dispatcher(Toolbox(), Progress(Console(file=buf, force_terminal=False, width=200)))
    result = await dispatcher.run([shell_call(["cd src && make", "pytest -q"], call_id="call_1"),
                                   shell_call(["ls"], call_id="call_2")])
    lines = buf.getvalue().splitlines()
    start = lines.index("  → shell_call 2 commands")
    assert lines[start + 1:start + 3] == ["      $ cd src && make", "      $ pytest -q"]
    assert "  → shell_call ls" in lines  # one command: on the line itself, as before
    assert not any("make && pytest" in line or "make ; pytest" in line for line in lines)
    # The run's record (run --json, the request log) keeps the list too.
    first, second = result.records
    assert (first.summary, first.parts) == ("2 commands", ["cd src && make", "pytest -q"])
    assert (second.summary, second.parts) == ("ls", [])


async def test_a_computer_call_answered_not_enabled_reads_as_failed() -> None:
    # Its error output is a screenshot of the reason: nothing in it says "failed" to a text check.
    buf = io.StringIO()
    dispatcher = Dispatcher(Toolbox(), Progress(Console(file=buf, force_terminal=False, width=200)))
    call = {**computer_call([{"type": "screenshot"}], call_id="call_1"), "id": "cu_1", "status": "completed"}
    result = await dispatcher.run([call])
    (record,) = result.records
    assert not record.ok and "computer use is not enabled" in record.outcome, record
    (output,) = result.outputs
    assert output["output"]["image_url"].startswith("data:image/png;base64,")  # the model still gets its image
    out = buf.getvalue()
    assert "✗ computer_call not enabled: computer use is not enabled" in out and "✓" not in out, out


async def test_an_output_that_answers_another_call_reads_as_failed() -> None:
    # A handler bug (its output names another call) is answered with the kind's error output:
    # for a computer_call a screenshot again, so the record must say so itself.
    class WrongId(ComputerCallKind):
        def unavailable(self, call: Any) -> str | None:
            return None

        async def handle(self, call: Any) -> Answer:
            return Answer({"type": "computer_call_output", "call_id": "someone_else",
                           "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,"}})

    buf = io.StringIO()
    dispatcher = Dispatcher(Toolbox(), Progress(Console(file=buf, force_terminal=False, width=200)))
    dispatcher.kinds["computer_call"] = WrongId(dispatcher.toolbox)
    call = {**computer_call([{"type": "screenshot"}], call_id="call_1"), "id": "cu_1", "status": "completed"}
    result = await dispatcher.run([call])
    (record,) = result.records
    (output,) = result.outputs
    assert output["call_id"] == "call_1" and not record.ok, record
    assert "does not answer this call" in record.outcome and "✗ computer_call" in buf.getvalue()
