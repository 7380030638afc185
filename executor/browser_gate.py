"""The browser's domain rules, asked through the gate.

Every request a page makes — navigations, subresources, fetch(), websockets, redirect hops —
is decided by :meth:`PolicyGate.url` (so a ``prompt`` rule reaches the human, once per host per
run) and recorded in the hash-chained audit log with its rule id, against the call whose
actions made it (requests a page makes between calls are recorded with no call id). Refusals
the browser then acts on are recorded as outcomes, including those it derives from the rules
itself (a name that resolves to a non-public address the policy does not list).
"""

from __future__ import annotations

from dataclasses import dataclass

from executor.items import COMPUTER
from executor.policy_gate import PolicyGate
from executor.toolbox import Toolbox
from policies.model import Policy
from sandbox.browser import BlockedRequest, BrowserConfig
from sandloop.verdict import Verdict

__all__ = ["BrowserGate"]


@dataclass
class BrowserGate:
    gate: PolicyGate
    toolbox: Toolbox

    @property
    def call_id(self) -> str:
        return self.toolbox.holding.get(COMPUTER, "")

    async def check(self, url: str) -> Verdict:
        return await self.gate.url(url, call_id=self.call_id)

    def blocked(self, blocked: BlockedRequest) -> None:
        self.gate.blocked(blocked.url, blocked.verdict, what=blocked.kind, call_id=self.call_id)

    def config(self, policy: Policy) -> BrowserConfig:
        return BrowserConfig(allow_url=self.check, on_block=self.blocked,
                             redact_selectors=tuple(policy.browser.redact_selectors))
