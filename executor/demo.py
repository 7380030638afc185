"""``sandloop run --demo``: the bundled scenario, end to end, through the real parts.

executor/demo_assets/ holds a tiny repo whose test fails, a status page, and the task. The demo
copies the repo to a temporary directory, serves the page on 127.0.0.1, and runs the task
through the real loop, the real ``openai`` client, a Docker sandbox (the minimal image: the
task's tests need python3 only) and Chromium. Without
``OPENAI_API_KEY`` the model side is the scripted model below, served by the strict fake
Responses server; with a key it is the live model, doing the same task.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console

from executor.run import BudgetOverrides, RunOptions
from policies.engine import load_policy
from sandbox import images
from sandloop.errors import ConfigError

__all__ = ["DEMO_DIR", "demo_model", "page_server", "placement", "scenario"]

DEMO_DIR = Path(__file__).resolve().parent / "demo_assets"

FIX = "@@ def add(a: int, b: int) -> int:\n-    return a - b\n+    return a + b\n"


@contextlib.contextmanager
def page_server(root: Path) -> Iterator[str]:
    """Serve ``root`` on a free port of 127.0.0.1; yields the index URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, name="demo-page", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the progress view is enough
        return


def _last_shell_exit(history: list[dict[str, Any]]) -> int | None:
    for item in reversed(history):
        if item.get("type") == "shell_call_output":
            outcome = (item.get("output") or [{}])[-1].get("outcome") or {}
            code = outcome.get("exit_code")
            return int(code) if code is not None else None
    return None


def demo_model(page_url: str) -> Any:
    """The scripted model: test (fail), read, patch, test (pass), open page, screenshot, answer."""
    from executor.testing import (
        ScriptedModel,
        apply_patch_call,
        computer_call,
        function_call,
        message,
        reasoning,
        shell_call,
        update_file,
    )

    def answer(_request: dict[str, Any], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        passed = _last_shell_exit(history) == 0  # the second test run
        verdict = ("The tests pass now." if passed
                   else "The tests still fail; the fix needs another look.")
        return [message(
            "add() in calc.py subtracted instead of adding (`return a - b`). I changed it to "
            f"`return a + b`. {verdict} The status page at {page_url} shows the heading "
            "\"calc — build status\"; its screenshot is in the log.", phase="final_answer")]

    return ScriptedModel([
        [reasoning(["Run the tests first."]), shell_call(["python3 -m unittest -v"])],
        [shell_call(["cat calc.py"])],
        [apply_patch_call(update_file("calc.py", FIX))],
        [shell_call(["python3 -m unittest -v"])],
        [function_call("navigate", {"url": page_url})],
        [computer_call([{"type": "screenshot"}])],
        answer,
    ])


def _page_policy(folder: Path, page_url: str) -> Path:
    """The demo policy, plus the one address and port the status page is served on."""
    path = folder / "policy.toml"
    path.write_text(f'version = 1\nextends = [{json.dumps(str(DEMO_DIR / "policy.toml"))}]\n\n'
                    f'[browser]\nallow_domains = [{json.dumps(urlsplit(page_url).netloc)}]\n', encoding="utf-8")
    return path


def placement(requested: str | None) -> str:
    """Where the demo's Chromium runs: where asked; else in its container once the browser image
    is built, and in the host's Chromium (the same policy, routing and rules) while it is not —
    a first ``make demo`` leaves that image to the background build, so as not to wait for it.
    With neither, the container, whose image is then built on first use."""
    if requested:
        return requested
    import docker

    try:
        client = docker.from_env(timeout=10)
        try:
            if images.is_current(client, "browser"):
                return "container"
        finally:
            client.close()
    except (docker.errors.DockerException, OSError):
        return "auto"  # no engine: the host's Chromium, if any
    return "local" if shutil.which("chromium") else "container"


@contextlib.contextmanager
def scenario(args: argparse.Namespace, console: Console, budgets: BudgetOverrides) -> Iterator[RunOptions]:
    """The demo's run: a fresh copy of the repo, the page served, and (offline) the scripted
    model behind the strict fake server, for as long as the run takes."""
    if args.policy and load_policy(args.policy).policy.computer.environment == "desktop":
        # the scenario navigates a page: refused here, not as a browser flag nobody gave
        raise ConfigError('--demo drives a browser page: its --policy cannot set [computer] environment = "desktop"')
    live = bool(os.environ.get("OPENAI_API_KEY"))
    with tempfile.TemporaryDirectory(prefix="sandloop-demo-") as tmp, \
            page_server(DEMO_DIR / "page") as page_url, contextlib.ExitStack() as stack:
        repo = Path(shutil.copytree(DEMO_DIR / "repo", Path(tmp) / "repo"))
        policy = args.policy or str(_page_policy(Path(tmp), page_url))
        task = (DEMO_DIR / "task.md").read_text(encoding="utf-8").format(page_url=page_url)
        base_url, api_key, model = args.base_url, os.environ.get("OPENAI_API_KEY"), args.model or "gpt-5.4"
        if not live:
            from executor.testing import FakeResponsesServer

            server = stack.enter_context(FakeResponsesServer(demo_model(page_url)))
            base_url, api_key, model = server.base_url, "offline-demo", "scripted-demo"
        # The demo's tests need python3 and nothing else: the minimal image, the one a first
        # `make demo` builds before it starts (sandbox.images.DEMO_TARGETS).
        image = args.image or images.image_name("minimal")
        console.print(f"[bold]sandloop demo[/] ({'live model ' + model if live else 'offline, scripted model'})"
                      f" — repo copy {repo}, page {page_url}")
        yield RunOptions(
            task=task, repo=repo, model=model, base_url=base_url, api_key=api_key,
            policy=policy, browser=placement(args.browser), budgets=budgets,
            stateless=args.stateless, log=Path(args.log) if args.log else None,
            record=Path(args.record) if args.record else None, image=image, backend=args.backend)
