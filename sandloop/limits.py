"""What one command may take. The policy sets these; every back-end enforces them itself,
whatever a call asks for (the model's ``timeout_ms`` is a request, never a grant)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    default_timeout_s: float = 120.0
    max_timeout_s: float = 600.0
    max_output_bytes: int = 1 << 20  # per stream, per command

    def timeout_s(self, requested_s: float | None = None) -> float:
        """The timeout a command gets: what was asked (the default when nothing, or nothing
        positive, was), never more than the maximum."""
        wanted = self.default_timeout_s if requested_s is None or requested_s <= 0 else requested_s
        return min(wanted, self.max_timeout_s)

    def output_bytes(self, requested: int | None = None) -> int:
        """The per-stream output cap: what was asked, never more than the maximum."""
        if requested is None or requested <= 0:
            return self.max_output_bytes
        return min(requested, self.max_output_bytes)
