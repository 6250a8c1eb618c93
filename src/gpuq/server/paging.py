"""Lists in pages, as the Kubernetes API serves them: ``?limit=N`` and the ``continue`` token.

A list of 10,000 pending workloads is one answer of megabytes that takes seconds to build; with
``limit`` a client reads it in pages (``gpuq get workloads --chunk-size``, 500 by default as
kubectl's). The token is opaque to clients: it carries the id of the last workload of the page, so
the next page starts after it in submission order, with the same filters applied in the query.
Unlike Kubernetes, a page is read as of its own request, not of the first page's resourceVersion:
a workload submitted meanwhile appears on a later page; one deleted meanwhile is simply absent.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from gpuq.server.errors import ApiError

MAX_LIMIT = 10_000


@dataclass(frozen=True)
class PageToken:
    after_id: int


def encode(token: PageToken) -> str:
    raw = json.dumps({"v": 1, "after": token.after_id}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(text: str | None) -> PageToken:
    """The token of a ``continue`` parameter; 400 naming the parameter when it is not one of ours."""
    if not text:
        return PageToken(0)
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        after = data["after"] if isinstance(data, dict) and data.get("v") == 1 else None
    except (ValueError, binascii.Error, KeyError, TypeError):
        after = None
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise ApiError(400, "continue: not a continue token of this server (start the list again without it)")
    return PageToken(after)
