"""The pages around the API: `/docs` (Swagger UI) working offline, and `/` leading to the inspector.

FastAPI's own /docs page loads Swagger UI from a CDN, so without internet it is blank. The assets come
from the fastapi-offline package instead (Swagger UI 5, which renders the OpenAPI 3.1 document FastAPI
writes; swagger-ui-bundle's 4.x cannot), served here under DOCS_ASSETS.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from engram.interfaces.inspector.routes import ROOT as INSPECTOR

DOCS = "/docs"
DOCS_ASSETS = "/docs/assets"
# The package's static folder: swagger-ui-bundle.js, swagger-ui.css, favicon.png (and redoc, unused).
ASSETS_DIR = Path(str(resources.files("fastapi_offline") / "static"))


def mount_docs(app: FastAPI) -> None:
    """Swagger UI at /docs from local assets, its OAuth2 redirect page, and `/` -> the inspector, on an
    app made with docs_url=None and redoc_url=None (FastAPI's own pages load from a CDN)."""
    app.mount(DOCS_ASSETS, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    oauth2_redirect = app.swagger_ui_oauth2_redirect_url or f"{DOCS}/oauth2-redirect"

    @app.get(DOCS, include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API docs",
            oauth2_redirect_url=oauth2_redirect,
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        )

    @app.get(oauth2_redirect, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        # A newcomer's browser lands here: the inspector (its sign-in page says where keys come from).
        return RedirectResponse(INSPECTOR, status_code=307)
