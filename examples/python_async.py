"""sandloop from async Python: one call opens the run, the model works, you check its work.

    python examples/python_async.py                    # the OpenAI API (OPENAI_API_KEY)
    python examples/python_async.py --base-url http://127.0.0.1:8000/v1 --model my-model

open_run() loads the policy, starts the Docker sandbox, opens the policy gate (its approvals,
its hash-chained audit log) and the run's folder. run.task() drives the model's tool calls to a
final answer; run.sandbox runs your own commands under the same policy and audit log.
"""

from __future__ import annotations

import asyncio

import openai
from common import arguments, checkout

import executor


async def main() -> int:
    args = arguments(__doc__)
    client = openai.AsyncOpenAI(base_url=args.base_url)
    # DenyAll: nobody answers the policy's prompts here (by default a terminal would be asked)
    with checkout(args.repo) as repo:
        async with executor.open_run(repo, policy=args.policy, model=args.model, client=client,
                                     approvals=executor.DenyAll()) as run:
            outcome = await run.task(args.task)
            print(f"model: {outcome.result.final_text}")
            check = await run.sandbox.run("python3 -m unittest -q")
            print(f"tests now: {'pass' if check.exit_code == 0 else 'fail'}")
            try:
                await run.sandbox.run("git push origin main")
            except executor.PolicyDenied as exc:
                print(f"refused: {exc}")
            print(f"run folder: {run.folder}\naudit head: {run.audit_head}")
    await client.close()
    return int(outcome.result.exit_code)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
