"""Consolidation end to end through the real HTTP client against a scripted OpenAI-protocol server."""

from __future__ import annotations

import json

import pytest

from engram.consolidation import LLMClient
from tests.consolidation.conftest import ok, raw


def episode_id(prompt, needle):
    return next(e["id"] for e in prompt["episodes"] if needle in e["user_said"])


def fact_id(prompt, needle):
    return next(f["id"] for f in prompt["stored_facts"] if needle in f["text"])


def llm_for(fake, **kw):
    """A client of the fake endpoint, closed with the fixture (the test made it, the test closes it)."""
    client = LLMClient(
        fake.url, "test-model", api_key="sk-test", timeout=kw.pop("timeout", 5), backoff=0.01, **kw
    )
    fake.clients.append(client)
    return client


def test_without_an_llm_consolidation_is_disabled(eng):
    eng.for_user("sarah").remember_turn("hello")
    report = eng.consolidate("sarah")
    assert report.status == "disabled: no LLM configured" and report.written == []


def test_scripted_scenario_ends_with_the_right_memory(eng, fake_llm):
    mem = eng.for_user("sarah")
    mem.remember_turn("hi! just got a Lumio Hub v2, and my dog Rex keeps chewing the sensor cables")
    mem.remember_turn(
        "ok thanks, maybe",
        metadata={"assistant_context": "Try a chew-proof protector sleeve for the cables."},
    )
    mem.remember_turn("we live in Bristol btw")
    fake_llm.script(
        ok(
            lambda p: {
                "facts": [
                    {
                        "text": "Sarah owns a Lumio Hub v2",
                        "fact_type": "identity",
                        "confidence": 0.95,
                        "supporting_episode_ids": [episode_id(p, "Lumio Hub")],
                    },
                    {
                        "text": "Sarah's dog Rex chews sensor cables",
                        "fact_type": "constraint",
                        "confidence": 0.9,
                        "supporting_episode_ids": [episode_id(p, "Rex")],
                    },
                    {
                        "text": "Sarah lives in Bristol",
                        "fact_type": "identity",
                        "confidence": 0.9,
                        "supporting_episode_ids": [episode_id(p, "Bristol")],
                    },
                    {
                        "text": "Sarah uses a chew-proof protector sleeve",
                        "confidence": 0.8,  # the assistant's idea
                        "supporting_episode_ids": [episode_id(p, "maybe")],
                    },
                    {
                        "text": "Sarah likes cats",
                        "confidence": 0.9,
                        "supporting_episode_ids": [],
                    },  # no provenance
                    {
                        "text": "Sarah might move soon",
                        "confidence": 0.3,
                        "supporting_episode_ids": [episode_id(p, "Bristol")],
                    },  # below the floor
                    {
                        "text": "Sarah has a garden",
                        "confidence": 0.9,
                        "supporting_episode_ids": ["epi_notFromThisBatch00000"],
                    },
                ],
            }
        )
    )
    first = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert first.status == "ok" and len(first.written) == 3 and first.episodes == 3, str(first.as_dict())
    reasons = {d["text"]: d["reason"] for d in first.dropped}
    assert "assistant" in reasons["Sarah uses a chew-proof protector sleeve"]
    assert (
        "cites no episode" in reasons["Sarah likes cats"]
        and "cites no episode" in reasons["Sarah has a garden"]
    )
    assert "below the floor" in reasons["Sarah might move soon"]

    mem.remember_turn("big news, we moved to Edinburgh last month")
    mem.remember_turn("the kitchen sensor is offline again, and yes I still have the Lumio Hub v2")
    mem.remember_turn(
        "that worked, thanks!",
        metadata={"assistant_context": "Hold reset for 10 s, then re-add it in the app."},
    )
    fake_llm.script(
        ok(
            lambda p: {
                "supersessions": [
                    {
                        "fact_id": fact_id(p, "Bristol"),
                        "new_text": "Sarah lives in Edinburgh",
                        "contradiction": "natural",
                        "confidence": 0.95,
                        "supporting_episode_ids": [episode_id(p, "Edinburgh")],
                    }
                ],
                "facts": [
                    {
                        "text": "Sarah owns a Lumio Hub v2",
                        "confidence": 0.9,  # already stored: a duplicate
                        "supporting_episode_ids": [episode_id(p, "kitchen")],
                    }
                ],
                "playbooks": [
                    {
                        "name": "Re-pair an offline sensor",
                        "trigger_text": "a sensor shows offline",
                        "description": "reset the sensor and add it again",
                        "steps": [
                            {"order": 1, "instruction": "Hold reset for 10 s"},
                            {"order": 2, "instruction": "Re-add the sensor in the app"},
                        ],
                        "supporting_episode_ids": [episode_id(p, "kitchen"), episode_id(p, "worked")],
                    }
                ],
            }
        )
    )
    second = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert second.status == "ok" and len(second.superseded) == 1 and len(second.merged) == 1, str(
        second.as_dict()
    )
    assert len(second.written) == 2, str(second.as_dict())

    mem.remember_turn("the reset trick worked again on the hallway sensor")
    mem.remember_turn("can you suggest a good film?")
    fake_llm.script(
        ok(
            lambda p: {
                "procedural_updates": [
                    {
                        "playbook_id": p["stored_playbooks"][0]["id"],
                        "outcome": "success",
                        "evidence_episode_ids": [episode_id(p, "hallway")],
                    },
                    {
                        "playbook_id": p["stored_playbooks"][0]["id"],
                        "outcome": "success",
                        "evidence_episode_ids": [],
                    },  # unconfirmed: no evidence
                    {
                        "playbook_id": p["stored_playbooks"][0]["id"],
                        "outcome": "success",
                        "evidence_episode_ids": [episode_id(p, "hallway")],
                    },  # the same success listed twice: counted once
                ],
            }
        )
    )
    third = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert len(third.feedback) == 1 and [d["reason"] for d in third.dropped] == [
        "success without evidence in the user's own words",
        "success counted already from the same turns",
    ]

    facts = {f.text: f for f in mem.list("semantic", include_superseded=True)}
    assert set(facts) == {
        "Sarah owns a Lumio Hub v2",
        "Sarah's dog Rex chews sensor cables",
        "Sarah lives in Bristol",
        "Sarah lives in Edinburgh",
    }
    assert facts["Sarah lives in Bristol"].superseded_by == facts["Sarah lives in Edinburgh"].id
    # a fact is valid from when the user said it (its event time), not from when the run wrote it
    turns = {e.text: e for e in mem.list("episodic", limit=100)}
    moved = turns["big news, we moved to Edinburgh last month"]
    edinburgh = facts["Sarah lives in Edinburgh"]
    assert edinburgh.valid_from == moved.timestamp < edinburgh.created_at
    assert len(facts["Sarah owns a Lumio Hub v2"].supporting_episode_ids) == 2  # merged provenance
    own_episodes = {e.id for e in mem.list("episodic", limit=100)}
    assert all(
        f.supporting_episode_ids and set(f.supporting_episode_ids) <= own_episodes for f in facts.values()
    )
    (playbook,) = mem.list("procedural")
    assert (playbook.success_count, playbook.failure_count) == (1, 0) and playbook.last_success_at is not None
    top = mem.recall("where does sarah live", memory_types=["semantic"])[0]
    assert top.memory.text == "Sarah lives in Edinburgh"
    # nothing new: no LLM call at all
    calls = len(fake_llm.requests)
    assert eng.consolidate("sarah", llm=llm_for(fake_llm)).episodes == 0 and len(fake_llm.requests) == calls


def test_an_llm_that_only_answers_malformed_output_sets_nothing_aside(eng, fake_llm):
    mem = eng.for_user("sarah")
    mem.remember_turn("I drive a red Volvo")
    fake_llm.script(*[raw(200, "Sure! Here are the facts: Volvo")] * 2)  # a turn gets one more try
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.status.startswith("error: every LLM reply was malformed") and report.written == []
    assert len(fake_llm.requests) == 2
    assert report.skipped_episodes == [] and len(eng.store.waiting_episodes("sarah", 10)) == 1
    fake_llm.script(
        ok(
            lambda p: {
                "facts": [
                    {
                        "text": "Sarah drives a red Volvo",
                        "confidence": 0.9,
                        "supporting_episode_ids": [p["episodes"][0]["id"]],
                    }
                ]
            }
        )
    )
    assert len(eng.consolidate("sarah", llm=llm_for(fake_llm)).written) == 1


def test_retries_with_backoff_on_5xx_and_timeouts(eng, fake_llm):
    eng.for_user("sarah").remember_turn("I drive a red Volvo")
    good = ok(
        lambda p: {
            "facts": [
                {
                    "text": "Sarah drives a red Volvo",
                    "confidence": 0.9,
                    "supporting_episode_ids": [p["episodes"][0]["id"]],
                }
            ]
        }
    )
    fake_llm.script(raw(503, "overloaded"), raw(200, "{}", delay=2.0), good)
    report = eng.consolidate("sarah", llm=llm_for(fake_llm, timeout=0.5))
    assert report.status == "ok" and len(report.written) == 1
    assert len(fake_llm.requests) == 3
    assert fake_llm.requests[0]["response_format"] == {"type": "json_object"}


def test_a_reply_trickled_a_byte_at_a_time_is_cut_off_at_the_timeout(eng, fake_llm):
    """httpx's timeout bounds each read: a server sending a byte every 50 ms kept a call with a 0.5 s
    timeout going for its whole reply (an outside bug hunt: 19 s with a 2 s timeout)."""
    eng.for_user("sarah").remember_turn("I drive a red Volvo")
    fake_llm.trickle_s = 0.05
    fake_llm.script(raw(200, json.dumps({"facts": []}) + " " * 200))
    report = eng.consolidate("sarah", llm=llm_for(fake_llm, timeout=0.5, max_retries=0))
    assert report.status.startswith("error: ") and "took more than 0.5 s" in report.status
    assert len(eng.store.waiting_episodes("sarah", 10)) == 1


def test_json_in_a_code_fence_or_in_prose_is_read(eng, fake_llm):
    """Local models in JSON mode sometimes wrap the object anyway: it was a malformed reply."""
    mem = eng.for_user("sarah")
    mem.remember_turn("I drive a red Volvo")

    def fact(p, text):
        return json.dumps({"facts": [{"text": text, "supporting_episode_ids": [p["episodes"][0]["id"]]}]})

    def fenced(body):
        return (
            200,
            "```json\n"
            + fact(json.loads(body["messages"][1]["content"]), "Sarah drives a red Volvo")
            + "\n```",
            0.0,
        )

    def prose(body):
        return (
            200,
            "Here is the JSON: " + fact(json.loads(body["messages"][1]["content"]), "Sarah works nights"),
            0.0,
        )

    fake_llm.script(fenced)
    assert eng.consolidate("sarah", llm=llm_for(fake_llm, max_retries=0)).status == "ok"
    mem.remember_turn("I work nights")
    fake_llm.script(prose)
    assert eng.consolidate("sarah", llm=llm_for(fake_llm, max_retries=0)).status == "ok"
    assert {f.text for f in mem.list("semantic")} == {"Sarah drives a red Volvo", "Sarah works nights"}


def test_an_item_of_the_wrong_shape_is_left_out_and_the_rest_written(eng, fake_llm):
    """One fact with "confidence": "high" rejected the whole reply; splitting then set the turn aside,
    its good facts with it (bug hunt)."""
    mem = eng.for_user("sarah")
    mem.remember_turn("I drive a red Volvo and my cat is called Miso")

    def extract(p):
        said = [p["episodes"][0]["id"]]
        return {
            "facts": [
                {"text": "Sarah drives a red Volvo", "confidence": "high", "supporting_episode_ids": said},
                {"text": "Sarah's cat is called Miso", "confidence": 0.9, "supporting_episode_ids": said},
            ]
        }

    fake_llm.script(ok(extract))
    report = eng.consolidate("sarah", llm=llm_for(fake_llm, max_retries=0))
    assert report.status == "ok" and [f.text for f in mem.list("semantic")] == ["Sarah's cat is called Miso"]
    ((dropped, reason),) = [(d["text"], d["reason"]) for d in report.dropped]
    assert dropped.startswith("facts.0: confidence: Input should be a valid number")
    assert reason == "not the shape asked for"


def test_a_reply_of_the_wrong_shape_is_named_where_it_is_wrong(eng, fake_llm):
    eng.for_user("sarah").remember_turn("I drive a red Volvo")
    fake_llm.script(*[raw(200, json.dumps({"facts": "none"}))] * 4)
    report = eng.consolidate("sarah", llm=llm_for(fake_llm, max_retries=0))
    assert "does not fit the extraction asked for: facts: Input should be a valid list" in report.status
    assert "pydantic.dev" not in report.status


def test_the_llm_sees_who_said_a_turn_of_a_group_conversation(eng, fake_llm):
    mem = eng.for_user("sarah")
    mem.remember_turn("I just adopted a greyhound", metadata={"speaker": "Melanie"})
    mem.remember_turn("my hub is offline again")
    fake_llm.script(ok(lambda p: {}))
    assert eng.consolidate("sarah", llm=llm_for(fake_llm)).status == "ok"
    episodes = json.loads(fake_llm.requests[0]["messages"][1]["content"])["episodes"]
    assert [e.get("speaker") for e in episodes] == ["Melanie", None]
    assert '"speaker"' in fake_llm.requests[0]["messages"][0]["content"]  # the rule that explains it


def test_a_fact_may_name_the_speaker_the_assistant_also_named(eng, fake_llm):
    # The guard against the assistant's words counts a turn's speaker as said by the user side.
    mem = eng.for_user("sarah")
    mem.remember_turn("I moved to Leeds last month", metadata={"speaker": "Priya"})
    mem.remember_turn("thanks!", metadata={"assistant_context": "Priya's birthday is on Friday"})
    fake_llm.script(
        ok(
            lambda p: {
                "facts": [
                    {
                        "text": "Priya moved to Leeds",
                        "confidence": 0.9,
                        "supporting_episode_ids": [episode_id(p, "Leeds")],
                    }
                ]
            }
        )
    )
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.dropped == [] and len(report.written) == 1
    assert mem.get(report.written[0]).text == "Priya moved to Leeds"


def test_gives_up_after_the_retries_and_writes_nothing(eng, fake_llm):
    eng.for_user("sarah").remember_turn("I drive a red Volvo")
    fake_llm.script(*[raw(503, "down")] * 3)
    report = eng.consolidate("sarah", llm=llm_for(fake_llm, max_retries=2))
    assert report.status.startswith("error") and len(fake_llm.requests) == 3
    assert len(eng.store.waiting_episodes("sarah", 10)) == 1
    assert eng.for_user("sarah").list("semantic") == []


def test_batches_and_the_judge(make_engram, fake_llm, embedder):
    existing, candidate = "Sarah owns a Lumio Hub v2", "Sarah's smart home hub is a Lumio, version two"
    vectors = embedder.embed_documents([existing, candidate])
    cos = float(vectors[0] @ vectors[1])
    eng = make_engram(
        dedup_similarity=min(1.0, cos + 0.02), dedup_judge_similarity=cos - 0.1, consolidation_batch=2
    )
    mem = eng.for_user("sarah")
    stored = mem.write(existing)
    for text in ["my hub is a lumio v2", "I said it already: lumio hub, version 2", "and I like tea"]:
        mem.remember_turn(text)

    def extract(p):
        return {
            "facts": [
                {"text": candidate, "confidence": 0.9, "supporting_episode_ids": [p["episodes"][0]["id"]]}
            ]
        }

    def judge(p, duplicate):
        return {"verdicts": [{"index": 0, "duplicate_of": p[0]["existing"][0]["id"] if duplicate else None}]}

    fake_llm.script(ok(extract), ok(lambda p: judge(p, True)), ok(extract), ok(lambda p: judge(p, False)))
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.batches == 2 and report.episodes == 3
    assert report.merged == [stored.id] and len(report.written) == 1  # batch 1 merged, batch 2 judged new
    assert len(fake_llm.requests) == 4


def test_a_near_duplicate_that_changes_a_detail_is_judged_never_merged(make_engram, fake_llm, embedder):
    """A change the extraction gave as a plain fact, close enough to the stored one to merge: merging
    would keep the old value current with the new turn as its support (an outside bug hunt: "Sam is not
    vegetarian any more" merged into "Sam is vegetarian"). It goes to the judge, whose ``replaces``
    makes it a supersession; a number changed in the same reply and judged new is written, not merged."""
    old, changed = "Sam is vegetarian", "Sam is not vegetarian any more"
    vectors = embedder.embed_documents([old, changed, "Mia is 7 years old", "Mia is 8 years old"])
    assert float(vectors[0] @ vectors[1]) >= 0.9 and float(vectors[2] @ vectors[3]) >= 0.9  # would merge
    eng = make_engram(dedup_similarity=0.9, dedup_judge_similarity=0.75)
    mem = eng.for_user("sam")
    stored, mia = mem.write(old), mem.write("Mia is 7 years old")
    mem.remember_turn("I eat meat again, not vegetarian any more. and mia turned 8 last week!")

    def extract(p):
        said = [p["episodes"][0]["id"]]
        return {
            "facts": [
                {"text": changed, "confidence": 0.9, "supporting_episode_ids": said},
                {"text": "Mia is 8 years old", "confidence": 0.9, "supporting_episode_ids": said},
            ]
        }

    def judge(p):
        assert [c["candidate"] for c in p] == [changed, "Mia is 8 years old"]
        return {"verdicts": [{"index": 0, "replaces": stored.id}, {"index": 1}]}

    fake_llm.script(ok(extract), ok(judge))
    report = eng.consolidate("sam", llm=llm_for(fake_llm))
    assert report.merged == [] and report.superseded == [stored.id] and len(report.written) == 2
    live = {f.text: f for f in mem.list("semantic")}
    assert set(live) == {changed, "Mia is 7 years old", "Mia is 8 years old"}
    assert live[changed].supersedes == stored.id and live[changed].contradiction == "natural"
    assert mia.id in {f.id for f in live.values()}  # judged new: both stand, for recall to order


def test_a_verdict_of_the_wrong_shape_leaves_the_others_standing(make_engram, fake_llm, embedder):
    """One malformed verdict ({"index": "second"}) failed the judge call, and with it the batch: now
    the good verdict applies and the other candidate is written as new, as with no verdict."""
    old, changed = "Sam is vegetarian", "Sam is not vegetarian any more"
    eng = make_engram(dedup_similarity=0.9, dedup_judge_similarity=0.75)
    mem = eng.for_user("sam")
    stored = mem.write(old)
    mia = mem.write("Mia is 7 years old")
    mem.remember_turn("I eat meat again, not vegetarian any more. and mia turned 8 last week!")

    def extract(p):
        said = [p["episodes"][0]["id"]]
        said_facts = (changed, "Mia is 8 years old")
        return {"facts": [{"text": t, "supporting_episode_ids": said} for t in said_facts]}

    def judge(p):
        return {"verdicts": [{"index": 0, "replaces": stored.id}, {"index": "second", "duplicate_of": 7}]}

    fake_llm.script(ok(extract), ok(judge))
    report = eng.consolidate("sam", llm=llm_for(fake_llm))
    assert report.status == "ok" and report.superseded == [stored.id] and len(report.written) == 2
    assert {f.text for f in mem.list("semantic")} == {changed, mia.text, "Mia is 8 years old"}
    assert [d["reason"] for d in report.dropped] == ["a judge verdict not of the shape asked for"]
    assert report.dropped[0]["text"].startswith("verdicts.1: index: ")


def test_two_changes_of_one_fact_in_one_reply_keep_the_later(eng, fake_llm):
    """ "moving to York", then "actually Leeds, not York" in one batch: the second supersession was
    dropped as superseding a fact that is "not live", and York stayed current (bug hunt)."""
    mem = eng.for_user("sam")
    bristol = mem.write("Sam lives in Bristol")
    mem.remember_turn("we're moving to York next month")
    mem.remember_turn("actually scrap that, it's Leeds, not York")

    def extract(p):
        return {
            "supersessions": [
                {"fact_id": bristol.id, "new_text": text, "supporting_episode_ids": [e["id"]]}
                for text, e in zip(["Sam lives in York", "Sam lives in Leeds"], p["episodes"], strict=True)
            ]
        }

    fake_llm.script(ok(extract))
    report = eng.consolidate("sam", llm=llm_for(fake_llm))
    assert report.superseded == [bristol.id] and len(report.written) == 1
    assert report.dropped == [
        {"text": "Sam lives in York", "reason": f"this reply changes {bristol.id!r} again, later"}
    ]
    assert [f.text for f in mem.list("semantic")] == ["Sam lives in Leeds"]


def test_an_old_fact_a_turn_changes_is_in_the_prompt_beyond_the_newest(make_engram, fake_llm):
    """The prompt held the newest 500 facts only: a user's older fact could never be superseded (bug
    hunt: Bristol and Edinburgh both live). Each turn's nearest facts are shown too."""
    from engram.consolidation import consolidator

    eng = make_engram()
    mem = eng.for_user("sam")
    bristol = mem.write("Sam lives in Bristol")
    for i in range(consolidator.PROMPT_NEWEST_FACTS + 5):
        mem.write(f"Sam's reading list item {i}: a novel about the sea")
    mem.remember_turn("big news, we moved to Edinburgh last month")
    seen: list[str] = []

    def extract(p):
        seen.extend(f["id"] for f in p["stored_facts"])
        return {
            "supersessions": [
                {
                    "fact_id": bristol.id,
                    "new_text": "Sam lives in Edinburgh",
                    "supporting_episode_ids": [p["episodes"][0]["id"]],
                }
            ]
        }

    fake_llm.script(ok(extract))
    report = eng.consolidate("sam", llm=llm_for(fake_llm))
    assert bristol.id in seen and len(seen) <= consolidator.PROMPT_NEWEST_FACTS + consolidator.NEIGHBOURS
    assert report.superseded == [bristol.id]


def test_the_same_fact_twice_in_one_reply_is_written_once_and_reported_merged(eng, fake_llm):
    mem = eng.for_user("sam")
    mem.remember_turn("my sister Aoife lives in Cork")
    mem.remember_turn("Aoife is in Cork, yeah")

    def extract(p):
        return {
            "facts": [
                {"text": "Sam's sister Aoife lives in Cork", "supporting_episode_ids": [e["id"]]}
                for e in p["episodes"]
            ]
        }

    fake_llm.script(ok(extract))
    report = eng.consolidate("sam", llm=llm_for(fake_llm))
    assert len(report.written) == 1 and report.merged == report.written
    assert len(mem.list("semantic")[0].supporting_episode_ids) == 2


def test_the_same_fact_twice_near_a_stored_one_is_judged_and_written_once(make_engram, fake_llm, embedder):
    """A newcomer's walk: both copies were near a stored fact, so both went to the judge, which saw
    neither as the other's neighbour; each was written (three copies in a real store)."""
    stored, candidate = "The user's dog is called Rex", "The user's cat is called Tom"
    vectors = embedder.embed_documents([stored, candidate])
    cos = float(vectors[0] @ vectors[1])
    eng = make_engram(dedup_similarity=min(1.0, cos + 0.02), dedup_judge_similarity=cos - 0.1)
    mem = eng.for_user("u1")
    mem.write(stored)
    mem.remember_turn("my cat is called Tom")
    mem.remember_turn("oh and my cat is called Tom, did I say?")

    def extract(p):
        said = [[e["id"]] for e in p["episodes"]]
        return {"facts": [{"text": candidate, "supporting_episode_ids": ids} for ids in said]}

    fake_llm.script(ok(extract), ok(lambda p: {"verdicts": [{"index": i} for i in range(len(p))]}))
    report = eng.consolidate("u1", llm=llm_for(fake_llm))
    assert len(report.written) == 1 and report.merged == report.written, str(report)
    (tom,) = [f for f in mem.list("semantic") if f.text == candidate]
    assert len(tom.supporting_episode_ids) == 2


def test_a_crash_before_commit_repeats_the_batch_without_duplicates(tmp_path, fake_llm):
    """Kill a consolidating process while it waits for the LLM, then run again: one copy of each fact."""
    import os
    import subprocess
    import sys
    import threading

    from engram import Engram

    url = f"sqlite:///{tmp_path}/crash.db"
    with Engram.open(url, rerank=False) as eng:
        eng.for_user("sarah").remember_turn("I drive a red Volvo")
    arrived, release = threading.Event(), threading.Event()

    def slow(body):
        arrived.set()
        release.wait(30)
        return 200, "{}", 0.0

    fake_llm.script(slow)
    env = dict(os.environ, ENGRAM_LLM_BASE_URL=fake_llm.url, ENGRAM_LLM_MODEL="m", ENGRAM_HOME=str(tmp_path))
    child = subprocess.Popen(
        [sys.executable, "-m", "engram", "consolidate", "--user", "sarah", "--store", url],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert arrived.wait(60)
    child.kill()
    child.wait(10)
    release.set()
    good = ok(
        lambda p: {
            "facts": [
                {
                    "text": "Sarah drives a red Volvo",
                    "confidence": 0.9,
                    "supporting_episode_ids": [p["episodes"][0]["id"]],
                }
            ]
        }
    )
    fake_llm.script(good, good)
    with Engram.open(url, rerank=False) as eng:
        assert len(eng.store.waiting_episodes("sarah", 10)) == 1
        assert len(eng.consolidate("sarah", llm=llm_for(fake_llm)).written) == 1
        eng.for_user("sarah").remember_turn("yes, the red Volvo, like I said")
        again = eng.consolidate("sarah", llm=llm_for(fake_llm))
        assert again.written == [] and len(again.merged) == 1
        assert [f.text for f in eng.for_user("sarah").list("semantic")] == ["Sarah drives a red Volvo"]


@pytest.mark.parametrize("bad", ["sem_notyours", "pro_unknown"])
def test_llm_cannot_reach_other_tenants_rows(eng, fake_llm, bad):
    bob = eng.for_user("bob").write("Bob lives in York")
    bob_pb = eng.for_user("bob").write("", memory_type="procedural", name="Bob's playbook")
    eng.for_user("sarah").remember_turn("I moved to Leeds, and the fix worked")
    target = bob.id if bad.startswith("sem") else bob_pb.id
    fake_llm.script(
        ok(
            lambda p: {
                "supersessions": [
                    {
                        "fact_id": target,
                        "new_text": "Sarah lives in Leeds",
                        "supporting_episode_ids": [p["episodes"][0]["id"]],
                    }
                ],
                "procedural_updates": [
                    {
                        "playbook_id": target,
                        "outcome": "success",
                        "evidence_episode_ids": [p["episodes"][0]["id"]],
                    }
                ],
                "facts": [
                    {"text": "Sarah lives in Leeds", "confidence": 0.9, "supporting_episode_ids": [bob.id]}
                ],
            }
        )
    )
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.written == [] and report.superseded == [] and report.feedback == []
    assert eng.for_user("bob").get(bob.id).superseded_by is None
    assert eng.for_user("bob").get(bob_pb.id).success_count == 0


def test_worker_runs_users_that_are_due(make_engram, fake_llm):
    from engram.consolidation.worker import ConsolidationWorker

    eng = make_engram(llm_base_url=fake_llm.url, llm_model="m", llm_max_retries=0)
    eng.for_user("sarah").remember_turn("I drive a red Volvo")
    eng.for_user("bob").remember_turn("hi")
    worker = ConsolidationWorker(eng, every_episodes=2, every_hours=24)
    assert worker.tick() == [] and fake_llm.requests == []  # one turn each: not due yet
    eng.for_user("sarah").remember_turn("and a blue bike")
    fake_llm.script(
        ok(
            lambda p: {
                "facts": [
                    {
                        "text": "Sarah drives a red Volvo",
                        "confidence": 0.9,
                        "supporting_episode_ids": [p["episodes"][0]["id"]],
                    }
                ]
            }
        )
    )
    (report,) = worker.tick()
    assert report["user_id"] == "sarah" and len(report["written"]) == 1
    hourly = ConsolidationWorker(eng, every_episodes=100, every_hours=0)  # due on time alone
    fake_llm.script(ok(lambda p: {}))
    assert [r["user_id"] for r in hourly.tick()] == ["bob"]


def poison_aware(body):
    """Malformed output whenever the batch holds the turn with POISON in it; else one fact per turn."""
    prompt = json.loads(body["messages"][1]["content"])
    if any("POISON" in e["user_said"] for e in prompt["episodes"]):
        return 200, "I cannot answer that as JSON, sorry", 0.0
    facts = [
        {"text": f"Sarah said: {e['user_said']}", "confidence": 0.9, "supporting_episode_ids": [e["id"]]}
        for e in prompt["episodes"]
    ]
    return 200, json.dumps({"facts": facts}), 0.0


def test_one_unreadable_turn_is_set_aside_and_never_blocks_the_rest(eng, fake_llm):
    """Issue 12.5: a malformed reply used to stop the user's consolidation for good."""
    mem = eng.for_user("sarah")
    texts = ["I drive a red Volvo", "POISON }{ turn", "my cat is called Miso", "I work nights"]
    turns = [mem.remember_turn(t) for t in texts]
    fake_llm.script(*[poison_aware] * 20)
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.status == "partial: 1 episodes skipped (malformed LLM output, or refused as too big)"
    assert report.skipped_episodes == [turns[1].id]
    assert report.episodes == 3 and len(report.written) == 3
    assert len(fake_llm.requests) == 6  # 4 turns, halves, then the poison alone twice: not per turn
    assert eng.store.waiting_episodes("sarah", 10) == []
    mem.remember_turn("and a blue bike")  # later turns go through; the poison is not read again
    again = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert (again.status, again.episodes, again.skipped_episodes) == ("ok", 1, [])
    assert "POISON" not in fake_llm.requests[-1]["messages"][1]["content"]


def test_a_batch_refused_as_too_big_is_split_and_a_turn_too_big_alone_set_aside(eng, fake_llm):
    """An endpoint refuses a context too long with HTTP 400: the batch used to fail on every run, for
    good (an outside bug hunt: one long turn blocked all the user's later ones)."""
    mem = eng.for_user("sarah")
    turns = [mem.remember_turn(t) for t in ["I drive a red Volvo", "HUGE " * 50, "my cat is called Miso"]]

    def context_window(body):
        prompt = json.loads(body["messages"][1]["content"])
        if any("HUGE" in e["user_said"] for e in prompt["episodes"]):
            return 400, '{"error": {"message": "This model\'s maximum context length is 8192 tokens"}}', 0.0
        return poison_aware(body)

    fake_llm.script(*[context_window] * 20)
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.status == "partial: 1 episodes skipped (malformed LLM output, or refused as too big)"
    assert report.skipped_episodes == [turns[1].id] and report.episodes == 2
    assert eng.store.waiting_episodes("sarah", 10) == []


def test_an_llm_refusing_every_request_stops_the_run_and_sets_nothing_aside(eng, fake_llm):
    """A 400 on every request is a wrong setting (no JSON mode, no such parameter), not a turn."""
    mem = eng.for_user("sarah")
    for text in ["I drive a red Volvo", "my cat is called Miso"]:
        mem.remember_turn(text)
    fake_llm.script(*[raw(400, '{"error": "response_format is not supported"}')] * 20)
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.status.startswith("error: ") and report.skipped_episodes == []
    assert len(eng.store.waiting_episodes("sarah", 10)) == 2


def test_a_turn_committed_after_a_later_stamped_one_is_still_consolidated(eng, fake_llm):
    """Issue 12.3: batches read past a created_at watermark skipped a turn that committed late."""
    from datetime import timedelta

    from engram.models import EpisodicMemory, new_id, utcnow

    mem = eng.for_user("sarah")
    early = utcnow() - timedelta(seconds=5)  # stamped first, committed after the run below
    late_turn = EpisodicMemory(
        id=new_id("episodic"),
        text="I also have a blue bike",
        user_id="sarah",
        created_at=early,
        timestamp=early,
    )
    mem.remember_turn("I drive a red Volvo")
    fake_llm.script(*[poison_aware] * 4)
    assert eng.consolidate("sarah", llm=llm_for(fake_llm)).episodes == 1
    vectors, tokens = eng.encode_rows([late_turn])
    eng.store.insert("sarah", [late_turn], vectors, None, tokens)
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.episodes == 1
    assert "Sarah said: I also have a blue bike" in {f.text for f in mem.list("semantic")}


def test_the_worker_goes_on_to_the_next_user_when_one_fails(make_engram, fake_llm, caplog):
    import logging

    from engram.consolidation.worker import ConsolidationWorker

    eng = make_engram(llm_base_url=fake_llm.url, llm_model="m", llm_max_retries=0)
    # alice's consolidation fails (the LLM is down for her request) ...
    eng.for_user("alice").remember_turn("I ride a green Brompton")
    # ... and must not stop sarah's, which comes after it.
    eng.for_user("sarah").remember_turn("I drive a red Volvo")
    fake_llm.script(raw(500, "upstream down"), poison_aware)
    worker = ConsolidationWorker(eng, every_episodes=1, every_hours=24)
    with caplog.at_level(logging.INFO, logger="engram.consolidation.worker"):
        reports = worker.tick()
    assert [(r["user_id"], r["status"][:5]) for r in reports] == [("alice", "error"), ("sarah", "ok")]
    # a failed run is an error in the log (it was "INFO consolidated alice: {'status': 'error: ...'}")
    logged = [(r.levelname, r.getMessage()[:28]) for r in caplog.records]
    assert logged == [("ERROR", "consolidation of alice faile"), ("INFO", "consolidation of sarah done:")]
    assert worker.tick() == []  # the failed user backs off instead of failing on every tick
    assert [f.text for f in eng.for_user("sarah").list("semantic")] == ["Sarah said: I drive a red Volvo"]


def test_consolidation_closes_the_http_client_it_opened(make_engram, fake_llm):
    """Issue 12.7: every consolidate call left an HTTP client (and its connection) open."""
    eng = make_engram(llm_base_url=fake_llm.url, llm_model="m", llm_max_retries=0)
    eng.for_user("sarah").remember_turn("I drive a red Volvo")
    fake_llm.script(poison_aware)
    assert eng.consolidate("sarah").status == "ok" and len(fake_llm.requests) == 1
    assert fake_llm.connections_closed()


def test_an_llm_that_always_answers_malformed_output_costs_a_few_calls_and_sets_nothing_aside(eng, fake_llm):
    mem = eng.for_user("sarah")
    for i in range(8):
        mem.remember_turn(f"turn {i}: I drive a red Volvo")
    fake_llm.script(*[raw(200, "no JSON today")] * 20)
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.status.startswith("error: every part of a batch") and report.skipped_episodes == []
    assert len(fake_llm.requests) == 3 + 4  # 8 -> 4 -> 2 turns, then the last two alone, twice each
    assert len(eng.store.waiting_episodes("sarah", 10)) == 8


def test_a_turn_forgotten_while_the_llm_reads_it_never_becomes_a_fact(eng, fake_llm):
    """A fact must not be written from a turn the user forgot meanwhile (forget is final)."""
    mem = eng.for_user("sarah")
    secret = mem.remember_turn("my PIN is 4711")

    def forget_then_answer(body):
        mem.forget(secret.id)  # the user forgets the turn while the LLM is working on it
        return poison_aware(body)

    fake_llm.script(forget_then_answer)
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.status.startswith("stopped: the batch changed") and report.written == []
    assert mem.list("semantic") == []


def test_the_worker_needs_only_a_store_and_a_consolidate():
    """The worker sits below the facade: whatever has a store (tenants, waiting episodes) and a
    consolidate(user) will do; Engram is one (the tests above)."""
    from engram.consolidation import ConsolidationReport
    from engram.consolidation.worker import ConsolidationWorker

    class Waiting:
        def tenants(self):
            return ["ann", "bob"]

        def waiting_episodes(self, tenant, limit):
            return ["turn"] * (3 if tenant == "ann" else 1)

    class Target:
        def __init__(self):
            self.store = Waiting()
            self.calls = []

        def consolidate(self, user_id):
            self.calls.append(user_id)
            return ConsolidationReport(user_id=user_id, episodes=3)

    target = Target()
    reports = ConsolidationWorker(target, every_episodes=2, every_hours=24).tick()
    assert target.calls == ["ann"] and [r["user_id"] for r in reports] == ["ann"]


def test_a_fact_the_facade_would_refuse_is_dropped(eng, fake_llm):
    """Text that shows nothing (or is too long) is refused by mem.write; consolidation drops it too,
    with the reason, and writes the rest of the batch."""
    eng.for_user("sarah").remember_turn("I drive a red Volvo")

    def facts(p):
        turn = p["episodes"][0]["id"]
        return {
            "facts": [
                {"text": "\u200b\u200b", "confidence": 0.9, "supporting_episode_ids": [turn]},
                {"text": "Sarah drives a red Volvo", "confidence": 0.9, "supporting_episode_ids": [turn]},
            ]
        }

    fake_llm.script(ok(facts))
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.status == "ok" and len(report.written) == 1
    assert [d["reason"][:13] for d in report.dropped] == ["not storable:"]


def test_engram_consolidate_prints_a_line_per_user_or_json(tmp_path, fake_llm):
    """Issue 24: the CLI's one human format: a line per user (its counts, the status last, as an error's
    text has spaces) instead of a JSON dump; --json gives the reports with their ids."""
    from typer.testing import CliRunner

    from engram import Engram
    from engram.interfaces.cli import app

    url = f"sqlite:///{tmp_path}/c.db"
    with Engram.open(url, rerank=False) as eng:
        eng.for_user("sarah").remember_turn("I drive a red Volvo")
    fake_llm.script(
        ok(
            lambda p: {
                "facts": [
                    {
                        "text": "Sarah drives a red Volvo",
                        "confidence": 0.9,
                        "supporting_episode_ids": [p["episodes"][0]["id"]],
                    }
                ]
            }
        )
    )
    env = {"ENGRAM_LLM_BASE_URL": fake_llm.url, "ENGRAM_LLM_MODEL": "m", "ENGRAM_HOME": str(tmp_path)}
    shown = CliRunner().invoke(app, ["consolidate", "--user", "sarah", "--store", url], env=env)
    assert shown.exit_code == 0, shown.output
    [line] = shown.stdout.splitlines()
    assert line.split()[0] == "sarah" and line.split()[-1] == "ok" and "written=1" in line.split(), line
    again = CliRunner().invoke(app, ["consolidate", "--user", "sarah", "--json", "--store", url], env=env)
    assert again.exit_code == 0, again.output
    assert [(r["user_id"], r["written"]) for r in json.loads(again.stdout)] == [("sarah", [])]


def test_a_reply_cannot_revive_what_it_replaces_store_a_playbook_twice_or_one_write_refuses(eng, fake_llm):
    """An outside review's repros: a fact listed beside the supersession that replaces it ("Sarah lives
    in Bristol" with Bristol -> Edinburgh) was written again, live; the same playbook twice in one reply
    was stored twice; a playbook write() refuses (a NUL, 500 steps) was stored."""
    mem = eng.for_user("sarah")
    bristol = mem.write("Sarah lives in Bristol")
    mem.remember_turn("we moved to Edinburgh last month")
    mem.remember_turn("tucking the cables behind the skirting worked, thanks")
    steps = [{"order": 1, "instruction": "run the cable behind the skirting board"}]

    def reply(p):
        moved, cables = episode_id(p, "Edinburgh"), episode_id(p, "cables")
        playbook = {"name": "Hide cables", "trigger_text": "cables show", "steps": steps}
        return {
            "supersessions": [
                {
                    "fact_id": bristol.id,
                    "new_text": "Sarah lives in Edinburgh",
                    "confidence": 0.95,
                    "supporting_episode_ids": [moved],
                }
            ],
            "facts": [
                {"text": "Sarah lives in Bristol", "confidence": 0.9, "supporting_episode_ids": [moved]}
            ],
            "playbooks": [
                {**playbook, "supporting_episode_ids": [cables]},
                {**playbook, "supporting_episode_ids": [cables]},
                {**playbook, "name": "Hide\u0000cables", "supporting_episode_ids": [cables]},
                {**playbook, "name": "Long", "steps": steps * 500, "supporting_episode_ids": [cables]},
            ],
        }

    fake_llm.script(ok(reply))
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.status == "ok", report.as_dict()
    assert [f.text for f in mem.list("semantic")] == ["Sarah lives in Edinburgh"]
    assert [p.name for p in mem.list("procedural")] == ["Hide cables"]
    reasons = sorted(d["reason"].split(":")[0] for d in report.dropped)
    assert reasons == [
        "duplicate of a playbook in this reply",
        "not storable",
        "not storable",
        "repeats a fact this batch replaces",
    ]


def test_a_fact_forgotten_while_the_llm_works_stops_the_run_for_next_time(eng, fake_llm):
    """The supersession's old fact forgotten while the LLM call is in flight: a NotFound from the write
    ended the run as an error (and the worker backed off); it is a change meanwhile, like a Conflict."""
    mem = eng.for_user("sarah")
    bristol = mem.write("Sarah lives in Bristol")
    mem.remember_turn("we moved to Edinburgh last month")

    def forget_then_supersede(p):
        mem.forget(bristol.id)
        return {
            "supersessions": [
                {
                    "fact_id": bristol.id,
                    "new_text": "Sarah lives in Edinburgh",
                    "confidence": 0.95,
                    "supporting_episode_ids": [episode_id(p, "Edinburgh")],
                }
            ]
        }

    fake_llm.script(ok(forget_then_supersede))
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.status.startswith("stopped:") and report.written == []
    assert mem.list("semantic") == [] and len(eng.store.waiting_episodes("sarah", 10)) == 1


def test_another_persons_fact_worded_like_the_one_replaced_is_kept(eng, fake_llm):
    """ "I'm not allergic to peanuts, my son is": a harsh supersession and a new fact about the son,
    worded alike (cosine 0.939): a restatement of the replaced fact is dropped, this is not."""
    mem = eng.for_user("sarah")
    peanuts = mem.write("Sarah is allergic to peanuts")
    mem.remember_turn("I'm not allergic to peanuts, my son is")

    def reply(p):
        turn = episode_id(p, "my son")
        return {
            "supersessions": [
                {
                    "fact_id": peanuts.id,
                    "new_text": "Sarah is not allergic to peanuts",
                    "contradiction": "harsh",
                    "confidence": 0.95,
                    "supporting_episode_ids": [turn],
                }
            ],
            "facts": [
                {
                    "text": "Sarah's son is allergic to peanuts",
                    "confidence": 0.9,
                    "supporting_episode_ids": [turn],
                }
            ],
        }

    # the son's fact is near the new "not allergic" one (the judge's band): the judge says it is new
    fake_llm.script(ok(reply), ok(lambda p: {"verdicts": [{"index": 0, "duplicate_of": None}]}))
    report = eng.consolidate("sarah", llm=llm_for(fake_llm))
    assert report.status == "ok" and report.dropped == [], report.as_dict()
    assert sorted(f.text for f in mem.list("semantic")) == [
        "Sarah is not allergic to peanuts",
        "Sarah's son is allergic to peanuts",
    ]
