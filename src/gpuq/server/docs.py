"""``/docs``: Swagger UI over ``/openapi.json``, served from files shipped in the package, no CDN.

FastAPI's own ``/docs`` page loads Swagger UI's script and style from a CDN (and its favicon from
fastapi.tiangolo.com), so it is blank on a control plane without Internet access and tells a third
party who reads the API's documentation. Here the page references only this server: the unmodified
``swagger-ui-dist`` files in ``static/swagger-ui`` (version, licence and checksums in its README),
under ``/docs/static/``. Its Content-Security-Policy allows this origin alone, so a browser refuses
anything from elsewhere, and Swagger UI's online validator badge (a request to validator.swagger.io)
is switched off. FastAPI's ``/redoc`` (ReDoc from a CDN) is not served.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/static"
SWAGGER_UI_VERSION = "5.35.0"
CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'self'"
)
"""Only this origin: FastAPI's page starts Swagger UI with an inline script."""


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs``, its OAuth2 redirect page and its assets; the app is built with ``docs_url=None``."""
    openapi_url = app.openapi_url or "/openapi.json"
    title = f"{app.title} - API documentation"
    app.mount(
        ASSETS_PATH,
        StaticFiles(packages=[("gpuq.server", "static/swagger-ui")]),
        name="swagger-ui",
    )

    @app.get(DOCS_PATH, include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        page = get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js?v={SWAGGER_UI_VERSION}",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css?v={SWAGGER_UI_VERSION}",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
            oauth2_redirect_url=f"{DOCS_PATH}/oauth2-redirect",
            swagger_ui_parameters={"validatorUrl": None},
        )
        page.headers["Content-Security-Policy"] = CSP
        return page

    @app.get(f"{DOCS_PATH}/oauth2-redirect", include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        page = get_swagger_ui_oauth2_redirect_html()
        page.headers["Content-Security-Policy"] = CSP
        return page
