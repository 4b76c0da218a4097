"""Tiny HTTP client for the monitoring endpoints (stdlib only, off the event loop)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

HTTP_TIMEOUT = 5.0


@dataclass(frozen=True)
class HttpResponse:
    """Status, content type and body of one GET."""

    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def _get(url: str) -> HttpResponse:
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as resp:
            return HttpResponse(resp.status, resp.headers.get("Content-Type", ""), resp.read())
    except urllib.error.HTTPError as err:
        return HttpResponse(err.code, err.headers.get("Content-Type", ""), err.read())


async def http_get(url: str) -> HttpResponse:
    """GET in a worker thread so the clients on the event loop keep running."""
    return await asyncio.to_thread(_get, url)


async def get_json(url: str) -> Any:
    """GET a JSON endpoint; non-200 is a test failure with the body shown."""
    resp = await http_get(url)
    assert resp.status == 200, f"GET {url} -> {resp.status}: {resp.body[:500]!r}"
    assert resp.content_type.startswith("application/json"), resp.content_type
    return resp.json()


def shape(obj: dict[str, Any]) -> dict[str, str]:
    """Field name -> JSON type name (int and float kept apart, as Go emits them)."""
    return {k: type(v).__name__ for k, v in obj.items()}
