"""A rollback of a weight release, checked the same way on any deployment.

Two training releases of random weights are proposed; a rollback to the first must be a
new head whose content is the first's, byte for byte, and the chain must list all four
releases in order. The in-process app (tests/api) and a Kafka + S3 deployment
(tests/e2e) run it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from reef.core.ids import release_id as chain_release_id
from tests.support.deployment import ReleaseChainClient

WEIGHT_BYTES = 3 * 1024 * 1024 + 17  # not a multiple of any chunk size


def write_weights(root: Path, version: int) -> dict[str, bytes]:
    files = {
        "model.safetensors": os.urandom(WEIGHT_BYTES),
        "config.json": json.dumps({"version": version, "hidden": 64}).encode(),
    }
    for path, body in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(body)
    return files


def check_weight_rollback(chain: ReleaseChainClient, tmp_path: Path) -> None:
    scenario = chain.create_scenario("weights")
    creation = chain.head(scenario)
    v1_files = write_weights(tmp_path / "v1", 1)
    v2_files = write_weights(tmp_path / "v2", 2)
    first = chain.propose_training(scenario, chain.content.publish_dir(tmp_path / "v1"))
    second = chain.propose_training(scenario, chain.content.publish_dir(tmp_path / "v2"))
    assert first["content_id"] != second["content_id"]

    response = chain.republish(scenario, "rollback", first["release_id"])
    assert response.status_code == 200, response.text
    new = response.json()
    assert new["scenario"] == scenario
    assert new["operation"] == "rollback"
    assert new["rollback_target_release_id"] == first["release_id"]
    assert new["parent_release_id"] == second["release_id"]
    assert new["content_id"] == first["content_id"]
    assert new["current"] is True and new["pending"] is False
    assert new["release_id"] not in {first["release_id"], second["release_id"]}
    assert new["release_id"] == chain_release_id(
        scenario, second["release_id"], first["content_id"], "rollback"
    )

    restored = chain.materialise(new["content_id"], tmp_path / "restored")
    target = chain.materialise(first["content_id"], tmp_path / "target")
    assert restored == target == v1_files
    assert chain.materialise(second["content_id"], tmp_path / "second") == v2_files

    listed = chain.releases(scenario)
    assert [r["release_id"] for r in listed] == [
        new["release_id"],
        second["release_id"],
        first["release_id"],
        creation["release_id"],
    ]
    assert [r["operation"] for r in listed] == ["rollback", "training", "training", "creation"]
    assert [r["current"] for r in listed] == [True, False, False, False]
    assert listed[0]["rollback_target_release_id"] == first["release_id"]
    assert all("rollback_target_release_id" not in r for r in listed[1:])
    assert {k: v for k, v in new.items() if k != "scenario"} == listed[0]
