"""The error the fake server answers with, in the real API's JSON shape.

The real Responses API reports a rejected request as HTTP 400 with
``{"error": {"message", "type": "invalid_request_error", "param", "code"}}``;
the ``openai`` client turns that into :class:`openai.BadRequestError` whose
``.message`` carries the text and whose ``.body`` is the inner ``error`` object.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ApiError"]


class ApiError(Exception):
    """A request the fake server refuses, with the fields of the real error object."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status
        self.type = type

    def to_json(self) -> dict[str, Any]:
        """The response body, exactly as the real API shapes it."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }
