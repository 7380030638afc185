"""What a policy answers: a decision, the rule that made it, and why."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Decision", "Verdict"]


class Decision(enum.StrEnum):
    ALLOW = "allow"
    PROMPT = "prompt"
    DENY = "deny"

    @property
    def strictness(self) -> int:
        return {"allow": 0, "prompt": 1, "deny": 2}[self.value]


@dataclass(frozen=True)
class Verdict:
    """A decision with its provenance, so auditors can see which rule decided and why."""

    decision: Decision
    justification: str
    rule_id: str | None = None  # None when the section default decided
    source: str | None = None  # "file:line" of the rule, or of the default

    @property
    def allowed(self) -> bool:
        return self.decision is Decision.ALLOW
