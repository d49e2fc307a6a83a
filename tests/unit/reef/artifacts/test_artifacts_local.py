"""The local-directory artifact store against the contract, plus the pure manifest rules."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from reef.artifacts import (
    ArtifactError,
    LocalArtifactStore,
    Manifest,
    ManifestEntry,
    UnsafePathError,
)
from reef.artifacts.manifest import validate_path
from reef.contracts.artifacts import ArtifactStoreContract, write_random_file
from reef.core.ids import EMPTY_CONTENT_ID


class TestLocalArtifactStore(ArtifactStoreContract):
    @pytest.fixture
    def store(self, tmp_path_factory: pytest.TempPathFactory) -> LocalArtifactStore:
        return LocalArtifactStore(tmp_path_factory.mktemp("artifacts"))

    def corrupt(self, store: LocalArtifactStore, oid: str) -> None:  # type: ignore[override]
        path = store.object_path(oid)
        path.chmod(0o644)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))

    def test_layout_is_lfs_objects_sharded_by_oid(self, store: LocalArtifactStore) -> None:
        ref = store.put_bytes(b"layout")
        oid = ref.oid
        path = store.root / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
        assert store.object_path(oid) == path
        assert path.read_bytes() == b"layout"
        assert path.stat().st_mode & 0o222 == 0  # stored objects are read-only

    def test_no_temp_files_are_left_behind(self, store: LocalArtifactStore, tmp_path: Path) -> None:
        source = tmp_path / "f.bin"
        write_random_file(source, 2 * 1024 * 1024)

        def fail(done: int) -> None:
            raise RuntimeError("disk on fire")

        with pytest.raises(RuntimeError):
            store.put_file(source, progress=fail)
        store.put_file(source)
        store.put_bytes(b"more")
        assert list((store.root / "tmp").iterdir()) == []

    def test_truncated_object_is_rewritten_by_the_next_put(self, store: LocalArtifactStore) -> None:
        ref = store.put_bytes(b"0123456789")
        path = store.object_path(ref.oid)
        path.chmod(0o644)
        path.write_bytes(b"01234")
        assert store.put_bytes(b"0123456789") == ref
        assert store.get_bytes(ref.oid) == b"0123456789"

    def test_default_location_is_under_the_state_dir(self, tmp_path: Path) -> None:
        assert LocalArtifactStore.in_state_dir(tmp_path).root == tmp_path / "artifacts"

    def test_source_errors_become_artifact_errors(
        self, store: LocalArtifactStore, tmp_path: Path
    ) -> None:
        with pytest.raises(ArtifactError) as caught:
            store.put_file(tmp_path / "does-not-exist")
        assert isinstance(caught.value.__cause__, OSError)


# -- manifest rules (pure) ----------------------------------------------------------------

OID = hashlib.sha256(b"x").hexdigest()


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/abs",
        "..",
        "../x",
        "a/..",
        "a/./b",
        "a//b",
        "a/",
        "a\\b",
        "a\nb",
        "a\x00b",
        ".git",
        "sub/.GIT/hooks/pre-commit",
        ".gitattributes",
        ".lfsconfig",
        "x" * 256,
        "bad-\udcff-utf8",
    ],
)
def test_validate_path_refuses(path: str) -> None:
    with pytest.raises(UnsafePathError):
        validate_path(path)


@pytest.mark.parametrize(
    "path", ["a", "a/b/c.txt", ".hidden", "dir/.gitattributes", "ünï code/…", "a..b", "...x"]
)
def test_validate_path_accepts(path: str) -> None:
    assert validate_path(path) == path


def test_a_path_cannot_be_both_file_and_directory() -> None:
    with pytest.raises(UnsafePathError):
        Manifest({"a": ManifestEntry(OID, 1), "a/b": ManifestEntry(OID, 1)})


def test_content_id_is_sha256_of_canonical_json() -> None:
    manifest = Manifest({"b.txt": ManifestEntry(OID, 1), "a.sh": ManifestEntry(OID, 1, "100755")})
    text = (
        '{"a.sh":{"mode":"100755","oid":"' + OID + '","size":1},'
        '"b.txt":{"mode":"100644","oid":"' + OID + '","size":1}}'
    )
    assert manifest.to_json() == text
    assert manifest.content_id == hashlib.sha256(text.encode()).hexdigest()
    assert Manifest().content_id == EMPTY_CONTENT_ID


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[]",
        '{"a": {"oid": "xyz", "size": 1}}',
        '{"a": {"oid": "' + OID + '", "size": -1}}',
        '{"a": {"oid": "' + OID + '", "size": true}}',
        '{"a": {"oid": "' + OID + '", "size": 1, "mode": "120000"}}',
        '{"a": {"oid": "' + OID + '"}}',
        '{"a": {"oid": "' + OID + '", "size": 1, "extra": 1}}',
    ],
)
def test_malformed_manifests_are_refused(raw: str) -> None:
    with pytest.raises(ArtifactError):
        Manifest.from_json(raw)
