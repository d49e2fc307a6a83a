"""Configuration, read once into a frozen :class:`Settings` and passed down explicitly.

:class:`Settings` is made of sections (``settings.kafka``, ``settings.upstream``,
``settings.judge``, ...); each component receives the sections it reads, not the whole.
Every setting also has one flat name, the name users write: ``kafka_bootstrap`` is
``settings.kafka.bootstrap`` and is read from ``REEF_KAFKA_BOOTSTRAP``, the YAML key
``kafka_bootstrap`` (or ``kafka: {bootstrap: ...}``) and the flag ``--kafka-bootstrap``.
A field's flat name is its alias, or its own name where it has none.

Sources, highest precedence first: command-line flags > the YAML file (``-c``) >
environment (``REEF_*``) > defaults. :func:`load_settings` also returns where each value
came from, for ``--print-config``. Nothing else in Reef reads ``os.environ``.

The YAML file holds a ``reef:`` mapping; nested mappings are flattened with ``_``
(``upstream: {url: ...}`` is ``upstream_url``), a section's own field names are accepted
under its name (``sessions: {track: true}`` is ``track_sessions``), and dashes are read
as underscores.
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
from pydantic.fields import FieldInfo

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


class Section(BaseModel):
    """A group of settings that one kind of component reads; frozen, validated once."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class DeploymentSettings(Section):
    """Where state lives, which log, and what every scenario starts with."""

    state_dir: Path = Field(Path(".reef"), description="Where embedded state lives.")
    log: Literal["embedded", "kafka"] = Field("embedded", description="Event log backend.")
    partitions: int = Field(6, ge=1, le=1024, description="Partitions of every event topic.")
    producer_id: str = Field("", description="Instance id written on events (default: host-pid).")
    recipe: str = Field("core", description="Recipe every new scenario is bound to.")
    recipe_config: Path | None = Field(
        None, description="YAML file whose 'recipe:' section configures the recipe."
    )
    seed_dir: Path | None = Field(None, description="Folder new scenarios start from.")
    allow_implicit_scenarios: bool = Field(True, description="First use of a name creates it.")
    rollouts: bool = Field(
        False,
        description="Run the rollout controller (canary releases decided by live outcomes) "
        "with the other processors, and accept rollouts; set it on API replicas and workers.",
    )


class KafkaSettings(Section):
    """The Kafka cluster: where it is, how long an append may wait, topic names."""

    bootstrap: str = Field(
        "127.0.0.1:9092", description="Kafka bootstrap servers.", alias="kafka_bootstrap"
    )
    append_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest wait for Kafka to acknowledge an append (then 503).",
        alias="kafka_append_timeout_s",
    )
    topic_prefix: str = Field(
        "", description="Prefix of every topic and group on Kafka.", alias="kafka_topic_prefix"
    )
    key_topic_segment_ms: int = Field(
        60_000,
        ge=100,
        description="Kafka segment.ms of the compacted key topic: an erased key is cleaned "
        "from the broker's files within about this long plus the cleaner's backoff.",
    )


class WireSettings(Section):
    """How event values are framed on the log, and the schema registry that names them."""

    format: Literal["single-object", "confluent"] = Field(
        "single-object",
        description="Header of every value written: single-object (C3 01 + fingerprint) or "
        "confluent (00 + the registry's schema id; needs schema_registry_url).",
        alias="wire_format",
    )
    schema_registry_url: str | None = Field(
        None,
        description="Confluent-compatible schema registry (its API base URL): `reef topics "
        "create` registers every schema in it, readers resolve Confluent schema ids in it.",
    )


class StreamsSettings(Section):
    """A `reef streams` worker's membership and stall watchdog."""

    session_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Kafka session timeout of a `reef streams` worker.",
        alias="streams_session_timeout_s",
    )
    stall_timeout_s: float = Field(
        60.0,
        ge=0,
        description="A `reef streams` worker whose input waits with no progress (or whose "
        "commit hangs) this long exits with status 75 for its supervisor to restart; 0: never.",
        alias="streams_stall_timeout_s",
    )
    instance_id: str | None = Field(
        None,
        description="Static group membership id of a `reef streams` worker.",
        alias="streams_instance_id",
    )


class ApiSettings(Section):
    """The HTTP API: where it binds, its processes, request limits, shadow copies."""

    host: str = Field("127.0.0.1", description="Address the API binds to.")
    port: int = Field(8900, ge=0, le=65535, description="Port the API binds to.")
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="API processes of `reef serve`, sharing the port (SO_REUSEPORT); the "
        "first also runs what runs once per deployment (embedded: processors, trainer, judge).",
    )
    role: Literal["all", "api"] = Field(
        "all",
        description="What one `reef serve` process runs: all (the API and, on the embedded "
        "log, the processors, trainer and judge) or api (the API alone: the other --workers).",
        alias="serve_role",
    )
    reuse_port: bool = Field(
        False,
        description="Bind the API port with SO_REUSEPORT (set for each of --workers).",
        alias="serve_reuse_port",
    )
    max_body_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1024,
        description="Largest request body (the providers' own limit: Anthropic's is 32 MB).",
    )
    agent_session_headers: bool = Field(
        True,
        description="Record agent CLIs' own session ids (x-claude-code-session-id, Codex's "
        "session-id, thread-id, ...) as session tags (reef/core/agent_headers.py).",
    )
    shadow_max_in_flight: int = Field(
        64, ge=1, description="Shadow copies an API process waits for at most; more are dropped."
    )
    shadow_grace_s: float = Field(
        10.0, ge=0, description="On shutdown, how long shadow copies in flight may finish."
    )


class AuthSettings(Section):
    """Who may call the API: bearer tokens and their scopes."""

    token: SecretStr | None = Field(None, description="Bearer token with every scope.")
    tokens: SecretStr = Field(
        SecretStr(""),
        description="More tokens: 'tok:scope+scope[@scenario-glob],...' (scopes: inference, "
        "report, read, admin).",
    )
    insecure: bool = Field(False, description="Run with no token at all (prints a warning).")


class ReportLimits(Section):
    """Rate limits on reports, per token and per scenario (token buckets)."""

    rate_per_token: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Reports per second one token may send, per API replica (token bucket; "
        "unset: no limit). Over it: 429 with Retry-After.",
        alias="report_rate_per_token",
    )
    burst_per_token: int = Field(
        20,
        ge=1,
        description="Reports one token may send at once before its rate applies.",
        alias="report_burst_per_token",
    )
    rate_per_scenario: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Reports per second one scenario accepts from all tokens, per API replica "
        "(token bucket; unset: no limit).",
        alias="report_rate_per_scenario",
    )
    burst_per_scenario: int = Field(
        100,
        ge=1,
        description="Reports one scenario accepts at once before its rate applies.",
        alias="report_burst_per_scenario",
    )


class JoinOptions(Section):
    """How reports wait for their exchanges, and whether turns merge into one trajectory."""

    park_timeout_s: float = Field(
        300.0,
        gt=0,
        description="How long a report waits for its records.",
        alias="join_park_timeout_s",
    )
    max_parked: int = Field(
        1000, ge=0, description="Reports that may wait per scenario.", alias="join_max_parked"
    )
    merge_sessions: bool = Field(
        False, description="Join multi-turn exchanges into one trajectory."
    )


class SessionOptions(Section):
    """Rebuilding agent sessions from exchanges."""

    track: bool = Field(
        False,
        description="Rebuild agent sessions from exchanges: TurnCompleted on reef.turns.",
        alias="track_sessions",
    )
    ttl_s: float = Field(
        900.0,
        gt=0,
        description="A session idle this long (event time) ends untrained.",
        alias="session_ttl_s",
    )
    max_open: int = Field(
        4096,
        ge=1,
        description="Open sessions per scenario; the least recently active end.",
        alias="max_open_sessions",
    )
    fingerprint_secret: SecretStr | None = Field(
        None, description="Keys the message fingerprints session matching reads (set it)."
    )


class JudgeSettings(Section):
    """The LLM judge of completed turns."""

    turns: bool = Field(
        False,
        description="Judge completed turns (TurnJudged on reef.judgements): in reef serve on "
        "the embedded log, else by reef judge. Needs track_sessions.",
        alias="judge_turns",
    )
    url: str | None = Field(
        None,
        description="Base URL of the judge, in judge_dialect (unset: the upstream's).",
        alias="judge_url",
    )
    dialect: Literal["openai", "sglang"] = Field(
        "openai",
        description="How the judge is asked: OpenAI chat completions, or SGLang's native "
        "/generate (the prompt rendered as ChatML).",
        alias="judge_dialect",
    )
    api_key: SecretStr | None = Field(
        None,
        description="Key of the judge endpoint (unset: the upstream's key).",
        alias="judge_api_key",
    )
    model: str = Field(
        "judge", description="Model name the judge requests carry.", alias="judge_model"
    )
    votes: int = Field(
        3, ge=1, le=32, description="Votes asked per turn (plurality).", alias="judge_votes"
    )
    hints: bool = Field(
        False, description="Also ask for hindsight hints (m more calls).", alias="judge_hints"
    )
    concurrency: int = Field(
        8, ge=1, description="Judge requests in flight at most.", alias="judge_concurrency"
    )
    timeout_s: float = Field(
        120.0,
        gt=0,
        description="Per-request timeout; a timed-out vote is invalid.",
        alias="judge_timeout_s",
    )
    max_tokens: int = Field(
        1024, ge=1, description="Largest judge reply, in tokens.", alias="judge_max_tokens"
    )
    temperature: float = Field(
        0.6, ge=0, description="Sampling temperature of votes.", alias="judge_temperature"
    )


class ArtifactSettings(Section):
    """The artifact store and what of a body goes into it."""

    backend: Literal["local", "s3"] = Field(
        "local", description="Artifact store backend.", alias="artifacts"
    )
    claim_check_bytes: int = Field(
        256 * 1024, ge=1024, description="Bodies larger than this go to the artifact store."
    )
    body_format: Literal["blocks", "compressed", "plain"] = Field(
        "blocks",
        description="How sealed bodies are stored (docs/storage.md): requests as blocks "
        "shared within a session (readers need the artifact store); compressed whole; "
        "or plain (uncompressed).",
    )


class S3Settings(Section):
    """The S3-compatible bucket of the s3 artifact store."""

    endpoint: str = Field(
        "http://127.0.0.1:9000", description="S3 endpoint URL.", alias="s3_endpoint"
    )
    access_key: SecretStr | None = Field(None, description="S3 access key.", alias="s3_access_key")
    secret_key: SecretStr | None = Field(None, description="S3 secret key.", alias="s3_secret_key")
    bucket: str = Field("reef", description="S3 bucket holding artifacts.", alias="s3_bucket")
    region: str = Field("us-east-1", description="S3 region.", alias="s3_region")
    prefix: str = Field("", description="Key prefix inside the bucket.", alias="s3_prefix")


class RecordingSettings(Section):
    """What an exchange's record holds beyond its bodies: tokens, logprobs, cost."""

    tokens: bool = Field(
        False,
        description="Ask engines for token ids + logprobs and record them (RL recipes).",
        alias="record_tokens",
    )
    top_logprobs: int = Field(
        0,
        ge=0,
        le=20,
        description="Also record the top-K token ids + logprobs per generated token "
        "(openclaw_rl distillation); 0: off. Implies record_tokens.",
        alias="record_top_logprobs",
    )
    prices: dict[str, ModelPrice] | None = Field(
        None,
        description="USD per million tokens by model, to record each exchange's cost "
        "(env: JSON text; docs/how-to/cost.md); a model it does not name is recorded without one.",
    )

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


class EngineSettings(Section):
    """The local engine and how sidecars load releases into engines."""

    model: str = Field(
        "tiny",
        description="Model of the local engine started when no upstream is set.",
        alias="engine_model",
    )
    scenario: str | None = Field(
        None,
        description="Scenario whose releases the local engine hot-loads (sidecar).",
        alias="engine_scenario",
    )
    device: str = Field(
        "cpu",
        pattern=r"^(cpu|cuda(:[0-9]+)?)$",
        description="Device of the local engine started when no upstream is set "
        "(reef engine --device: cpu, cuda or cuda:N).",
        alias="engine_device",
    )
    tool_call_parser: str | None = Field(
        None,
        description="Tool-call parser of the local engine (reef engine --tool-call-parser: "
        "qwen25, hermes, llama3, pythonic); unset: the built-in model's own, a folder none.",
        alias="engine_tool_call_parser",
    )
    load_method: Literal["disk", "tensor", "broadcast", "pushed_tensor"] = Field(
        "disk",
        description="How a sidecar loads a full-weights release into an engine on its "
        "machine: disk (/update_weights_from_disk), tensor (/update_weights_from_tensor, "
        "disk when that fails), broadcast or pushed_tensor (the trainer pushes it by "
        "trainer_publish; the sidecar waits engine_push_wait_s for it, then loads from disk).",
        alias="engine_load_method",
    )
    push_wait_s: float = Field(
        5.0,
        ge=0,
        description="With a pushed engine_load_method: how long a sidecar waits for the "
        "trainer's push of a new head before it loads the head from disk.",
        alias="engine_push_wait_s",
    )


class TrainerSettings(Section):
    """Where the trainer runs and how it pushes new heads to engines."""

    in_process: bool = Field(
        True,
        description="On the embedded log, run the recipe's trainer inside reef serve.",
        alias="trainer_in_process",
    )
    publish: Literal["none", "broadcast", "tensor"] = Field(
        "none",
        description="How the trainer pushes a release it got committed as the head to "
        "trainer_publish_engines: broadcast (a weights group: NCCL when training on CUDA, "
        "else gloo), tensor (/update_weights_from_tensor, same machine) or none.",
        alias="trainer_publish",
    )
    publish_engines: tuple[str, ...] = Field(
        (),
        description="Engine base URLs the trainer publishes to (env: comma-separated).",
        alias="trainer_publish_engines",
    )
    publish_timeout_s: float = Field(
        60.0,
        gt=0,
        description="Longest one publish may take (the group's rendezvous too).",
        alias="trainer_publish_timeout_s",
    )

    @field_validator("publish_engines", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        """The environment gives one string: ``http://a:30000,http://b:30000``."""
        if isinstance(value, str):
            return tuple(url.strip() for url in value.split(",") if url.strip())
        return value


class UpstreamSettings(Section):
    """The provider exchanges are relayed to."""

    url: str | None = Field(
        None, description="Provider base URL, e.g. .../v1.", alias="upstream_url"
    )
    api_key: SecretStr | None = Field(
        None, description="Provider key (never recorded).", alias="upstream_api_key"
    )
    model: str | None = Field(
        None, description="Model forced on upstream requests.", alias="upstream_model"
    )
    dialect: Literal["openai", "anthropic"] = Field(
        "openai",
        description="Dialect the upstream speaks.",
        alias="upstream_dialect",
    )
    connect_timeout_s: float = Field(
        5.0, gt=0, description="Upstream connect timeout.", alias="upstream_connect_timeout_s"
    )
    read_timeout_s: float = Field(
        120.0, gt=0, description="Upstream read timeout.", alias="upstream_read_timeout_s"
    )
    max_connections: int = Field(
        200, ge=1, description="Pooled upstream connections.", alias="upstream_max_connections"
    )


class OtelSettings(Section):
    """OpenTelemetry export of spans."""

    enabled: bool = Field(
        False,
        description="Export OpenTelemetry spans of exchanges and reports over OTLP/HTTP "
        "(needs reef[otel]); off: no tracing code runs.",
        alias="otel_enabled",
    )
    endpoint: str = Field(
        "http://127.0.0.1:4318",
        description="OTLP/HTTP receiver base URL (spans go to <endpoint>/v1/traces).",
        alias="otel_endpoint",
    )
    service: str = Field(
        "reef", description="service.name of the exported spans.", alias="otel_service"
    )


class Settings(BaseModel):
    """Every setting Reef has, in sections; each field has a type, a default and one line of
    doc, and is read from ``REEF_<FLAT NAME>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: DeploymentSettings = Field(default_factory=DeploymentSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    wire: WireSettings = Field(default_factory=WireSettings)
    streams: StreamsSettings = Field(default_factory=StreamsSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    reports: ReportLimits = Field(default_factory=ReportLimits)
    join: JoinOptions = Field(default_factory=JoinOptions)
    sessions: SessionOptions = Field(default_factory=SessionOptions)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    artifacts: ArtifactSettings = Field(default_factory=ArtifactSettings)
    s3: S3Settings = Field(default_factory=S3Settings)
    recording: RecordingSettings = Field(default_factory=RecordingSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    trainer: TrainerSettings = Field(default_factory=TrainerSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    otel: OtelSettings = Field(default_factory=OtelSettings)

    @classmethod
    def of(cls, **values: Any) -> Settings:
        """Settings from flat names (as in the environment, without ``REEF_``); the rest
        default: ``Settings.of(log="kafka", kafka_bootstrap="b:9092")``."""
        return cls.from_flat(values)

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> Settings:
        """Settings from a mapping of flat names; an unknown name is a ``ValueError``."""
        unknown = sorted(set(values) - set(PLACES))
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(unknown)}")
        grouped: dict[str, dict[str, Any]] = {}
        for name, value in values.items():
            section, _ = PLACES[name]
            grouped.setdefault(section, {})[name] = value
        return cls.model_validate(grouped)

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name, in the order of :func:`names`."""
        return {name: self.value(name) for name in PLACES}

    def value(self, name: str) -> Any:
        """The value of the setting whose flat name is ``name``."""
        section, field = PLACES[name]
        return getattr(getattr(self, section), field)

    def replace(self, **values: Any) -> Settings:
        """These settings with some changed, by flat name, validated again."""
        return Settings.from_flat({**self.flat(), **values})


def _places() -> dict[str, tuple[str, str]]:
    places: dict[str, tuple[str, str]] = {}
    for section, info in Settings.model_fields.items():
        model = info.annotation
        assert isinstance(model, type) and issubclass(model, Section)
        for field, field_info in model.model_fields.items():
            places[field_info.alias or field] = (section, field)
    return places


PLACES: dict[str, tuple[str, str]] = _places()
"""Each flat name's (section, field)."""


def names() -> list[str]:
    """Every setting's flat name, section by section."""
    return list(PLACES)


def field_info(name: str) -> FieldInfo:
    """The type, default and doc of the setting whose flat name is ``name``."""
    section, field = PLACES[name]
    model = Settings.model_fields[section].annotation
    assert isinstance(model, type) and issubclass(model, Section)
    return model.model_fields[field]


def section_of(name: str) -> str:
    """The section holding the setting whose flat name is ``name``."""
    return PLACES[name][0]


Source = Literal["flag", "file", "env", "default"]


@dataclass(frozen=True, slots=True)
class LoadedSettings:
    settings: Settings
    sources: dict[str, Source]


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = prefix + str(raw_key).replace("-", "_")
        if isinstance(value, Mapping) and key not in PLACES:
            if not prefix and key in Settings.model_fields:
                out.update(_section_values(key, value))
            else:
                out.update(_flatten(value, key + "_"))
        else:
            out[key] = value
    return out


def _section_values(section: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """A section written under its own name: its field names, or flat names prefixed."""
    flat_of = {field: name for name, (owner, field) in PLACES.items() if owner == section}
    out: dict[str, Any] = {}
    for key, value in _flatten(data).items():
        out[flat_of.get(key, key if key in PLACES else f"{section}_{key}")] = value
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
    unknown = sorted(set(values) - set(PLACES))
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join('reef.' + k for k in unknown)}")
    return values


def read_env(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in PLACES:
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
    sources: dict[str, Source] = dict.fromkeys(PLACES, "default")
    for source, values in layers:
        merged.update(values)
        sources.update(dict.fromkeys(values, source))
    try:
        settings = Settings.from_flat(merged)
    except ValidationError as exc:
        problems = "; ".join(f"{_flat_location(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid configuration: {problems}") from exc
    except ValueError as exc:  # a flag or key with no setting of that name
        raise ConfigError(f"invalid configuration: {exc}") from exc
    return LoadedSettings(settings, sources)


def _flat_location(loc: tuple[int | str, ...]) -> str:
    """A validation error's place as the user wrote it: ``('kafka', 'kafka_bootstrap')``
    (a section, then the alias it was given by) is ``kafka_bootstrap``."""
    parts = [str(p) for p in loc]
    if len(parts) >= 2 and parts[0] in Settings.model_fields:
        field = parts[1]
        flat = next((name for name, place in PLACES.items() if place == (parts[0], field)), field)
        parts = [flat, *parts[2:]]
    return ".".join(parts)


def describe(loaded: LoadedSettings) -> list[tuple[str, str, Source]]:
    """(flat name, shown value, source) rows; secrets are masked."""
    rows = []
    for name, value in loaded.settings.flat().items():
        shown = "********" if isinstance(value, SecretStr) else repr(value)
        rows.append((name, shown, loaded.sources[name]))
    return rows
