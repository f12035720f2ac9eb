"""Connecting to OpenSearch (opensearch-py), mapping its errors, and the per-tenant write lease.

``opensearch://HOST:PORT`` or ``opensearchs://HOST:PORT`` (TLS); credentials from the URL
(``opensearchs://USER:PASSWORD@HOST:PORT``) or the options (ENGRAM_OS_USER / ENGRAM_OS_PASSWORD).
Several nodes, comma-separated (``opensearchs://svc:...@node1:9200,node2:9200,node3:9200``): the client
spreads requests over them, and a read that cannot reach one node (refused, reset) or gets 502/503/504
is sent again to another, up to ``MAX_RETRIES`` times; a node that failed is left out for a while
(opensearch-py's connection pool). Name every node the service may reach, or a load balancer.

A write (``_bulk``, a document's index/create/update/delete) is sent once, never again by the client:
a 502 from a proxy may come after the node applied it, and a resent ``create`` or ``if_seq_no`` write
would then fail with 409 for what the first send did (``_ReadRetryTransport``). Its failure reaches the
unit of work, which settles what landed (``_unit.UnitOfWork.commit``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from engram.errors import ConfigError, Conflict, StorageError, StoreBusy
from engram.settings import (
    DEFAULT_OS_INDEX_PREFIX,
    DEFAULT_OS_REFRESH,
    DEFAULT_OS_REPLICAS,
    DEFAULT_OS_SHARDS,
    DEFAULT_OS_TOKEN_CACHE_MB,
    EngramSettings,
    OsRefresh,
)

if TYPE_CHECKING:  # opensearch-py is an optional dependency (the opensearch extra)
    from opensearchpy import OpenSearch

Refresh = OsRefresh
LEASE_TTL_MS = 60_000  # a writer that died holding a tenant's lease blocks its writes this long at most
DEFAULT_LEASE_WAIT_S = 30.0  # how long a write waits for another writer of the same tenant
IMPERSONATE = "opendistro_security_impersonate_as"
MAX_RETRIES = 3  # reads only: another node per retry, a cluster that lost one node of three still answers
Settle = Callable[[str, dict[str, Any]], None]  # (owner, journal): complete or roll back a unit left
_READS = ("/_search", "/_msearch", "/_mget", "/_count")  # POSTed, yet safe to send again
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OpenSearchOptions:
    """How to reach the cluster and lay the store out on it (settings: ENGRAM_OS_*)."""

    user: str | None = None
    password: str | None = None
    ca_certs: str | None = None
    index_prefix: str = DEFAULT_OS_INDEX_PREFIX
    shards: int = DEFAULT_OS_SHARDS
    replicas: int = DEFAULT_OS_REPLICAS
    refresh: Refresh = DEFAULT_OS_REFRESH
    token_cache_mb: int = DEFAULT_OS_TOKEN_CACHE_MB

    @classmethod
    def from_settings(cls, settings: EngramSettings) -> OpenSearchOptions:
        """The options the ENGRAM_OS_* settings give."""
        return cls(
            user=settings.os_user,
            password=settings.os_password.get_secret_value() if settings.os_password else None,
            ca_certs=str(settings.os_ca_certs) if settings.os_ca_certs else None,
            index_prefix=settings.os_index_prefix,
            shards=settings.os_shards,
            replicas=settings.os_replicas,
            refresh=settings.os_refresh,
            token_cache_mb=settings.os_token_cache_mb,
        )


@dataclass(frozen=True)
class Endpoint:
    hosts: tuple[tuple[str, int], ...]
    tls: bool
    user: str | None
    password: str | None

    @property
    def host(self) -> str:
        return self.hosts[0][0]

    @property
    def port(self) -> int:
        return self.hosts[0][1]

    @property
    def label(self) -> str:
        named = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.hosts)
        return f"{'opensearchs' if self.tls else 'opensearch'}://{named}"


def parse_url(url: str, options: OpenSearchOptions) -> Endpoint:
    """The endpoint of an ``opensearch(s)://`` URL (one host or several, comma-separated, each with its
    port or 9200); URL credentials win over the options'."""
    parts = urlsplit(url)
    if parts.scheme not in ("opensearch", "opensearchs") or not parts.netloc.rpartition("@")[2]:
        raise ConfigError(
            f"not an OpenSearch URL: expected opensearch(s)://HOST:PORT[,HOST:PORT...], got {parts.scheme}://..."
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError("an OpenSearch URL names hosts and ports only; set ENGRAM_OS_INDEX_PREFIX instead")
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    hosts = tuple(_host(part) for part in hostlist.split(","))
    url_user, has_password, url_password = userinfo.partition(":")
    user = unquote(url_user) if url_user else options.user
    password = unquote(url_password) if has_password and url_password else options.password
    return Endpoint(hosts, parts.scheme == "opensearchs", user, password)


def _host(part: str) -> tuple[str, int]:
    one = urlsplit(f"//{part.strip()}")
    if not one.hostname or one.username is not None:
        raise ConfigError(f"bad host in the OpenSearch URL: {part.strip()!r} (expected HOST or HOST:PORT)")
    try:
        return one.hostname, one.port or 9200
    except ValueError as exc:
        raise ConfigError(f"bad port in the OpenSearch URL: {exc}") from None


def is_write(method: str, url: str) -> bool:
    """Whether a request may change something: anything but GET/HEAD and the POSTed reads."""
    if method in ("GET", "HEAD"):
        return False
    return not (method == "POST" and url.split("?", 1)[0].endswith(_READS))


@functools.cache
def _transport_class() -> type:
    from opensearchpy import Transport

    class ReadRetryTransport(Transport):
        """opensearch-py's transport, resending reads only (``max_retries`` reads 0 during a write)."""

        _once = threading.local()

        @property
        def max_retries(self) -> int:
            return 0 if getattr(self._once, "on", False) else self._max_retries

        @max_retries.setter
        def max_retries(self, value: int) -> None:
            self._max_retries = value

        def perform_request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if not is_write(method, url):
                return super().perform_request(method, url, *args, **kwargs)
            self._once.on = True
            try:
                return super().perform_request(method, url, *args, **kwargs)
            finally:
                self._once.on = False

    return ReadRetryTransport


def connect(endpoint: Endpoint, options: OpenSearchOptions, pool_size: int = 16) -> OpenSearch:
    from opensearchpy import OpenSearch

    return OpenSearch(
        transport_class=_transport_class(),
        hosts=[{"host": host, "port": port} for host, port in endpoint.hosts],
        http_auth=(endpoint.user, endpoint.password) if endpoint.user else None,
        use_ssl=endpoint.tls,
        verify_certs=endpoint.tls,
        ca_certs=options.ca_certs if endpoint.tls else None,
        ssl_show_warn=False,
        timeout=30,
        maxsize=pool_size,
        max_retries=MAX_RETRIES,
    )


@contextlib.contextmanager
def errors() -> Iterator[None]:
    """Map the driver's errors: a version conflict is Conflict, anything else StorageError."""
    from opensearchpy import exceptions

    try:
        yield
    except exceptions.ConflictError as exc:
        raise Conflict(f"changed meanwhile or already there: {_reason(exc)}") from exc
    except exceptions.ConnectionError as exc:
        raise StorageError(f"cannot reach OpenSearch: {exc.error}") from exc
    except exceptions.TransportError as exc:
        if exc.status_code == 429:
            raise StoreBusy(f"OpenSearch is busy (429): {_reason(exc)}") from exc
        raise StorageError(f"OpenSearch error {exc.status_code}: {_reason(exc)}") from exc


def _reason(exc: Any) -> str:
    info = exc.info if isinstance(exc.info, dict) else {}
    error = info.get("error")
    return str(error.get("reason") if isinstance(error, dict) else error or exc.error)


def as_user(user: str) -> dict[str, str]:
    """The header that makes the service account's request run as a tenant's user (and its roles)."""
    return {IMPERSONATE: user}


class Lease:
    """A held lease: its document's version, re-stamped by ``confirm``."""

    def __init__(self, leases: Leases, doc_id: str, seq: tuple[int, int], owner: str) -> None:
        self.leases = leases
        self.doc_id = doc_id
        self.seq = seq
        self.owner = owner
        self.stamped = time.monotonic()
        self.unit: dict[str, Any] | None = None  # the journal of the unit in progress (``_journal``)
        self.keep = False  # a unit that could not take back its writes: its journal stays for recovery

    @property
    def age_ms(self) -> float:
        return (time.monotonic() - self.stamped) * 1000

    def confirm(self, unit: dict[str, Any] | None = None) -> None:
        """Check the lease is still ours and stamp it again (a new ``expires_ms``), in one write at its
        version; Conflict if it expired and another writer took it (or dropped it) meanwhile. With
        ``unit``, the lease document also becomes that unit's journal (``_journal``) until released."""
        from opensearchpy import exceptions

        if unit is not None:
            self.unit = unit
        body: dict[str, Any] = {
            "kind": "lock",
            "owner": self.owner,
            "expires_ms": int(time.time() * 1000) + LEASE_TTL_MS,
        }
        if self.unit is not None:
            body["unit"] = self.unit
        try:
            with errors():
                done = self.leases.client.index(
                    index=self.leases.index,
                    id=self.doc_id,
                    body=body,
                    if_seq_no=self.seq[0],
                    if_primary_term=self.seq[1],
                    refresh="false",
                )
        except Conflict as exc:
            if isinstance(exc.__cause__, exceptions.ConflictError):
                raise Conflict("this write outlived its lease and another writer took it") from exc
            raise
        self.seq = int(done["_seq_no"]), int(done["_primary_term"])
        self.stamped = time.monotonic()

    def renew_if_old(self, fraction: float = 0.5) -> None:
        """``confirm`` once ``fraction`` of the lease's time has gone (a unit of work that runs long)."""
        if self.age_ms > LEASE_TTL_MS * fraction:
            self.confirm()


class Leases:
    """One writer per tenant at a time: a lease document in the store index, created with
    ``op_type=create`` (the server refuses a second one) and deleted when the write ends. It stands in
    for the SQL backends' row locks: a rule reads, decides, then writes without another writer of the
    tenant in between; the writes still carry ``if_seq_no`` against anything else.

    A lease expires ``LEASE_TTL_MS`` after it was stamped (wall clock): a unit of work stamps it again
    (``Lease.confirm``) before its second bulk, and before its first once half that time has gone, and
    gives up with Conflict if another writer took it over. A release that fails (the connection dropped)
    is tried once more, then logged, never raised over the write's result; this store then takes that
    lease back at its next write of the tenant rather than wait for it to expire.
    """

    def __init__(self, client: OpenSearch, index: str, settle: Settle) -> None:
        self.client = client
        self.index = index
        self.settle = settle  # completes or rolls back the unit a lease's journal names
        self._unreleased: dict[str, tuple[int, int]] = {}  # lease id -> version this store left behind
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self, owner: str, max_wait_s: float | None) -> Iterator[Lease]:
        doc_id = f"lock:{owner or '*catalog*'}"
        seq = self._acquire(doc_id, owner, DEFAULT_LEASE_WAIT_S if max_wait_s is None else max_wait_s)
        lease = Lease(self, doc_id, seq, owner)
        try:
            yield lease
        finally:
            if lease.keep:  # left for the next write of the tenant (or the next open) to settle
                with self._lock:
                    self._unreleased[lease.doc_id] = lease.seq
            else:
                self._release(lease)

    def settle_left(self) -> list[str]:
        """Settle the journals of units whose writer died (their lease expired) and drop those leases;
        the tenants whose unit was settled."""
        from opensearchpy import exceptions

        with errors():  # leases are written without a refresh: a search sees them after one
            self.client.indices.refresh(index=self.index)
            found = self.client.search(
                index=self.index,
                body={"size": 1000, "query": {"term": {"kind": "lock"}}, "seq_no_primary_term": True},
            )
        settled = []
        now_ms = int(time.time() * 1000)
        for hit in found["hits"]["hits"]:
            held = hit["_source"]
            if held.get("unit") is None or held["expires_ms"] >= now_ms:
                continue
            self.settle(held["owner"], held["unit"])
            with errors(), contextlib.suppress(exceptions.ConflictError, exceptions.NotFoundError):
                self.client.delete(
                    index=self.index,
                    id=hit["_id"],
                    if_seq_no=hit["_seq_no"],
                    if_primary_term=hit["_primary_term"],
                    refresh="true",
                )
            settled.append(held["owner"])
        return settled

    def _release(self, lease: Lease) -> None:
        for attempt in (1, 2):
            try:
                with contextlib.suppress(Conflict), errors():  # expired and taken over: not ours to drop
                    self.client.delete(
                        index=self.index,
                        id=lease.doc_id,
                        if_seq_no=lease.seq[0],
                        if_primary_term=lease.seq[1],
                        refresh="false",
                    )
                return
            except Exception as exc:  # the write is done; its lease only delays others
                if attempt == 2:
                    _log.warning(
                        "could not release the write lease %s (%s): taken back later", lease.doc_id, exc
                    )
        with self._lock:
            self._unreleased[lease.doc_id] = lease.seq

    def _acquire(self, doc_id: str, owner: str, wait_s: float) -> tuple[int, int]:
        from opensearchpy import exceptions

        deadline = time.monotonic() + wait_s
        pause = 0.002
        while True:
            now_ms = int(time.time() * 1000)
            body = {"kind": "lock", "owner": owner, "expires_ms": now_ms + LEASE_TTL_MS}
            with errors():
                try:
                    done = self.client.create(index=self.index, id=doc_id, body=body, refresh="false")
                    with self._lock:
                        self._unreleased.pop(doc_id, None)
                    return int(done["_seq_no"]), int(done["_primary_term"])
                except exceptions.ConflictError:
                    held = self.client.get(index=self.index, id=doc_id, ignore=404)
            if not held.get("found"):
                continue
            version = (held["_seq_no"], held["_primary_term"])
            with self._lock:
                ours = self._unreleased.get(doc_id) == version  # a release of ours that failed
            if ours or held["_source"]["expires_ms"] < now_ms:  # its writer died or it is ours: take over
                if held["_source"].get("unit") is not None:  # after settling the unit it left
                    self.settle(owner, held["_source"]["unit"])
                with errors(), contextlib.suppress(exceptions.ConflictError, exceptions.NotFoundError):
                    self.client.delete(
                        index=self.index,
                        id=doc_id,
                        if_seq_no=version[0],
                        if_primary_term=version[1],
                        refresh="false",
                    )
                continue
            if time.monotonic() >= deadline:
                raise StoreBusy("another writer of this tenant holds its lease")
            time.sleep(pause * (1 + random.random()))
            pause = min(pause * 2, 0.05)
