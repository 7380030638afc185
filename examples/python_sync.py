"""sandloop from a plain script: the same run as python_async.py, with no asyncio in sight.

    python examples/python_sync.py                     # the OpenAI API (OPENAI_API_KEY)
    python examples/python_sync.py --base-url http://127.0.0.1:8000/v1 --model my-model

open_sandbox_sync() is the sandbox alone, its policy in front: your commands and writes are
decided and recorded like the model's. open_run_sync() adds the model.
"""

from __future__ import annotations

from common import arguments, checkout

import executor


def main() -> int:
    args = arguments(__doc__)
    with checkout(args.repo) as repo:
        with executor.open_sandbox_sync(repo, policy=args.policy, approvals=executor.DenyAll()) as sandbox:
            sandbox.write_file("NOTES.md", "Fix add() before the release.\n")
            print(f"notes: {sandbox.read_file('NOTES.md').decode().strip()}")
            before = sandbox.run("python3 -m unittest -q")
            print(f"tests before: {'pass' if before.exit_code == 0 else 'fail'}")
        with executor.open_run_sync(repo, policy=args.policy, model=args.model,
                                    base_url=args.base_url, approvals=executor.DenyAll()) as run:
            outcome = run.task(args.task)
            print(f"model: {outcome.result.final_text}")
            after = run.sandbox.run("python3 -m unittest -q")
            print(f"tests now: {'pass' if after.exit_code == 0 else 'fail'}")
            print(f"run folder: {run.folder}\naudit head: {run.audit_head}")
    return int(outcome.result.exit_code)


if __name__ == "__main__":
    raise SystemExit(main())
