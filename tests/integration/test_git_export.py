"""The release chain as a Git repository, cloned with the real ``git`` and ``git lfs``.

A tiny LFS server on loopback answers ``POST <lfs.url>/objects/batch`` with
:func:`lfs_batch_response` and serves ``GET <lfs.url>/objects/<oid>`` from the store,
as Reef's API endpoint does. With the S3 store, the batch answer carries presigned
URLs instead and git-lfs downloads straight from the bucket.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from reef.artifacts import (
    ArtifactError,
    ArtifactNotFoundError,
    ArtifactStore,
    LocalArtifactStore,
    Manifest,
    publish_files,
)
from reef.artifacts.gitview import GitRelease, export_git
from reef.artifacts.lfs import (
    LFS_MEDIA_TYPE,
    href_for_store,
    lfs_batch_response,
    lfs_pointer,
)
from reef.contracts.artifacts import fingerprint_tree
from reef.core.errors import RequestError

if TYPE_CHECKING:
    from tests.support.stack import S3Server

SCENARIO = "support-bot"
GENERATED = {".gitattributes", ".lfsconfig"}


# -- a minimal LFS server -------------------------------------------------------------


class LfsServer:
    """Serves ``/reef/lfs/<scenario>/objects/batch`` and ``.../objects/<oid>`` on loopback."""

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        self.requests: list[tuple[str, str]] = []
        self.batches: list[dict[str, Any]] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def lfs_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/reef/lfs/{SCENARIO}"

    def __enter__(self) -> LfsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self
        prefix = f"/reef/lfs/{SCENARIO}/objects/"

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                server.requests.append(("POST", self.path))
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != prefix + "batch":
                    return self._json(404, {"message": "not found"})
                server.batches.append(json.loads(body))
                href = href_for_store(server.store, server.lfs_url + "/objects")
                try:
                    answer = lfs_batch_response(server.store, body, href)
                except RequestError as exc:
                    return self._json(exc.status, {"message": exc.message})
                self._json(200, answer)

            def do_GET(self) -> None:
                server.requests.append(("GET", self.path))
                oid = self.path.removeprefix(prefix)
                try:
                    reader = server.store.open(oid)
                except ArtifactNotFoundError:
                    return self._json(404, {"message": "not found"})
                except ArtifactError:
                    return self._json(422, {"message": "bad oid"})
                with reader:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(reader.size))
                    self.end_headers()
                    while chunk := reader.read(1 << 20):
                        self.wfile.write(chunk)

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", LFS_MEDIA_TYPE)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


# -- the chain ---------------------------------------------------------------------------


def weights(seed: str, size: int = 300_000) -> bytes:
    """Binary, safetensors-like bytes (a JSON header, then NUL-rich data)."""
    header = b'{"w":{"dtype":"F32"}}'
    body = hashlib.sha256(seed.encode()).digest() * (size // 32)
    return len(header).to_bytes(8, "little") + header + body.replace(b"\x01", b"\x00")


def three_releases(store: ArtifactStore) -> list[dict[str, Any]]:
    """creation (harness only) → training (adds weights) → training (changes both)."""
    base: dict[str, bytes | str] = {
        "prompts/system.md": "You are a support bot.\n",
        "skills/lookup/SKILL.md": "# Lookup\nSearch the knowledge base.\n",
        "skills/lookup/run.sh": '#!/bin/sh\nexec lookup "$@"\n',
        "config/recipe.yaml": "recipe: sft\nlr: 1e-5\n",
    }
    second = {
        **base,
        "prompts/system.md": "You are a concise support bot.\n",
        "model/model.safetensors": weights("r2"),
        "adapters/lora/adapter_config.json": '{"r": 8}\n',
        "adapters/lora/adapter state [1].dat": weights("lora-r2", 5000),
        "docs/my notes [draft].txt": "spaces and brackets\n",
    }
    third = {
        **second,
        "prompts/system.md": "You are a concise, friendly support bot.\n",
        "model/model.safetensors": weights("r3"),
        "adapters/lora/adapter state [1].dat": weights("lora-r3", 5000),
    }
    del third["config/recipe.yaml"]
    executable = {"skills/lookup/run.sh"}
    t0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    specs: list[tuple[str, dict[str, bytes | str], dict[str, float]]] = [
        ("creation", base, {}),
        ("training", second, {"loss": 0.42}),
        ("training", third, {}),
    ]
    releases: list[dict[str, Any]] = []
    parent = None
    for index, (operation, files, metrics) in enumerate(specs):
        manifest = publish_files(store, files, executable=executable)
        release_id = hashlib.sha256(f"{parent}{manifest.content_id}".encode()).hexdigest()[:32]
        releases.append(
            {
                "release_id": release_id,
                "parent_release_id": parent,
                "operation": operation,
                "manifest": manifest.as_json() if index == 1 else manifest,
                "metrics": metrics,
                "created_at": (t0 + timedelta(hours=index)).isoformat(),
            }
        )
        parent = release_id
    return releases


def expected_tree(store: ArtifactStore, manifest: Manifest) -> dict[str, tuple[bytes, bool]]:
    return {path: (store.get_bytes(e.oid), e.executable) for path, e in manifest.items()}


# -- running git -----------------------------------------------------------------------


@pytest.fixture
def git_env(tmp_path: Path) -> dict[str, str]:
    """An isolated git: empty global config, no system config, no prompts."""
    for tool in ("git", "git-lfs"):
        if shutil.which(tool) is None:
            pytest.fail(f"`{tool}` is not installed (apt-get install -y git git-lfs)")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Test\n\temail = test@example.invalid\n")
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/true",
        "LANG": "C.UTF-8",
    }


def git(env: dict[str, str], cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout + result.stderr


def working_tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    tree = fingerprint_tree(root)
    return {p: v for p, v in tree.items() if not p.startswith(".git/") and p not in GENERATED}


def clone_and_check_every_release(
    store: ArtifactStore, tmp_path: Path, env: dict[str, str], server: LfsServer
) -> None:
    releases = three_releases(store)
    exported = export_git(releases, store, tmp_path / "repo.git", server.lfs_url)
    clone = tmp_path / "clone"
    git(env, tmp_path, "clone", "--quiet", str(exported.path), str(clone))
    git(env, clone, "lfs", "install", "--local")
    git(env, clone, "lfs", "pull")
    chain = [GitRelease.coerce(r) for r in releases]
    for release in [chain[-1], *chain]:
        git(env, clone, "checkout", "--quiet", f"release-{release.release_id}")
        git(env, clone, "lfs", "pull")
        commit = git(env, clone, "rev-parse", "HEAD").strip()
        assert commit == exported.commits[release.release_id]
        assert working_tree(clone) == expected_tree(store, release.manifest)
    assert {op for op, _ in server.requests} >= {"POST"}
    assert all(batch["operation"] == "download" for batch in server.batches)


# -- tests -------------------------------------------------------------------------------


def test_clone_and_lfs_pull_reproduce_every_release(
    tmp_path: Path, git_env: dict[str, str]
) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    with LfsServer(store) as server:
        clone_and_check_every_release(store, tmp_path, git_env, server)
        assert any(method == "GET" for method, _ in server.requests)


@pytest.mark.s3
def test_clone_pulls_lfs_objects_from_presigned_s3_urls(
    tmp_path: Path, git_env: dict[str, str], s3: S3Server
) -> None:
    from reef.artifacts.s3 import S3ArtifactStore

    prefix = f"reef-test/gitview-{uuid.uuid4().hex[:12]}/"
    store = S3ArtifactStore(
        s3.endpoint,
        access_key=s3.access_key,
        secret_key=s3.secret_key,
        bucket=s3.bucket,
        region=s3.region,
        prefix=prefix,
    )
    try:
        with LfsServer(store) as server:
            clone_and_check_every_release(store, tmp_path, git_env, server)
            assert not any(method == "GET" for method, _ in server.requests)
    finally:
        client = s3.client()
        for item in client.list_objects(s3.bucket, prefix=prefix, recursive=True):
            client.remove_object(s3.bucket, item.object_name)


def test_repository_shape(tmp_path: Path, git_env: dict[str, str]) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    releases = three_releases(store)
    lfs_url = f"http://127.0.0.1:8900/reef/lfs/{SCENARIO}"
    exported = export_git(releases, store, tmp_path / "repo.git", lfs_url)
    repo = exported.path
    chain = [GitRelease.coerce(r) for r in releases]

    log = git(git_env, repo, "log", "--format=%H %P|%s", "main").strip().splitlines()
    assert len(log) == 3
    heads = [line.split("|")[0].split() for line in log]
    assert [h[0] for h in heads] == [exported.commits[r.release_id] for r in reversed(chain)]
    assert heads[-1][1:] == [] and heads[0][1:] == [heads[1][0]]
    assert log[0].endswith(f"training: release {chain[2].release_id}")

    message = git(git_env, repo, "log", "-1", "--format=%B", exported.commits[chain[1].release_id])
    assert f"Release-Id: {chain[1].release_id}" in message
    assert f"Parent-Release-Id: {chain[0].release_id}" in message
    assert 'Metrics: {"loss":0.42}' in message
    assert f"Content-Id: {chain[1].manifest.content_id}" in message

    entry = chain[2].manifest["model/model.safetensors"]
    pointer = git(git_env, repo, "cat-file", "-p", "main:model/model.safetensors")
    assert pointer.encode() == lfs_pointer(entry.oid, entry.size)
    assert pointer == (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{entry.oid}\nsize {entry.size}\n"
    )
    adapter_state = git(git_env, repo, "cat-file", "-p", "main:adapters/lora/adapter state [1].dat")
    assert adapter_state.startswith("version https://git-lfs.github.com/spec/v1\n")
    config = git(git_env, repo, "cat-file", "-p", "main:adapters/lora/adapter_config.json")
    assert config == '{"r": 8}\n'
    assert git(git_env, repo, "cat-file", "-p", "main:.lfsconfig") == f"[lfs]\n\turl = {lfs_url}\n"
    attributes = git(git_env, repo, "cat-file", "-p", "main:.gitattributes")
    assert "*.safetensors filter=lfs diff=lfs merge=lfs -text\n" in attributes
    assert (
        "/adapters/lora/adapter[[:space:]]state[[:space:]]\\[1].dat filter=lfs diff=lfs merge=lfs"
        in attributes
    )
    paths = ["adapters/lora/adapter state [1].dat", "docs/my notes [draft].txt"]
    paths.append("model/model.safetensors")
    plain = tmp_path / "plain"  # a clone without LFS installed: the tree holds pointers
    git(git_env, tmp_path, "clone", "--quiet", str(repo), str(plain))
    check_attr = git(git_env, plain, "check-attr", "filter", "--", *paths)
    assert check_attr.splitlines() == [
        "adapters/lora/adapter state [1].dat: filter: lfs",
        "docs/my notes [draft].txt: filter: unspecified",
        "model/model.safetensors: filter: lfs",
    ]
    mode = git(git_env, repo, "ls-tree", "main", "skills/lookup/run.sh").split()[0]
    assert mode == "100755"
    assert git(git_env, repo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    git(git_env, repo, "fsck", "--strict")

    again = export_git(releases, store, tmp_path / "again.git", lfs_url)
    assert again.commits == exported.commits


def test_lfs_push_is_refused_gracefully(tmp_path: Path, git_env: dict[str, str]) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    with LfsServer(store) as server:
        exported = export_git(three_releases(store), store, tmp_path / "repo.git", server.lfs_url)
        clone = tmp_path / "clone"
        git(git_env, tmp_path, "clone", "--quiet", str(exported.path), str(clone))
        git(git_env, clone, "lfs", "install", "--local")
        (clone / "model" / "new.safetensors").write_bytes(weights("pushed"))
        git(git_env, clone, "add", "model/new.safetensors")
        git(git_env, clone, "commit", "--quiet", "-m", "try to push")
        push = subprocess.run(
            ["git", "lfs", "push", "origin", "main"],
            cwd=clone,
            env=git_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert push.returncode != 0
        assert "Reef's LFS endpoint is read-only" in push.stderr + push.stdout
        assert [b["operation"] for b in server.batches] == ["upload"]


def test_export_refuses_broken_chains(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    releases = three_releases(store)
    with pytest.raises(ArtifactError):
        export_git(releases[1:], store, tmp_path / "a.git", "http://x/lfs")
    with pytest.raises(ArtifactError):
        export_git([], store, tmp_path / "b.git", "http://x/lfs")
    with pytest.raises(ArtifactError):
        export_git([releases[0], releases[0]], store, tmp_path / "c.git", "http://x/lfs")
    (tmp_path / "exists.git").mkdir()
    with pytest.raises(ArtifactError):
        export_git(releases, store, tmp_path / "exists.git", "http://x/lfs")
    shuffled = [releases[2], releases[0], releases[1]]
    exported = export_git(shuffled, store, tmp_path / "d.git", "http://x/lfs")
    assert exported.head == exported.commits[releases[2]["release_id"]]  # the chain's tip
    pinned = releases[1]["release_id"]
    ordered = export_git(releases, store, tmp_path / "e.git", "http://x/lfs", head=pinned)
    assert ordered.commits == exported.commits
    assert ordered.head == ordered.commits[pinned]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.git", "e.git", "exists.git", "store"]


# -- the batch API (pure) --------------------------------------------------------------


def batch(objects: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"operation": "download", "transfers": ["basic"], "objects": objects, **extra}


def test_batch_answers_download_with_hrefs_and_per_object_errors(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    ref = store.put_bytes(b"weights")
    answer = lfs_batch_response(
        store,
        batch(
            [
                {"oid": ref.oid, "size": ref.size},
                {"oid": "e" * 64, "size": 3},
                {"oid": "../../etc/passwd", "size": 3},
                {"oid": ref.oid, "size": 999},
            ]
        ),
        lambda oid: f"http://lfs/objects/{oid}",
    )
    assert answer["transfer"] == "basic"
    ok, unknown, invalid, wrong_size = answer["objects"]
    assert ok == {
        "oid": ref.oid,
        "size": ref.size,
        "authenticated": True,
        "actions": {"download": {"href": f"http://lfs/objects/{ref.oid}", "expires_in": 3600}},
    }
    assert unknown["error"]["code"] == 404 and "actions" not in unknown
    assert invalid["error"]["code"] == 422
    assert wrong_size["error"]["code"] == 422


@pytest.mark.parametrize(
    ("request_json", "status"),
    [
        ({"operation": "upload", "objects": []}, 403),
        ({"operation": "download"}, 422),
        ({"operation": "delete", "objects": []}, 422),
        ({"operation": "download", "transfers": ["ssh"], "objects": []}, 422),
        ({"operation": "download", "hash_algo": "sha512", "objects": []}, 409),
        ({"operation": "download", "objects": [{"oid": "0" * 64, "size": 0}] * 1001}, 413),
        ("not json", 422),
    ],
)
def test_batch_refuses_whole_requests(
    tmp_path: Path, request_json: dict[str, Any] | str, status: int
) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    with pytest.raises(RequestError) as caught:
        lfs_batch_response(store, request_json, lambda oid: oid)
    assert caught.value.status == status


def test_local_store_hrefs_point_at_the_api(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    href = href_for_store(store, "http://api/reef/lfs/s/objects/")
    assert href("a" * 64) == "http://api/reef/lfs/s/objects/" + "a" * 64


def test_release_coercion_accepts_mappings_objects_and_epoch_millis(tmp_path: Path) -> None:
    manifest = Manifest()

    class View:
        release_id = "r1"
        parent_release_id = None
        operation = "creation"
        content = manifest
        metrics_json = '{"acc": 1}'
        occurred_at = 1_700_000_000_000

    release = GitRelease.coerce(View())
    assert release.manifest == manifest and release.metrics == {"acc": 1}
    assert release.created_at == datetime.fromtimestamp(1_700_000_000, UTC)
    with pytest.raises(ArtifactError):
        GitRelease.coerce({"release_id": "r"})
    bad = {"release_id": "bad/../id", "parent_release_id": None, "operation": "creation"}
    with pytest.raises(ArtifactError):
        export_git(
            [{**bad, "manifest": manifest}],
            LocalArtifactStore(tmp_path / "s"),
            tmp_path / "x.git",
            "http://x",
        )


def test_sibling_releases_branch_from_their_parent_commit(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path / "store")
    manifest = publish_files(store, {"a.txt": "a"})

    def release(release_id: str, parent: str | None) -> GitRelease:
        return GitRelease(release_id, parent, "training", manifest)

    chain = [release("root", None), release("pending", "root"), release("head", "root")]
    exported = export_git(chain, store, tmp_path / "r.git", "http://x/lfs", head="head")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1"}
    for child in ("pending", "head"):
        parents = git(env, exported.path, "rev-parse", f"{exported.commits[child]}^@").split()
        assert parents == [exported.commits["root"]]
    assert exported.head == exported.commits["head"]
    cycle = [release("x", "y"), release("y", "x")]
    with pytest.raises(ArtifactError, match="cycle"):
        export_git(cycle, store, tmp_path / "c.git", "http://x/lfs")
