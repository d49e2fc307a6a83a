"""Disk full on the embedded log's volume, under load.

``reef serve`` (embedded log) keeps its state dir on a small tmpfs. A filler file takes
every free byte while the steady load runs: writes must fail with 503 (no receipt, no
report id handed out for anything not stored), nothing may be corrupted (SQLite's
integrity check, every record decodes), and once the filler is deleted the service
resumes by itself: new requests are acknowledged and every report gets its fate.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from reef.log.embedded import EmbeddedLog
from reef.testing.servers import UpstreamProcess, start_reef
from reef_dev.load import SteadyLoad
from tests.support import consistency
from tests.support.disk import fill_disk, tiny_tmpfs
from tests.support.faults import TOKEN, FaultRow, FaultTable, create_scenarios, reef_env

pytestmark = pytest.mark.slow

RATE = 10.0
FULL_SECONDS = 6.0


def test_disk_full_on_the_embedded_log(
    upstream: UpstreamProcess, fault_table: FaultTable, tmp_path: Path
) -> None:
    with tiny_tmpfs(tmp_path / "disk", size="48m") as disk:
        state = disk / "state"
        reef = start_reef(
            ["--upstream-url", upstream.v1_url],
            env=reef_env(),
            state_dir=state,
            log_dir=tmp_path / "logs",
            name="reef-disk",
        )
        filler = disk / "filler"
        try:
            scenarios = create_scenarios(reef.base_url, 2, "disk")
            with SteadyLoad([reef.base_url], TOKEN, scenarios, rate=RATE) as load:
                load.wait_acks(20)
                fault_at = time.monotonic()
                fill_disk(filler)
                deadline = time.monotonic() + 30
                while not any(
                    a.status == "503" for a in load.snapshot().attempts if a.started >= fault_at
                ):
                    assert time.monotonic() < deadline, "no 503 while the disk is full"
                    time.sleep(0.1)
                time.sleep(FULL_SECONDS)
                filler.unlink()
                freed_at = time.monotonic()
                load.wait_acks(30, since=freed_at)
                end = time.monotonic()
            result = load.result
            assert reef.managed.running(), reef.output()
            full = result.between(fault_at, freed_at)
            refused = [a for a in full if a.status == "503"]
            report = consistency.check(
                lambda: EmbeddedLog(state / "log.sqlite3"), result, scenarios
            )
            db = sqlite3.connect(state / "log.sqlite3")
            try:
                (integrity,) = db.execute("PRAGMA integrity_check").fetchone()
            finally:
                db.close()
            fault_table.record(
                FaultRow(
                    "disk full on the embedded log's volume (tmpfs)",
                    result.offered_rate(fault_at, freed_at),
                    result.acknowledged(),
                    report.lost,
                    report.duplicated,
                    result.recovered_after(freed_at),
                    f"{len(refused)}/{len(full)} requests refused with 503 while full "
                    f"({freed_at - fault_at:.1f} s); errors {dict(result.errors)}; "
                    f"integrity {integrity}",
                )
            )
            report.assert_ok()
            assert integrity == "ok"
            assert refused, "the full disk refused nothing"
            # only clean refusals: 503, never a 500, a hang or a dropped connection
            assert {a.status for a in result.attempts if not a.ok} == {"503"}, result.summary()
            assert result.offered_rate(freed_at, end) > 0
        finally:
            reef.stop()
            filler.unlink(missing_ok=True)
            # the processors' own log lives on the tmpfs: keep it for a failure's post-mortem
            shutil.copytree(state / "logs", tmp_path / "state-logs", dirs_exist_ok=True)
