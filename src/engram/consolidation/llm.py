"""A client for any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp server, Ollama).

JSON mode, a timeout per call (the whole reply, not each chunk of it: a server that trickles bytes is
cut off too) and a cap on the reply's size, retries with exponential backoff on timeouts, connection
errors, 429 and 5xx, and the reply validated against a pydantic model (the JSON may come in a code
fence or with prose around it, as local models in JSON mode sometimes send it). ``chat`` (tool
calling) serves the agent (engram.agent), which also gives each call a ``deadline``: no attempt, wait
or retry runs past it (a person is waiting for the turn); nothing else in Engram needs an LLM.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from engram.errors import EngramError
from engram.settings import EngramSettings

log = logging.getLogger(__name__)
T = TypeVar("T", bound=BaseModel)

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})

# Each failure names the setting most likely wrong: a person reads it in `engram chat` or in a
# consolidation report, and "Expecting value: line 1 column 1" sends nobody to the base URL.
CHECK_BASE_URL = "check ENGRAM_LLM_BASE_URL (the API's base URL, e.g. http://localhost:11434/v1)"
REFUSAL_HINTS = {
    401: "check ENGRAM_LLM_API_KEY",
    403: "check ENGRAM_LLM_API_KEY",
    404: f"no chat-completions API there, or no such model: {CHECK_BASE_URL} and ENGRAM_LLM_MODEL",
    405: CHECK_BASE_URL,
}
REFUSAL_QUOTE = 200  # characters of a refusal's body quoted: its reason ("model does not support tools")
MAX_REPLY_BYTES = 8 * 2**20  # a chat reply this big is a runaway model or not a chat-completions API
_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_ENCODING_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


class LLMError(EngramError):
    """The LLM could not be reached or kept failing. ``status``: the HTTP status of a refused
    request (400 for a context too long, 413...), None when no answer came."""

    code = "llm_error"

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class LLMOutputError(LLMError):
    """The LLM answered, but not with the JSON asked for."""

    code = "llm_bad_output"


class LLMClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)
        self.model = model
        self.max_retries = max_retries
        self.backoff = backoff

    @classmethod
    def from_settings(cls, settings: EngramSettings) -> LLMClient | None:
        """The client of the configured LLM (ENGRAM_LLM_*); None when none is configured."""
        if not (settings.llm_base_url and settings.llm_model):
            return None
        return cls(
            settings.llm_base_url,
            settings.llm_model,
            api_key=settings.llm_api_key,
            timeout=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
        )

    def complete_json(self, system: str, user: str, schema: type[T]) -> T:
        """One chat call in JSON mode; the reply must validate as ``schema``."""
        body = {
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        content = self._post(body)
        try:
            return schema.model_validate(json.loads(json_text(content)))
        # A reply nested deeper than the parser's recursion limit raises RecursionError: malformed too.
        except ValidationError as exc:  # where and what, without pydantic's links to its documentation
            wrong = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors()[:3]
            )
            raise LLMOutputError(
                f"the LLM's reply does not fit the {_shape(schema)} asked for: {wrong}"
            ) from exc
        except (json.JSONDecodeError, RecursionError) as exc:
            raise LLMOutputError(
                f"the LLM's reply is not valid JSON (for the {_shape(schema)}): {exc}"
            ) from exc

    def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        tool_choice: str = "auto",
        max_tokens: int | None = None,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """One chat call, with tools if given (the agent); returns the assistant message as the
        endpoint sent it (``content``, ``tool_calls``), unvalidated: the caller judges tool calls.
        ``max_tokens`` bounds the reply (a model that never stops costs time, and its reply context).
        ``deadline`` (a ``time.monotonic()`` value): each attempt waits at most until then, and no retry
        starts that could not; LLMError once it has passed."""
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if tools:
            body["tools"] = tools
            body["tool_choice"] = tool_choice
        return self._message(body, deadline)

    def _post(self, body: dict[str, object]) -> str:
        return str(self._message(body).get("content"))

    def _message(self, body: dict[str, object], deadline: float | None = None) -> dict[str, Any]:
        attempt = 0
        while True:
            try:
                response = self._read(body, self._timeout(deadline))
                if response.status_code in RETRY_STATUSES:
                    raise httpx.HTTPStatusError(
                        f"HTTP {response.status_code}", request=response.request, response=response
                    )
                if response.is_error:
                    raise LLMError(self._refused(response), status=response.status_code)
                if _is_html(response):
                    raise LLMError(
                        f"the endpoint {self._http.base_url} answered an HTML page (HTTP "
                        f"{response.status_code}), not the chat-completions API: {CHECK_BASE_URL}",
                        status=response.status_code,
                    )
                message = response.json()["choices"][0]["message"]
                if not isinstance(message, dict):
                    raise TypeError(f"the message is a {type(message).__name__}, not an object")
                return message
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                status = exc.response.status_code if isinstance(exc, httpx.HTTPStatusError) else None
                retryable = status is None or status in RETRY_STATUSES
                delay = self.backoff * 2**attempt
                late = deadline is not None and time.monotonic() + delay >= deadline
                if not retryable or attempt >= self.max_retries or late:
                    message = f"LLM request to {self._http.base_url} failed: {exc}"
                    if late and retryable and attempt < self.max_retries:
                        message += " (no time left for a retry before the turn's deadline)"
                    raise LLMError(f"{message}{_hint(exc, attempt, late)}", status=status) from exc
                log.warning("LLM call failed (%s), retrying in %.1fs", exc, delay)
                time.sleep(delay)
                attempt += 1
            except (KeyError, IndexError, TypeError, ValueError, RecursionError) as exc:
                # RecursionError: a body nested deeper than the JSON parser's recursion limit
                raise LLMOutputError(f"unexpected chat-completions response: {exc}") from exc

    def _read(self, body: dict[str, object], timeout: httpx.Timeout) -> httpx.Response:
        """POST ``body`` and read the whole reply within ``timeout.read`` seconds in all (httpx bounds
        each read, so a server sending a byte a second would never time out) and MAX_REPLY_BYTES."""
        total = timeout.read
        end = None if total is None else time.monotonic() + total
        with self._http.stream("POST", "/chat/completions", json=body, timeout=timeout) as response:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_REPLY_BYTES:
                    raise LLMOutputError(f"the LLM's reply is larger than {MAX_REPLY_BYTES // 2**20} MB")
                if end is not None and time.monotonic() > end:
                    raise httpx.ReadTimeout(f"the reply took more than {total:g} s", request=response.request)
                chunks.append(chunk)
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _ENCODING_HEADERS]
        return httpx.Response(
            response.status_code, headers=headers, content=b"".join(chunks), request=response.request
        )

    def _refused(self, response: httpx.Response) -> str:
        """A refusal (4xx but the retried ones) in one line: what the endpoint said (not a web page's
        markup), and the setting most likely wrong."""
        status = response.status_code
        said = "" if _is_html(response) else " ".join(response.text.split())
        said = (
            f" ({said[: REFUSAL_QUOTE - 1]}…)" if len(said) > REFUSAL_QUOTE else f" ({said})" if said else ""
        )
        hint = REFUSAL_HINTS.get(status, "check ENGRAM_LLM_MODEL and the endpoint's own log")
        return f"LLM request to {self._http.base_url} refused: HTTP {status}{said}: {hint}"

    def _timeout(self, deadline: float | None) -> httpx.Timeout:
        """The client's timeout, or less: each of connect, send and read ends by the deadline."""
        if deadline is None:
            return self._http.timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise LLMError(f"LLM request to {self._http.base_url} not sent: the turn's deadline has passed")
        configured = self._http.timeout.read
        return httpx.Timeout(left if configured is None else min(configured, left))

    def close(self) -> None:
        self._http.close()


def json_text(content: str) -> str:
    """The JSON of a reply: as sent, else the block a model wrapped in a code fence, else what lies
    between the first "{" and the last "}" ("Here is the JSON: {...}"). Example: '```json\n{}\n```'
    -> '{}'."""
    stripped = content.strip()
    if stripped.startswith("{"):
        return stripped
    if fenced := _FENCED.search(content):
        return fenced.group(1).strip()
    start, end = content.find("{"), content.rfind("}")
    return content[start : end + 1] if 0 <= start < end else content


def _is_html(response: httpx.Response) -> bool:
    """A web page where JSON was due: the base URL names a site or a proxy's error page."""
    return "html" in response.headers.get("content-type", "") or response.content.lstrip()[:1] == b"<"


def _hint(exc: httpx.TransportError | httpx.HTTPStatusError, attempt: int, late: bool) -> str:
    """What to check after the last try failed (``late``: a turn's deadline ended the tries)."""
    tries = f"{attempt + 1} tries" if attempt else "1 try"
    if late and isinstance(exc, httpx.TimeoutException):
        return (
            f" ({tries}): the turn's time ran out: raise ENGRAM_AGENT_TURN_TIMEOUT_S, or use a faster model"
        )
    if isinstance(exc, httpx.TimeoutException):
        return (
            f" ({tries}): the model is slow or the server is stuck: raise ENGRAM_LLM_TIMEOUT_S, or check it"
        )
    if isinstance(exc, httpx.TransportError):
        return f" ({tries}): is the LLM server running? {CHECK_BASE_URL}"
    if exc.response.status_code == 429:
        return f" ({tries}): rate limited: wait, or raise ENGRAM_LLM_MAX_RETRIES"
    return f" ({tries}): the LLM server is failing: its own log has the cause"


def _shape(schema: type[BaseModel]) -> str:
    """A reply's schema in words, not its class name ("Extraction" puzzled a newcomer): "extraction",
    "judge verdicts", "semantic memory"."""
    return re.sub(r"(?<!^)(?=[A-Z])", " ", schema.__name__).lower()
