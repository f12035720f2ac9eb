"""The /rerank endpoint reranker against a local HTTP server speaking that protocol (Cohere / Jina /
vLLM's request and response), alone and as the reranker of a recall."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from engram import Engram, ModelError
from engram.providers.http_rerank import HttpReranker


def fake_relevance(query: str, document: str) -> float:
    """Share of the query's words the document holds: a reranker that reads words, nothing else."""
    words = set(query.lower().rstrip("?").split())
    return len(words & set(document.lower().split())) / len(words)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests: ClassVar[list] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.requests.append((self.path, self.headers.get("Authorization"), body))
        if body["model"] == "broken":
            return self._answer(500, {"error": "model not loaded"})
        results = [
            {"index": i, "relevance_score": fake_relevance(body["query"], d)}
            for i, d in enumerate(body["documents"])
        ]
        if body["model"] == "short":  # a server that drops a passage
            results = results[1:]
        if body["model"] == "logits":  # raw logits where probabilities belong
            results = [
                {"index": r["index"], "relevance_score": 8.0 * r["relevance_score"] - 4.0} for r in results
            ]
        results.sort(key=lambda r: -r["relevance_score"])  # as Cohere answers: best first
        self._answer(200, {"id": "r1", "results": results[: body["top_n"]]})

    def _answer(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Handler.requests.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_scores_come_back_in_the_order_the_passages_went(server):
    reranker = HttpReranker(server + "/", model="bge-reranker-v2-m3", api_key="sk-test")
    try:
        passages = ["nothing here", "the hub shows an error", "hub error code E-4021 shows"]
        scores = reranker.score("what error does the hub show", passages)
    finally:
        reranker.close()
    assert reranker.name == "http:bge-reranker-v2-m3"
    assert scores == pytest.approx([0.0, 3 / 6, 2 / 6])  # the server sent them best first
    path, auth, body = Handler.requests[-1]
    assert (path, auth) == ("/v1/rerank", "Bearer sk-test")
    assert body == {
        "model": "bge-reranker-v2-m3",
        "query": "what error does the hub show",
        "documents": passages,
        "top_n": 3,
    }


def test_scores_outside_zero_to_one_are_read_as_logits(server):
    """Clipped, every negative logit tied at 0 and the order among them was lost."""
    reranker = HttpReranker(server.replace("http://", "http://user:secret@"), model="logits")
    try:
        scores = reranker.score("hub error code", ["hub error code", "hub", "cat"])  # logits 4, -1.33, -4
        assert scores[0] > 0.98 and scores[1] > scores[2] > 0 and scores[2] < 0.02
    finally:
        reranker.close()
    broken = HttpReranker(server.replace("http://", "http://user:secret@"), model="broken")
    try:
        with pytest.raises(ModelError) as failed:
            broken.score("q", ["p"])
        assert "secret" not in str(failed.value)  # the URL's password never reaches a log
    finally:
        broken.close()


def test_a_failing_or_incomplete_answer_is_a_model_error(server):
    for model, message in (("broken", "500"), ("short", "not each of the 2 sent once")):
        reranker = HttpReranker(server, model=model)
        try:
            with pytest.raises(ModelError, match=message):
                reranker.score("hub error", ["hub error", "cat"])
        finally:
            reranker.close()
    with pytest.raises(ModelError, match="reranker_model"):
        HttpReranker(server, model=None)


def test_recall_reranks_through_the_endpoint_and_survives_its_failure(server, tmp_path):
    settings = {"reranker_url": server, "rerank_gap": 1.0, "rerank_gap_distilled": 1.0}
    texts = [
        "my hub shows error E-4021 since the firmware update",
        "the dog chewed through the hub cable",
        "we replaced the kitchen tap last week",
    ]
    with Engram.open(tmp_path / "r.db", reranker_model="word-overlap", **settings) as engram:
        sarah = engram.for_user("sarah")
        for text in texts:
            sarah.remember_turn(text)
        hits = sarah.recall("what error does my hub show since the update", k=3, record_use=False)
    _, _, body = Handler.requests[-1]
    assert body["model"] == "word-overlap" and set(body["documents"]) <= set(texts)
    assert len(hits) == 3 and all(h.explain["relevance"] == "rerank" for h in hits)
    scores = [h.explain["rerank"] for h in hits]  # every hit scored by the endpoint, ranked by it
    assert scores == pytest.approx([fake_relevance(body["query"], h.memory.text) for h in hits], abs=1e-3)
    assert scores == sorted(scores, reverse=True) and hits[0].memory.text == texts[0]

    with Engram.open(tmp_path / "r.db", reranker_model="broken", **settings) as engram:
        hits = engram.for_user("sarah").recall("what error does my hub show", k=3, record_use=False)
    assert hits and hits[0].explain["rerank_error"] == "a model failed; the server log has the details"
