"""A model at a whole Linux desktop: it opens the terminal on the screen, types a command that
writes a file into your checkout, and the shell tool reads the file back.

    python examples/desktop.py                     # the OpenAI API (OPENAI_API_KEY)
    python examples/desktop.py --base-url http://127.0.0.1:8000/v1 --model my-model

browser="desktop" gives computer calls a desktop (Xvfb, openbox, xterm, an editor, Chromium) in
its own hardened container beside the shell's; the screenshots go to the run folder, where
`sandloop report` draws each click over the screen it landed on. The desktop image is built on
first use (a few minutes, once).
"""

from __future__ import annotations

from common import TASK as DEMO_TASK
from common import arguments, checkout

import executor

TASK = ("On the desktop, click into the terminal window, type `echo hello from the desktop > hello.txt` "
        "and press Enter. Then read hello.txt with the shell tool and answer with its contents.")


def main() -> int:
    args = arguments(__doc__)
    task = TASK if args.task == DEMO_TASK else args.task
    with checkout(args.repo) as repo, executor.open_run_sync(
            repo, policy=args.policy, model=args.model, base_url=args.base_url, browser="desktop",
            approvals=executor.DenyAll()) as run:
        outcome = run.task(task)
        print(f"model: {outcome.result.final_text}")
        written = run.sandbox.read_file("hello.txt").decode().strip()
        print(f"hello.txt: {written}")
        screenshots = sorted((run.folder / "screenshots").glob("*.png"))
        print(f"screenshots: {len(screenshots)} in {run.folder / 'screenshots'}")
        print(f"run folder: {run.folder}\naudit head: {run.audit_head}")
    return int(outcome.result.exit_code)


if __name__ == "__main__":
    raise SystemExit(main())
