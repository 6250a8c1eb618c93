"""The HTTP client the CLI talks through: one place for the address, the token and error shapes.

Every failure becomes a :class:`ClientError` with one printable line (and the
diagnostics of a refused apply), never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from gpuq.server.kinds import API_PREFIX

HttpFactory = Callable[..., httpx.Client]
http_client: HttpFactory = httpx.Client
"""Makes the HTTP client (``base_url``, ``headers``, ``timeout``); tests put FastAPI's TestClient here."""


@dataclass
class ClientError(Exception):
    message: str
    status: int = 0
    diagnostics: list[dict[str, Any]] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message


class ApiClient:
    """Requests to one server with one token; paths are relative to ``/apis/gpuq.dev/v1alpha1``."""

    def __init__(self, server: str, token: str | None, *, timeout_s: float = 30.0) -> None:
        self.server = server
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = http_client(base_url=server, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None}).json()

    def get_all(self, path: str, chunk_size: int | None, **params: Any) -> list[Any]:
        """Every item of a paged list, ``chunk_size`` per request (None: one request), following
        ``continue`` tokens as kubectl's ``--chunk-size`` does."""
        items: list[Any] = []
        token: str | None = None
        while True:
            page = self.get(path, limit=chunk_size, **params, **{"continue": token})
            items += page["items"]
            token = page.get("continue")
            if not token or chunk_size is None:
                return items

    def text(self, path: str, **params: Any) -> str:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None}).text

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path).json()

    def apply(self, text: str, *, dry_run: bool = False) -> Any:
        headers = {"Content-Type": "application/yaml"}
        params = {"dryRun": "true"} if dry_run else {}
        return self.request("POST", "/apply", content=text.encode(), headers=headers, params=params).json()

    def dry_run_forecast(self, text: str) -> Any:
        """``POST /forecast/dry-run``: when would this workload manifest start if submitted now."""
        headers = {"Content-Type": "application/yaml"}
        return self.request("POST", "/forecast/dry-run", content=text.encode(), headers=headers).json()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = path if path.startswith("/apis/") or path == "/healthz" else f"{API_PREFIX}{path}"
        try:
            response = self._http.request(method, url, **kwargs)
        except httpx.TimeoutException as error:
            raise ClientError(f"the gpuq server at {self.server} did not answer in time ({error})") from error
        except httpx.HTTPError as error:
            raise ClientError(
                f"cannot reach the gpuq server at {self.server}: {error or type(error).__name__} "
                "(is `gpuq serve` running? set --server or GPUQ_SERVER)"
            ) from error
        if response.status_code >= 400:
            raise _error(response)
        return response


def _error(response: httpx.Response) -> ClientError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = body.get("message") or body.get("detail") or response.text.strip() or response.reason_phrase
    hint = " (check --token, GPUQ_TOKEN or the context file)" if response.status_code == 401 else ""
    return ClientError(
        f"error {response.status_code}: {message}{hint}", response.status_code, body.get("diagnostics") or []
    )
