"""Migrating an OpenSearch store to this Engram's mapping version (``MAPPING_VERSION``).

For each kind (memories, tombstones, store) whose alias points at an index of an older version:

1. create ``{prefix}{kind}-v{MAPPING_VERSION}`` with the current body (``index_body``; the old index's
   shard and replica counts, and for memories its embedding dimension): the create fails if the index
   exists, so two migrators cannot both proceed;
2. block writes to the old index (``index.blocks.write``) and refresh it, so the copy holds every
   acknowledged write and no write can land in the old index after the copy began;
3. copy the documents with ``_reindex`` (a server task, polled until done: a large store outlasts any
   HTTP timeout), through the painless scripts of ``STEPS`` where a version's change needs one;
4. check the new index holds as many documents as the old one.

Then one ``_aliases`` request moves all the migrated aliases at once (``remove`` the old index, ``add``
the new): a reader sees the old store or the new one, never half of it, nor memories at v2 beside
tombstones at v1. The old indices stay, read-only, until the operator deletes them (or ``delete_old``).
Leases (``kind: lock`` documents in ``store``) are not copied: they belong to writes in flight, which
the write block has failed anyway.

Writes during a migration: the store must be quiesced (stop every Engram process on it, then migrate,
then start the new Engram), and the write block enforces it rather than trusting it: a forgotten writer
gets an error (403 ``cluster_block_exception``) instead of a write that the copy misses and the swap
silently drops. Reads go on from the old indices until the swap. Refusing writes at the server is the
simple safe option: a store-level flag in Engram would be read only by Engram processes that check it,
and a dual-write or catch-up copy would need an ordering the unit-of-work writes do not have.

Idempotent: a kind already at ``MAPPING_VERSION`` is left alone, so a second run changes nothing. An index
newer than this code is refused before anything changes (there is no migrating down: upgrade Engram).
A run that fails before the swap deletes the index it created and lifts the write block; one that was
killed leaves its new index behind, which the next run refuses to touch (see ``_check_target``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engram.errors import StorageError
from engram.settings import load_settings
from engram.storage.opensearch._client import OpenSearchOptions, connect, errors, parse_url
from engram.storage.opensearch._layout import KINDS, MAPPING_VERSION, Names, index_body

if TYPE_CHECKING:
    from opensearchpy import OpenSearch

# What reindexing into version N does to each document, by kind: a painless script over ctx._source.
# A version whose change needs no document change (a new analyzer, a new optional field, other settings)
# has no entry: the documents are copied as they are and the new mapping indexes them. A migration across
# several versions runs each step in order, each in its own block. Steps are history: never edited once
# released. Version 1 is the first mapping: nothing is transformed into it yet; a version 2 that, say,
# derived a field would add ``2: {"memories": "ctx._source.new_field = ..."}``.
# Version 4 (the embedding no longer stored in _source) has no step: the copy reads each document's
# embedding from the old _source and the new index keeps it as its vector only (k-NN derived source); a
# later copy from version 4 gets the embedding back in ctx._source from the plugin.
STEPS: dict[int, Mapping[str, str]] = {
    # 3: the recall filter's fields, as _documents.document derives them (recall_filter.metadata_term)
    3: {
        "memories": """
            def src = ctx._source;
            def attrs = src.attrs == null ? [:] : src.attrs;
            src.session_id = attrs.session_id;
            def at = src.event_at;
            if (at == null && src.memory_type == 'semantic') { at = attrs.valid_from; }
            src.event_time = at == null ? src.created_at : at;
            List terms = new ArrayList();
            if (src.metadata != null) {
                for (def pair : src.metadata.entrySet()) {
                    String key = pair.getKey(); def v = pair.getValue(); String tagged = null;
                    if (v instanceof String) { tagged = 's:' + v; }
                    else if (v instanceof Boolean) { tagged = v ? 'b:true' : 'b:false'; }
                    else if (v instanceof Integer || v instanceof Long) { tagged = 'n:' + v; }
                    else if (v instanceof Double || v instanceof Float) {
                        double d = v;
                        if (!Double.isNaN(d) && !Double.isInfinite(d)) {
                            tagged = (d == Math.floor(d) && Math.abs(d) < 9007199254740992.0)
                                ? 'n:' + (long) d : 'n:' + Double.toString(d);
                        }
                    }
                    if (tagged != null) {
                        String term = key.length() + ':' + key + tagged;
                        if (term.length() <= 8000) { terms.add(term); }
                    }
                }
            }
            src.metadata_terms = terms;
        """
    },
}

# Documents not copied, by kind: leases are for writes in flight, which the write block has failed.
_SKIPPED: Mapping[str, dict[str, Any]] = {"store": {"term": {"kind": "lock"}}}
_POLL_S = (0.05, 1.0)  # first and longest pause between two looks at the reindex task


@dataclass(frozen=True)
class Migrated:
    """One kind moved to this Engram's mapping version."""

    kind: str
    from_version: int
    to_version: int
    documents: int
    old_index: str
    old_deleted: bool


@dataclass(frozen=True)
class _Plan:
    kind: str
    alias: str
    old: str
    old_version: int
    new: str


def migrate(
    target: str | OpenSearch,
    options: OpenSearchOptions | None = None,
    *,
    index_prefix: str | None = None,
    delete_old: bool = False,
) -> list[Migrated]:
    """Migrate the store at ``target`` (an ``opensearch(s)://`` URL or a connected client) to
    ``MAPPING_VERSION``; see the module docstring.

    ``options`` None: the ENGRAM_OS_* settings (as ``engram serve`` reads them); ``index_prefix`` names
    the store when it is not the options'. Run it as the service account or an administrator, with the
    store's writers stopped. Returns the kinds migrated now (none when the store is current or has no
    indices yet). ``delete_old`` deletes the old indices after the swap instead of keeping them,
    read-only, for the operator to delete.
    """
    options = options or OpenSearchOptions.from_settings(load_settings())  # as `engram serve` reads them
    names = Names(options.index_prefix if index_prefix is None else index_prefix)
    if not isinstance(target, str):
        return _Migration(target, names).run(delete_old)
    client = connect(parse_url(target, options), options)
    try:
        return _Migration(client, names).run(delete_old)
    finally:
        client.close()


def step_script(kind: str, from_version: int, to_version: int = MAPPING_VERSION) -> str | None:
    """The painless script reindexing a ``kind`` document from ``from_version`` to ``to_version`` runs:
    the steps of every version in between, in order; None when none has one."""
    versions = [v for v in range(from_version + 1, to_version + 1) if kind in STEPS.get(v, {})]
    if not versions:
        return None
    # A function per step (painless declares them first): one step's variables cannot clash with another's.
    functions = [f"void v{v}(Map ctx) {{ {STEPS[v][kind]} }}" for v in versions]
    return "\n".join([*functions, " ".join(f"v{v}(ctx);" for v in versions)])


def alias_version(client: OpenSearch, names: Names, kind: str) -> tuple[str, int] | None:
    """The concrete index behind a kind's alias and its mapping version (``-vN``), None with no alias."""
    alias = names.alias(kind)
    with errors():  # the alias as the index too: /_alias/{name} alone would need aliases/get on '*'
        found = client.indices.get_alias(index=alias, name=alias, ignore=404)
    indices = [name for name in found if name != "error" and name != "status"]
    if not indices:
        return None
    if len(indices) > 1 or not indices[0].startswith(alias + "-v"):
        raise StorageError(f"alias {alias} points at {sorted(indices)}: expected one index {alias}-vN")
    try:
        return indices[0], int(indices[0].rsplit("-v", 1)[1])
    except ValueError:
        raise StorageError(f"alias {alias} points at {indices[0]}: expected {alias}-vN") from None


class _Migration:
    def __init__(self, client: OpenSearch, names: Names) -> None:
        self.client = client
        self.names = names

    def run(self, delete_old: bool) -> list[Migrated]:
        plans = self._plan()
        created: list[_Plan] = []
        blocked: list[_Plan] = []
        counts: dict[str, int] = {}
        try:
            for plan in plans:
                # Created before the old index is blocked: a second migrator fails here, at the create,
                # without having touched the block the first one relies on.
                self._create(plan)
                created.append(plan)
                self._block_writes(plan.old, True)
                blocked.append(plan)
                counts[plan.kind] = self._copy(plan)
            self._swap(plans)
        except BaseException:
            self._roll_back(plans, created, blocked)
            raise
        if delete_old:
            for plan in plans:
                with errors():
                    self.client.indices.delete(index=plan.old)
        return [
            Migrated(p.kind, p.old_version, MAPPING_VERSION, counts[p.kind], p.old, delete_old) for p in plans
        ]

    def _roll_back(self, plans: list[_Plan], created: list[_Plan], blocked: list[_Plan]) -> None:
        """Before the swap nobody reads the new indices: take them back and let writers in again. Best
        effort (the failure that got here is what the caller sees), and nothing at all if the swap was
        applied after all (its answer lost): the new indices are then the store."""
        with contextlib.suppress(StorageError):
            if any(alias_version(self.client, self.names, p.kind) == (p.new, MAPPING_VERSION) for p in plans):
                return
        for plan in created:
            with contextlib.suppress(StorageError), errors():
                self.client.indices.delete(index=plan.new, ignore=404)
        for plan in blocked:
            with contextlib.suppress(StorageError):
                self._block_writes(plan.old, False)

    def _plan(self) -> list[_Plan]:
        """The kinds to migrate; refuses a newer index (no migrating down) before anything changes."""
        found = {kind: alias_version(self.client, self.names, kind) for kind in KINDS}
        newer = {kind: v for kind, (_, v) in _present(found).items() if v > MAPPING_VERSION}
        if newer:
            described = ", ".join(f"{self.names.alias(k)} is at v{v}" for k, v in newer.items())
            raise StorageError(
                f"cannot migrate down: {described}, newer than this Engram's mapping version "
                f"{MAPPING_VERSION}; upgrade Engram instead (nothing was changed)"
            )
        plans = [
            _Plan(kind, self.names.alias(kind), old, version, self.names.concrete(kind))
            for kind, (old, version) in _present(found).items()
            if version < MAPPING_VERSION
        ]
        for plan in plans:
            self._check_target(plan)
        return plans

    def _check_target(self, plan: _Plan) -> None:
        """The new index must not exist yet: another migration is running, or a killed one left it."""
        with errors():
            exists = bool(self.client.indices.exists(index=plan.new))
        if exists:
            raise StorageError(
                f"index {plan.new} exists but alias {plan.alias} points at {plan.old}: another migration "
                f"is running, or one was interrupted. If none is running, delete {plan.new} (DELETE "
                f"/{plan.new}) and migrate again; the old index {plan.old} is untouched but may still "
                "refuse writes (index.blocks.write): to go back to it instead, PUT "
                f'/{plan.old}/_settings {{"index.blocks.write": false}}'
            )

    def _block_writes(self, index: str, blocked: bool) -> None:
        with errors():
            self.client.indices.put_settings(index=index, body={"index.blocks.write": blocked})

    def _create(self, plan: _Plan) -> None:
        with errors():
            settings = self.client.indices.get_settings(index=plan.old)[plan.old]["settings"]["index"]
            mapping = self.client.indices.get_mapping(index=plan.old)[plan.old]["mappings"]
        dim = int(mapping.get("properties", {}).get("embedding", {}).get("dimension", 0))
        if plan.kind == "memories" and dim <= 0:
            raise StorageError(f"index {plan.old} has no embedding dimension to carry over")
        shards, replicas = int(settings["number_of_shards"]), int(settings["number_of_replicas"])
        with errors():
            self.client.indices.create(index=plan.new, body=index_body(plan.kind, dim, shards, replicas))

    def _copy(self, plan: _Plan) -> int:
        """Reindex the old index into the new one; the number of documents copied, checked."""
        skipped = _SKIPPED.get(plan.kind)
        query = {"bool": {"must_not": [skipped]}} if skipped else {"match_all": {}}
        with errors():
            self.client.indices.refresh(index=plan.old)  # the copy reads what a search sees: all of it
            expected = int(self.client.count(index=plan.old, body={"query": query})["count"])
        body: dict[str, Any] = {
            "source": {"index": plan.old, "query": query},
            "dest": {"index": plan.new, "op_type": "create"},
        }
        script = step_script(plan.kind, plan.old_version)
        if script is not None:
            body["script"] = {"lang": "painless", "source": script}
        with errors():
            task = self.client.reindex(body=body, wait_for_completion=False, refresh=True, slices="auto")
        result = self._wait(str(task["task"]))
        failures = result.get("failures") or []
        if failures or result.get("timed_out"):
            raise StorageError(f"reindexing {plan.old} into {plan.new} failed: {failures[:3] or 'timed out'}")
        with errors():
            copied = int(self.client.count(index=plan.new)["count"])
        if copied != expected:
            raise StorageError(
                f"reindexing {plan.old} into {plan.new} copied {copied} of {expected} documents"
            )
        return copied

    def _wait(self, task_id: str) -> dict[str, Any]:
        pause = _POLL_S[0]
        while True:
            with errors():
                found = self.client.tasks.get(task_id=task_id)
            if found.get("completed"):
                if "error" in found:
                    raise StorageError(f"reindex task {task_id} failed: {found['error']}")
                response: dict[str, Any] = found.get("response", {})
                return response
            time.sleep(pause)
            pause = min(pause * 2, _POLL_S[1])

    def _swap(self, plans: list[_Plan]) -> None:
        """Every migrated alias moved in one request: the cluster applies it atomically."""
        if not plans:
            return
        actions: list[dict[str, Any]] = []
        for plan in plans:
            actions += [
                {"remove": {"index": plan.old, "alias": plan.alias}},
                {"add": {"index": plan.new, "alias": plan.alias}},
            ]
        with errors():
            self.client.indices.update_aliases(body={"actions": actions})


def _present(found: Mapping[str, tuple[str, int] | None]) -> dict[str, tuple[str, int]]:
    return {kind: value for kind, value in found.items() if value is not None}
