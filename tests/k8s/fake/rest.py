"""The API server's answers, for every kind of object the fake serves: ``Status`` errors, a
get, and a list or a chunked watch stream of JSON lines from a resourceVersion (410 for one too
old). The server's routes (:mod:`.server`) and the agent-sandbox controller (:mod:`.sandboxes`)
both answer with these."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
from typing import Any

from aiohttp import web

from .store import Event, Store, label_match, parse_selector

__all__ = ["Obj", "get", "list_or_watch", "now", "status"]

Obj = dict[str, Any]


def status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    return web.json_response(body, status=code)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def get(store: Store, resource: str, ns: str, name: str) -> web.Response:
    """One object, or the 404 Status."""
    obj = store.get(resource, ns, name)
    if obj is None:
        return status(404, "NotFound", f'{resource} "{name}" not found')
    return web.json_response(obj)


async def list_or_watch(request: web.Request, store: Store, resource: str, ns: str | None,
                        kind: str = "", api_version: str = "v1") -> web.StreamResponse:
    """A list of the objects the selectors match, or (``watch=true``) a watch stream of them."""
    selector = parse_selector(request.query.get("labelSelector"))
    field = request.query.get("fieldSelector") or ""
    name = field.split("=", 1)[1] if field.startswith("metadata.name=") else None
    if request.query.get("watch") in ("true", "1"):
        return await _watch(request, store, resource, ns, selector, name)
    items = store.list(resource, ns, selector, name)
    kind = kind or {"pods": "PodList", "networkpolicies": "NetworkPolicyList"}.get(resource, "List")
    return web.json_response({"apiVersion": api_version, "kind": kind,
                              "metadata": {"resourceVersion": str(store.rv)}, "items": items})


async def _watch(request: web.Request, store: Store, resource: str, ns: str | None,
                 selector: list[tuple[str, str | None]], name: str | None) -> web.StreamResponse:
    rv_text = request.query.get("resourceVersion") or "0"
    timeout = float(request.query.get("timeoutSeconds") or 1800)
    since = int(rv_text) if rv_text.isdigit() else 0

    def wanted(event: Event) -> bool:
        meta = event.obj.get("metadata") or {}
        return (event.resource == resource and (ns is None or event.namespace == ns)
                and (name is None or meta.get("name") == name)
                and label_match(meta.get("labels") or {}, selector))

    queue = store.subscribe()  # before reading the history: nothing falls in between
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)

    async def send(kind: str, obj: Obj) -> None:
        await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    try:
        if since == 0:
            for obj in store.list(resource, ns, selector, name):
                await send("ADDED", obj)
            since = store.rv
        elif store.history and since < store.history[0].rv - 1:
            await send("ERROR", {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
                                 "message": f"too old resource version: {since}", "code": 410})
            return response
        else:
            for event in [e for e in store.history if e.rv > since]:
                if wanted(event):
                    await send(event.type, event.obj)
            since = store.rv
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while (left := end - loop.time()) > 0:
            try:
                event = await asyncio.wait_for(queue.get(), left)
            except TimeoutError:
                break
            if event.rv > since and wanted(event):
                await send(event.type, event.obj)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        store.unsubscribe(queue)
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response
