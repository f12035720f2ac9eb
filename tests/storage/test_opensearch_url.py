"""OpenSearch store URLs: one node or several (comma-separated), credentials, refusals. No server needed."""

from __future__ import annotations

import pytest

from engram.errors import ConfigError
from engram.storage.opensearch._client import OpenSearchOptions, connect, parse_url

OPTIONS = OpenSearchOptions(user="svc", password="opt-pass")


def test_one_host_with_and_without_port() -> None:
    endpoint = parse_url("opensearchs://db.example.com:9243", OPTIONS)
    assert endpoint.hosts == (("db.example.com", 9243),)
    assert (endpoint.host, endpoint.port, endpoint.tls) == ("db.example.com", 9243, True)
    assert (endpoint.user, endpoint.password) == ("svc", "opt-pass")
    assert parse_url("opensearch://localhost", OPTIONS).hosts == (("localhost", 9200),)
    assert parse_url("opensearch://localhost/", OPTIONS).tls is False


def test_several_hosts_comma_separated() -> None:
    endpoint = parse_url("opensearchs://127.0.0.1:9201,127.0.0.1:9202, node3", OPTIONS)
    assert endpoint.hosts == (("127.0.0.1", 9201), ("127.0.0.1", 9202), ("node3", 9200))
    assert endpoint.label == "opensearchs://127.0.0.1:9201,127.0.0.1:9202,node3:9200"
    ipv6 = parse_url("opensearch://[::1]:9200,[fe80::2]:9300", OPTIONS)
    assert ipv6.hosts == (("::1", 9200), ("fe80::2", 9300))
    assert ipv6.label == "opensearch://[::1]:9200,[fe80::2]:9300"


def test_url_credentials_win_and_are_never_in_the_label() -> None:
    endpoint = parse_url("opensearchs://app%40x:p%3Ass@a:1,b:2", OPTIONS)
    assert (endpoint.user, endpoint.password) == ("app@x", "p:ss")
    assert endpoint.hosts == (("a", 1), ("b", 2))
    assert "p:ss" not in endpoint.label and "app" not in endpoint.label
    only_user = parse_url("opensearchs://reader@a:1", OPTIONS)
    assert (only_user.user, only_user.password) == ("reader", "opt-pass")


@pytest.mark.parametrize(
    "url",
    [
        "http://a:9200",
        "opensearchs://",
        "opensearchs://svc:pw@",
        "opensearchs://a:1,,b:2",
        "opensearchs://a:1,:9200",
        "opensearchs://a:notaport",
        "opensearchs://a:1,b:99999",
        "opensearchs://a:1/engram",
        "opensearchs://a:1?prefix=x",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_url(url, OPTIONS)


def test_the_client_knows_every_node() -> None:
    pytest.importorskip("opensearchpy")
    client = connect(parse_url("opensearch://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", OPTIONS), OPTIONS)
    try:
        connections = client.transport.connection_pool.connections
        assert sorted(c.host for c in connections) == [f"http://127.0.0.1:{p}" for p in (1, 2, 3)]
        assert client.transport.max_retries >= 2  # a request refused by one node goes to another
    finally:
        client.close()


def test_a_store_whose_first_node_is_down_works_through_the_next(opensearch_node, os_prefixes, embedder):
    """The test node named second, after a port nothing listens on: every request that tries the dead
    address first is sent again to the live one (the fault run with three JVMs is bench/os_fault.py)."""
    from engram import Engram
    from engram.storage.opensearch import OpenSearchStore
    from tests.conftest import opensearch_options
    from tests.opensearch_node.node import _free_ports

    options = {
        k.removeprefix("os_"): v for k, v in opensearch_options(opensearch_node, os_prefixes()).items()
    }
    url = f"opensearchs://127.0.0.1:{_free_ports(1)[0]},{opensearch_node.address}"
    store = OpenSearchStore(url, OpenSearchOptions(**options))  # type: ignore[arg-type]
    assert len(store.endpoint.hosts) == 2
    with Engram(store, embedder, None) as eng:
        sarah = eng.for_user("sarah")
        written = [sarah.write(f"sarah's fact number {i} about failover").id for i in range(5)]
        assert {h.memory.id for h in sarah.recall("failover facts", k=10)} == set(written)
