"""The API's listening socket: accepted connections send small writes at once (``TCP_NODELAY``).

Without it a response written as headers, then body, waits for the client's delayed ACK, about
40 ms a request on Linux, whatever the server's speed (asyncio sets no-delay only on sockets
whose ``proto`` says TCP, which a plain ``socket.socket()`` does not).
"""

from __future__ import annotations

import socket

import pytest
import typer

from gpuq.commands.serve import _listen


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        pytest.param("::1", marks=pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback")),
    ],
)
def test_an_accepted_connection_has_no_delay(host: str) -> None:
    listener = _listen(host, 0)
    try:
        assert listener.proto == socket.IPPROTO_TCP
        listener.listen(1)
        with socket.create_connection((host, listener.getsockname()[1])):
            accepted, _ = listener.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        listener.close()


def test_a_port_taken_is_a_clear_error(capfd: pytest.CaptureFixture[str]) -> None:
    taken = _listen("127.0.0.1", 0)
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(typer.Exit):
            _listen("127.0.0.1", port)
    finally:
        taken.close()
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in capfd.readouterr().err
