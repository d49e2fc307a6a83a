"""SIGKILL of the S3 server (SeaweedFS) under load, with artifacts in S3.

``reef serve`` (embedded log) keeps its artifacts in the local S3 (a fresh key prefix),
claim-checks every request body over 1 KiB into it, and runs its in-process trainer (a
torch-free recipe that publishes a release folder to S3 for every batch of 4 samples).
While the load runs the S3 server is SIGKILLed, then restarted:

* writes that need S3 fail cleanly: the client gets an error and no receipt, nothing
  half-written is in the log (no record whose claim-checked body is missing, no
  proposal or release whose manifest or objects are missing: the deep audit reads every
  object back from S3 and checks its sha256);
* once S3 is back the service resumes by itself: requests are acknowledged again and
  the trainer commits releases again.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from reef.artifacts import open_store
from reef.artifacts.content import ContentStore
from reef.core import topics
from reef.core.events import ReleaseCommitted, ReleaseProposed
from reef.log.embedded import EmbeddedLog
from reef.settings import Settings
from reef.testing.servers import UpstreamProcess, start_reef
from reef_dev.load import SteadyLoad
from tests.support import consistency
from tests.support.faults import TOKEN, FaultRow, FaultTable, create_scenarios, reef_env

pytestmark = [pytest.mark.s3, pytest.mark.slow]

RATE = 8.0
DOWN_SECONDS = 6.0
RECIPE = "tests.support.fake_recipe:FakeRecipe"


def trained(state_dir: Path, scenarios: list[str]) -> list[ReleaseCommitted]:
    events, _ = consistency.read_events(
        lambda: EmbeddedLog(state_dir / "log.sqlite3"), scenarios, (topics.RELEASES,)
    )
    return [e for e in events if isinstance(e, ReleaseCommitted) and e.operation == "training"]


def wait_trained(state_dir: Path, scenarios: list[str], more_than: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while (count := len(trained(state_dir, scenarios))) <= more_than:
        assert time.monotonic() < deadline, f"no training release beyond {more_than} in time"
        time.sleep(0.5)
    return count


def test_sigkill_of_the_s3_server(
    s3: Any, upstream: UpstreamProcess, fault_table: FaultTable, tmp_path: Path
) -> None:
    assert s3.managed, "the S3 server must be the local stack's (the test kills it)"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "recipe:\n  batching: {batch_size: 4}\n"
        "  eligibility: {max_staleness: 1000}\n  train_seconds: 0.2\n"
    )
    s3_env = {
        "REEF_ARTIFACTS": "s3",
        "REEF_S3_ENDPOINT": s3.endpoint,
        "REEF_S3_ACCESS_KEY": s3.access_key,
        "REEF_S3_SECRET_KEY": s3.secret_key,
        "REEF_S3_BUCKET": s3.bucket,
        "REEF_S3_REGION": s3.region,
        "REEF_S3_PREFIX": f"fault-{uuid.uuid4().hex[:10]}/",
    }
    env = {
        **s3_env,
        "REEF_CLAIM_CHECK_BYTES": "1024",
        # bodies uncompressed, so every request over 1 KiB is claim-checked into S3
        "REEF_BODY_FORMAT": "plain",
        "REEF_RECIPE": RECIPE,
        "REEF_RECIPE_CONFIG": str(recipe),
    }
    state = tmp_path / "state"
    reef = start_reef(
        ["--upstream-url", upstream.v1_url], env=reef_env(env), state_dir=state, name="reef-s3"
    )
    settings = Settings.from_flat(
        {k.removeprefix("REEF_").lower(): v for k, v in s3_env.items()}
    )
    content = ContentStore(open_store(settings))
    try:
        scenarios = create_scenarios(reef.base_url, 2, "s3")
        with SteadyLoad(
            [reef.base_url], TOKEN, scenarios, rate=RATE, prompt_bytes=1500, timeout=60.0
        ) as load:
            load.wait_acks(20)
            before = wait_trained(state, scenarios, 0, timeout=60)
            fault_at = time.monotonic()
            try:
                s3.kill()
                time.sleep(DOWN_SECONDS)
            finally:
                restart_at = time.monotonic()
                s3.start()
            back_at = time.monotonic()
            load.wait_acks(20, since=back_at, timeout=60)
            after = wait_trained(state, scenarios, len(trained(state, scenarios)), timeout=60)
            end = time.monotonic()
        result = load.result
        assert reef.managed.running(), reef.output()
        report = consistency.check(
            lambda: EmbeddedLog(state / "log.sqlite3"), result, scenarios, content=content
        )
        # no half-written proposal either: every proposed content is whole in S3
        events, _ = consistency.read_events(
            lambda: EmbeddedLog(state / "log.sqlite3"), scenarios, (topics.RELEASE_PROPOSALS,)
        )
        proposals = [e for e in events if isinstance(e, ReleaseProposed)]
        for proposal in proposals:
            for entry in content.load(proposal.content_id).values():
                content.store.get_bytes(entry.oid)
        down = result.between(fault_at, restart_at)
        failed = [a for a in down if not a.ok]
        fault_table.record(
            FaultRow(
                f"SIGKILL of the S3 server ({DOWN_SECONDS:.0f} s down, restarted)",
                result.offered_rate(fault_at, back_at),
                result.acknowledged(),
                report.lost,
                report.duplicated,
                result.recovered_after(back_at) + (back_at - fault_at),
                f"{len(failed)}/{len(down)} requests refused while down; S3 restart "
                f"{back_at - restart_at:.1f} s; training releases {before} before, "
                f"{after} after; {len(proposals)} proposals, all whole; "
                f"errors {dict(result.errors)}",
            )
        )
        report.assert_ok()
        assert failed, "nothing needed S3 while it was down"
        assert set(result.errors) <= {"chat:503", "report:503"}, result.summary()
        assert end > back_at
    finally:
        reef.stop()
        if not s3.is_running():
            s3.start()
