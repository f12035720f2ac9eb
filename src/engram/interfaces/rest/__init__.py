"""The REST + MCP service."""

from engram.interfaces.rest.app import create_app

__all__ = ["create_app"]
