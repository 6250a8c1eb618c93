"""``/docs`` loads nothing from a CDN: the page and every asset it references come from the server.

FastAPI's default page pulled Swagger UI's script and style from cdn.jsdelivr.net and its favicon
from fastapi.tiangolo.com: blank without Internet access.
"""

from __future__ import annotations

import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import gpuq.server
from server.conftest import Plane

SHIPPED = Path(gpuq.server.__file__).parent / "static" / "swagger-ui"
SHA256 = {
    "swagger-ui-bundle.js": "e6a898692f2d768e807c3ba4626068a69a2c5dd960dd6c76f3e4d3a3de180af2",
    "swagger-ui.css": "5ed08757e53da3e026d6cbecc61fe5d43585c9560b302d534ad56692519a273d",
    "favicon-32x32.png": "3ed612f41e050ca5e7000cad6f1cbe7e7da39f65fca99c02e99e6591056e5837",
}


class References(HTMLParser):
    """Every URL a page makes the browser load: script src, link href, img src."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (name, tag) in (("src", "script"), ("href", "link"), ("src", "img")):
                self.urls.append(value)


def test_docs_and_every_asset_it_references_come_from_the_server(plane: Plane) -> None:
    page = plane.client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    references = References()
    references.feed(page.text)
    assert len(references.urls) == 3, references.urls  # the script, the style, the favicon
    # and the URLs in the page's inline script (the OpenAPI document, the OAuth2 redirect page)
    inline = re.findall(r"'(/[^']*)'", page.text)
    assert sorted(inline) == ["/docs/oauth2-redirect", "/openapi.json"], page.text
    for url in [*references.urls, *inline]:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc, f"{url} is not on this server"
        fetched = plane.client.get(url)
        assert fetched.status_code == 200, url
        assert fetched.content, url
    assert "cdn" not in page.text and "https://" not in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "http" not in policy, "a browser loads nothing elsewhere"
    assert '"validatorUrl": null' in page.text, "no badge from validator.swagger.io"
    assert plane.client.get("/redoc").status_code == 404, "ReDoc came from a CDN: not served"
    assert plane.client.get("/openapi.json").json()["openapi"].startswith("3.1")


def test_the_assets_are_the_shipped_swagger_ui_5_files_with_their_licence(plane: Plane) -> None:
    """Swagger UI 5 (OpenAPI 3.1, which FastAPI writes), unmodified, Apache-2.0, served as shipped."""
    for name, digest in SHA256.items():
        served = plane.client.get(f"/docs/static/{name}").content
        assert (
            hashlib.sha256(served).hexdigest()
            == digest
            == hashlib.sha256((SHIPPED / name).read_bytes()).hexdigest()
        )
    assert "Apache License" in (SHIPPED / "LICENSE").read_text()
    assert "SmartBear" in (SHIPPED / "NOTICE").read_text()
    assert "5.35.0" in (SHIPPED / "README.md").read_text()
    assert plane.client.get("/docs/static/swagger-ui.css").headers["content-type"].startswith("text/css")
