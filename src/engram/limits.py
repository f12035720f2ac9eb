"""Every bound on what a caller passes in, owned here. The engine enforces each one; the REST schemas
(OpenAPI) and the MCP tools' input schemas are generated from these names, so what a schema promises is
what the server takes (tests/interfaces/test_limits.py compares them).

Two bounds are settings, because an operator may move them: a text's length (``max_text_chars``: a turn,
a fact, a query, a catalog entry) and a row's metadata (``max_metadata_chars``, its JSON). Their
defaults live in engram.settings, and the service's schemas show the running server's values.
"""

from __future__ import annotations

from typing import Final

# A turn's session_id on every surface (the Python API, REST, MCP, import): an id, not text.
MAX_SESSION_ID_CHARS: Final = 200
MAX_TITLE_CHARS: Final = 1_000  # a catalog row's title: a heading, not a second text
# A turn's time may run this far ahead of the server's clock (clocks and time zones drift); a turn dated
# later (year 9999, milliseconds read as seconds) was stored and ranked first on every recall.
MAX_AHEAD_S: Final = 86_400
# Playbook fields are short by nature; a description may be as long as any memory's text.
MAX_NAME_CHARS: Final = 200  # a playbook's name, a step's tool, a speaker
MAX_LINE_CHARS: Final = 2_000  # a trigger, one step's instruction
MAX_STEPS: Final = 100  # a longer procedure is a document, not a playbook
MAX_SUPPORTING_IDS: Final = 100  # a fact's supporting episodes
MAX_KEY_LABEL_CHARS: Final = 200  # an API key's label
# ... one line: no control character (a newline would forge a row of `engram keys list`, NUL no store
# keeps), C1 controls and the line and paragraph separators included
KEY_LABEL_PATTERN: Final = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]*$"
SESSION_ID_PATTERN: Final = KEY_LABEL_PATTERN  # ... and a session id's (validation.check_session_id)
MIN_KEY_LIFETIME_S: Final = 60  # a key that expires sooner is a mistake, not a credential
MAX_KEY_LIFETIME_S: Final = 10 * 366 * 86400  # ten years: past that, a key without expiry says so
MAX_IDEMPOTENCY_KEY_CHARS: Final = 200  # an import's Idempotency-Key: a UUID or a SHA-256 in hex fits
MAX_COUNT: Final = 1_000_000_000  # a playbook's success and failure counts: within every engine's integers
# Hits of one recall: the Python API may ask for many (evaluations); a service caller gets at most 100,
# as the cross-encoder and the response size are paid by the server.
MAX_RECALL_K: Final = 1_000
MAX_SERVICE_RECALL_K: Final = 100
MAX_PAGE: Final = 500  # rows in one page of a listing over the service
MAX_PAGE_BOUND: Final = 1_000_000_000  # limit/offset past this are nonsense and overflow engines' integers
# Request bodies of the service: far above any turn or fact, below abuse; imports carry whole histories.
MAX_BODY_BYTES: Final = 1 << 20
MAX_IMPORT_BYTES: Final = 64 << 20
# Where a schema's bound is a setting, it names the setting under this key; the service writes the
# running server's value there (engram.interfaces.rest.schemas.publish_limits).
SETTING_MARK: Final = "x-engram-setting"
# A recall's metadata filter (equality on every pair): a handful of keys, each value a short scalar.
MAX_METADATA_FILTER_KEYS: Final = 16
MAX_METADATA_FILTER_VALUE_CHARS: Final = 2_000
