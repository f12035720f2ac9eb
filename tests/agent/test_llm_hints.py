"""Each way an LLM endpoint fails is one line naming the setting most likely wrong (issue 24): what
`engram chat` and a consolidation report show, instead of "Expecting value: line 1 column 1"."""

from __future__ import annotations

import time
from contextlib import closing

import pytest

from engram.consolidation.llm import LLMClient, LLMError

NGINX = "<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head></html>"
HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (
            200,
            NGINX,
            "answered an HTML page (HTTP 200), not the chat-completions API: check ENGRAM_LLM_BASE_URL",
        ),
        (
            401,
            '{"error": "invalid api key"}',
            'refused: HTTP 401 ({"error": "invalid api key"}): check ENGRAM_LLM_API_KEY',
        ),
        (
            400,
            '{"error": "x does not support tools"}\n',
            'HTTP 400 ({"error": "x does not support tools"}): check ENGRAM_LLM_MODEL',
        ),
        (
            404,
            NGINX,
            "refused: HTTP 404: no chat-completions API there, or no such model: check ENGRAM_LLM_BASE",
        ),
        (503, NGINX, "failed: HTTP 503 (2 tries): the LLM server is failing: its own log has the cause"),
        (429, "{}", "failed: HTTP 429 (2 tries): rate limited: wait, or raise ENGRAM_LLM_MAX_RETRIES"),
    ],
)
def test_an_llm_failure_is_one_line_naming_what_to_check(fake_chat, status, body, expected):
    fake_chat.script(*[lambda request: (status, body)] * 2)
    with (
        closing(LLMClient(fake_chat.url, "test-model", max_retries=1, backoff=0.01)) as llm,
        pytest.raises(LLMError) as failure,
    ):
        llm.chat(HI)
    message = str(failure.value)
    assert expected in message and "\n" not in message and failure.value.status == status
    assert type(failure.value) is LLMError  # the endpoint is wrong, not the model's output: nothing set aside
    assert len(fake_chat.requests) == (2 if status in (503, 429) else 1)  # only what may pass is retried


def test_nothing_listening_and_a_slow_model_say_what_to_check(fake_chat):
    with (
        closing(LLMClient("http://127.0.0.1:1/v1", "test-model", max_retries=0)) as llm,
        pytest.raises(LLMError) as down,
    ):
        llm.chat(HI)
    assert "(1 try): is the LLM server running? check ENGRAM_LLM_BASE_URL" in str(down.value)

    fake_chat.script(lambda request: time.sleep(1) or {"content": "late"})
    with (
        closing(LLMClient(fake_chat.url, "test-model", timeout=0.2, max_retries=0)) as llm,
        pytest.raises(LLMError) as slow,
    ):
        llm.chat(HI)
    assert "the model is slow or the server is stuck: raise ENGRAM_LLM_TIMEOUT_S" in str(slow.value)
