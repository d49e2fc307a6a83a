"""Routing during a rollout (reef.core.routing): the same arm in another process, the
candidate's share within sampling error, a session's arm fixed while its rollout is
active, and independent draws for two rollouts of one scenario."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from reef.core.routing import DRAWS, Route, draw, route, routing_key, takes
from tests.support.rollouts import committed, decided, rollout_book, started

REPO = Path(__file__).resolve().parents[4]
KEYS = [routing_key(f"session-{n}", "unused") for n in range(300)]


def random_keys(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [routing_key(None, f"{rng.getrandbits(128):032x}") for _ in range(count)]


def sampling_error(share: float, count: int) -> float:
    """Five standard deviations of a binomial fraction: a fixed-seed test never flakes,
    and a biased draw (off by a tenth of the share at 100k keys) still fails."""
    return 5 * math.sqrt(share * (1 - share) / count)


def test_the_draw_is_pinned() -> None:
    """Changing the draw would move live sessions between releases during an upgrade."""
    assert draw("shop", "r1", "session:alice") == 0x8EB61BF3D297704B
    digest = hashlib.blake2b(b"4:shop2:r1session:alice", digest_size=8, person=b"reef-route")
    assert draw("shop", "r1", "session:alice") == int(digest.hexdigest(), 16)
    # length prefixes: moving a character between fields changes the text hashed
    assert draw("shop", "r1x", "y") != draw("shop", "r1", "xy")
    assert routing_key("alice", "rec") == "session:alice"
    assert routing_key(None, "rec") == "receipt:rec"
    assert routing_key("", "rec") == "receipt:rec"


def test_another_process_routes_every_key_the_same() -> None:
    here = [route("shop", key, rollout_book(share=0.3)) for key in KEYS]
    script = (
        "import json, sys\n"
        "from reef.core.routing import route\n"
        "from tests.support.rollouts import rollout_book\n"
        "book = rollout_book(share=0.3)\n"
        "keys = json.loads(sys.stdin.read())\n"
        "print(json.dumps([route('shop', k, book).arm for k in keys]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # hash() would differ; the route must not
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(KEYS),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=True,
        timeout=60,
    )
    there = json.loads(done.stdout)
    assert there == [r.arm for r in here if r is not None]
    assert {"head", "candidate"} == set(there)


@pytest.mark.parametrize("share", [0.05, 0.3])
def test_the_candidates_fraction_is_the_share_within_sampling_error(share: float) -> None:
    book = rollout_book(share=share)
    keys = random_keys(100_000, seed=int(share * 100))
    routes = [route("shop", key, book) for key in keys]
    taken = sum(1 for r in routes if r is not None and r.arm == "candidate")
    assert abs(taken / len(keys) - share) <= sampling_error(share, len(keys)), taken
    assert all(r is not None and r.shadow_release_id is None for r in routes)


def test_a_shadow_rollout_returns_the_head_and_copies_a_share_to_the_candidate() -> None:
    book = rollout_book(mode="shadow", share=0.25)
    keys = random_keys(20_000, seed=7)
    routes = [route("shop", key, book) for key in keys]
    assert {(r.arm, r.release_id) for r in routes if r is not None} == {("head", "h0")}
    copied = [r for r in routes if r is not None and r.shadow_release_id == "c1"]
    assert abs(len(copied) / len(keys) - 0.25) <= sampling_error(0.25, len(keys))
    assert {r.rollout_id for r in copied} == {"r1"}


def test_a_sessions_arm_does_not_change_while_the_rollout_is_active() -> None:
    book = rollout_book(share=0.5)
    first = [route("shop", key, book) for key in KEYS]
    for event in [
        committed("shop", "c2", pending=True),  # another held release
        started("shop", "r2", "c2", "h0"),  # a second start: refused
        decided("shop", "elsewhere"),  # a decision on another rollout: ignored
        committed("docs", "d0", operation="creation"),  # another scenario
        committed("docs", "d1", pending=True),
        started("docs", "r1", "d1", "d0", share=0.9),
    ]:
        book.apply(event)
        assert [route("shop", key, book) for key in KEYS] == first
    assert {r.release_id for r in first if r is not None} == {"h0", "c1"}


def test_after_the_decision_everyone_gets_the_same_release() -> None:
    promoted = rollout_book()
    promoted.apply(decided("shop", "r1", "promoted"))
    assert {route("shop", k, promoted) for k in KEYS} == {Route("candidate", "c1", None, "r1")}
    promoted.apply(committed("shop", "p2", operation="promote", target="c1"))
    assert {route("shop", k, promoted) for k in KEYS} == {Route("head", "p2")}

    rolled_back = rollout_book()
    rolled_back.apply(decided("shop", "r1", "rolled_back", "max_duration"))
    assert {route("shop", k, rolled_back) for k in KEYS} == {Route("head", "h0")}


def test_an_unknown_scenario_has_no_route() -> None:
    assert route("nowhere", "session:x", rollout_book()) is None


def test_two_rollouts_of_a_scenario_draw_independently() -> None:
    """Independent draws: the keys both rollouts give the candidate are share^2 of all."""
    keys = random_keys(100_000, seed=11)
    first = [takes(0.5, draw("shop", "r1", key)) for key in keys]
    second = [takes(0.5, draw("shop", "r2", key)) for key in keys]
    both = sum(a and b for a, b in zip(first, second, strict=True))
    assert abs(both / len(keys) - 0.25) <= sampling_error(0.25, len(keys)), both
    assert abs(sum(second) / len(keys) - 0.5) <= sampling_error(0.5, len(keys))


def test_the_share_bounds_are_exact() -> None:
    assert takes(1.0, DRAWS - 1) and not takes(0.0, 0)
    assert takes(0.5, DRAWS // 2 - 1) and not takes(0.5, DRAWS // 2)
