"""Configuration, read once into a frozen :class:`Settings` and passed down explicitly.

Sources, highest precedence first: command-line flags > the YAML file (``-c``) >
environment (``REEF_*``) > defaults. :func:`load_settings` also returns where each value
came from, for ``--print-config``. Nothing else in Reef reads ``os.environ``.

The YAML file holds a ``reef:`` mapping; nested mappings are flattened with ``_``
(``upstream: {url: ...}`` is ``upstream_url``) and dashes are read as underscores.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from reef.core.errors import ConfigError

ENV_PREFIX = "REEF_"


class ModelPrice(BaseModel):
    """One model's prices, USD per million tokens (reef.core.cost.Price)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0, description="Prompt tokens not read from or written to a cache.")
    output: float = Field(ge=0, description="Generated tokens.")
    cached_input: float | None = Field(
        None, ge=0, description="Prompt tokens read from the provider's cache."
    )
    cache_write: float | None = Field(
        None, ge=0, description="Prompt tokens written to the provider's cache (Anthropic)."
    )
    cache_write_1h: float | None = Field(
        None, ge=0, description="Prompt tokens written to Anthropic's one-hour cache."
    )


class Settings(BaseModel):
    """Every setting Reef has: type, default, one line of doc, env name ``REEF_<NAME>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state_dir: Path = Field(Path(".reef"), description="Where embedded state lives.")
    log: Literal["embedded", "kafka"] = Field("embedded", description="Event log backend.")
    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers.")
    kafka_append_timeout_s: float = Field(
        10.0, gt=0, description="Longest wait for Kafka to acknowledge an append (then 503)."
    )
    key_topic_segment_ms: int = Field(
        60_000,
        ge=100,
        description="Kafka segment.ms of the compacted key topic: an erased key is cleaned "
        "from the broker's files within about this long plus the cleaner's backoff.",
    )
    streams_session_timeout_s: float = Field(
        10.0, gt=0, description="Kafka session timeout of a `reef streams` worker."
    )
    streams_stall_timeout_s: float = Field(
        60.0,
        ge=0,
        description="A `reef streams` worker whose input waits with no progress (or whose "
        "commit hangs) this long exits with status 75 for its supervisor to restart; 0: never.",
    )
    streams_instance_id: str | None = Field(
        None, description="Static group membership id of a `reef streams` worker."
    )
    kafka_topic_prefix: str = Field("", description="Prefix of every topic and group on Kafka.")
    schema_registry_url: str | None = Field(
        None,
        description="Confluent-compatible schema registry (its API base URL): `reef topics "
        "create` registers every schema in it, readers resolve Confluent schema ids in it.",
    )
    wire_format: Literal["single-object", "confluent"] = Field(
        "single-object",
        description="Header of every value written: single-object (C3 01 + fingerprint) or "
        "confluent (00 + the registry's schema id; needs schema_registry_url).",
    )
    partitions: int = Field(6, ge=1, le=1024, description="Partitions of every event topic.")
    producer_id: str = Field("", description="Instance id written on events (default: host-pid).")

    host: str = Field("127.0.0.1", description="Address the API binds to.")
    port: int = Field(8900, ge=0, le=65535, description="Port the API binds to.")
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="API processes of `reef serve`, sharing the port (SO_REUSEPORT); the "
        "first also runs what runs once per deployment (embedded: processors, trainer, judge).",
    )
    serve_role: Literal["all", "api"] = Field(
        "all",
        description="What one `reef serve` process runs: all (the API and, on the embedded "
        "log, the processors, trainer and judge) or api (the API alone: the other --workers).",
    )
    serve_reuse_port: bool = Field(
        False, description="Bind the API port with SO_REUSEPORT (set for each of --workers)."
    )
    token: SecretStr | None = Field(None, description="Bearer token with every scope.")
    tokens: SecretStr = Field(
        SecretStr(""),
        description="More tokens: 'tok:scope+scope[@scenario-glob],...' (scopes: inference, "
        "report, read, admin).",
    )
    insecure: bool = Field(False, description="Run with no token at all (prints a warning).")
    max_body_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1024,
        description="Largest request body (the providers' own limit: Anthropic's is 32 MB).",
    )
    allow_implicit_scenarios: bool = Field(True, description="First use of a name creates it.")
    report_rate_per_token: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Reports per second one token may send, per API replica (token bucket; "
        "unset: no limit). Over it: 429 with Retry-After.",
    )
    report_burst_per_token: int = Field(
        20, ge=1, description="Reports one token may send at once before its rate applies."
    )
    report_rate_per_scenario: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Reports per second one scenario accepts from all tokens, per API replica "
        "(token bucket; unset: no limit).",
    )
    report_burst_per_scenario: int = Field(
        100, ge=1, description="Reports one scenario accepts at once before its rate applies."
    )
    recipe: str = Field("core", description="Recipe every new scenario is bound to.")
    recipe_config: Path | None = Field(
        None, description="YAML file whose 'recipe:' section configures the recipe."
    )
    trainer_in_process: bool = Field(
        True, description="On the embedded log, run the recipe's trainer inside reef serve."
    )

    join_park_timeout_s: float = Field(
        300.0, gt=0, description="How long a report waits for its records."
    )
    join_max_parked: int = Field(1000, ge=0, description="Reports that may wait per scenario.")
    merge_sessions: bool = Field(
        False, description="Join multi-turn exchanges into one trajectory."
    )
    track_sessions: bool = Field(
        False, description="Rebuild agent sessions from exchanges: TurnCompleted on reef.turns."
    )
    session_ttl_s: float = Field(
        900.0, gt=0, description="A session idle this long (event time) ends untrained."
    )
    max_open_sessions: int = Field(
        4096, ge=1, description="Open sessions per scenario; the least recently active end."
    )
    fingerprint_secret: SecretStr | None = Field(
        None, description="Keys the message fingerprints session matching reads (set it)."
    )
    agent_session_headers: bool = Field(
        True,
        description="Record agent CLIs' own session ids (x-claude-code-session-id, Codex's "
        "session-id, thread-id, ...) as session tags (reef/core/agent_headers.py).",
    )
    judge_turns: bool = Field(
        False,
        description="Judge completed turns (TurnJudged on reef.judgements): in reef serve on "
        "the embedded log, else by reef judge. Needs track_sessions.",
    )
    judge_url: str | None = Field(
        None, description="Base URL of the judge, in judge_dialect (unset: the upstream's)."
    )
    judge_dialect: Literal["openai", "sglang"] = Field(
        "openai",
        description="How the judge is asked: OpenAI chat completions, or SGLang's native "
        "/generate (the prompt rendered as ChatML).",
    )
    judge_api_key: SecretStr | None = Field(
        None, description="Key of the judge endpoint (unset: the upstream's key)."
    )
    judge_model: str = Field("judge", description="Model name the judge requests carry.")
    judge_votes: int = Field(3, ge=1, le=32, description="Votes asked per turn (plurality).")
    judge_hints: bool = Field(False, description="Also ask for hindsight hints (m more calls).")
    judge_concurrency: int = Field(8, ge=1, description="Judge requests in flight at most.")
    judge_timeout_s: float = Field(
        120.0, gt=0, description="Per-request timeout; a timed-out vote is invalid."
    )
    judge_max_tokens: int = Field(1024, ge=1, description="Largest judge reply, in tokens.")
    judge_temperature: float = Field(0.6, ge=0, description="Sampling temperature of votes.")
    rollouts: bool = Field(
        False,
        description="Run the rollout controller (canary releases decided by live outcomes) "
        "with the other processors, and accept rollouts; set it on API replicas and workers.",
    )
    shadow_max_in_flight: int = Field(
        64, ge=1, description="Shadow copies an API process waits for at most; more are dropped."
    )
    shadow_grace_s: float = Field(
        10.0, ge=0, description="On shutdown, how long shadow copies in flight may finish."
    )

    artifacts: Literal["local", "s3"] = Field("local", description="Artifact store backend.")
    s3_endpoint: str = Field("http://127.0.0.1:9000", description="S3 endpoint URL.")
    s3_access_key: SecretStr | None = Field(None, description="S3 access key.")
    s3_secret_key: SecretStr | None = Field(None, description="S3 secret key.")
    s3_bucket: str = Field("reef", description="S3 bucket holding artifacts.")
    s3_region: str = Field("us-east-1", description="S3 region.")
    s3_prefix: str = Field("", description="Key prefix inside the bucket.")
    claim_check_bytes: int = Field(
        256 * 1024, ge=1024, description="Bodies larger than this go to the artifact store."
    )
    body_format: Literal["blocks", "compressed", "plain"] = Field(
        "blocks",
        description="How sealed bodies are stored (docs/storage.md): requests as blocks "
        "shared within a session (readers need the artifact store); compressed whole; "
        "or plain (uncompressed).",
    )
    seed_dir: Path | None = Field(None, description="Folder new scenarios start from.")

    record_tokens: bool = Field(
        False, description="Ask engines for token ids + logprobs and record them (RL recipes)."
    )
    record_top_logprobs: int = Field(
        0,
        ge=0,
        le=20,
        description="Also record the top-K token ids + logprobs per generated token "
        "(openclaw_rl distillation); 0: off. Implies record_tokens.",
    )
    engine_model: str = Field(
        "tiny", description="Model of the local engine started when no upstream is set."
    )
    engine_scenario: str | None = Field(
        None, description="Scenario whose releases the local engine hot-loads (sidecar)."
    )
    engine_device: str = Field(
        "cpu",
        pattern=r"^(cpu|cuda(:[0-9]+)?)$",
        description="Device of the local engine started when no upstream is set "
        "(reef engine --device: cpu, cuda or cuda:N).",
    )
    engine_tool_call_parser: str | None = Field(
        None,
        description="Tool-call parser of the local engine (reef engine --tool-call-parser: "
        "qwen25, hermes, llama3, pythonic); unset: the built-in model's own, a folder none.",
    )
    engine_load_method: Literal["disk", "tensor", "broadcast", "pushed_tensor"] = Field(
        "disk",
        description="How a sidecar loads a full-weights release into an engine on its "
        "machine: disk (/update_weights_from_disk), tensor (/update_weights_from_tensor, "
        "disk when that fails), broadcast or pushed_tensor (the trainer pushes it by "
        "trainer_publish; the sidecar waits engine_push_wait_s for it, then loads from disk).",
    )
    engine_push_wait_s: float = Field(
        5.0,
        ge=0,
        description="With a pushed engine_load_method: how long a sidecar waits for the "
        "trainer's push of a new head before it loads the head from disk.",
    )
    trainer_publish: Literal["none", "broadcast", "tensor"] = Field(
        "none",
        description="How the trainer pushes a release it got committed as the head to "
        "trainer_publish_engines: broadcast (a weights group: NCCL when training on CUDA, "
        "else gloo), tensor (/update_weights_from_tensor, same machine) or none.",
    )
    trainer_publish_engines: tuple[str, ...] = Field(
        (),
        description="Engine base URLs the trainer publishes to (env: comma-separated).",
    )
    trainer_publish_timeout_s: float = Field(
        60.0, gt=0, description="Longest one publish may take (the group's rendezvous too)."
    )

    upstream_url: str | None = Field(None, description="Provider base URL, e.g. .../v1.")
    upstream_api_key: SecretStr | None = Field(None, description="Provider key (never recorded).")
    upstream_model: str | None = Field(None, description="Model forced on upstream requests.")
    upstream_dialect: Literal["openai", "anthropic"] = Field(
        "openai", description="Dialect the upstream speaks."
    )
    upstream_connect_timeout_s: float = Field(5.0, gt=0, description="Upstream connect timeout.")
    upstream_read_timeout_s: float = Field(120.0, gt=0, description="Upstream read timeout.")
    upstream_max_connections: int = Field(200, ge=1, description="Pooled upstream connections.")
    prices: dict[str, ModelPrice] | None = Field(
        None,
        description="USD per million tokens by model, to record each exchange's cost "
        "(env: JSON text; docs/how-to/cost.md); a model it does not name is recorded without one.",
    )

    otel_enabled: bool = Field(
        False,
        description="Export OpenTelemetry spans of exchanges and reports over OTLP/HTTP "
        "(needs reef[otel]); off: no tracing code runs.",
    )
    otel_endpoint: str = Field(
        "http://127.0.0.1:4318",
        description="OTLP/HTTP receiver base URL (spans go to <endpoint>/v1/traces).",
    )
    otel_service: str = Field("reef", description="service.name of the exported spans.")

    @field_validator("prices", mode="before")
    @classmethod
    def _json_text(cls, value: object) -> object:
        """The environment gives one string: a JSON object of model -> prices."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(f"not JSON: {exc}") from exc
        return value

    @field_validator("trainer_publish_engines", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        """The environment gives one string: ``http://a:30000,http://b:30000``."""
        if isinstance(value, str):
            return tuple(url.strip() for url in value.split(",") if url.strip())
        return value


Source = Literal["flag", "file", "env", "default"]


@dataclass(frozen=True, slots=True)
class LoadedSettings:
    settings: Settings
    sources: dict[str, Source]


def _fields() -> set[str]:
    return set(Settings.model_fields)


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = prefix + str(raw_key).replace("-", "_")
        if isinstance(value, Mapping) and key not in _fields():
            out.update(_flatten(value, key + "_"))
        else:
            out[key] = value
    return out


def read_file(path: Path) -> dict[str, Any]:
    """The ``reef:`` section of a YAML config file, flattened; unknown keys are errors."""
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    if not isinstance(document, Mapping):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    section = document.get("reef", {})
    if not isinstance(section, Mapping):
        raise ConfigError(f"{path}: 'reef' must be a mapping")
    values = _flatten(section)
    unknown = sorted(set(values) - _fields())
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join('reef.' + k for k in unknown)}")
    return values


def read_env(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in _fields():
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            values[name] = raw
    return values


def load_settings(
    flags: Mapping[str, Any] | None = None,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> LoadedSettings:
    """Merge the sources by precedence and validate once."""
    layers: list[tuple[Source, dict[str, Any]]] = [
        ("env", read_env(os.environ if environ is None else environ)),
        ("file", read_file(config_file) if config_file else {}),
        ("flag", {k: v for k, v in (flags or {}).items() if v is not None}),
    ]
    merged: dict[str, Any] = {}
    sources: dict[str, Source] = dict.fromkeys(_fields(), "default")
    for source, values in layers:
        merged.update(values)
        sources.update(dict.fromkeys(values, source))
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"invalid configuration: {problems}") from exc
    return LoadedSettings(settings, sources)


def describe(loaded: LoadedSettings) -> list[tuple[str, str, Source]]:
    """(name, shown value, source) rows; secrets are masked."""
    rows = []
    for name in Settings.model_fields:
        value = getattr(loaded.settings, name)
        shown = "********" if isinstance(value, SecretStr) else repr(value)
        rows.append((name, shown, loaded.sources[name]))
    return rows
