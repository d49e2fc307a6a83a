"""Usage as each dialect reports it (buffered and streamed), normalised and priced."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reef.api.dialects import StreamAssembly, encode_event, parse_event, usage_of
from reef.core.cost import NO_USAGE, Billable, SpendLedger, Usage, exchange_cost
from reef.core.events import InferenceRecorded
from reef.settings import ModelPrice
from reef_dev.events import inference

AT = datetime(2026, 1, 1, tzinfo=UTC)
PRICES = {
    "claude": ModelPrice(input=3.0, cached_input=0.3, cache_write=3.75, output=15.0),
    "gpt": ModelPrice(input=2.5, cached_input=1.25, output=10.0),
    "plain": ModelPrice(input=1.0, output=2.0),
}

ANTHROPIC = {
    "input_tokens": 100,
    "cache_creation_input_tokens": 2000,
    "cache_read_input_tokens": 5000,
    "output_tokens": 50,
}
CHAT = {
    "prompt_tokens": 6000,
    "completion_tokens": 50,
    "total_tokens": 6050,
    "prompt_tokens_details": {"cached_tokens": 5000, "audio_tokens": 0},
}
RESPONSES = {
    "input_tokens": 6000,
    "input_tokens_details": {"cached_tokens": 5000},
    "output_tokens": 50,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 6050,
}


def test_anthropic_usage_leaves_the_cache_out_of_its_input() -> None:
    usage = usage_of({"usage": ANTHROPIC})
    assert usage == Usage(100, 50, 5000, 2000, input_includes_cached=False)
    assert usage.billable() == Billable(100, 5000, 2000, 50)


@pytest.mark.parametrize("shape", [CHAT, RESPONSES], ids=["chat", "responses"])
def test_openai_usage_counts_the_cache_in_its_input(shape: dict[str, Any]) -> None:
    usage = usage_of({"usage": shape})
    assert usage == Usage(6000, 50, 5000, None, input_includes_cached=True)
    assert usage.billable() == Billable(1000, 5000, 0, 50)


@pytest.mark.parametrize(
    "body",
    [{}, {"usage": None}, {"usage": "lots"}, {"usage": {}}],
    ids=["absent", "null", "text", "empty"],
)
def test_a_response_without_usage_has_no_billable_counts(body: dict[str, Any]) -> None:
    usage = usage_of(body)
    assert usage.input_tokens is None and usage.output_tokens is None
    assert usage.billable() is None
    assert exchange_cost("claude", usage, PRICES) is None


def test_counts_of_the_wrong_type_are_not_counted() -> None:
    usage = usage_of({"usage": {"prompt_tokens": True, "completion_tokens": "3"}})
    assert (usage.input_tokens, usage.output_tokens) == (None, None)


def test_plain_usage_without_cache_fields_prices_as_before() -> None:
    usage = usage_of({"usage": {"input_tokens": 10, "output_tokens": 4}})
    assert usage.billable() == Billable(10, 0, 0, 4)
    assert exchange_cost("plain", usage, PRICES) == pytest.approx((10 * 1.0 + 4 * 2.0) / 1e6)


def test_each_kind_of_token_is_priced_at_its_own_rate() -> None:
    cost = exchange_cost("claude", usage_of({"usage": ANTHROPIC}), PRICES)
    expected = (100 * 3.0 + 5000 * 0.3 + 2000 * 3.75 + 50 * 15.0) / 1e6
    assert cost == pytest.approx(expected)
    chat = exchange_cost("gpt", usage_of({"usage": CHAT}), PRICES)
    assert chat == pytest.approx((1000 * 2.5 + 5000 * 1.25 + 50 * 10.0) / 1e6)
    responses = exchange_cost("gpt", usage_of({"usage": RESPONSES}), PRICES)
    assert responses == chat  # the same exchange in two OpenAI shapes costs the same


def test_the_same_prompt_costs_the_same_in_both_dialects() -> None:
    """6,000 prompt tokens of which 5,000 cached, 50 out: one split, one price."""
    prices = {"m": ModelPrice(input=2.0, cached_input=0.5, cache_write=2.5, output=8.0)}
    anthropic = {"input_tokens": 1000, "cache_read_input_tokens": 5000, "output_tokens": 50}
    costs = {
        exchange_cost("m", usage_of({"usage": shape}), prices)
        for shape in (anthropic, CHAT, RESPONSES)
    }
    assert len(costs) == 1


def test_unknown_model_missing_model_or_no_table_gives_no_cost() -> None:
    usage = usage_of({"usage": CHAT})
    assert exchange_cost("gpt-unknown", usage, PRICES) is None
    assert exchange_cost("GPT", usage, PRICES) is None  # exact names only
    assert exchange_cost(None, usage, PRICES) is None
    assert exchange_cost("gpt", usage, None) is None
    assert exchange_cost("gpt", usage, {}) is None
    assert exchange_cost("gpt", NO_USAGE, PRICES) is None


def test_a_missing_count_gives_no_cost() -> None:
    assert exchange_cost("plain", Usage(input_tokens=10), PRICES) is None
    assert exchange_cost("plain", Usage(output_tokens=10), PRICES) is None


def test_one_hour_cache_writes_are_priced_at_their_own_rate() -> None:
    usage = usage_of(
        {
            "usage": {
                **ANTHROPIC,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 500,
                    "ephemeral_1h_input_tokens": 1500,
                },
            }
        }
    )
    assert usage.cache_write_tokens == 2000 and usage.cache_write_1h_tokens == 1500
    assert usage.billable() == Billable(100, 5000, 2000, 50, cache_write_1h=1500)
    assert exchange_cost("claude", usage, PRICES) is None  # no one-hour price: no guess
    prices = {"claude": PRICES["claude"].model_copy(update={"cache_write_1h": 6.0})}
    expected = (100 * 3.0 + 5000 * 0.3 + 500 * 3.75 + 1500 * 6.0 + 50 * 15.0) / 1e6
    assert exchange_cost("claude", usage, prices) == pytest.approx(expected)
    five_minutes = {**ANTHROPIC, "cache_creation": {"ephemeral_1h_input_tokens": 0}}
    assert exchange_cost("claude", usage_of({"usage": five_minutes}), PRICES) == pytest.approx(
        (100 * 3.0 + 5000 * 0.3 + 2000 * 3.75 + 50 * 15.0) / 1e6
    )


def test_cache_tokens_without_their_price_give_no_cost_rather_than_a_guess() -> None:
    assert exchange_cost("plain", usage_of({"usage": CHAT}), PRICES) is None
    writes = {"input_tokens": 10, "cache_creation_input_tokens": 20, "output_tokens": 1}
    assert exchange_cost("gpt", usage_of({"usage": writes}), PRICES) is None
    # zero cached tokens need no cached price
    zero = {**CHAT, "prompt_tokens_details": {"cached_tokens": 0}}
    assert exchange_cost("plain", usage_of({"usage": zero}), PRICES) is not None


# -- streams ------------------------------------------------------------------------------


def _assembled(frames: list[bytes]) -> Usage:
    assembly = StreamAssembly()
    for frame in frames:
        assembly.observe(parse_event(frame))
    return assembly.usage


def test_anthropic_stream_usage_from_message_start_and_message_delta() -> None:
    start_usage = {
        "input_tokens": 100,
        "cache_creation_input_tokens": 2000,
        "cache_read_input_tokens": 5000,
        "output_tokens": 1,
    }
    frames = [
        encode_event("message_start", {"type": "message_start", "message": {"usage": start_usage}}),
        encode_event(
            "content_block_delta",
            {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}},
        ),
        encode_event("message_delta", {"type": "message_delta", "usage": {"output_tokens": 50}}),
        encode_event("message_stop", {"type": "message_stop"}),
    ]
    assert _assembled(frames) == usage_of({"usage": ANTHROPIC})


def test_anthropic_stream_keeps_the_one_hour_writes_of_message_start() -> None:
    creation = {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 2000}
    start = {
        "type": "message_start",
        "message": {"usage": {**ANTHROPIC, "cache_creation": creation}},
    }
    delta = {"type": "message_delta", "usage": {"output_tokens": 50}}
    usage = _assembled([encode_event("message_start", start), encode_event("message_delta", delta)])
    assert (usage.cache_write_tokens, usage.cache_write_1h_tokens, usage.output_tokens) == (
        2000,
        2000,
        50,
    )


def test_anthropic_stream_broken_before_message_delta_has_no_output_count() -> None:
    start = {"type": "message_start", "message": {"usage": {**ANTHROPIC, "output_tokens": 1}}}
    usage = _assembled([encode_event("message_start", start)])
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (100, 5000, None)


def test_anthropic_message_delta_counts_replace_message_start_counts() -> None:
    start = {"type": "message_start", "message": {"usage": {"input_tokens": 7, "output_tokens": 1}}}
    delta = {"type": "message_delta", "usage": {**ANTHROPIC}}
    usage = _assembled([encode_event("message_start", start), encode_event("message_delta", delta)])
    assert usage == usage_of({"usage": ANTHROPIC})


def test_chat_stream_usage_from_its_usage_chunk() -> None:
    base = {"id": "c", "object": "chat.completion.chunk", "model": "gpt"}
    frames = [
        encode_event(None, {**base, "choices": [{"delta": {"content": "hi"}}], "usage": None}),
        encode_event(None, {**base, "choices": [], "usage": CHAT}),
        b"data: [DONE]\n\n",
    ]
    assert _assembled(frames) == usage_of({"usage": CHAT})


def test_responses_stream_usage_from_response_completed() -> None:
    completed = {"type": "response.completed", "response": {"usage": RESPONSES}}
    frames = [
        encode_event("response.output_text.delta", {"type": "response.output_text.delta"}),
        encode_event("response.completed", completed),
    ]
    assert _assembled(frames) == usage_of({"usage": RESPONSES})


# -- the ledger ---------------------------------------------------------------------------


def _record(scenario: str, n: int, release: str, **fields: Any) -> InferenceRecorded:
    return replace(inference(scenario, f"rec-{n}", AT, release=release), **fields)


def test_the_ledger_sums_per_scenario_and_serving_release() -> None:
    ledger = SpendLedger()
    anthropic = {"dialect": "anthropic", "route": "/v1/messages"}
    ledger.apply(
        _record(
            "a", 1, "r1", input_tokens=100, output_tokens=50, cost_usd=0.25,
            cache_read_input_tokens=5000, cache_creation_input_tokens=2000, **anthropic,
        )
    )  # fmt: skip
    ledger.apply(
        _record(
            "a", 2, "r1", served_release_id="r2", input_tokens=6000, output_tokens=50,
            cache_read_input_tokens=5000, cost_usd=0.5,
        )
    )  # fmt: skip
    ledger.apply(_record("a", 3, "r2", input_tokens=10, output_tokens=1))
    ledger.apply(_record("a", 4, "r2"))  # no usage reported
    ledger.apply(_record("b", 1, "r9", input_tokens=1, output_tokens=1, cost_usd=1.0))
    by_release = ledger.by_release("a")
    assert set(by_release) == {"r1", "r2"}
    assert by_release["r1"].as_json() == {
        "exchanges": 1,
        "metered": 1,
        "priced": 1,
        "uncached_input_tokens": 100,
        "cache_read_tokens": 5000,
        "cache_write_tokens": 2000,
        "output_tokens": 50,
        "cost_usd": 0.25,
    }
    total = ledger.scenario("a")
    assert (total.exchanges, total.metered, total.priced) == (4, 3, 2)
    assert total.uncached_input_tokens == 100 + 1000 + 10
    assert total.cache_read_tokens == 10000 and total.cost_usd == pytest.approx(0.75)
    assert ledger.scenario("b").cost_usd == 1.0
    assert ledger.scenario("none").exchanges == 0


def test_prices_read_from_the_environment_as_json() -> None:
    from reef.core.errors import ConfigError
    from reef.settings import load_settings

    table = {"claude": {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15}}
    settings = load_settings(environ={"REEF_PRICES": json.dumps(table)}).settings
    assert settings.recording.prices == {"claude": PRICES["claude"]}
    assert load_settings(environ={}).settings.recording.prices is None
    for bad in ("{not json", '{"m": {"input": 1}}', '{"m": {"input": -1, "output": 1}}'):
        with pytest.raises(ConfigError, match="prices"):
            load_settings(environ={"REEF_PRICES": bad})
    with pytest.raises(ConfigError, match="prices"):
        load_settings(environ={"REEF_PRICES": '{"m": {"input": 1, "output": 1, "cached": 1}}'})


def test_prices_read_from_the_config_file_keep_model_names_as_written(tmp_path: Path) -> None:
    from reef.settings import load_settings

    config = tmp_path / "reef.yaml"
    config.write_text(
        "reef:\n  prices:\n    claude-sonnet-4-5:\n      input: 3\n      output: 15\n"
        "      cached_input: 0.3\n      cache_write: 3.75\n"
    )
    settings = load_settings(config_file=config, environ={}).settings
    assert settings.recording.prices == {
        "claude-sonnet-4-5": ModelPrice(input=3, output=15, cached_input=0.3, cache_write=3.75)
    }
