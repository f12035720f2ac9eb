"""The narrower service role of docs/opensearch.md ("Running against a managed or self-run cluster",
point 3), exercised: the node's admin creates a role with exactly the documented permissions, listed in
``plugins.security.restapi.roles_enabled``, and an internal user holding it; an Engram on a fresh prefix
runs as that user through its public API (first open, turns and facts of two tenants, a supersession,
recall with the default pipeline, forget, ``engram repair``, a user's deletion; and a migration),
tenants isolated.
And the route the document used to offer besides roles_enabled, ``restapi:admin/*`` permissions with
``plugins.security.restapi.admin.enabled``, does not open the security REST API in 2.19: refused at
open. The node's opensearch.yml names both accounts (tests/opensearch_node/node.py)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import NamedTuple

import pytest
from typer.testing import CliRunner

from engram import Engram, NotFound
from engram.data_rights import erase_user
from engram.errors import StorageError
from engram.interfaces.cli import app
from engram.models import SemanticMemory
from engram.storage.opensearch import MAPPING_VERSION, OpenSearchOptions, OpenSearchStore, migrate
from engram.storage.opensearch._layout import KINDS
from tests.opensearch_node.node import (
    NARROW_ACCOUNT,
    NARROW_ROLE,
    REST_ADMIN_ACCOUNT,
    REST_ADMIN_ROLE,
    OpenSearchNode,
)
from tests.storage.test_opensearch_migrate import downgrade_to_v0

SECURITY = "/_plugins/_security/api"
AUTHINFO = "/_plugins/_security/authinfo"
PASSWORD = "Narrow-svc-pass-1"


def service_role(prefix: str) -> dict[str, object]:
    """Exactly what docs/opensearch.md lists for the service account's role."""
    return {
        "cluster_permissions": ["cluster_composite_ops", "cluster_monitor"],
        "index_permissions": [{"index_patterns": [f"{prefix}*"], "allowed_actions": ["indices_all"]}],
    }


class Account(NamedTuple):
    user: str
    prefix: str


def admin_put(node: OpenSearchNode, path: str, body: object) -> None:
    status, found = node.request("PUT", f"{SECURITY}/{path}", body)
    assert status in (200, 201), found


@contextlib.contextmanager
def make_account(node: OpenSearchNode, prefix: str, user: str, role: str) -> Iterator[Account]:
    """``user`` holding ``role`` = the documented role on ``prefix``, made as the node's admin (both
    deleted afterwards)."""
    try:
        admin_put(node, f"roles/{role}", service_role(prefix))
        admin_put(node, f"internalusers/{user}", {"password": PASSWORD})
        admin_put(node, f"rolesmapping/{role}", {"users": [user]})
        yield Account(user, prefix)
    finally:
        for path in (f"rolesmapping/{role}", f"roles/{role}", f"internalusers/{user}"):
            node.request("DELETE", f"{SECURITY}/{path}")


@pytest.fixture(scope="module")
def narrow_account(opensearch_node: OpenSearchNode) -> Iterator[str]:
    """The service account of docs/opensearch.md, its role in roles_enabled: made once for the module
    (a security-config write costs ~0.5 s); each test points its role at the test's prefix."""
    with make_account(opensearch_node, "unused-", NARROW_ACCOUNT, NARROW_ROLE) as made:
        yield made.user


@pytest.fixture
def account(opensearch_node: OpenSearchNode, narrow_account: str, os_prefixes) -> Account:
    """The narrow service account, its role on a fresh prefix."""
    prefix = os_prefixes()
    admin_put(opensearch_node, f"roles/{NARROW_ROLE}", service_role(prefix))
    return Account(narrow_account, prefix)


def options(node: OpenSearchNode, account: Account) -> OpenSearchOptions:
    return OpenSearchOptions(
        user=account.user, password=PASSWORD, ca_certs=str(node.ca), index_prefix=account.prefix, replicas=0
    )


def test_the_role_is_as_narrow_as_documented(account, opensearch_node):
    """Outside its prefix, and for cluster settings or impersonating anyone but a tenant, the account
    is refused: the tests below run with no more than the documented permissions."""
    as_account = {"user": account.user, "password": PASSWORD}
    assert opensearch_node.request("PUT", f"/{account.prefix}probe", {}, **as_account)[0] == 200
    assert opensearch_node.request("PUT", "/elsewhere-probe", {}, **as_account)[0] == 403
    assert opensearch_node.request("GET", "/_cluster/health", **as_account)[0] == 200
    settings = {"transient": {"cluster.routing.allocation.enable": "all"}}
    assert opensearch_node.request("PUT", "/_cluster/settings", settings, **as_account)[0] == 403
    assert opensearch_node.request("GET", f"{SECURITY}/internalusers/admin", **as_account)[0] == 200
    # roles_enabled opens the whole security REST API (docs/opensearch.md: its power is the caveat)
    assert opensearch_node.request("GET", f"{SECURITY}/actiongroups", **as_account)[0] == 200
    # only Engram's tenant users may be impersonated (the allow-list; the test below impersonates them)
    assert opensearch_node.request("GET", AUTHINFO, impersonate="admin", **as_account)[0] == 403


def test_engram_runs_end_to_end_as_the_narrow_service_account(
    account, opensearch_node, embedder, reranker, token_encoder, tmp_path
):
    prefix = account.prefix
    url = f"opensearchs://{opensearch_node.address}"
    # first open: the indices and the tenants' DLS role, made by the narrow account
    eng = Engram(
        OpenSearchStore(url, options(opensearch_node, account)),
        embedder,
        reranker,
        token_encoder=token_encoder,
    )
    try:
        role = opensearch_node.request("GET", f"{SECURITY}/roles/{prefix}tenant")
        assert role[0] == 200 and f"{prefix}tenant" in role[1]
        aliases = opensearch_node.request("GET", f"/_alias/{prefix}*")[1]
        assert {a for index in aliases.values() for a in index["aliases"]} == {
            f"{prefix}memories",
            f"{prefix}tombstones",
            f"{prefix}store",
        }
        sarah, bob = eng.for_user("sarah"), eng.for_user("bob")
        first = sarah.remember_turn("I just moved to Leith with my cat Miso", session_id="s1")
        reply = sarah.remember_turn("yes, near the harbour", session_id="s1")
        assert reply.context_id == first.id  # the previous turn read back as sarah
        bob_turn = bob.remember_turn("my locker code is 9931", session_id="b1")
        old = sarah.write("Sarah lives in Leith")
        new = sarah.write("Sarah lives in Porto", supersedes_id=old.id)
        bob_fact = bob.write("Bob lives in Leith")
        cat = eng.catalog.add("Lockers open with a four digit code", title="Lockers")

        hits = sarah.recall("where does Sarah live?", k=5)
        ids = [h.memory.id for h in hits]
        assert ids[0] == new.id
        assert old.id not in ids and bob_fact.id not in ids and bob_turn.id not in ids
        top = hits[0].memory
        assert isinstance(top, SemanticMemory) and top.use_count == 1  # the use recorded under a lease
        assert [m.id for m in sarah.history(new.id)] == [old.id, new.id]
        assert sarah.get(old.id).superseded_by == new.id
        # isolation: neither tenant sees the other's rows, by recall or by id; both see the catalog
        bob_hits = {h.memory.id for h in bob.recall("locker code Leith", k=10)}
        assert bob_turn.id in bob_hits and bob_fact.id in bob_hits and cat.id in bob_hits
        assert not bob_hits & {first.id, reply.id, old.id, new.id}
        with pytest.raises(NotFound):
            bob.get(new.id)
        with pytest.raises(NotFound):
            sarah.get(bob_fact.id)
        with pytest.raises(NotFound):
            bob.forget(first.id)

        tombstone = sarah.forget(first.id)
        assert (tombstone.id, tombstone.user_id, tombstone.memory_type) == (first.id, "sarah", "episodic")
        with pytest.raises(NotFound):
            sarah.get(first.id)
        assert first.id not in {h.memory.id for h in sarah.recall("moved to Leith with my cat", k=10)}
        assert [m.id for m in sarah.list(memory_type="episodic")] == [reply.id]

        # engram repair, as an operator runs it, with the narrow account
        env = {
            "ENGRAM_HOME": str(tmp_path),
            "ENGRAM_OS_USER": account.user,
            "ENGRAM_OS_PASSWORD": PASSWORD,
            "ENGRAM_OS_CA_CERTS": str(opensearch_node.ca),
            "ENGRAM_OS_INDEX_PREFIX": prefix,
        }
        ran = CliRunner().invoke(app, ["repair", "--store", url, "--json"], env=env)
        assert ran.exit_code == 0, ran.output
        assert json.loads(ran.stdout) == {"settled": [], "quotes_cleared": 0, "held": 0}

        # deleting a user: its documents and its internal user go, the other tenant's stay
        counts = erase_user(eng.store, "bob", by="test")
        assert counts["memories"] == 2 and counts["internal_user"] == 1
        assert opensearch_node.request("GET", f"{SECURITY}/internalusers/engram_u_bob")[0] == 404
        assert bob.list(memory_type="semantic") == [] and bob.list(memory_type="episodic") == []
        assert {m.id for m in sarah.list(memory_type="semantic")} == {new.id}
        assert [h.memory.id for h in sarah.recall("where does Sarah live?", k=1)] == [new.id]
    finally:
        eng.close()


def test_migrate_runs_as_the_narrow_service_account(account, opensearch_node, embedder, reranker):
    """docs/opensearch.md: migrate runs as the service account (blocks writes to the old index,
    ``_reindex`` as a task it polls, moves the aliases): with this role too."""
    url = f"opensearchs://{opensearch_node.address}"
    eng = Engram(OpenSearchStore(url, options(opensearch_node, account)), embedder, reranker)
    kept = eng.for_user("sarah").write("Sarah's locker code is 4411")
    eng.close()
    downgrade_to_v0(opensearch_node, account.prefix)  # as the node's admin: an older store

    done = migrate(url, options(opensearch_node, account))

    assert {(m.kind, m.from_version, m.to_version) for m in done} == {
        (kind, 0, MAPPING_VERSION) for kind in KINDS
    }
    again = Engram(OpenSearchStore(url, options(opensearch_node, account)), embedder, reranker)
    try:
        assert [m.id for m in again.for_user("sarah").list(memory_type="semantic")] == [kept.id]
    finally:
        again.close()


def test_restapi_admin_permissions_without_roles_enabled_are_refused_at_open(opensearch_node, os_prefixes):
    """The documented role plus restapi:admin/internalusers, roles and rolesmapping (the node's
    REST_ADMIN_ROLE, restapi.admin.enabled on) but not in roles_enabled: the security plugin refuses the
    REST API ("does not have any role privileged for admin access"), and Engram refuses to open, saying
    what it needs, having created nothing."""
    prefix = os_prefixes()
    with make_account(opensearch_node, prefix, REST_ADMIN_ACCOUNT, "engram_service_restapi") as account:
        as_account = {"user": account.user, "password": PASSWORD}
        status, found = opensearch_node.request("GET", AUTHINFO, **as_account)
        assert status == 200 and REST_ADMIN_ROLE in found["roles"]  # it holds the permissions
        status, found = opensearch_node.request("GET", f"{SECURITY}/internalusers/admin", **as_account)
        assert status == 403 and "privileged for admin access" in found["message"]
        with pytest.raises(StorageError, match=r"cannot read the security plugin's roles.*manage its role"):
            OpenSearchStore(f"opensearchs://{opensearch_node.address}", options(opensearch_node, account))
        assert opensearch_node.request("GET", f"/{prefix}*")[1] == {}  # no index made
