"""Every tunable constant, in one place, overridable by ``ENGRAM_*`` env vars or a TOML file.

Precedence: keyword arguments > environment (``ENGRAM_RRF_K=60``) > TOML file (``ENGRAM_CONFIG``, else
``$ENGRAM_HOME/engram.toml``) > the defaults below. Only the edges read the environment: ``load_settings``
(used by the CLI and ``Engram.open``). ``Engram(...)`` without settings uses ``EngramSettings.defaults()``,
which reads no variable and no file, so embedding Engram is configured only by what the program passes.
A bad value, an unknown key or a missing ``ENGRAM_CONFIG`` file is a ``ConfigError`` naming the setting.
"""

from __future__ import annotations

import os
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import BeforeValidator, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from engram.errors import ConfigError
from engram.threads import available_cores

# --- recall (the reference design's values unless said otherwise) ---------------------------------
DEFAULT_LEG_CANDIDATES = 80  # each leg over-fetches enough that RRF sees both legs' long tails
DEFAULT_RRF_K = 30  # tighter than the usual 60, so top ranks of each leg weigh more
DEFAULT_RERANK_WINDOW = 10  # windows 20-80: no better R@1/MRR at 1.4-5x the latency (docs/benchmarks.md)
# Recalls in the cross-encoder stage at once; past it one is shed. Measured on 2 cores (bench/load.py):
# 8 sheds none at 8 clients and keeps recall p95 under 1 s at 32; 4 shed 59% already at 8 clients.
DEFAULT_RERANK_QUEUE = 8
# Recalls computed at once (the rest wait): half the cores, so writes always find one. Measured at 32
# clients on 2 cores: 1 -> remember p95 107 ms, 2 -> 275 ms, no limit -> 361 ms (docs/benchmarks.md).
DEFAULT_RECALL_CONCURRENCY = max(1, available_cores() // 2)  # per process: `serve --workers N` has N x
# `engram serve`'s request threads (anyio's default is 40). A recall waiting for a slot holds one, and
# at most half of them wait (RecallGate): the rest are always free for writes.
DEFAULT_REQUEST_THREADS = 128
DEFAULT_RECALL_NICE = 10  # recall's helper threads run at this nice value: writes win the cores
# Relevance of a reranked row = w x cross-encoder probability + (1 - w) x late-interaction score: the
# two models see different things (whole pair vs token matches); w is set from docs/benchmarks.md
DEFAULT_RERANK_WEIGHT = 1.0
# Among raw turns the cross-encoder scores only the leaders whose late-interaction MaxSim is within this
# of the first's (plus a row both legs rank first): it changed the answer mostly among such near-ties,
# and past them it cost R@5 on conversations; 0.01 scored best on LoCoMo dev (docs/benchmarks.md,
# "Cross-encoder on near-ties"). Raw MaxSim moves by up to 0.014 between CPU kinds: a tie this close
# can go either way on another machine, as the order itself can.
DEFAULT_RERANK_GAP = 0.01
# ... in a window holding a fact, playbook or catalog item, within this (and the leader): 0.05 ranked as
# the whole window did on the eval corpus's dev splits with 41% fewer pairs (docs/benchmarks.md).
DEFAULT_RERANK_GAP_DISTILLED = 0.05
DEFAULT_LATE_WINDOW = 160  # late interaction scores every fused candidate (2 legs x 80): ~0.1 ms each
DEFAULT_DECAY_OFFSET_DAYS = 180.0  # memories younger than ~6 months are not penalised at all
DEFAULT_DECAY_SCALE_DAYS, DEFAULT_DECAY_VALUE = 1825.0, 0.5  # 5 years past the offset, worth half as much
DEFAULT_USE_COUNT_WEIGHT = 0.2  # 10 uses ~1.2x, 100 uses ~1.4x: recall keeps useful facts on top
DEFAULT_CATALOG_PRIOR = 0.85  # ties go to the user's own memory; a clearly better catalog hit still wins
DEFAULT_TIME_MATCH_BOOST = 1.5  # a turn said in the period the query names ("in May 2023") ranks up
DEFAULT_SPEAKER_MATCH_BOOST = 1.1  # a turn said by the person the query names ranks above replies to them
DEFAULT_OUTDATED_FACTOR = 0.5  # a replaced memory's share of its score: just below what replaced it
DEFAULT_RECENCY_HALF_LIFE_DAYS = 2000.0  # "...now?": a turn a year older keeps 0.88 of its score; 0: off
DEFAULT_ASKED_FACTOR = 0.1  # a turn asking what the query asks tells no answer (contenders.py); 1: off
DEFAULT_MISSING_VALUE_FACTOR = 0.1  # confidence of a hit lacking the value asked (asked_value; fitted 0.097)
DEFAULT_MISSING_VALUE_RANK = 0.7  # ... and its score: an answer with the value, close behind, goes first
# A successor must match the query by late interaction's raw MaxSim at least as well as what it replaces,
# less this: a live fact replaces the turn it supersedes for the question about it, not for every one.
DEFAULT_REPLACE_MARGIN = 0.05
# A change-announcing newer turn this near the top replaces the leading turn within that margin
# (engram.retrieval.currency; 10 places cost the "unchanged" questions of bench/updates.py).
DEFAULT_CHANGE_PLACES = 5
# ... or when the speaker says they changed it ("we moved") and the two turns' token vectors match this well
# (one subject: the README's Bristol -> Edinburgh 0.74, a bug hunt's Leeds -> York 0.718; 0.68 cost dev).
DEFAULT_SAME_SUBJECT = 0.70
# ... and a turn announcing any change, above this ("the German one is cancelled" matched an orchestra 0.66)
DEFAULT_RELATED_SUBJECT = 0.70
# Confidence = a logistic calibration of the strongest stage's raw score (engram.retrieval.confidence),
# fitted by bench/calibrate.py on the development sets with the packaged models (docs/benchmarks.md).
# Coverage: the hit's match for the query's least-matched content word (late_interaction.query_coverage).
DEFAULT_CONFIDENCE_RERANK = (0.214, 1.811, -1.712)  # (a, b, c): σ(a·logit(cross-encoder p) + b·coverage + c)
DEFAULT_CONFIDENCE_LATE = (14.034, 3.651, -15.095)  # (a, b, c): σ(a·MaxSim + b·coverage + c), no reranker
DEFAULT_CONFIDENCE_DENSE = (10.326, -8.132)  # (a, c): σ(a·cosine + c) without late interaction
DEFAULT_CONFIDENCE_LEADER = (2.958, 3.322, -4.450)  # (a, b, c): as late, a leader no other raw turn came near
DEFAULT_CONFIDENCE_COVERAGE_MEAN = 0.563  # the fitted hits' mean coverage: stands in when it is missing
DEFAULT_CONFIDENCE_BELOW = (6.405, 3.255, -9.671)  # (a, b, c): as late, a hit below what was judged
# The agent's and the MCP tool's default min_confidence: hits below it are not shown to a model.
DEFAULT_MIN_CONFIDENCE = 0.1
# A local model on CPUs answers one tool round in tens of seconds; a person waits for a reply about this long.
DEFAULT_AGENT_TURN_TIMEOUT_S = 120.0
# --- writes ----------------------------------------------------------------------------------------
DEFAULT_SUPERSEDE_PENALTY = 0.1  # a harshly contradicted user was wrong once: trust the new fact less
DEFAULT_MAX_TEXT_CHARS = 16_000  # a turn or fact longer than this is a document, not a memory
DEFAULT_MAX_METADATA_CHARS = 16_000  # a row's metadata, as JSON: notes about a memory, not a second one
DEFAULT_EMBED_BATCH = 32  # batch size for the embedder; larger did not help on 2 cores
# texts per token-encoder run in a bulk write (import, transfer, reindex); 64 and 128 were no faster
DEFAULT_TOKEN_BATCH = 32
# onnxruntime threads per model (and cross-encoder sessions): 1 beat 2 on 2 cores at every load, as the
# pipeline already runs its stages side by side (bench/load.py: 1 client recall p50 65 -> 60 ms,
# 32 clients 68 -> 108 requests/s; docs/benchmarks.md)
DEFAULT_MODEL_THREADS = 1
DEFAULT_IMPORT_CHUNK = 256  # rows per import transaction: the longest a bulk import holds the write lock
DEFAULT_USE_WAIT_MS = 100  # recall waits this long for the write lock to bump use counts, then queues it
DEFAULT_ANN_MIN_ROWS = 5000  # own HNSW index past this: wins by >2 ms from here (docs/benchmarks.md)
# --- OpenSearch (engram.storage.opensearch) -------------------------------------------------------
DEFAULT_OS_INDEX_PREFIX = "engram-"  # every index, alias and role of the store starts with it
DEFAULT_OS_SHARDS = 1  # a tenant's recall reads every shard: one until an index outgrows ~30 GB
DEFAULT_OS_REPLICAS = 1  # one more copy on another node; a single node runs yellow, which writes accept
DEFAULT_OS_TOKEN_CACHE_MB = 256  # ~16k rows' int8 token vectors: a warm recall fetches none (~4x faster)
# A write refreshes the shards it touched before it answers, so the next recall sees it: "true" measured
# p50 40 ms a write on the test node, "wait_for" (the next periodic refresh, 1 s) 1016 ms.
OsRefresh = Literal["true", "wait_for"]
DEFAULT_OS_REFRESH: OsRefresh = "true"


FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]  # a NaN coefficient would make every score NaN
# (a, b, c); a calibration written before the coverage term, (a, c), reads as (a, 0, c): the same one.
CoverageCalibration = Annotated[
    tuple[FiniteFloat, FiniteFloat, FiniteFloat],
    BeforeValidator(lambda v: (v[0], 0.0, v[1]) if isinstance(v, list | tuple) and len(v) == 2 else v),
]


def default_home() -> Path:
    return Path(platformdirs.user_data_dir("engram", appauthor=False))


class EngramSettings(BaseSettings):
    """Engram's configuration. Each field documents why it has its default."""

    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="forbid")

    home: Path = Field(default_factory=default_home, description="where the embedded store lives")
    store: str | None = Field(
        default=None, description="store URL, e.g. sqlite:///path/to/engram.db; default: $home/engram.db"
    )
    pg_admin_url: str | None = Field(
        default=None,
        description="PostgreSQL URL of the schema owner: migrations run with it; recall never does",
    )
    os_user: str | None = Field(
        default=None,
        description="OpenSearch service account (or in the URL): it acts as each tenant by impersonation",
    )
    os_password: SecretStr | None = Field(default=None, description="the service account's password")
    os_ca_certs: Path | None = Field(
        default=None, description="CA bundle of the cluster's TLS (opensearchs://)"
    )
    os_index_prefix: str = Field(
        default=DEFAULT_OS_INDEX_PREFIX,
        pattern=r"^[a-z0-9][a-z0-9_.\-]{0,40}$",
        description="names this store's indices and tenant role: several stores share a cluster",
    )
    os_shards: int = Field(default=DEFAULT_OS_SHARDS, ge=1, le=1024, description="shards of a new index")
    os_replicas: int = Field(default=DEFAULT_OS_REPLICAS, ge=0, le=16, description="replicas of a new index")
    os_refresh: OsRefresh = Field(
        default=DEFAULT_OS_REFRESH, description="how a write waits until recall sees it (see the default)"
    )
    os_token_cache_mb: int = Field(default=DEFAULT_OS_TOKEN_CACHE_MB, ge=0, description="per process, 0: off")
    admin_key: SecretStr | None = Field(
        default=None,
        description="the one admin key of `engram serve` (else one is created on first start); setting a "
        "new one revokes the others; rules in engram.auth.check_admin_key",
    )
    leg_candidates: int = Field(default=DEFAULT_LEG_CANDIDATES, ge=1, le=1000)
    rrf_k: float = Field(default=DEFAULT_RRF_K, gt=0)
    late_interaction: bool = Field(
        default=True,
        description="store token vectors (ColBERT) and re-order the fused candidates by MaxSim before the "
        "cross-encoder: LoCoMo dev R@10 +0.06 for ~15 KB and ~3 ms per written row (docs/benchmarks.md)",
    )
    lean_token_vectors: bool = Field(
        default=False,
        description="store the packaged model's token vectors lean (product-quantised: 64 bytes a token, "
        "not 388; SQLite 3.8 KB a memory at 100k, not 12.5); off by default: the own held-out eval R@10 "
        "0.943 -> 0.929 (docs/benchmarks.md, 'Lean token vectors'); `engram reindex` converts either way",
    )
    late_window: int = Field(default=DEFAULT_LATE_WINDOW, ge=0, le=2000)
    rerank: bool = Field(default=True, description="use the cross-encoder at all")
    rerank_window: int = Field(default=DEFAULT_RERANK_WINDOW, ge=0, le=1000)
    rerank_weight: float = Field(
        default=DEFAULT_RERANK_WEIGHT,
        ge=0,
        le=1,
        description="share of the cross-encoder's probability in a reranked row's relevance, the rest "
        "its late-interaction score; 1: the cross-encoder alone",
    )
    rerank_gap: float = Field(
        default=DEFAULT_RERANK_GAP,
        ge=0,
        description="among raw turns, the cross-encoder scores only the leader's near-ties (raw "
        "late-interaction MaxSim within this of the leader's) and a row both legs rank first; a large "
        "value (e.g. 1) scores every window of raw turns of two or more whole",
    )
    rerank_gap_distilled: float = Field(
        default=DEFAULT_RERANK_GAP_DISTILLED, ge=0, description="rerank_gap for a window holding a fact"
    )
    recall_gate: bool = Field(
        default=False,
        description="queue and shed recalls under load (recall_concurrency, rerank_queue): `engram serve` "
        "turns it on; an Engram embedded in another program computes every recall in full by default",
    )
    recall_concurrency: int = Field(
        default=DEFAULT_RECALL_CONCURRENCY,
        ge=0,
        description="with recall_gate: recalls computed at once (default: half the cores); the rest wait "
        "for a slot, and one whose user already has their share of rerank_queue waiting runs without the "
        "cross-encoder (writes never wait); 0: no limit",
    )
    rerank_queue: int = Field(
        default=DEFAULT_RERANK_QUEUE,
        ge=0,
        description="with recall_gate: recalls that may wait for a slot (or, without recall_concurrency, "
        "for the cross-encoder) and keep it, shared among the users waiting; one past its user's share "
        "is shed; 0: never shed",
    )
    request_threads: int = Field(  # at most half wait for a recall slot
        default=DEFAULT_REQUEST_THREADS, ge=2, description="threads serving requests in `engram serve`"
    )
    recall_nice: int = Field(  # 0: the same as everything else
        default=DEFAULT_RECALL_NICE, ge=0, le=19, description="Linux nice of recall's helper threads"
    )
    decay_offset_days: float = Field(default=DEFAULT_DECAY_OFFSET_DAYS, ge=0)
    decay_scale_days: float = Field(default=DEFAULT_DECAY_SCALE_DAYS, gt=0)
    decay_value: float = Field(default=DEFAULT_DECAY_VALUE, gt=0, lt=1)
    use_count_weight: float = Field(default=DEFAULT_USE_COUNT_WEIGHT, ge=0)
    catalog_prior: float = Field(default=DEFAULT_CATALOG_PRIOR, gt=0)
    time_match_boost: float = Field(default=DEFAULT_TIME_MATCH_BOOST, ge=1)
    speaker_match_boost: float = Field(default=DEFAULT_SPEAKER_MATCH_BOOST, ge=1)
    current_first: bool = Field(default=True, description="a newer memory replacing an older one ranks first")
    replace_margin: float = Field(default=DEFAULT_REPLACE_MARGIN, ge=0, le=1)
    change_places: int = Field(default=DEFAULT_CHANGE_PLACES, ge=0, le=1000)
    same_subject: float = Field(default=DEFAULT_SAME_SUBJECT, ge=-1, le=1.01)  # above 1: never
    related_subject: float = Field(default=DEFAULT_RELATED_SUBJECT, ge=-1, le=1.01)  # -1: any subject
    outdated_factor: float = Field(default=DEFAULT_OUTDATED_FACTOR, gt=0, le=1)
    recency_half_life_days: float = Field(default=DEFAULT_RECENCY_HALF_LIFE_DAYS, ge=0)
    asked_factor: float = Field(default=DEFAULT_ASKED_FACTOR, gt=0, le=1)
    missing_value_factor: float = Field(default=DEFAULT_MISSING_VALUE_FACTOR, gt=0, le=1)  # 1: off
    missing_value_rank: float = Field(default=DEFAULT_MISSING_VALUE_RANK, gt=0, le=1)  # 1: off
    confidence_rerank: CoverageCalibration = Field(DEFAULT_CONFIDENCE_RERANK, description="reranked: a, b, c")
    confidence_late: CoverageCalibration = Field(DEFAULT_CONFIDENCE_LATE, description="not reranked: a, b, c")
    confidence_dense: tuple[FiniteFloat, FiniteFloat] = Field(
        default=DEFAULT_CONFIDENCE_DENSE, description="calibration without late interaction: a, c"
    )
    confidence_leader: CoverageCalibration = Field(DEFAULT_CONFIDENCE_LEADER, description="leader: a, b, c")
    confidence_below: CoverageCalibration = Field(DEFAULT_CONFIDENCE_BELOW, description="below: a, b, c")
    confidence_coverage_mean: float = Field(
        default=DEFAULT_CONFIDENCE_COVERAGE_MEAN, ge=-1, le=1, description="coverage assumed when missing"
    )
    min_confidence: float = Field(
        default=DEFAULT_MIN_CONFIDENCE,
        ge=0,
        le=1,
        description="the agent's and the MCP tool's default threshold: hits below it are not shown",
    )
    procedural_feedback: bool = Field(
        default=False,
        description="rank playbooks by their success record; off: it cost MRR on the eval corpus",
    )
    supersede_penalty: float = Field(default=DEFAULT_SUPERSEDE_PENALTY, ge=0, le=1)
    max_text_chars: int = Field(default=DEFAULT_MAX_TEXT_CHARS, ge=1)
    max_metadata_chars: int = Field(
        default=DEFAULT_MAX_METADATA_CHARS, ge=2, description="a row's metadata, counted as compact JSON"
    )
    embed_batch: int = Field(default=DEFAULT_EMBED_BATCH, ge=1)
    token_batch: int = Field(default=DEFAULT_TOKEN_BATCH, ge=1)
    model_threads: int = Field(default=DEFAULT_MODEL_THREADS, ge=1)
    use_wait_ms: int = Field(default=DEFAULT_USE_WAIT_MS, ge=0)
    import_chunk: int = Field(default=DEFAULT_IMPORT_CHUNK, ge=1)
    # An import sent to `engram serve` with an Idempotency-Key runs as a job (interfaces/rest/imports.py).
    import_workers: int = Field(default=2, ge=1, description="imports a server runs at once; more queue")
    import_jobs_max: int = Field(
        default=16, ge=1, description="imports queued or running per server process; one more gets 503"
    )
    import_wait_s: float = Field(
        default=20.0,
        ge=0,
        le=300,
        description="longest an import request waits for its job before answering 202 with progress: "
        "below the Client's 30 s timeout and common proxies' 60 s",
    )
    import_kept_s: float = Field(
        default=3600.0, gt=0, description="a finished import's result is kept this long for its client"
    )
    erase_wait_s: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="how long erasing a user waits for their running imports (stopped at their next "
        "chunk) and consolidation runs to end before deleting again what they wrote meanwhile",
    )
    ann_min_rows: int = Field(
        default=DEFAULT_ANN_MIN_ROWS,
        ge=0,
        description="rows after which a tenant gets its own HNSW index (SQLite: in the background; "
        "PostgreSQL: at `engram reindex` with the admin URL); 0: never",
    )
    # Consolidation (needs an OpenAI-compatible chat endpoint; nothing else in Engram uses an LLM).
    llm_base_url: str | None = Field(default=None, description="e.g. http://localhost:11434/v1 (Ollama)")
    llm_model: str | None = Field(default=None, description="model name sent to llm_base_url")
    llm_api_key: str | None = Field(default=None, description="bearer key for llm_base_url")
    llm_timeout_s: float = Field(default=60.0, gt=0, description="one chat call; extraction is slow on CPUs")
    llm_max_retries: int = Field(
        default=3, ge=0, description="retries on timeouts, 429 and 5xx, backoff 0.5s*2^n"
    )
    consolidation_batch: int = Field(
        default=40, ge=1, description="episodes per LLM call: fits small contexts"
    )
    dedup_similarity: float = Field(default=0.90, gt=0, le=1, description="cosine at/above: same fact, merge")
    dedup_judge_similarity: float = Field(
        default=0.75, gt=0, le=1, description="cosine from here to dedup_similarity: the LLM judge decides"
    )
    confidence_floor: float = Field(default=0.6, ge=0, le=1, description="extracted facts below are dropped")
    consolidation_worker: bool = Field(default=True, description="run consolidation inside `engram serve`")
    consolidate_every_episodes: int = Field(default=20, ge=1, description="new turns that trigger a run")
    consolidate_every_hours: float = Field(default=24.0, gt=0, description="a run at least this often")
    consolidation_runs: int = Field(  # one per user
        default=2, ge=1, description="runs started over REST/MCP a server runs at once; more queue"
    )
    # The support agent (engram.agent, `engram chat`) talks to the same LLM as consolidation.
    agent_max_tool_rounds: int = Field(
        default=4,
        ge=0,
        le=50,
        description="model calls per turn that may use tools: a looping model still answers",
    )
    # One reply can carry any number of calls: each runs against the store and is echoed back in the
    # next request, so a runaway model would write (or flood the context) without bound.
    agent_max_tool_calls: int = Field(
        default=8, ge=1, le=100, description="tool calls run per round; the rest get a tool error"
    )
    # A model that never stops talking costs time, and its reply is the next request's history.
    agent_max_tokens: int = Field(
        default=1024, ge=16, le=32768, description="max_tokens of each agent chat request"
    )
    agent_profile_facts: int = Field(
        default=24,
        ge=0,
        le=200,
        description="core facts in the system prompt: the user at a glance, small contexts",
    )
    # Consolidation's LLM settings allow one call 60 s and 3 retries: several tool rounds of that made a
    # turn wait ~20 minutes for its fallback reply. A person waiting for a reply gets this bound instead.
    agent_turn_timeout_s: float = Field(
        default=DEFAULT_AGENT_TURN_TIMEOUT_S,
        gt=0,
        le=3600,
        description="the model calls of one agent turn, retries included, end by then (a fallback reply)",
    )
    agent_recall_k: int = Field(
        default=8, ge=1, le=100, description="hits recalled on the raw message before the model's first call"
    )
    # Optional providers; the default is always the packaged local models.
    embedder_onnx_dir: Path | None = Field(None, description="a local ONNX embedder and its tokenizer.json")
    embedder_url: str | None = Field(None, description="an OpenAI-compatible /v1 base URL for embeddings")
    embedder_model: str | None = Field(default=None, description="model name sent to embedder_url")
    embedder_api_key: str | None = Field(default=None, description="bearer key for embedder_url")
    reranker_onnx_dir: Path | None = Field(None, description="a local cross-encoder ONNX model (one logit)")
    reranker_url: str | None = Field(None, description="base URL of a /rerank endpoint (http_rerank.py)")
    reranker_model: str | None = Field(default=None, description="model name sent to reranker_url")
    reranker_api_key: str | None = Field(default=None, description="bearer key for reranker_url")
    # /metrics tells how much the service is used and what it holds: readable by the admin key alone
    # unless the operator opens it (a scraper on a private network), or turns it off.
    metrics: Literal["off", "open", "admin"] = Field(
        default="admin", description="/metrics: admin (the admin key as bearer), open (no key), off"
    )
    otel: bool = Field(
        default=False,
        description="OpenTelemetry spans per request and recall stage (the otel extra); off: not imported",
    )
    # The MCP SDK answers 421 to any Host but loopback (DNS-rebinding guard): a reverse proxy's name
    # must be listed to reach /mcp. Comma-separated in the environment; "host", "host:port", "host:*".
    mcp_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Host headers /mcp accepts besides loopback, e.g. mem.example.com"
    )

    @field_validator("mcp_allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: Any) -> Any:
        return [h.strip() for h in value.split(",") if h.strip()] if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        if _BUILT_IN_ONLY.get():
            return (init_settings,)
        toml = TomlConfigSettingsSource(settings_cls, toml_file=_toml_path())
        return (init_settings, env_settings, toml)

    @classmethod
    def defaults(cls, **values: Any) -> EngramSettings:
        """The defaults above plus ``values``, reading no environment variable and no file."""
        token = _BUILT_IN_ONLY.set(True)
        try:
            return _validated(cls, values)
        finally:
            _BUILT_IN_ONLY.reset(token)

    def store_url(self) -> str:
        return self.store or f"sqlite:///{self.home / 'engram.db'}"


# Set while EngramSettings.defaults() builds an instance: the sources are then the arguments alone.
_BUILT_IN_ONLY: ContextVar[bool] = ContextVar("engram_settings_built_in_only", default=False)


def _toml_path() -> Path | None:
    explicit = os.environ.get("ENGRAM_CONFIG")
    if explicit:
        if not Path(explicit).is_file():  # a typo here would otherwise silently mean "defaults"
            raise ConfigError(f"ENGRAM_CONFIG={explicit}: no such file")
        return Path(explicit)
    home = os.environ.get("ENGRAM_HOME")
    candidate = (Path(home) if home else default_home()) / "engram.toml"
    return candidate if candidate.is_file() else None


def load_settings(**overrides: Any) -> EngramSettings:
    """Settings from ``overrides``, ``ENGRAM_*`` variables and the TOML file (the edges call this once)."""
    return _validated(EngramSettings, overrides)


def _validated(cls: type[EngramSettings], values: dict[str, Any]) -> EngramSettings:
    try:
        return cls(**values)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{_toml_path()} is not valid TOML: {exc}") from None


def _describe(exc: ValidationError) -> str:
    """One line per bad setting, named as a user sets it: ENGRAM_RRF_K (rrf_k in the TOML file)."""
    lines = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "?"
        if error["type"] == "extra_forbidden":
            lines.append(f"unknown setting {name!r}")
            continue
        got = "" if "key" in name else f" (got {str(error['input'])[:60]!r})"  # never echo a secret
        lines.append(f"setting ENGRAM_{name.upper()} ({name} in the TOML file): {error['msg']}{got}")
    return "; ".join(lines)
