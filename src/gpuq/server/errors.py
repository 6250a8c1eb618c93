"""One error shape for every refusal, so the CLI can print any of them the same way.

Body: ``{"status": 403, "reason": "Forbidden", "message": "...", "diagnostics": [...]}``;
``diagnostics`` only for manifests that failed validation (422), each the loader's
finding (``path``, ``line``, ``kind``, ``name``, ``field``, ``message``, ``severity``, ``text``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from gpuq.api.diagnostics import Diagnostic


class ApiError(Exception):
    """A refusal with its HTTP status; raising it changes nothing (handlers raise before writing)."""

    def __init__(
        self,
        status: int,
        message: str,
        diagnostics: Iterable[Diagnostic] = (),
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.diagnostics = tuple(diagnostics)
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "status": self.status,
            "reason": HTTPStatus(self.status).phrase,
            "message": self.message,
        }
        if self.diagnostics:
            body["diagnostics"] = [diagnostic_document(d) for d in self.diagnostics]
        return body


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


def diagnostic_document(diagnostic: Diagnostic) -> dict[str, Any]:
    return {
        "path": diagnostic.path,
        "line": diagnostic.line,
        "kind": diagnostic.kind,
        "name": diagnostic.name,
        "field": diagnostic.field,
        "message": diagnostic.message,
        "severity": diagnostic.severity,
        "text": str(diagnostic),
    }


def install_handlers(app: FastAPI) -> None:
    """Answer :class:`ApiError` and FastAPI's own parameter errors in the one shape."""

    async def api_error(_request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, ApiError)
        headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else {}
        return JSONResponse(error.body(), status_code=error.status, headers=headers | error.headers)

    async def bad_parameters(_request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in error.errors()
        )
        return JSONResponse(ApiError(400, f"bad request: {problems}").body(), status_code=400)

    async def store_busy(_request: Request, error: Exception) -> JSONResponse:
        """The store could not take the write in time (SQLite's lock timeout under many writers): nothing
        was written; say so in the one shape, with when to retry, rather than a bare 500."""
        message = f"the store is busy, nothing was written; retry: {getattr(error, 'orig', error)}"
        return JSONResponse(ApiError(503, message).body(), status_code=503, headers={"Retry-After": "1"})

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, bad_parameters)
    app.add_exception_handler(OperationalError, store_busy)
