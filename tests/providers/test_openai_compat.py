"""The OpenAI-compatible embedder against a local HTTP server speaking that protocol."""

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import numpy as np
import pytest

from engram import Engram, ModelError
from engram.providers.openai_compat import OpenAIEmbedder
from engram.storage.sqlite import SQLiteStore

DIM = 16


def fake_vector(text: str) -> list[float]:
    """Bag of hashed words: texts sharing words get similar vectors."""
    v = np.zeros(DIM)
    for word in text.lower().split():
        v[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return (v * 3).tolist()  # deliberately not normalised: the client must normalise


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real endpoint: a client must close it
    requests: ClassVar[list] = []
    open_connections: ClassVar[list] = []

    def setup(self):
        super().setup()
        Handler.open_connections.append(self)

    def finish(self):
        super().finish()
        Handler.open_connections.remove(self)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.requests.append((self.path, self.headers.get("Authorization"), body))
        if body["model"] == "broken":
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = [{"index": i, "embedding": fake_vector(t)} for i, t in enumerate(body["input"])]
        payload = json.dumps(
            {"object": "list", "data": list(reversed(data)), "model": body["model"]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_embeds_through_the_wire_and_works_as_engram_embedder(server, tmp_path):
    emb = OpenAIEmbedder(server, model="tiny-embed", api_key="sk-test")
    assert (emb.name, emb.dim) == ("openai:tiny-embed", DIM)
    vectors = emb.embed_documents(["sensor battery", "dog cables"])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    path, auth, body = Handler.requests[-1]
    assert (path, auth, body["input"]) == (
        "/v1/embeddings",
        "Bearer sk-test",
        ["sensor battery", "dog cables"],
    )
    with Engram(SQLiteStore(tmp_path / "x.db"), emb, None) as eng:
        mem = eng.for_user("sarah")
        f = mem.write("kitchen sensor battery replaced")
        mem.write("dog chews cables")
        assert mem.recall("sensor battery")[0].memory.id == f.id
    emb.close()  # Engram(...) closes the store it is given; the embedder belongs to its maker


def test_server_errors_are_model_errors(server):
    with pytest.raises(ModelError, match="embedding request"):
        OpenAIEmbedder(server, model="broken")
    with pytest.raises(ModelError, match="embedder_model"):
        OpenAIEmbedder(server, model=None)


def test_engram_close_closes_the_embedder_client_it_made(server, tmp_path):
    """Issue 12.7: Engram.close() closed only the store; the embedder's connection stayed open."""
    import time

    eng = Engram.open(
        f"sqlite:///{tmp_path}/x.db", embedder_url=server, embedder_model="tiny-embed", rerank=False
    )
    eng.for_user("sarah").write("kitchen sensor battery replaced")
    assert Handler.open_connections
    eng.close()
    deadline = time.monotonic() + 5
    while Handler.open_connections and time.monotonic() < deadline:
        time.sleep(0.02)
    assert Handler.open_connections == []
