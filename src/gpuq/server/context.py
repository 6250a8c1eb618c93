"""The context file: where the server is and which token to send, for the CLI.

``~/.gpuq/context.yaml`` (``GPUQ_CONTEXT`` names another), mode 0600 in a directory created
mode 0700, since it holds a bearer token: ``{server: http://127.0.0.1:8470, token: ...}``.
``gpuq serve`` writes it; the CLI reads it, and ``--server`` / ``--token`` / ``GPUQ_SERVER`` /
``GPUQ_TOKEN`` win.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import yaml

DEFAULT_SERVER = "http://127.0.0.1:8470"


def context_path() -> Path:
    configured = os.environ.get("GPUQ_CONTEXT")
    return Path(configured).expanduser() if configured else Path.home() / ".gpuq" / "context.yaml"


def read_context(path: Path | None = None) -> dict[str, str]:
    """The file's ``server`` and ``token``; empty when it is absent or unreadable (or its YAML aliases
    expand past the loader's bound)."""
    from gpuq.api.loader import parse_documents

    path = path or context_path()
    try:
        documents, problems = parse_documents(str(path), path.read_text())
    except OSError:
        return {}
    data = documents[0].data if documents and not problems else None
    if not isinstance(data, dict):
        return {}
    return {k: str(v) for k, v in data.items() if k in ("server", "token") and v}


def write_context(server: str, token: str | None, path: Path | None = None) -> Path:
    """Write ``server`` (and ``token`` when given, else keep the file's) with mode 0600."""
    path = path or context_path()
    data = read_context(path)
    data["server"] = server
    if token:
        data["token"] = token
    private_dir(path.parent)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        yaml.safe_dump(data, handle, sort_keys=True)
    os.chmod(path, 0o600)  # an existing file keeps its old mode through os.open
    return path


def private_dir(directory: Path) -> None:
    """Create ``directory`` (and missing parents) mode 0700; one that exists is left as it is, except
    ``~/.gpuq``, gpuq's own, which is made 0700 (pods must not list it: docs/serve.md, "Job isolation")."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    for created in reversed(missing):
        with contextlib.suppress(FileExistsError):
            created.mkdir(mode=0o700)
    if directory == Path.home() / ".gpuq" and directory.stat().st_uid == os.geteuid():
        directory.chmod(0o700)


def client_address(host: str, port: int) -> str:
    """The URL a local client reaches a server bound to ``host`` at (wildcards become loopback)."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def resolve(server: str | None, token: str | None) -> tuple[str, str | None]:
    """Server and token: the options, else the environment, else the context file, else the default."""
    context = read_context()
    address = server or os.environ.get("GPUQ_SERVER") or context.get("server") or DEFAULT_SERVER
    return address.rstrip("/"), token or os.environ.get("GPUQ_TOKEN") or context.get("token")
