"""A real OpenSearch 2.19 for the test suite, from Maven Central jars (no tarball, no Docker): one node
for the suite, or a cluster of several on 127.0.0.1 for the fault benchmark (bench/os_fault.py).

``ensure_dist()`` fetches the jars with ``mvn`` (cached in ~/.m2, then copied once into a cache folder)
and compiles the launcher (``OsNode.java``) with ``javac``; ``start_node()`` writes TLS certificates
(openssl) and the security plugin's configuration, starts the node on 127.0.0.1 (HTTPS, security on)
and waits for green, within a deadline. ``start_cluster()`` starts N such nodes (one JVM each, the same
certificates and security configuration, discovery by seed hosts instead of single-node) and waits until
all have joined and the cluster is green. ``python -m tests.opensearch_node.node fetch`` does the fetch
alone (.ci/run calls it). A missing tool fails with a message naming what to install.

The node's users: ``admin`` (all_access: tests set up and inspect with it) and ``svc``, the service
account Engram runs as: all_access for its own indices and the security REST API (it provisions the
tenants' users and its DLS role), and allowed to impersonate only Engram's tenant users
(``engram_u_*``, ``engram_h_*``, ``engram_catalog``), whose roles (DLS on ``owner``) then apply. The
narrower accounts of docs/opensearch.md are named in opensearch.yml (static settings) and made by
tests/storage/test_opensearch_service_role.py: ``NARROW_ROLE`` is in roles_enabled; ``REST_ADMIN_ROLE``
holds restapi:admin/* instead, which only a security admin may grant (not all_access): made here.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
VERSION = "2.19.4"
KNN = "org.opensearch.plugin:opensearch-knn:2.19.1.0:zip"
SECURITY = "org.opensearch.plugin:opensearch-security:2.19.4.0:zip"
HEAP = "512m"  # the CI machine has 2 shared cores and little memory to spare
CLUSTER_HEAP = "384m"  # each node of a cluster (three JVMs on the same small machine)
START_DEADLINE_S = 180.0  # a cold JVM on a loaded 2-core machine; typically ~20 s
TOOLS = {
    "java": "a Java 17+ runtime (Debian: apt-get install openjdk-17-jdk-headless)",
    "javac": "a Java 17+ JDK (Debian: apt-get install openjdk-17-jdk-headless)",
    "mvn": "Apache Maven (Debian: apt-get install maven)",
    "openssl": "OpenSSL (Debian: apt-get install openssl)",
}
# bcrypt hashes made with the security plugin's own Hasher (org.opensearch.security.tools.Hasher)
USERS = {
    "admin": ("Admin-pass-1", "$2y$12$yqoJWRuZgm2sBtCMQkfUeefSwXmlkxxu/rfcrRexLTMp9IWMv2JhO"),
    "svc": ("Svc-pass-1", "$2y$12$FosxtnguFNfFriVOwSOCPeybQkyrkV7pRqI88mEZPd5bZUijPZEgS"),
}

NARROW_ROLE, NARROW_ACCOUNT = "engram_service", "engram_svc"
REST_ADMIN_ROLE, REST_ADMIN_ACCOUNT = "engram_restapi", "engram_svc_restapi"
_TENANTS = '["engram_u_*", "engram_h_*", "engram_catalog"]'  # who the service accounts may impersonate
_REST_ADMIN_PERMISSIONS = [f"restapi:admin/{e}" for e in ("internalusers", "roles", "rolesmapping")]


class NodeSetupError(RuntimeError):
    """The node cannot be built or started here (a tool missing, a fetch failed, a start timed out)."""


def missing_tools() -> list[str]:
    return [f"{tool}: install {what}" for tool, what in TOOLS.items() if shutil.which(tool) is None]


def cache_dir() -> Path:
    """Where the fetched jars and the compiled launcher live, keyed by the pom and the launcher source."""
    digest = hashlib.sha256((HERE / "pom.xml").read_bytes() + (HERE / "OsNode.java").read_bytes())
    root = Path(os.environ.get("ENGRAM_TEST_OS_CACHE", Path.home() / ".cache" / "engram-test-opensearch"))
    return root / f"{VERSION}-{digest.hexdigest()[:12]}"


def ensure_dist() -> Path:
    """The node's jars (lib/, sec/) and launcher, fetched and compiled once; later calls return at once."""
    missing = missing_tools()
    if missing:
        raise NodeSetupError("the OpenSearch tests need: " + "; ".join(missing))
    dist = cache_dir()
    if (dist / "complete").exists():
        return dist
    dist.mkdir(parents=True, exist_ok=True)
    with (dist.parent / f"{dist.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two sessions fetching at once: one fetches, one waits
        if not (dist / "complete").exists():
            _fetch(dist)
    return dist


def _run(args: list[str], cwd: Path) -> None:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NodeSetupError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def _fetch(dist: Path) -> None:
    """fetch.sh of the shared recipe: core + modules + k-NN into lib/, the security plugin into sec/."""
    for sub in ("lib", "sec", "zips", "launcher"):
        shutil.rmtree(dist / sub, ignore_errors=True)
        (dist / sub).mkdir()
    shutil.copy(HERE / "pom.xml", dist / "pom.xml")
    mvn = ["mvn", "-q", "-B"]
    _run([*mvn, "dependency:copy-dependencies", "-DoutputDirectory=lib", "-DincludeScope=runtime"], dist)
    for artifact in (KNN, SECURITY):
        _run([*mvn, "dependency:copy", f"-Dartifact={artifact}", "-DoutputDirectory=zips"], dist)
    # the k-NN zip: only its own jar (its bundled dependencies are in the pom)
    with zipfile.ZipFile(next((dist / "zips").glob("opensearch-knn-*.zip"))) as knn:
        (jar,) = [n for n in knn.namelist() if re.fullmatch(r"opensearch-knn-[0-9.]+\.jar", n)]
        (dist / "lib" / jar).write_bytes(knn.read(jar))
    with zipfile.ZipFile(next((dist / "zips").glob("opensearch-security-*.zip"))) as security:
        security.extractall(dist / "zips" / "security")
    have = {_artifact(p.name) for p in (dist / "lib").glob("*.jar")}
    for jar in (dist / "zips" / "security").glob("*.jar"):
        if _artifact(jar.name) not in have:
            shutil.copy(jar, dist / "sec" / jar.name)
    shutil.copytree(dist / "zips" / "security" / "config", dist / "sec" / "config-templates")
    shutil.rmtree(dist / "zips")
    _run(["javac", "-cp", str(dist / "lib") + "/*", "-d", "launcher", str(HERE / "OsNode.java")], dist)
    (dist / "complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))


def _artifact(jar: str) -> str:
    """A jar's artifact name without its version: guava-33.4.0-jre.jar -> guava."""
    parts = jar.removesuffix(".jar").split("-")
    for i, part in enumerate(parts):
        if part[:1].isdigit():
            return "-".join(parts[:i])
    return "-".join(parts)


@dataclass
class OpenSearchNode:
    """A running node: its HTTPS address, CA certificate, and raw JSON requests for tests."""

    proc: subprocess.Popen[bytes]
    home: Path
    port: int
    ca: Path
    startup_s: float

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        user: str = "admin",
        password: str | None = None,
        impersonate: str | None = None,
        ndjson: bool = False,
    ) -> tuple[int, Any]:
        """(status, decoded JSON body) of one raw HTTPS request, as ``user`` (an impersonation with svc)."""
        headers = {
            "Authorization": "Basic "
            + base64.b64encode(f"{user}:{password or USERS[user][0]}".encode()).decode()
        }
        if impersonate:
            headers["opendistro_security_impersonate_as"] = impersonate
        data = None
        if body is not None:
            if ndjson:
                data = ("\n".join(json.dumps(x) for x in body) + "\n").encode()
                headers["Content-Type"] = "application/x-ndjson"
            else:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            f"https://{self.address}{path}", data=data, method=method, headers=headers
        )
        context = ssl.create_default_context(cafile=str(self.ca))
        try:
            with urllib.request.urlopen(request, timeout=60, context=context) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw or b"null")
        except json.JSONDecodeError:
            return status, raw.decode(errors="replace")

    def stop(self, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the shutdown hook closes the node cleanly
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdin:
            self.proc.stdin.close()

    def kill(self) -> None:
        """SIGKILL: the node dies at once, nothing closed cleanly (a crashed machine, to its peers)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdin:
            self.proc.stdin.close()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class OpenSearchCluster:
    """Nodes started by ``start_cluster``: one JVM each on 127.0.0.1, one cluster."""

    nodes: list[OpenSearchNode]
    startup_s: float

    @property
    def ca(self) -> Path:
        return self.nodes[0].ca

    def live(self) -> list[OpenSearchNode]:
        return [n for n in self.nodes if n.alive]

    def url(self, scheme: str = "opensearchs") -> str:
        """An Engram store URL naming every node: ``opensearchs://127.0.0.1:P0,127.0.0.1:P1,...``."""
        return f"{scheme}://" + ",".join(n.address for n in self.nodes)

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        """A raw request through the first node still running."""
        live = self.live()
        if not live:
            raise NodeSetupError("no node of the cluster is running")
        return live[0].request(method, path, body, **kwargs)

    def health(self, wait_for: str | None = None, timeout_s: int = 5, nodes: int | None = None) -> Any:
        params = [f"timeout={timeout_s}s"]
        if wait_for:
            params.append(f"wait_for_status={wait_for}")
        if nodes is not None:
            params.append(f"wait_for_nodes={nodes}")
        return self.request("GET", "/_cluster/health?" + "&".join(params))[1]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


_CERTS = """
set -e
openssl genrsa -out root-ca-key.pem 2048 2>/dev/null
openssl req -new -x509 -sha256 -key root-ca-key.pem -subj "/C=XX/O=Test/OU=Test/CN=test-root-ca" \
    -out root-ca.pem -days 3650
openssl genrsa -out node-key-tmp.pem 2048 2>/dev/null
openssl pkcs8 -inform PEM -outform PEM -in node-key-tmp.pem -topk8 -nocrypt -out node-key.pem
openssl req -new -key node-key.pem -subj "/C=XX/O=Test/OU=Test/CN=node-0" -out node.csr
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > node.ext
openssl x509 -req -in node.csr -CA root-ca.pem -CAkey root-ca-key.pem -CAcreateserial -sha256 \
    -out node.pem -days 3650 -extfile node.ext 2>/dev/null
rm -f node-key-tmp.pem node.csr node.ext root-ca.srl
"""

_NODE_SETTINGS = f"""
plugins.security.ssl.transport.pemcert_filepath: node.pem
plugins.security.ssl.transport.pemkey_filepath: node-key.pem
plugins.security.ssl.transport.pemtrustedcas_filepath: root-ca.pem
plugins.security.ssl.transport.enforce_hostname_verification: false
plugins.security.ssl.http.enabled: true
plugins.security.ssl.http.pemcert_filepath: node.pem
plugins.security.ssl.http.pemkey_filepath: node-key.pem
plugins.security.ssl.http.pemtrustedcas_filepath: root-ca.pem
plugins.security.allow_default_init_securityindex: true
plugins.security.authcz.admin_dn: ["CN=admin,OU=Test,O=Test,C=XX"]
plugins.security.nodes_dn: ["CN=node-0,OU=Test,O=Test,C=XX"]
plugins.security.audit.type: noop
plugins.security.restapi.roles_enabled: ["all_access", "{NARROW_ROLE}"]
plugins.security.restapi.admin.enabled: true
plugins.security.system_indices.enabled: true
plugins.security.authcz.rest_impersonation_user:
  {{svc: {_TENANTS}, {NARROW_ACCOUNT}: {_TENANTS}, {REST_ADMIN_ACCOUNT}: {_TENANTS}}}
"""

_AUTH = """
_meta: {type: "config", config_version: 2}
config:
  dynamic:
    http: {anonymous_auth_enabled: false}
    authc:
      basic_internal_auth_domain:
        http_enabled: true
        transport_enabled: true
        order: 0
        http_authenticator: {type: basic, challenge: true}
        authentication_backend: {type: intern}
"""


_CERT_FILES = ("root-ca.pem", "root-ca-key.pem", "node.pem", "node-key.pem")


def _write_config(dist: Path, config: Path, certs_from: Path | None = None, cluster: str = "") -> None:
    """A node's config folder: new TLS certificates (or a copy of ``certs_from``'s: every node of a
    cluster trusts the same CA and presents the same node certificate), the node settings (plus
    ``cluster``'s discovery settings) and the security plugin's configuration."""
    if certs_from is None:
        subprocess.run(["sh", "-c", _CERTS], cwd=config, check=True)
    else:
        for name in _CERT_FILES:
            shutil.copy(certs_from / name, config / name)
    (config / "opensearch.yml").write_text(textwrap.dedent(_NODE_SETTINGS) + cluster)
    security = config / "opensearch-security"
    security.mkdir(exist_ok=True)
    templates = dist / "sec" / "config-templates"
    for name in ("action_groups.yml", "tenants.yml", "nodes_dn.yml", "allowlist.yml", "audit.yml"):
        shutil.copy(templates / name, security / name)
    (security / "config.yml").write_text(_AUTH)
    users = ['_meta: {type: "internalusers", config_version: 2}']
    users += [
        f'{name}:\n  hash: "{hashed}"\n  backend_roles: ["admin"]' for name, (_, hashed) in USERS.items()
    ]
    (security / "internal_users.yml").write_text("\n".join(users) + "\n")
    (security / "roles.yml").write_text(
        '_meta: {type: "roles", config_version: 2}\n'
        f"{REST_ADMIN_ROLE}: {{cluster_permissions: {json.dumps(_REST_ADMIN_PERMISSIONS)}}}\n"
    )
    (security / "roles_mapping.yml").write_text(
        '_meta: {type: "rolesmapping", config_version: 2}\nall_access: {backend_roles: ["admin"]}\n'
        f'{REST_ADMIN_ROLE}: {{users: ["{REST_ADMIN_ACCOUNT}"]}}\n'
    )


def start_node(home: Path, deadline_s: float = START_DEADLINE_S, heap: str = HEAP) -> OpenSearchNode:
    """Start a node with security and HTTPS in ``home`` and wait until it is green (NodeSetupError past
    ``deadline_s``). The node also stops when this process dies (its stdin closes)."""
    dist = ensure_dist()
    start = time.monotonic()
    config = home / "config"
    config.mkdir(parents=True, exist_ok=True)
    _write_config(dist, config)
    proc = _launch(dist, home, heap, [], 0)
    try:
        node = _await_ready(proc, home, start, deadline_s)
        _await_health(node, "wait_for_status=green", start, deadline_s)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    node.startup_s = time.monotonic() - start
    return node


def start_cluster(
    home: Path, size: int = 3, deadline_s: float = 2 * START_DEADLINE_S, heap: str = CLUSTER_HEAP
) -> OpenSearchCluster:
    """Start ``size`` nodes (``home``/node-0 ...) that form one cluster on 127.0.0.1: fixed transport
    ports, each node seeded with all of them, all of them cluster-manager eligible (and data nodes);
    waits until every node has joined and the cluster is green. The same security setup as
    ``start_node`` (the same users; the security index is replicated to every node)."""
    dist = ensure_dist()
    start = time.monotonic()
    ports = _free_ports(size)
    names = [f"node-{i}" for i in range(size)]
    discovery = (
        f"discovery.seed_hosts: {json.dumps([f'127.0.0.1:{p}' for p in ports])}\n"
        f"cluster.initial_cluster_manager_nodes: {json.dumps(names)}\n"
    )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, name in enumerate(names):
            config = home / name / "config"
            config.mkdir(parents=True, exist_ok=True)
            _write_config(dist, config, None if i == 0 else home / names[0] / "config", discovery)
            extra = [f"-Dos.setting.node.name={name}", "-Dos.setting.discovery.type=zen"]
            procs.append(_launch(dist, home / name, heap, extra, ports[i]))
        nodes = [
            _await_ready(proc, home / name, start, deadline_s)
            for proc, name in zip(procs, names, strict=True)
        ]
        _await_health(nodes[0], f"wait_for_status=green&wait_for_nodes={size}", start, deadline_s)
    except BaseException:
        for proc in procs:
            proc.kill()
            proc.wait()
        raise
    for node in nodes:
        node.startup_s = time.monotonic() - start
    return OpenSearchCluster(nodes, time.monotonic() - start)


def _free_ports(count: int) -> list[int]:
    """Ports free now on 127.0.0.1 (a node binds them a moment later: a race nobody else runs here)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def _launch(
    dist: Path, home: Path, heap: str, extra: list[str], transport_port: int
) -> subprocess.Popen[bytes]:
    jvm = [f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dos.loglevel=warn"]
    classpath = f"{dist}/lib/*:{dist}/sec/*:{dist}/launcher"
    args = ["java", *jvm, *extra, "-Dos.security=true", "-cp", classpath, "OsNode", str(home), "0"]
    with (home / "node.log").open("wb") as out:
        return subprocess.Popen(
            [*args, str(transport_port)], stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT
        )


def _await_ready(
    proc: subprocess.Popen[bytes], home: Path, start: float, deadline_s: float
) -> OpenSearchNode:
    """The node once its HTTP port is bound (the launcher writes it to ``home``/ready)."""
    log = home / "node.log"
    ready = home / "ready"
    while not ready.exists():
        if proc.poll() is not None:
            raise NodeSetupError(f"OpenSearch exited with {proc.returncode}; see {log}")
        _check_deadline(start, deadline_s, log)
        time.sleep(0.2)
    return OpenSearchNode(proc, home, int(ready.read_text()), home / "config" / "root-ca.pem", 0.0)


def _await_health(node: OpenSearchNode, wait: str, start: float, deadline_s: float) -> None:
    """Until the health request with ``wait`` answers green and the security index is initialised
    (admin can log in)."""
    log = node.home / "node.log"
    while True:
        if node.proc.poll() is not None:
            raise NodeSetupError(f"OpenSearch exited with {node.proc.returncode}; see {log}")
        with contextlib.suppress(urllib.error.URLError, ConnectionError, OSError):
            status, body = node.request("GET", f"/_cluster/health?{wait}&timeout=5s")
            if status == 200 and body.get("status") == "green" and not body.get("timed_out"):
                return
        _check_deadline(start, deadline_s, log)
        time.sleep(0.3)


def _check_deadline(start: float, deadline_s: float, log: Path) -> None:
    if time.monotonic() - start > deadline_s:
        raise NodeSetupError(f"OpenSearch not up after {deadline_s:.0f} s; see {log}")


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        sys.exit("usage: python -m tests.opensearch_node.node fetch")
    t0 = time.monotonic()
    print(f"OpenSearch test node ready in {ensure_dist()} ({time.monotonic() - t0:.1f} s)")
