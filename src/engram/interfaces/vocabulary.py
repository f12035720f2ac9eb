"""One vocabulary for every surface: each facade operation's CLI command, REST route and MCP tool.

The facade (``engram.memory``) names the operations; the surfaces follow its verbs: ``mem.remember_turn``
is ``engram remember-turn``, ``POST /v1/turns`` (a resource noun; its OpenAPI operation is named after the
verb) and the MCP tool ``remember_turn``. The MCP names ``recall_memory``, ``write_memory`` and
``forget_memory`` are fixed by the design. A surface that deliberately lacks an operation says why
(``Absent``). ``tests/test_vocabulary.py`` checks this table against the registered Typer commands,
FastAPI routes and MCP tools, both ways, and that every public facade method has an entry.

The shared catalog has one name on every surface: ``memory_type`` ``"catalog"`` with ``user_id`` null.
Storage's own markers for it (None, ``''``, ``'*catalog*'``) never reach a user.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

CATALOG_TYPE: Final = "catalog"  # the catalog's memory_type: the one name the surfaces show for it


@dataclass(frozen=True)
class Absent:
    """A surface deliberately without this operation, and why."""

    reason: str


@dataclass(frozen=True)
class Route:
    method: str
    path: str

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


@dataclass(frozen=True)
class Operation:
    """Where one facade operation lives on each surface. ``cli`` is the command path under ``engram``
    (``"catalog add"``)."""

    cli: str | Absent
    rest: Route | Absent
    mcp: str | Absent


# Reasons shared by several entries.
_ADMIN_ONLY = Absent("admin: MCP sessions hold a user key, which cannot change the catalog")
_BULK = Absent("bulk load of a whole document: an operator's job, not a conversation step")
_NOT_A_TOOL = Absent(
    "recall returns the rows an agent needs, with their ids; every tool is in the model's context on "
    "each turn, so the agent's toolset stays at what a conversation uses"
)
_INSPECTOR = Absent("the admin's read-only view of one user: served by the inspector (/inspector) only")
_TAB_COUNT = Absent(
    "the catalog tab's count in the inspector; `catalog list` and GET /v1/catalog page the rows"
)
_LIFECYCLE = Absent("opens or closes the store: the CLI's --store option, `engram serve` at start")
_MAINTENANCE = Absent("store maintenance run by an operator, not by a request")

OPERATIONS: Final[Mapping[str, Operation]] = {
    # -- Engram: the store --------------------------------------------------------------------------
    "Engram.open": Operation(_LIFECYCLE, _LIFECYCLE, _LIFECYCLE),
    "Engram.from_settings": Operation(_LIFECYCLE, _LIFECYCLE, _LIFECYCLE),
    "Engram.close": Operation(_LIFECYCLE, _LIFECYCLE, _LIFECYCLE),
    "Engram.for_user": Operation(
        Absent("picks the tenant: every memory command's --user"),
        Absent("picks the tenant: the API key"),
        Absent("picks the tenant: the API key (HTTP) or ENGRAM_API_KEY/ENGRAM_USER (stdio)"),
    ),
    "Engram.reader": Operation(_INSPECTOR, _INSPECTOR, _INSPECTOR),
    "Engram.catalog": Operation(
        Absent("the admin handle: its operations are the `engram catalog` commands (CatalogAdmin.*)"),
        Absent("the admin handle: its operations are the /v1/catalog routes (CatalogAdmin.*)"),
        _ADMIN_ONLY,
    ),
    "Engram.import_json": Operation(
        "import",  # a user document (with --user, or its own user_id) or a catalog array
        Absent("a key opens one tenant: POST /v1/import (UserMemory) or POST /v1/catalog/import (catalog)"),
        _BULK,
    ),
    # `engram serve` also runs it in the background (every N turns or 24 h); over REST and MCP the
    # key's user starts a run now, answered at once with its run id (LLM calls outlast a request).
    "Engram.consolidate": Operation("consolidate", Route("POST", "/v1/consolidate"), "consolidate_memory"),
    "Engram.reindex": Operation("reindex", _MAINTENANCE, _MAINTENANCE),
    "Engram.index_heavy_tenants": Operation(
        Absent("a step of `engram reindex`, which builds heavy users' indexes after the token vectors"),
        _MAINTENANCE,
        _MAINTENANCE,
    ),
    "Engram.encode_rows": Operation(
        Absent("internal: embeds rows for the importer and transfer"),
        Absent("internal: embeds rows for the importer and transfer"),
        Absent("internal: embeds rows for the importer and transfer"),
    ),
    # -- UserMemory: one user's memory --------------------------------------------------------------
    "UserMemory.remember_turn": Operation("remember-turn", Route("POST", "/v1/turns"), "remember_turn"),
    "UserMemory.write": Operation("write", Route("POST", "/v1/memories"), "write_memory"),
    "UserMemory.recall": Operation("recall", Route("POST", "/v1/recall"), "recall_memory"),
    "UserMemory.get": Operation("get", Route("GET", "/v1/memories/{memory_id}"), _NOT_A_TOOL),
    "UserMemory.history": Operation(
        "history",
        Route("GET", "/v1/memories/{memory_id}/history"),
        Absent("recall_memory with include_superseded=true answers 'what was it before?'"),
    ),
    "UserMemory.list": Operation("list", Route("GET", "/v1/memories"), _NOT_A_TOOL),
    "UserMemory.record_outcome": Operation(
        "record-outcome", Route("POST", "/v1/playbooks/{playbook_id}/outcome"), "record_outcome"
    ),
    "UserMemory.forget": Operation("forget", Route("DELETE", "/v1/memories/{memory_id}"), "forget_memory"),
    "UserMemory.import_json": Operation("import", Route("POST", "/v1/import"), _BULK),
    # -- CatalogAdmin: the shared catalog (admin) ---------------------------------------------------
    "CatalogAdmin.add": Operation("catalog add", Route("POST", "/v1/catalog"), _ADMIN_ONLY),
    "CatalogAdmin.list": Operation("catalog list", Route("GET", "/v1/catalog"), _ADMIN_ONLY),
    "CatalogAdmin.count": Operation(_TAB_COUNT, _TAB_COUNT, _TAB_COUNT),
    "CatalogAdmin.get": Operation("catalog get", Route("GET", "/v1/catalog/{memory_id}"), _ADMIN_ONLY),
    "CatalogAdmin.forget": Operation(
        "catalog forget", Route("DELETE", "/v1/catalog/{memory_id}"), _ADMIN_ONLY
    ),
    "CatalogAdmin.import_json": Operation("import", Route("POST", "/v1/catalog/import"), _ADMIN_ONLY),
    # -- MemoryReader: read only, for the inspector -------------------------------------------------
    "MemoryReader.get": Operation(_INSPECTOR, _INSPECTOR, _INSPECTOR),
    "MemoryReader.history": Operation(_INSPECTOR, _INSPECTOR, _INSPECTOR),
    "MemoryReader.list": Operation(_INSPECTOR, _INSPECTOR, _INSPECTOR),
    "MemoryReader.count": Operation(_INSPECTOR, _INSPECTOR, _INSPECTOR),
    "MemoryReader.recall": Operation(_INSPECTOR, _INSPECTOR, _INSPECTOR),
    "MemoryReader.present": Operation(_INSPECTOR, _INSPECTOR, _INSPECTOR),
}

# Old command names kept, hidden, so that existing scripts keep working: old name -> current name.
CLI_ALIASES: Final[Mapping[str, str]] = {"remember": "remember-turn"}

# What the surfaces offer beyond the facade, each with the module that does it.
CLI_ONLY: Final[Mapping[str, str]] = {
    "demo": "engram.demo: a sample store to try the other commands on",
    "export": "engram.transfer: the whole store as JSON Lines (`import --all` loads it)",
    "info": "the store's location, model and row counts",
    "repair": "the store's repair: writes a crashed process left half done (OpenSearch), completed or undone",
    "serve": "runs the REST API, MCP over HTTP and the inspector",
    "mcp": "runs MCP over stdio for one user",
    "mcp-config": "prints MCP client configuration",
    "chat": "engram.agent: a support agent that uses the memory",
    "eval": "engram.eval: recall quality on the evaluation corpus",
    "keys create": "engram.auth.ApiKeys.create",
    "keys list": "engram.auth.ApiKeys.list",
    "keys revoke": "engram.auth.ApiKeys.revoke",
    "users export": "engram.transfer.export_user: everything of one user (a data-rights request)",
    "users delete": "engram.data_rights.erase_user: delete everything of one user",
}
REST_ONLY: Final[Mapping[Route, str]] = {
    Route("GET", "/v1/me"): "whose memory the key opens (UserMemory.user_id)",
    Route("POST", "/v1/keys"): "engram.auth.ApiKeys.create",
    Route("GET", "/v1/keys"): "engram.auth.ApiKeys.list",
    Route("DELETE", "/v1/keys/{key_id}"): "engram.auth.ApiKeys.revoke",
    Route("GET", "/v1/admin/users/{user_id}/export"): "engram.transfer.export_user, as `users export`",
    Route("DELETE", "/v1/admin/users/{user_id}"): "engram.data_rights.erase_user, as `users delete`",
    Route("GET", "/v1/import/{key}"): "an import sent with an Idempotency-Key: its progress, then its report",
    Route("GET", "/v1/catalog/import/{key}"): "a catalog import sent with an Idempotency-Key, likewise",
    Route("GET", "/v1/consolidate/{run_id}"): "a consolidation run's status (consolidate_memory with run_id)",
}
MCP_ONLY: Final[Mapping[str, str]] = {}


def cli_commands() -> set[str]:
    """Every visible command path the table names (facade operations and CLI-only commands)."""
    return {op.cli for op in OPERATIONS.values() if isinstance(op.cli, str)} | set(CLI_ONLY)


def rest_routes() -> set[Route]:
    """Every /v1 route the table names."""
    return {op.rest for op in OPERATIONS.values() if isinstance(op.rest, Route)} | set(REST_ONLY)


def mcp_tools() -> set[str]:
    """Every MCP tool the table names."""
    return {op.mcp for op in OPERATIONS.values() if isinstance(op.mcp, str)} | set(MCP_ONLY)
