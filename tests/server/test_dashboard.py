"""The web dashboard: sign-in through the same tokens, what each role sees, escaping, no external resource."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import httpx
import pytest

from gpuq.server.auth import add_user
from gpuq.server.dashboard import COOKIE
from server.test_metrics_endpoint import Live, make_live, running_and_pending


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    """a runs on two GPUs, b is admitted and waits for a GPU, c waits for quota (see running_and_pending)."""
    made = make_live(tmp_path)
    running_and_pending(made)
    yield made
    made.loop.close()
    made.plane.store.close()


def page(live: Live, token: str, path: str = "/dashboard") -> httpx.Response:
    response = live.plane.client.get(path, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response


def text_of(html: str) -> str:
    """The page as a reader sees it: tags dropped, whitespace collapsed."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_without_a_token_the_dashboard_is_a_login_form_and_shows_no_data(live: Live) -> None:
    for path in ("/", "/dashboard"):
        response = live.plane.client.get(path)
        assert response.status_code == 401
        assert 'action="/dashboard/login"' in response.text and "team-a" not in response.text
    assert live.plane.client.get("/dashboard/content").status_code == 401


def test_a_token_in_the_address_signs_in_with_a_cookie_and_is_dropped_from_the_address(live: Live) -> None:
    client = live.plane.client
    response = client.get(f"/?token={live.plane.team_a}", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=lax" in cookie
    followed = client.get("/")  # the client kept the cookie
    assert followed.status_code == 200 and "alice" in followed.text
    assert client.get("/dashboard/content").status_code == 200
    out = client.post("/dashboard/logout", follow_redirects=False)
    assert out.status_code == 303 and f'{COOKIE}=""' in out.headers["set-cookie"]
    client.cookies.clear()
    assert client.get("/dashboard").status_code == 401


def test_the_login_form_signs_in_and_a_wrong_token_is_refused(live: Live) -> None:
    client = live.plane.client
    wrong = client.get("/dashboard?token=nope", follow_redirects=False)
    assert (
        wrong.status_code == 401 and "belongs to no user" in wrong.text and "set-cookie" not in wrong.headers
    )
    posted = client.post(
        "/dashboard/login",
        content=f"token={live.plane.admin}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert posted.status_code == 303 and posted.headers["location"] == "/dashboard"
    assert "admin" in client.get("/dashboard").text


def test_an_admin_sees_quota_pending_reasons_running_pods_gpus_and_events(live: Live) -> None:
    html = page(live, live.plane.admin).text
    shown = text_of(html)
    assert "shared" in shown and "1 pending · 2 admitted" in shown
    assert "gpu · nvidia.com/gpu" in shown and "3 / 4" in shown  # used / nominal
    assert re.search(r'<rect class="used" width="75\.00"', html)  # a bar three quarters full
    c = live.plane.store.get_workload("team-b", "c")
    assert c is not None and c.message
    assert "team-b/ c" in shown and c.message in shown  # pending, with why it waits
    assert "team-a/ a" in shown and "main-0 Running on box GPU 0 GPU 1" in shown
    assert "team-b/ b" in shown and "no pod yet" in shown  # admitted, waiting for a GPU
    assert "GPU 0 team-a/a main-0" in shown and "2 × A100-80GB · 0 free · 2 in use" in shown
    assert "Admitted" in shown and "replica test" in shown and "role leader" in shown
    assert "dashboard/content" in html  # the refresh script


def test_a_member_sees_only_its_namespaces(live: Live) -> None:
    live.plane.store.add_event("Normal", "Note", "Workload", "team-b", "c", "bob's secret", 1.0)
    shown = text_of(page(live, live.plane.team_a).text)
    assert "team-a/ a" in shown and "main-0 Running on box" in shown
    assert "team-b" not in shown and "bob's secret" not in shown
    assert "shared" in shown and "3 / 4" in shown  # ClusterQueues are cluster-scoped: everyone reads them
    bob = text_of(page(live, live.plane.team_b).text)
    assert "team-b/ c" in bob and "team-a" not in bob and "GPU 0 another namespace" in bob


def test_every_user_string_is_escaped(live: Live) -> None:
    evil = '<img src=x onerror="alert(1)">'
    token = add_user(live.plane.store, evil, namespaces=["team-a"])
    live.plane.store.add_event(
        "Warning", "<b>Bad</b>", "Workload", "team-a", "a", "</td><script>x()</script>", 2.0
    )
    html = page(live, token).text
    assert evil not in html and "<script>x()" not in html and "<b>Bad</b>" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert "&lt;/td&gt;&lt;script&gt;x()&lt;/script&gt;" in html and "&lt;b&gt;Bad&lt;/b&gt;" in html


def test_the_page_loads_nothing_from_elsewhere_and_runs_only_its_own_script(live: Live) -> None:
    response = page(live, live.plane.admin, "/")
    html = response.text
    assert not re.search(r"(?:src|href|action)\s*=\s*[\"']?(?:https?:)?//", html)
    assert "http://" not in html and "https://" not in html and "@import" not in html
    policy = response.headers["content-security-policy"]
    (nonce,) = set(re.findall(r"'nonce-([^']+)'", policy))
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert html.count(f'nonce="{nonce}"') == 2 == html.count("<script") + html.count("<style")
    assert response.headers["cache-control"] == "no-store"


def test_a_follower_says_the_leader_shows_quota_usage(live: Live) -> None:
    live.plane.client.app.state.queue_usage = lambda: None  # type: ignore[attr-defined]
    shown = text_of(page(live, live.plane.admin).text)
    assert "the leader's dashboard shows quota usage" in shown and "3 / 4" not in shown
