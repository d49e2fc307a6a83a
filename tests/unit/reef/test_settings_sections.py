"""Settings in sections, read by the flat names users write.

Every setting has one flat name (``kafka_bootstrap``) that the environment, the YAML file
and the flags use, and one place in code (``settings.kafka.bootstrap``); these tests hold
the two together for every setting, so a field added to a section without a reachable
name, or two settings sharing one, fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from reef.core.errors import ConfigError
from reef.hosts.worker import settings_environment
from reef.settings import (
    ENV_PREFIX,
    PLACES,
    KafkaSettings,
    ModelPrice,
    Section,
    Settings,
    describe,
    field_info,
    load_settings,
    names,
)


def test_every_section_field_has_exactly_one_flat_name() -> None:
    places = set(PLACES.values())
    fields = set()
    for section, info in Settings.model_fields.items():
        model = info.annotation
        assert isinstance(model, type) and issubclass(model, Section), section
        fields |= {(section, field) for field in model.model_fields}
    assert places == fields
    assert len(places) == len(PLACES) == len(names())


@pytest.mark.parametrize("name", names())
def test_each_flat_name_reaches_its_field_from_env_file_and_flag(name: str, tmp_path: Path) -> None:
    raw = _sample(name)
    section, field = PLACES[name]
    from_env = load_settings(environ={ENV_PREFIX + name.upper(): _as_env(raw)})
    config = tmp_path / "reef.yaml"
    config.write_text(f"reef:\n  {name}: {_as_yaml(raw)}\n")
    from_file = load_settings(config_file=config, environ={})
    from_flag = load_settings(flags={name: raw}, environ={})
    for loaded, source in ((from_env, "env"), (from_file, "file"), (from_flag, "flag")):
        value = getattr(getattr(loaded.settings, section), field)
        assert _plain(value) == _plain(loaded.settings.value(name)), (name, source)
        assert _plain(value) != _plain(field_info(name).get_default(call_default_factory=True))
        assert loaded.sources[name] == source


def test_a_section_may_be_written_under_its_own_name_in_the_file(tmp_path: Path) -> None:
    config = tmp_path / "reef.yaml"
    config.write_text(
        "reef:\n"
        "  kafka: {bootstrap: 'k:1', topic_prefix: p-}\n"
        "  sessions: {track: true, ttl_s: 5}\n"
        "  judge: {turns: true, votes: 5}\n"
        "  upstream: {url: 'http://u/v1'}\n"
    )
    settings = load_settings(config_file=config, environ={}).settings
    assert (settings.kafka.bootstrap, settings.kafka.topic_prefix) == ("k:1", "p-")
    assert (settings.sessions.track, settings.sessions.ttl_s) == (True, 5.0)
    assert (settings.judge.turns, settings.judge.votes) == (True, 5)
    assert settings.upstream.url == "http://u/v1"


def test_an_unknown_name_is_refused_by_name(tmp_path: Path) -> None:
    config = tmp_path / "reef.yaml"
    config.write_text("reef:\n  kafka: {bootstrapp: 'k:1'}\n")
    with pytest.raises(ConfigError, match=r"reef\.kafka_bootstrapp"):
        load_settings(config_file=config, environ={})
    with pytest.raises(ValueError, match="kafka_bootstrapp"):
        Settings.of(kafka_bootstrapp="k:1")


def test_a_bad_value_is_reported_under_its_flat_name() -> None:
    with pytest.raises(ConfigError, match=r"judge_votes: Input should be less than or equal"):
        load_settings(environ={"REEF_JUDGE_VOTES": "99"})
    with pytest.raises(ConfigError, match=r"serve_role: Input should be 'all' or 'api'"):
        load_settings(flags={"serve_role": "both"}, environ={})


def test_sections_are_frozen_and_replace_validates_again() -> None:
    settings = Settings.of(kafka_bootstrap="a:1")
    with pytest.raises(ValueError):
        settings.kafka.bootstrap = "b:2"  # type: ignore[misc]
    moved = settings.replace(kafka_bootstrap="b:2", port=9)
    assert (moved.kafka.bootstrap, moved.api.port, settings.kafka.bootstrap) == ("b:2", 9, "a:1")
    with pytest.raises(ValueError):
        settings.replace(port=-1)
    assert KafkaSettings(bootstrap="c:3").bootstrap == "c:3"  # by field name in code


def test_print_config_rows_use_flat_names_and_mask_secrets() -> None:
    loaded = load_settings(
        flags={"upstream_api_key": "sk-secret"}, environ={"REEF_KAFKA_BOOTSTRAP": "e:1"}
    )
    rows = {name: (shown, source) for name, shown, source in describe(loaded)}
    assert list(rows) == names()
    assert rows["upstream_api_key"] == ("********", "flag")
    assert rows["kafka_bootstrap"] == ("'e:1'", "env")
    assert rows["port"] == ("8900", "default")


def test_a_child_process_environment_reads_back_as_the_same_settings(tmp_path: Path) -> None:
    settings = Settings.of(**{name: _sample(name) for name in names()})
    env = settings_environment(settings)
    assert load_settings(environ=env).settings == settings


# a non-default value for every setting, as a flag would give it
SAMPLES: dict[str, Any] = {
    "log": "kafka",
    "wire_format": "confluent",
    "serve_role": "api",
    "upstream_dialect": "anthropic",
    "judge_dialect": "sglang",
    "artifacts": "s3",
    "body_format": "plain",
    "engine_device": "cuda:1",
    "engine_load_method": "tensor",
    "trainer_publish": "broadcast",
    "trainer_publish_engines": ("http://a:1", "http://b:2"),
    "prices": {"m": ModelPrice(input=1.0, output=2.0, cached_input=0.5)},
}


def _sample(name: str) -> Any:
    if name in SAMPLES:
        return SAMPLES[name]
    info = field_info(name)
    default = info.get_default(call_default_factory=True)
    annotation = str(info.annotation)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default + 1.5
    if isinstance(default, Path) or "Path" in annotation:
        return Path(f"/tmp/sample-{name}")
    if "float" in annotation:
        return 2.5
    if "int" in annotation:
        return 3
    return f"sample-{name}"


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return {
            k: _plain(v.model_dump() if hasattr(v, "model_dump") else v) for k, v in value.items()
        }
    return value


def _as_env(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, dict):
        import json

        return json.dumps(_plain(value))
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _as_yaml(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(value) + "]"
    if isinstance(value, dict):
        import json

        return json.dumps(_plain(value))
    if isinstance(value, bool):
        return str(value).lower()
    return f"'{value}'" if isinstance(value, str | Path) else str(value)
