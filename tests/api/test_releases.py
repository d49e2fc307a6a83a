"""The release API and the Git view, through the app ``reef serve`` builds, in process
(tests/support/embedded_app.py: the embedded log, the release chain hosted beside the
app, local artifacts):

* rollback of a weight release (a few MB of random ``model.safetensors`` + ``config.json``):
  the new head's materialised files equal the target's byte for byte (on Kafka + S3, a
  ``reef streams`` worker hosting the chain: tests/e2e/test_releases.py);
* harness pins: ``GET /reef/harness`` serves the head's files or a pinned release's;
  unsafe paths are refused at publish time;
* bad input: unknown / foreign releases, promote of a non-pending release, promote of a
  pending one, manifests naming missing objects, releases whose objects were deleted,
  tokens without the admin scope;
* ``reef git export`` + stock ``git clone`` / ``git lfs pull`` against the app's LFS
  endpoint (on a loopback socket): every release's checkout equals its manifest;
* the claim check: a large prompt is stored by reference in the raw event, and read back
  in full by ``reef log tail`` and the records API.

One app serves the module; releases are proposed as a trainer would (appended to its log).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from reef.artifacts import (
    ClaimCheck,
    LocalArtifactStore,
    Manifest,
    ManifestEntry,
    UnsafePathError,
)
from reef.artifacts.content import ContentStore, IncompleteContentError
from reef.codec import EventCodec
from reef.core import topics
from reef.core.events import Event, InferenceRecorded
from reef.log.embedded import EmbeddedLog
from reef.log.partitioner import partition_for
from reef.testing.servers import clean_env, run_reef
from reef.wiring import readable_store
from tests.support.api import assert_reef_error, chat_body, unique_scenario
from tests.support.deployment import ReleaseChainClient, tree_files
from tests.support.embedded_app import AppFactory, EmbeddedApp
from tests.support.weight_rollback import check_weight_rollback

SEED_FILES = {
    "system_prompt.md": "You are the seed agent.\nBe brief.\n",
    "skills/a.md": "# Skill A\nSay hello.\n",
}
WEIGHT_BYTES = 3 * 1024 * 1024 + 17  # not a multiple of any chunk size


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@dataclass
class Releases(ReleaseChainClient):
    """The app seen by a release client: its API with the admin or the read token, its
    artifact store, and proposals appended to its log as a trainer would."""

    app: EmbeddedApp
    read_token: str
    content: ContentStore
    seed_dir: Path
    #: how long a proposal may take to be decided by the chain
    decide_timeout: float = 30.0
    POLL_S: ClassVar[float] = 0.05

    @property
    def state_dir(self) -> Path:
        return self.app.state_dir

    def client(
        self, token: str | None = "", scenario: str | None = None, timeout: float = 60.0
    ) -> httpx.Client:
        """``token=""``: the admin token; None: no Authorization header."""
        if token is None:
            headers = {"x-reef-scenario": scenario} if scenario is not None else {}
            return self.app.bare_client(timeout, headers)
        return self.app.client(scenario, token or None, timeout)

    def append(self, *events: Event) -> None:
        self.app.append(*events)

    def alive(self) -> None:
        failure = self.app.failure()
        assert failure is None, f"the embedded processors stopped: {failure!r}"


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("seed")
    for path, text in SEED_FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


@pytest.fixture(scope="module")
def embedded(app_factory: AppFactory, seed_dir: Path) -> Releases:
    """The embedded default: SQLite log, chain beside the app, local artifacts."""
    admin, reader = f"adm-{secrets.token_hex(8)}", f"rd-{secrets.token_hex(8)}"
    app = app_factory(
        token=admin,
        tokens=f"{reader}:read",
        env={"REEF_SEED_DIR": str(seed_dir), "REEF_CLAIM_CHECK_BYTES": "2048"},
    )
    content = ContentStore(LocalArtifactStore.in_state_dir(app.state_dir))
    return Releases(app, reader, content, seed_dir)


# ---------------------------------------------------------------------------
# Rollback of a weight release


def test_rollback_of_a_weight_release_restores_its_bytes(
    embedded: Releases, tmp_path: Path
) -> None:
    check_weight_rollback(embedded, tmp_path)


# ---------------------------------------------------------------------------
# Harness pins


def harness(
    deployment: Releases, scenario: str, release_id: str | None = None, token: str | None = ""
) -> httpx.Response:
    params = {"release_id": release_id} if release_id is not None else None
    with deployment.client(token, scenario=scenario) as client:
        return client.get("/reef/harness", params=params)


def test_harness_serves_the_head_or_a_pinned_release(embedded: Releases) -> None:
    scenario = embedded.create_scenario("harness")
    creation = embedded.head(scenario)
    assert creation["operation"] == "creation"
    assert creation["content_id"] == embedded.content.publish_dir(embedded.seed_dir)

    seeded = harness(embedded, scenario, token=embedded.read_token)
    assert seeded.status_code == 200, seeded.text
    assert seeded.json()["files"] == SEED_FILES
    assert seeded.json()["release_id"] == creation["release_id"]
    assert seeded.headers["x-reef-release-id"] == creation["release_id"]

    changed: dict[str, bytes | str] = {
        "system_prompt.md": "You are the trained agent.\nBe precise.\n",
        "skills/a.md": "# Skill A\nSay hello, politely.\n",
        "skills/b.md": "# Skill B\nSay goodbye. ✓\n",
    }
    trained = embedded.propose_training(scenario, embedded.content.publish_files(changed))

    head = harness(embedded, scenario)
    assert head.status_code == 200, head.text
    body = head.json()
    assert body["files"] == changed
    assert body["release_id"] == trained["release_id"]
    assert body["parent_release_id"] == creation["release_id"]
    assert body["content_id"] == trained["content_id"]
    assert head.headers["x-reef-release-id"] == trained["release_id"]

    pinned = harness(embedded, scenario, creation["release_id"], token=embedded.read_token)
    assert pinned.status_code == 200, pinned.text
    assert pinned.json()["files"] == SEED_FILES
    assert pinned.json()["release_id"] == creation["release_id"]
    assert pinned.json()["parent_release_id"] is None
    assert pinned.headers["x-reef-release-id"] == creation["release_id"]

    unknown = harness(embedded, scenario, uuid.uuid4().hex)
    assert_reef_error(unknown, 404)
    other = embedded.create_scenario("harness-other")
    foreign = harness(embedded, other, trained["release_id"])
    assert_reef_error(foreign, 404)


def test_unsafe_paths_are_refused_at_publish_time(embedded: Releases, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "skills").mkdir(parents=True)
    (tree / "system_prompt.md").write_text("hi\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("not for publishing\n")
    (tree / "skills" / "leak.md").symlink_to(outside)
    with pytest.raises(UnsafePathError):
        embedded.content.publish_dir(tree)
    (tree / "skills" / "leak.md").unlink()
    (tree / "skills" / "dir-link").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(UnsafePathError):
        embedded.content.publish_dir(tree)

    for bad in ("../x", "/abs", "skills/../../x", ".git/config", "a\\b"):
        with pytest.raises(UnsafePathError):
            embedded.content.publish_files({"system_prompt.md": "ok", bad: "evil"})


# ---------------------------------------------------------------------------
# Bad input


def test_rollback_to_unknown_or_foreign_release_is_404(embedded: Releases) -> None:
    scenario = embedded.create_scenario("bad-rollback")
    other = embedded.create_scenario("bad-rollback-other")
    foreign = embedded.propose_training(other, embedded.content.publish_files({"x.md": "other"}))
    before = embedded.releases(scenario)

    body = assert_reef_error(embedded.republish(scenario, "rollback", uuid.uuid4().hex), 404)
    assert body["error"]["code"] == "unknown_release"
    body = assert_reef_error(embedded.republish(scenario, "rollback", foreign["release_id"]), 404)
    assert body["error"]["code"] == "unknown_release"
    body = assert_reef_error(embedded.republish(scenario, "promote", foreign["release_id"]), 404)
    assert body["error"]["code"] == "unknown_release"
    assert_reef_error(embedded.republish(f"nope-{uuid.uuid4().hex[:8]}", "rollback", "x"), 404)
    with embedded.client() as client:
        missing = client.post(f"/reef/scenarios/{scenario}/rollback", json={})
    assert_reef_error(missing, 400)
    assert embedded.releases(scenario) == before


def test_promote_needs_a_pending_release(embedded: Releases) -> None:
    scenario = embedded.create_scenario("promote")
    creation = embedded.head(scenario)
    served = embedded.propose_training(scenario, embedded.content.publish_files({"p.md": "one"}))

    body = assert_reef_error(embedded.republish(scenario, "promote", served["release_id"]), 409)
    assert body["error"]["code"] == "not_pending"
    body = assert_reef_error(embedded.republish(scenario, "promote", creation["release_id"]), 409)
    assert body["error"]["code"] == "not_pending"

    held = embedded.propose_training(
        scenario, embedded.content.publish_files({"p.md": "two"}), pending=True
    )
    assert embedded.head(scenario)["release_id"] == served["release_id"]
    body = assert_reef_error(embedded.republish(scenario, "rollback", held["release_id"]), 409)
    assert body["error"]["code"] == "pending_release"
    assert harness(embedded, scenario).json()["files"] == {"p.md": "one"}

    response = embedded.republish(scenario, "promote", held["release_id"])
    assert response.status_code == 200, response.text
    promoted = response.json()
    assert promoted["operation"] == "promote"
    assert promoted["rollback_target_release_id"] == held["release_id"]
    assert promoted["content_id"] == held["content_id"]
    assert promoted["parent_release_id"] == served["release_id"]
    assert promoted["current"] is True
    listed = embedded.releases(scenario)
    assert listed[0]["release_id"] == promoted["release_id"]
    assert [r["release_id"] for r in listed if r["current"]] == [promoted["release_id"]]
    assert not any(r["pending"] for r in listed)
    assert harness(embedded, scenario).json()["files"] == {"p.md": "two"}

    again = assert_reef_error(embedded.republish(scenario, "promote", held["release_id"]), 409)
    assert again["error"]["code"] == "not_pending"


def test_incomplete_content_is_never_proposed_or_restored(embedded: Releases) -> None:
    absent = hashlib.sha256(os.urandom(32)).hexdigest()
    present = embedded.content.store.put_bytes(b"present").oid
    manifest = Manifest(
        {"present.txt": ManifestEntry(present, 7), "weights.bin": ManifestEntry(absent, 12)}
    )
    with pytest.raises(IncompleteContentError):
        embedded.content.save(manifest)
    assert not embedded.content.store.exists(manifest.content_id)

    scenario = embedded.create_scenario("restorable")
    unique = os.urandom(4096)
    doomed = embedded.propose_training(
        scenario, embedded.content.publish_files({"adapter/adapter_model.safetensors": unique})
    )
    embedded.propose_training(scenario, embedded.content.publish_files({"later.md": "later"}))
    store = embedded.content.store
    assert isinstance(store, LocalArtifactStore)
    (entry,) = embedded.content.load(doomed["content_id"]).values()
    store.object_path(entry.oid).unlink()
    before = embedded.releases(scenario)
    body = assert_reef_error(embedded.republish(scenario, "rollback", doomed["release_id"]), 409)
    assert body["error"]["code"] == "not_restorable"

    manifest_gone = embedded.propose_training(
        scenario, embedded.content.publish_files({"gone.md": uuid.uuid4().hex})
    )
    embedded.propose_training(scenario, embedded.content.publish_files({"last.md": "last"}))
    store.object_path(manifest_gone["content_id"]).unlink()
    body = assert_reef_error(
        embedded.republish(scenario, "rollback", manifest_gone["release_id"]), 409
    )
    assert body["error"]["code"] == "not_restorable"
    # nothing was committed by the refused rollbacks
    after = [r["release_id"] for r in embedded.releases(scenario)]
    assert after[2:] == [r["release_id"] for r in before]
    assert len(after) == len(before) + 2


def test_release_changes_need_the_admin_scope(embedded: Releases) -> None:
    scenario = embedded.create_scenario("scopes")
    creation = embedded.head(scenario)
    target = embedded.propose_training(scenario, embedded.content.publish_files({"s.md": "s"}))
    for operation, release in (("rollback", creation), ("promote", target)):
        with embedded.client(embedded.read_token) as client:
            response = client.post(
                f"/reef/scenarios/{scenario}/{operation}",
                json={"release_id": release["release_id"]},
            )
        body = assert_reef_error(response, 403)
        assert body["error"]["code"] == "insufficient_scope"
        with embedded.client(None) as client:
            response = client.post(
                f"/reef/scenarios/{scenario}/{operation}",
                json={"release_id": release["release_id"]},
            )
        assert_reef_error(response, 401)
    assert embedded.head(scenario)["release_id"] == target["release_id"]
    assert harness(embedded, scenario, token=embedded.read_token).status_code == 200


# ---------------------------------------------------------------------------
# reef git export + stock git / git-lfs


def git(*args: str, cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"git {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_git_export_clones_and_lfs_pulls_from_the_running_app(
    embedded: Releases, tmp_path: Path
) -> None:
    scenario = embedded.create_scenario("git")
    creation = embedded.head(scenario)
    adapter_v1, adapter_v2 = os.urandom(300_000), os.urandom(200_000) + b"\0tail"
    second = embedded.propose_training(
        scenario,
        embedded.content.publish_files(
            {
                "system_prompt.md": "You are the adapted agent.\n",
                "skills/a.md": SEED_FILES["skills/a.md"],
                "adapter/adapter_model.safetensors": adapter_v1,
                "adapter/adapter_config.json": '{"r": 8}\n',
            }
        ),
    )
    third = embedded.propose_training(
        scenario,
        embedded.content.publish_files(
            {
                "system_prompt.md": "You are the adapted agent, v2.\n",
                "skills/a.md": "# Skill A\nv2\n",
                "skills/b.md": "# Skill B\n",
                "adapter/adapter_model.safetensors": adapter_v2,
                "adapter/adapter_config.json": '{"r": 16}\n',
            }
        ),
    )
    releases = [creation, second, third]

    lfs_url = f"{embedded.app.base_url}/reef/lfs/{scenario}"
    bare = tmp_path / "export.git"
    exported = run_reef(
        "git",
        "export",
        scenario,
        str(bare),
        "--lfs-url",
        lfs_url,
        "--state-dir",
        str(embedded.state_dir),
    )
    assert exported.returncode == 0, f"{exported.stdout}\n{exported.stderr}"
    assert f"exported 3 release(s) of {scenario}" in exported.stdout

    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(
        {
            "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_LFS_SKIP_SMUDGE": "1",
        }
    )
    env.pop("GIT_DIR", None)
    git("clone", "--quiet", str(bare), "work", cwd=tmp_path, env=env)
    work = tmp_path / "work"
    for key, value in (
        ("user.name", "test"),
        ("user.email", "test@reef.invalid"),
        ("advice.detachedHead", "false"),
        ("http.extraHeader", f"Authorization: Bearer {embedded.read_token}"),
    ):
        git("config", key, value, cwd=work, env=env)
    git("lfs", "install", "--local", cwd=work, env=env)
    assert (work / ".lfsconfig").read_text() == f"[lfs]\n\turl = {lfs_url}\n"
    # without the smudge, the checkout holds the pointer
    pointer = (work / "adapter" / "adapter_model.safetensors").read_bytes()
    assert pointer.startswith(b"version https://git-lfs.github.com/spec/v1\n")
    assert hashlib.sha256(adapter_v2).hexdigest().encode() in pointer

    smudging = {k: v for k, v in env.items() if k != "GIT_LFS_SKIP_SMUDGE"}
    git("lfs", "pull", cwd=work, env=smudging)
    assert git("rev-parse", "HEAD", cwd=work, env=env) == git(
        "rev-parse", f"release-{third['release_id']}", cwd=work, env=env
    )
    tags = git("tag", "--list", "release-*", cwd=work, env=env).split()
    assert sorted(tags) == sorted(f"release-{r['release_id']}" for r in releases)

    for index, release in enumerate(releases):
        tag = f"release-{release['release_id']}"
        git("checkout", "--quiet", "--force", tag, cwd=work, env=smudging)
        assert git("status", "--porcelain", cwd=work, env=env) == ""
        checked_out = tree_files(work, skip=(".git", ".gitattributes", ".lfsconfig"))
        expected = embedded.materialise(release["content_id"], tmp_path / f"release-{index}")
        assert checked_out == expected, f"release {index} differs from its manifest"
        manifest = embedded.content.load(release["content_id"])
        assert sorted(checked_out) == sorted(manifest)
        for path, entry in manifest.items():
            assert hashlib.sha256(checked_out[path]).hexdigest() == entry.oid
        message = git("log", "-1", "--format=%B", cwd=work, env=env)
        assert f"Release-Id: {release['release_id']}" in message
        assert f"Content-Id: {release['content_id']}" in message
        parents = git("log", "-1", "--format=%P", cwd=work, env=env).split()
        assert len(parents) == (0 if index == 0 else 1)
    assert checked_out["adapter/adapter_model.safetensors"] == adapter_v2
    assert tree_files(tmp_path / "release-1")["adapter/adapter_model.safetensors"] == adapter_v1

    # the batch endpoint refuses anonymous clients and answers authenticated ones
    oid = hashlib.sha256(adapter_v2).hexdigest()
    batch = {
        "operation": "download",
        "transfers": ["basic"],
        "objects": [{"oid": oid, "size": len(adapter_v2)}],
    }
    lfs_headers = {
        "Accept": "application/vnd.git-lfs+json",
        "Content-Type": "application/vnd.git-lfs+json",
    }
    anonymous = httpx.post(f"{lfs_url}/objects/batch", json=batch, headers=lfs_headers)
    assert anonymous.status_code == 401, anonymous.text
    assert httpx.get(f"{lfs_url}/objects/{oid}").status_code == 401
    # over the socket: the answer's links are built from the address it was asked on
    reader = {"Authorization": f"Bearer {embedded.read_token}"}
    with httpx.Client(base_url=embedded.app.base_url, headers=reader, timeout=30.0) as client:
        answered = client.post(
            f"/reef/lfs/{scenario}/objects/batch", json=batch, headers=lfs_headers
        )
    assert answered.status_code == 200, answered.text
    (item,) = answered.json()["objects"]
    assert item["actions"]["download"]["href"] == f"{lfs_url}/objects/{oid}"
    basic = httpx.get(f"{lfs_url}/objects/{oid}", auth=("git", embedded.read_token), timeout=30.0)
    assert basic.status_code == 200 and basic.content == adapter_v2


# ---------------------------------------------------------------------------
# Claim check


async def raw_log_values(state_dir: Path) -> bytes:
    """Every record (key, value, headers) of every topic of an embedded log, undecoded."""
    log = EmbeddedLog(state_dir / "log.sqlite3")
    chunks: list[bytes] = []
    try:
        for topic in topics.ALL_TOPICS:
            async for record in log.read(topic):
                chunks += [record.key or b"", record.value]
                chunks += [name.encode() + value for name, value in record.headers]
    finally:
        await log.close()
    return b"\n".join(chunks)


def test_large_prompt_is_claim_checked_and_read_back_in_full(embedded: Releases) -> None:
    scenario = unique_scenario("claim")
    # no words repeat, so it stays over the threshold compressed; sent indented, so it is
    # stored whole, not as blocks (docs/storage.md)
    prompt = "claim-check " + " ".join(uuid.uuid4().hex for _ in range(300))
    assert 9_000 < len(prompt.encode()) < 12_000
    with embedded.client(scenario=scenario) as client:
        body = json.dumps(chat_body(prompt), indent=1)
        headers = {"content-type": "application/json"}
        response = client.post("/v1/chat/completions", content=body, headers=headers)
    assert response.status_code == 200, response.text
    record_id = response.headers["x-reef-agent-record-id"]

    async def raw_events() -> list[InferenceRecorded]:
        log = EmbeddedLog(embedded.state_dir / "log.sqlite3")
        codec = EventCodec()
        found = []
        try:
            async for record in log.read(topics.INFERENCE):
                if record.key == scenario.encode():
                    event = codec.decode(record.value)
                    assert isinstance(event, InferenceRecorded)
                    found.append(event)
        finally:
            await log.close()
        return found

    deadline = time.monotonic() + 15
    while not (events := [e for e in _run(raw_events()) if e.event_id == record_id]):
        assert time.monotonic() < deadline, "the exchange was not recorded"
        time.sleep(0.1)
    (raw,) = events
    assert raw.request_json is None and raw.sealed
    assert raw.request_ref is not None and raw.request_ref.startswith("sha256:")
    # the store holds the sealed body (under the record's data key), not the text
    stored = embedded.content.store.get_bytes(raw.request_ref.removeprefix("sha256:"))
    assert prompt[:200].encode() not in stored

    async def opened() -> InferenceRecorded:
        log = EmbeddedLog(embedded.state_dir / "log.sqlite3")
        claims = ClaimCheck(embedded.content.store, 1024)
        try:
            async with readable_store(log, claims) as store:
                found = [s.event async for s in store.read(topics.INFERENCE)]
        finally:
            await log.close()
        (event,) = [e for e in found if e is not None and e.event_id == record_id]
        assert isinstance(event, InferenceRecorded)
        return event

    assert json.loads(_run(opened()).request_json or "")["messages"][0]["content"] == prompt
    # no record of any topic holds the body (processor state may: it is not the log)
    assert prompt[:200].encode() not in _run(raw_log_values(embedded.state_dir))

    with embedded.client() as client:
        record = client.get(f"/reef/scenarios/{scenario}/records/{record_id}")
    assert record.status_code == 200, record.text
    assert record.json()["request"]["messages"][0]["content"] == prompt

    tailed = run_reef(
        "log",
        "tail",
        "--topic",
        topics.INFERENCE,
        "--from-beginning",
        "--no-follow",
        "--scenario",
        scenario,
        "--state-dir",
        str(embedded.state_dir),
    )
    assert tailed.returncode == 0, tailed.stderr
    lines = [json.loads(line) for line in tailed.stdout.splitlines() if line.strip()]
    (line,) = [x for x in lines if x.get("event", {}).get("event_id") == record_id]
    assert "error" not in line, line
    assert line["partition"] == partition_for(scenario.encode(), 6)
    assert json.loads(line["event"]["request_json"])["messages"][0]["content"] == prompt
