"""What one member may cost the server (docs/serve.md, "Limits"): request bodies, YAML alias bombs,
requests per token.

Bodies are refused by ``Content-Length`` before they are read, and counted as they stream in when the
length is absent, so a large body neither lands in memory nor reaches a handler. YAML whose aliases
would expand it past the loader's bound is a fast 422, in a request or in the YAML a manifest holds.
A token's requests past its bucket are 429s with ``Retry-After`` (watches: tests/server/test_watch.py).
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuq.api.loader import MAX_ALIAS_NODES
from gpuq.server.kinds import API_PREFIX
from gpuq.server.limits import MAX_BUCKETS, Limits, TokenBuckets
from server.conftest import Plane, dump, job, make_plane
from server.test_cli_commands import Gpuq, gpuq  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
SMALL = Limits(max_body_bytes=64 << 10, service_max_body_bytes=128 << 10)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Plane]:
    """The API on SQLite with a 64 KiB body limit (128 KiB for service traffic)."""
    made = make_plane(f"sqlite:///{tmp_path / 'gpuq.db'}", tmp_path / "work", limits=SMALL)
    yield made
    made.store.close()


def padded(size: int) -> str:
    """A valid Job manifest of about ``size`` bytes (a long comment)."""
    text = dump(job("padded"))
    return text + "#" + "x" * max(0, size - len(text) - 2) + "\n"


def chunks(text: str, size: int = 8 << 10) -> Iterator[bytes]:
    """``text`` as a body without a Content-Length (httpx sends an iterator chunked)."""
    data = text.encode()
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_past_the_limit_is_a_413_and_changes_nothing(small: Plane, chunked: bool) -> None:
    before = small.snapshot()
    text = padded(200 << 10)
    body = chunks(text) if chunked else text.encode()
    answer = small.call("POST", "/apply", small.team_a, content=body)
    assert answer.status_code == 413, answer.text
    assert answer.json()["reason"] == "Request Entity Too Large"
    assert f"larger than {64 << 10} bytes" in answer.json()["message"]
    assert "--max-body-size" in answer.json()["message"]
    assert small.snapshot() == before


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_within_the_limit_is_read_as_before(small: Plane, chunked: bool) -> None:
    text = padded(60 << 10)
    answer = small.call("POST", "/apply", small.team_a, content=chunks(text) if chunked else text.encode())
    assert answer.status_code == 200, answer.text
    assert [r["action"] for r in answer.json()["results"]] == ["created"]


def test_service_traffic_has_its_own_body_limit(small: Plane) -> None:
    """``/services/...`` takes up to 128 KiB here (then 404: this plane routes no service), not more."""
    for size, status in ((100 << 10, 404), (200 << 10, 413)):
        answer = small.client.post(
            "/services/team-a/embed/v1/embeddings",
            headers={"Authorization": f"Bearer {small.team_a}"},
            content=b"x" * size,
        )
        assert answer.status_code == status, answer.text
    assert "--service-max-body-size" in answer.json()["message"]


# -- memory stays flat: a real server process ------------------------------------------------------------

SERVER = """
import sys, uvicorn
from gpuq.run.store import Store
from gpuq.server.app import create_app
from gpuq.server.auth import add_user, ensure_admin
store = Store(sys.argv[1]); store.migrate(); ensure_admin(store)
add_user(store, "alice", namespaces=["team-a"], token="alice-token")
uvicorn.run(create_app(store), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """A ``create_app`` server with the default limits (4 MiB bodies) as a process: (pid, port)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, f"sqlite:///{tmp_path / 'gpuq.db'}", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not answer /healthz"
            time.sleep(0.1)
        yield process.pid, port
    finally:
        process.kill()
        process.wait(10)


def send_body(port: int, total: int, *, chunked: bool) -> tuple[bytes, int]:
    """POST ``/apply`` with a ``total``-byte body, sending until the server answers or hangs up: (the
    answer's head, bytes sent)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
        head = (
            f"POST {API_PREFIX}/apply HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer alice-token\r\n"
            f"Content-Type: application/yaml\r\n{framing}\r\n\r\n"
        )
        connection.sendall(head.encode())
        if not chunked:  # a declared length past the limit is answered before any of the body is sent
            select.select([connection], [], [], 10)
        piece = b"#" * (1 << 20)
        frame = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
        sent = 0
        try:
            while sent < total and not select.select([connection], [], [], 0)[0]:
                connection.sendall(frame)
                sent += len(piece)
        except OSError:  # the server answered and closed while we were still sending
            pass
        answer = b""
        try:
            while b"\r\n\r\n" not in answer:
                data = connection.recv(65536)
                if not data:
                    break
                answer += data
        except OSError:
            pass
        return answer.split(b"\r\n\r\n", 1)[0], sent


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
def test_a_huge_body_is_refused_and_the_servers_memory_stays_flat(
    server: tuple[int, int], chunked: bool
) -> None:
    pid, port = server
    before = rss_bytes(pid)
    total = 256 << 20
    head, sent = send_body(port, total, chunked=chunked)
    grown = rss_bytes(pid) - before
    assert head.startswith(b"HTTP/1.1 413"), head
    assert sent < total, "the server read the whole body"
    if not chunked:
        assert sent == 0, "a declared length past the limit is refused before the body is read"
    assert grown < 48 << 20, f"the server grew by {grown >> 20} MiB for a {total >> 20} MiB body"
    answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)  # and it still serves
    assert answer.status_code == 200
    assert json.loads(answer.text)["ok"] is True


# -- YAML alias bombs -----------------------------------------------------------------------------------

REFUSED = f"YAML aliases expand past {MAX_ALIAS_NODES} nodes: refused"


def laughs(indent: str) -> str:
    """The "billion laughs" (10^9 nodes once expanded, 620 bytes)."""
    lines = [f"{indent}a0: &a0 [" + ",".join(['"lol"'] * 9) + "]"]
    lines += [f"{indent}a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


BOMB_JOB = (
    "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: lol\n  namespace: team-a\n  annotations:\n"
    + laughs("    ")
    + "spec: {template: {spec: {containers: [{name: m, image: x, command: [x]}]}}}\n"
)
BOMB_RAYJOB = (
    "apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: env, namespace: team-a}\nspec:\n"
    "  entrypoint: python -c pass\n  runtimeEnvYAML: |\n" + laughs("    ")
)


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [(BOMB_JOB, 11, ""), (BOMB_RAYJOB, 6, "spec.runtimeEnvYAML")],
    ids=["in the request", "in a RayJob's runtimeEnvYAML"],
)
def test_a_yaml_alias_bomb_is_a_fast_422_that_changes_nothing(
    plane: Plane, text: str, line: int, field: str
) -> None:
    before = plane.snapshot()
    answer = plane.apply(text, plane.team_a)  # an expanded bomb would not return: no timing asserted
    assert answer.status_code == 422, answer.text
    assert "aliases, recursion or depth" in answer.json()["message"]
    [diagnostic] = answer.json()["diagnostics"]
    assert (diagnostic["path"], diagnostic["line"], diagnostic["field"]) == ("<request>", line, field)
    assert diagnostic["message"].startswith(REFUSED)
    assert plane.snapshot() == before


def test_a_manifest_with_a_few_aliases_applies(plane: Plane) -> None:
    text = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: shared
  namespace: team-a
  labels: &labels {kueue.x-k8s.io/queue-name: q}
spec:
  template:
    metadata: {labels: *labels}
    spec:
      containers:
      - {name: a, image: x, command: [x], resources: &one {requests: {nvidia.com/gpu: 1}}}
      - {name: b, image: x, command: [x], resources: *one}
"""
    answer = plane.apply(text, plane.team_a)
    assert answer.status_code == 200, answer.text
    stored = plane.store.get_workload("team-a", "shared")
    assert stored is not None
    assert stored.manifest["spec"]["template"]["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "q"}


def test_gpuq_delete_f_refuses_a_bomb_in_a_file(
    plane: Plane,
    gpuq: Gpuq,  # noqa: F811
    tmp_path: Path,
) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB_JOB)
    started = time.monotonic()
    result = gpuq("delete", "-f", str(path), token=plane.team_a)
    assert time.monotonic() - started < 2.0
    assert result.exit_code == 1
    assert f"{path}:11: {REFUSED}" in result.stderr


# -- requests per token ---------------------------------------------------------------------------------


def test_a_token_bucket_grants_its_burst_then_its_rate() -> None:
    now = [100.0]
    buckets = TokenBuckets(rate=2.0, burst=3, clock=lambda: now[0])
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == pytest.approx(0.5)  # the next token in half a second
    assert buckets.take("b") == 0.0  # every key its own bucket
    now[0] += 0.5
    assert buckets.take("a") == 0.0
    assert buckets.take("a") == pytest.approx(0.5)
    now[0] += 60  # refilled to the burst, not beyond
    assert [buckets.take("a") for _ in range(4)][-1] > 0
    for key in range(MAX_BUCKETS + 10):  # memory stays bounded whatever tokens are sprayed
        buckets.take(f"k{key}")
    assert len(buckets._buckets) == MAX_BUCKETS


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Plane]:
    """The API with a request every 2 s per token after a burst of 3."""
    made = make_plane(
        f"sqlite:///{tmp_path / 'gpuq.db'}", tmp_path / "work", limits=Limits(rate_per_s=0.5, rate_burst=3)
    )
    yield made
    made.store.close()


def test_a_token_past_its_rate_gets_429_with_retry_after_and_others_do_not(limited: Plane) -> None:
    answers = [limited.get("/whoami", limited.team_a) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    refused = answers[-1]
    assert refused.headers["retry-after"] == "2"
    assert refused.json()["reason"] == "Too Many Requests"
    assert "at most 0.5 a second after a burst of 3" in refused.json()["message"]
    assert "--rate-limit" in refused.json()["message"]
    cookie = {"Cookie": f"gpuq_token={limited.team_a}"}
    assert limited.client.get("/dashboard/content", headers=cookie).status_code == 429  # same token
    assert limited.get("/whoami", limited.team_b).status_code == 200  # bob has his own bucket
    assert limited.get("/whoami", None).status_code == 401  # no token: not counted, refused as before
    served = limited.client.post(
        "/services/team-a/embed/v1", headers={"Authorization": f"Bearer {limited.team_a}"}, content=b"{}"
    )
    assert served.status_code == 404  # service traffic has its own limit (off here)
    time.sleep(2.1)  # a token more
    assert limited.get("/whoami", limited.team_a).status_code == 200
    assert limited.get("/whoami", limited.team_a).status_code == 429


def test_service_traffic_has_its_own_buckets(tmp_path: Path) -> None:
    limits = Limits(rate_per_s=100, rate_burst=2, service_rate_per_s=0.2)
    plane = make_plane(
        f"sqlite:///{tmp_path / 'gpuq.db'}", tmp_path / "work", limits=limits, configured=False
    )
    try:
        headers = {"Authorization": f"Bearer {plane.team_a}"}
        codes = [plane.client.get("/services/team-a/embed/v1", headers=headers).status_code for _ in range(3)]
        assert codes == [404, 404, 429]
        assert (
            "--service-rate-limit"
            in plane.client.get("/services/team-a/x", headers=headers).json()["message"]
        )
        assert plane.get("/whoami", plane.team_a).status_code == 200
    finally:
        plane.store.close()
