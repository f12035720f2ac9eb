"""One vocabulary across the surfaces (engram.interfaces.vocabulary), checked against the real ones: the
facade's public methods by introspection, the Typer app's commands, the FastAPI app's /v1 routes and the
MCP server's tools through the official client. A missing or an extra entry on either side fails; so
does docs/cli.md when it is not what the generator prints."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer
from fastapi.testclient import TestClient
from mcp import Client
from typer.testing import CliRunner

from engram import Engram
from engram.auth import ApiKeys
from engram.interfaces import vocabulary
from engram.interfaces.cli import app as cli_app
from engram.interfaces.cli import reference
from engram.interfaces.mcp import build_mcp_server
from engram.interfaces.rest import create_app
from engram.interfaces.vocabulary import CLI_ALIASES, OPERATIONS, Route
from engram.memory import CatalogAdmin, MemoryReader, UserMemory

ROOT = Path(__file__).resolve().parents[1]
FACADE = (Engram, UserMemory, CatalogAdmin, MemoryReader)
# storage's markers for the catalog owner, as they would show in JSON (compact or indented)
SENTINELS = re.compile(r'\*catalog\*|"user_id":\s*""')


def facade_operations() -> set[str]:
    """Every public method (and handle property) of the facade's classes, inherited ones included."""
    return {
        f"{cls.__name__}.{name}"
        for cls in FACADE
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and (callable(member) or isinstance(member, property))
    }


def cli_leaves() -> Iterator[tuple[str, Any]]:
    """(command path under `engram`, click command) for every runnable command, hidden ones too."""
    root = typer.main.get_command(cli_app)
    for path, command, _ in reference._walk(root, root.context_class(root, info_name="engram"), ""):
        if getattr(command, "list_commands", None) is None:
            yield path.strip(), command


def rest_routes(app: Any) -> dict[Route, str]:
    """The API's operations as its OpenAPI document lists them (what clients see; FastAPI keeps included
    routers behind private objects), each with its operation id. Only /v1: /healthz, /inspector and
    /mcp are no operations of the facade."""
    return {
        Route(method.upper(), path): operation["operationId"]
        for path, methods in app.openapi()["paths"].items()
        if path.startswith("/v1")
        for method, operation in methods.items()
    }


def mcp_tool_names(eng: Engram) -> set[str]:
    async def listed() -> set[str]:
        async with Client(build_mcp_server(eng, lambda ctx: "sarah")) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    return anyio.run(listed)


def verb(operation: str) -> str:
    """The facade's verb: the method name (``import_json`` imports; JSON is the format)."""
    return operation.split(".")[1].removesuffix("_json")


def test_every_facade_operation_has_an_entry_and_every_entry_an_operation():
    operations = facade_operations()
    assert "UserMemory.remember_turn" in operations and "CatalogAdmin.forget" in operations  # inherited
    missing, stale = operations - set(OPERATIONS), set(OPERATIONS) - operations
    assert not missing, f"add these facade operations to engram.interfaces.vocabulary.OPERATIONS: {missing}"
    assert not stale, f"OPERATIONS names operations the facade no longer has: {stale}"


def test_cli_commands_are_exactly_the_table():
    leaves = dict(cli_leaves())
    visible = {path for path, command in leaves.items() if not command.hidden}
    hidden = {path for path, command in leaves.items() if command.hidden}
    assert visible == vocabulary.cli_commands(), (
        f"not in the table: {visible - vocabulary.cli_commands()}; "
        f"not registered: {vocabulary.cli_commands() - visible}"
    )
    assert hidden == set(CLI_ALIASES)
    for old, new in CLI_ALIASES.items():  # an alias runs the very command it names
        assert leaves[old].callback.__wrapped__ is leaves[new].callback.__wrapped__
        assert [p.name for p in leaves[old].params] == [p.name for p in leaves[new].params]


def test_rest_routes_are_exactly_the_table(eng):
    routes = rest_routes(create_app(eng, ApiKeys(eng.store)))
    expected = vocabulary.rest_routes()
    assert set(routes) == expected, (
        f"not in the table: {set(routes) - expected}; not served: {expected - set(routes)}"
    )
    for name, op in OPERATIONS.items():  # the OpenAPI operation id starts with the facade's verb
        if isinstance(op.rest, Route):
            assert routes[op.rest].startswith(verb(name)), (name, op.rest, routes[op.rest])


def test_mcp_tools_are_exactly_the_table(eng):
    tools = mcp_tool_names(eng)
    assert tools == vocabulary.mcp_tools(), (tools, vocabulary.mcp_tools())
    assert {"recall_memory", "write_memory", "forget_memory"} <= tools  # fixed by the design


def test_one_verb_per_operation():
    """The CLI command and MCP tool of an operation are its facade verb (MCP: or ``<verb>_memory``)."""
    for name, op in OPERATIONS.items():
        if isinstance(op.cli, str):
            assert op.cli.split()[-1] == verb(name).replace("_", "-"), (name, op.cli)
        if isinstance(op.mcp, str):
            assert op.mcp in (verb(name), f"{verb(name)}_memory"), (name, op.mcp)
    for old, new in CLI_ALIASES.items():
        assert new in vocabulary.cli_commands() and old not in vocabulary.cli_commands()


def test_every_absence_says_why():
    for name, op in OPERATIONS.items():
        for surface in (op.cli, op.rest, op.mcp):
            if isinstance(surface, vocabulary.Absent):
                assert len(surface.reason) > 20, (name, surface)


def test_cli_reference_is_generated():
    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == reference.render(), f"docs/cli.md is stale: run `{reference.REGENERATE}`"
    assert "docs/cli.md" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_names_every_mcp_tool():
    """The README is the MCP tools' only reference (the CLI has docs/cli.md, REST its OpenAPI)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for tool in vocabulary.mcp_tools():
        assert f"`{tool}`" in readme, tool


@pytest.fixture
def served(eng: Engram) -> Iterator[tuple[Engram, TestClient, dict[str, str]]]:
    keys = ApiKeys(eng.store)
    tokens = {"admin": keys.create(None)[0], "sarah": keys.create("sarah")[0]}
    with TestClient(create_app(eng, keys)) as http:
        yield eng, http, tokens


def test_the_catalog_has_one_name_on_every_surface(served):
    """memory_type "catalog" and user_id null, over REST, MCP and the CLI; never storage's '' or
    '*catalog*'."""
    eng, http, tokens = served
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    sarah = {"Authorization": f"Bearer {tokens['sarah']}"}
    seen: list[str] = []

    def check(row: dict[str, Any]) -> None:
        assert row["memory_type"] == vocabulary.CATALOG_TYPE and row["user_id"] is None, row

    added = http.post("/v1/catalog", json={"text": "The Lumio Hub v2 speaks Zigbee 3.0"}, headers=admin)
    item_id = added.json()["id"]
    for response in (
        added,
        http.get(f"/v1/catalog/{item_id}", headers=admin),
        http.get(f"/v1/memories/{item_id}", headers=sarah),
    ):
        assert response.status_code in (200, 201), response.text
        check(response.json())
        seen.append(response.text)
    check(http.get("/v1/catalog", headers=admin).json()["data"][0])
    hits = http.post("/v1/recall", json={"query": "zigbee hub"}, headers=sarah).json()["hits"]
    check(hits[0]["memory"])
    listed = http.get("/v1/memories", params={"type": "catalog"}, headers=sarah)
    assert listed.status_code == 422 and "/v1/catalog" in http.get("/openapi.json").text

    async def mcp_recall(view: str) -> dict[str, Any]:
        async with Client(build_mcp_server(eng, lambda ctx: "sarah")) as client:
            result = await client.call_tool("recall_memory", {"query": "zigbee hub", "k": 1, "view": view})
            return dict(result.structured_content or {})

    mcp_hits = anyio.run(mcp_recall, "full")["hits"]
    check(mcp_hits[0]["memory"])
    compact = anyio.run(mcp_recall, "compact")["hits"]  # the tool's default view
    assert compact[0]["type"] == vocabulary.CATALOG_TYPE and "user_id" not in compact[0]
    seen.append(json.dumps(mcp_hits + compact))

    runner, store = CliRunner(), ["--store", f"sqlite:///{eng.store.path}"]
    shown = runner.invoke(cli_app, ["catalog", "get", item_id, "--json", *store])
    assert shown.exit_code == 0, shown.output
    check(json.loads(shown.output))
    refused = runner.invoke(cli_app, ["list", "--user", "sarah", "--type", "catalog", *store])
    assert refused.exit_code == 1 and "engram catalog list" in refused.output, refused.output
    seen += [shown.output, refused.output]

    gone = http.delete(f"/v1/catalog/{item_id}", headers=admin)
    check(gone.json()["forgotten"])
    seen.append(gone.text)
    assert len(seen) == 7
    for text in seen:
        assert not SENTINELS.search(text), text
