"""Consolidation on demand over REST (POST/GET /v1/consolidate) and MCP (consolidate_memory), against a
real server whose LLM is the scripted chat-completions endpoint of this directory's conftest."""

from __future__ import annotations

import json

import anyio

from tests.consolidation.conftest import raw
from tests.interfaces.conftest import (
    make_service,  # noqa: F401 (the fixture, shared with tests/interfaces)
    mcp_session,
)
from tests.polling import until


def one_fact(delay: float = 0.0):
    """A step answering a batch with one fact citing its first turn, after ``delay`` seconds."""

    def step(body):
        prompt = json.loads(body["messages"][1]["content"])
        first = prompt["episodes"][0]["id"]
        fact = {"text": "Sarah owns a Lumio Hub v2", "confidence": 0.95, "supporting_episode_ids": [first]}
        return 200, json.dumps({"facts": [fact]}), delay

    return step


def llm_settings(fake_llm):
    return {"llm_base_url": fake_llm.url, "llm_model": "test-model", "llm_max_retries": 0}


def test_without_an_llm_a_trigger_is_409_and_says_what_to_set(make_service):  # noqa: F811
    with make_service() as svc:
        svc.engram.for_user("sarah").remember_turn("I just got a Lumio Hub v2")
        r = svc.client("sarah").post("/v1/consolidate")
        assert r.status_code == 409 and r.json()["error"] == "conflict"
        assert "ENGRAM_LLM_BASE_URL" in r.json()["message"]
        assert svc.engram.store.waiting_episodes("sarah", 10)  # nothing was read


def test_a_run_is_202_then_succeeds_and_one_runs_at_a_time_per_user(make_service, fake_llm):  # noqa: F811
    fake_llm.script(one_fact(delay=1.0))
    with make_service(**llm_settings(fake_llm)) as svc:
        svc.engram.for_user("sarah").remember_turn("hi! I just got a Lumio Hub v2")
        sarah, bob = svc.client("sarah"), svc.client("bob")
        started = sarah.post("/v1/consolidate")
        assert started.status_code == 202, started.text
        run = started.json()
        assert run["status"] in ("queued", "running") and run["run_id"].startswith("run_")
        assert started.headers["Location"] == f"/v1/consolidate/{run['run_id']}"
        # while it runs, a second trigger answers the same run, not a second one
        again = sarah.post("/v1/consolidate")
        assert again.status_code == 202 and again.json()["run_id"] == run["run_id"]
        # another user cannot read it: 404, as for an id that does not exist
        assert bob.get(f"/v1/consolidate/{run['run_id']}").status_code == 404
        assert sarah.get("/v1/consolidate/run_nope").json()["error"] == "not_found"

        def ended():
            return sarah.get(f"/v1/consolidate/{run['run_id']}").json()["status"] not in ("queued", "running")

        assert until(ended, 30)
        done = sarah.get(f"/v1/consolidate/{run['run_id']}").json()
        assert done["status"] == "succeeded", done
        assert done["counts"]["episodes"] == 1 and done["counts"]["written"] == 1 and done["finished_at"]
        facts = svc.engram.for_user("sarah").list("semantic")
        assert [f.text for f in facts] == ["Sarah owns a Lumio Hub v2"]
        assert svc.engram.for_user("bob").list("semantic") == []
        assert len(fake_llm.requests) == 1  # one run, one batch: the second trigger started nothing


def test_a_failing_llm_is_a_failed_run_that_names_no_endpoint(make_service, fake_llm):  # noqa: F811
    fake_llm.script(raw(500, '{"error": "boom at http://internal-llm:8000"}'))
    with make_service(**llm_settings(fake_llm)) as svc:
        svc.engram.for_user("sarah").remember_turn("hi! I just got a Lumio Hub v2")
        sarah = svc.client("sarah")
        run_id = sarah.post("/v1/consolidate").json()["run_id"]
        assert until(lambda: sarah.get(f"/v1/consolidate/{run_id}").json()["status"] == "failed", 30)
        failed = sarah.get(f"/v1/consolidate/{run_id}").json()
        assert "the LLM failed" in failed["error"] and "internal-llm" not in json.dumps(failed)
        assert svc.engram.store.waiting_episodes("sarah", 10)  # the turn still waits for the next run


def test_mcp_consolidate_memory_starts_a_run_and_reads_it(make_service, fake_llm):  # noqa: F811
    fake_llm.script(one_fact())
    with make_service(**llm_settings(fake_llm)) as svc:
        svc.engram.for_user("sarah").remember_turn("hi! I just got a Lumio Hub v2")

        async def main():
            async with mcp_session(svc.url, svc.user_keys["sarah"]) as session:
                started = (await session.call_tool("consolidate_memory", {})).structured_content
                run_id = started["run_id"]
                for _ in range(300):
                    status = await session.call_tool("consolidate_memory", {"run_id": run_id})
                    if status.structured_content["status"] in ("succeeded", "failed"):
                        break
                    await anyio.sleep(0.1)
                unknown = await session.call_tool("consolidate_memory", {"run_id": "run_nope"})
                return started, status.structured_content, unknown

        started, status, unknown = anyio.run(main)
        assert started["status"] in ("queued", "running")
        assert status["status"] == "succeeded" and status["counts"]["written"] == 1, status
        assert unknown.is_error and "not_found" in unknown.content[0].text
        # the REST route reads the same run: one registry per server
        assert svc.client("sarah").get(f"/v1/consolidate/{started['run_id']}").json()["status"] == "succeeded"
