"""The fake API server's objects: one resourceVersion counter, a history for watches, and the
selectors the back-end uses (``labelSelector`` with ``k=v`` and ``k``; ``metadata.name=`` fields).
Touched only from the server's event loop."""

from __future__ import annotations

import asyncio
import copy
import datetime
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "Store", "label_match", "parse_selector"]

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (resource, namespace, name); namespace "" for cluster-scoped


def parse_selector(text: str | None) -> list[tuple[str, str | None]]:
    """``a=b,c`` → [("a", "b"), ("c", None)] (equality and existence: what sandloop sends)."""
    out: list[tuple[str, str | None]] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "==" in part:
            key, value = part.split("==", 1)
            out.append((key.strip(), value.strip()))
        elif "=" in part:
            key, value = part.split("=", 1)
            out.append((key.strip(), value.strip()))
        else:
            out.append((part, None))
    return out


def label_match(labels: dict[str, str], selector: list[tuple[str, str | None]]) -> bool:
    return all(key in labels and (value is None or labels[key] == value) for key, value in selector)


@dataclass
class Event:
    rv: int
    type: str
    resource: str
    namespace: str
    obj: Obj


@dataclass
class Store:
    objects: dict[Key, Obj] = field(default_factory=dict)
    history: list[Event] = field(default_factory=list)
    rv: int = 1
    _waiters: list[asyncio.Queue[Event]] = field(default_factory=list)

    def _bump(self, obj: Obj) -> int:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return self.rv

    def _emit(self, kind: str, resource: str, namespace: str, obj: Obj) -> None:
        event = Event(int(obj["metadata"]["resourceVersion"]), kind, resource, namespace, copy.deepcopy(obj))
        self.history.append(event)
        del self.history[:-5000]
        for queue in self._waiters:
            queue.put_nowait(event)

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        return self.objects.get((resource, namespace, name))

    def list(self, resource: str, namespace: str | None, selector: list[tuple[str, str | None]],
             name: str | None = None) -> list[Obj]:
        return [obj for (res, ns, n), obj in sorted(self.objects.items())
                if res == resource and (namespace is None or ns == namespace) and (name is None or n == name)
                and label_match(obj.get("metadata", {}).get("labels") or {}, selector)]

    def add(self, resource: str, namespace: str, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        if namespace:
            meta["namespace"] = namespace
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta.setdefault("labels", {})
        self._bump(obj)
        self.objects[(resource, namespace, meta["name"])] = obj
        self._emit("ADDED", resource, namespace, obj)
        return obj

    def update(self, resource: str, namespace: str, name: str, change: Callable[[Obj], None]) -> Obj | None:
        obj = self.objects.get((resource, namespace, name))
        if obj is None:
            return None
        change(obj)
        self._bump(obj)
        self._emit("MODIFIED", resource, namespace, obj)
        return obj

    def remove(self, resource: str, namespace: str, name: str) -> Obj | None:
        obj = self.objects.pop((resource, namespace, name), None)
        if obj is not None:
            self._bump(obj)
            self._emit("DELETED", resource, namespace, obj)
        return obj

    def subscribe(self) -> asyncio.Queue[Event]:
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._waiters.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Event]) -> None:
        if queue in self._waiters:
            self._waiters.remove(queue)
