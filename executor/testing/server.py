"""A strict fake of the OpenAI Responses API, served over real HTTP on 127.0.0.1.

Point the real ``openai`` client at it::

    from executor.testing import FakeResponsesServer, ScriptedModel, shell_call, message

    model = ScriptedModel([[shell_call(["ls"])], [message("done")]])
    with FakeResponsesServer(model) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test")
        ...                                   # AsyncOpenAI works the same way
        assert len(server.requests) == 2

It serves ``POST /v1/responses`` (non-streaming) and ``GET /v1/responses/{id}``. Each
request body is validated like the real API does (see :mod:`executor.testing.state` and
:mod:`executor.testing.schema`); a rejected request gets the real API's 400 error JSON, which
the client raises as :class:`openai.BadRequestError`. Errors carry ``x-should-retry: false``
so the client does not silently retry them.
"""

from __future__ import annotations

import json
import threading
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import pydantic
from openai.types.responses import Response

from .errors import ApiError
from .model import ScenarioExhausted, ScriptedModel
from .state import Conversations

__all__ = ["FakeResponsesServer"]

_PREFIX = "/v1/responses"


class FakeResponsesServer:
    """A strict Responses API on a random free port of 127.0.0.1, in a background thread.

    ``accept_local_shell_call_id`` also accepts ``local_shell_call_output`` items that
    carry the call id in ``call_id`` (the guide's shape) instead of ``id`` (the SDK's).

    Attributes, readable while and after it runs:

    * ``base_url`` — ``http://127.0.0.1:PORT/v1``, for ``openai.OpenAI(base_url=...)``;
    * ``requests`` — every ``POST /v1/responses`` body, in arrival order, rejected ones too;
    * ``responses`` — every response served with 200, in order;
    * ``rejections`` — every ``{"error": ...}`` body served with a 4xx/5xx, in order.
    """

    def __init__(self, model: ScriptedModel, *, accept_local_shell_call_id: bool = False) -> None:
        self.model = model
        self.conversations = Conversations(accept_local_shell_call_id=accept_local_shell_call_id)
        self.requests: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.rejections: list[dict[str, Any]] = []
        # One request at a time: the conversation state must change atomically, as each
        # request both reads the chain and extends it.
        self._serial = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeResponsesServer:
        """Start serving (idempotent); :meth:`close` stops."""
        if self._thread is None:
            self._thread = threading.Thread(
                # A short poll interval keeps close() fast (shutdown waits for one poll).
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                name=f"fake-responses-{self.port}", daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> FakeResponsesServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- request handling (called from the HTTP threads) ----------------------------------

    def handle_create(self, body: Any) -> tuple[int, dict[str, Any]]:
        """Answer one ``POST /v1/responses``: (HTTP status, JSON body)."""
        with self._serial:
            if isinstance(body, dict):
                self.requests.append(body)
            try:
                if not isinstance(body, dict):
                    raise ApiError("The request body must be a JSON object.")
                if body.get("stream"):
                    raise ApiError("streaming not supported by the fake server",
                                   param="stream")
                context = self.conversations.prepare(body, self.model.required_tools)
                try:
                    produced = self.model.respond(body, context)
                except ScenarioExhausted as exc:
                    raise ApiError(str(exc), status=500, type="server_error") from exc
                except Exception as exc:
                    # A scripted turn that raises (e.g. an assertion on the request) surfaces
                    # in the client as openai.InternalServerError carrying this text.
                    raise ApiError(f"the scripted turn raised {type(exc).__name__}: {exc}",
                                   status=500, type="server_error") from exc
                if produced.get("id") not in getattr(self.model, "unchecked", ()):
                    _check_response(produced)
                served = self.conversations.commit(body, context, produced)
            except ApiError as err:
                self.rejections.append(err.to_json())
                return err.status, err.to_json()
            self.responses.append(served)
            return 200, served

    def handle_retrieve(self, response_id: str) -> tuple[int, dict[str, Any]]:
        """Answer one ``GET /v1/responses/{id}``."""
        stored = self.conversations.get(response_id)
        if stored is None:
            err = ApiError(f"Response with id '{response_id}' not found.", status=404)
            return err.status, err.to_json()
        return 200, stored


def _check_response(response: dict[str, Any]) -> None:
    """Refuse to serve what the real API never would: the scenario is wrong, not the client."""
    try:
        Response.model_validate(response)
    except pydantic.ValidationError as exc:
        raise ApiError(
            f"the scripted model produced an invalid Response: {exc}", status=500,
            type="server_error",
        ) from exc


def _handler_for(server: FakeResponsesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 keeps the client's connection alive between turns.
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes; with Nagle's algorithm on, the body then
        # waits for the client's delayed ACK (~40 ms a turn).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # tests read `server.requests`, not stderr

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-request-id", f"req_{uuid.uuid4().hex}")
            if status >= 400:
                self.send_header("x-should-retry", "false")
            self.end_headers()
            self.wfile.write(data)

        def _not_found(self) -> None:
            err = ApiError(f"Unknown route {self.command} {self.path} (fake server).",
                           status=HTTPStatus.NOT_FOUND)
            self._send(err.status, err.to_json())

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.split("?")[0].rstrip("/") != _PREFIX:
                self._not_found()
                return
            try:
                body = json.loads(raw or b"null")
            except json.JSONDecodeError:
                err = ApiError("We could not parse the JSON body of your request.")
                self._send(err.status, err.to_json())
                return
            self._send(*server.handle_create(body))

        def do_GET(self) -> None:
            path = self.path.split("?")[0].rstrip("/")
            if not path.startswith(_PREFIX + "/") or "/" in path[len(_PREFIX) + 1:]:
                self._not_found()
                return
            self._send(*server.handle_retrieve(path[len(_PREFIX) + 1:]))

    return Handler
