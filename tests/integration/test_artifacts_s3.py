"""The S3 artifact store against the contract, on the local S3-compatible server."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from reef.artifacts import ArtifactError
from reef.artifacts.s3 import S3ArtifactStore
from reef.contracts.artifacts import MIB, ArtifactStoreContract, file_ref, write_random_file

if TYPE_CHECKING:
    from tests.support.stack import S3Server

pytestmark = pytest.mark.s3


def make_store(s3: S3Server, prefix: str, *, retries: int = 3) -> S3ArtifactStore:
    return S3ArtifactStore(
        s3.endpoint,
        access_key=s3.access_key,
        secret_key=s3.secret_key,
        bucket=s3.bucket,
        region=s3.region,
        prefix=prefix,
        retries=retries,
    )


def remove_prefix(s3: S3Server, prefix: str) -> None:
    client = s3.client()
    for item in client.list_objects(s3.bucket, prefix=prefix, recursive=True):
        client.remove_object(s3.bucket, item.object_name)


@pytest.fixture
def s3_prefix(s3: S3Server) -> Iterator[str]:
    """A key prefix of this test's own; its objects are removed afterwards."""
    prefix = f"reef-test/artifacts-{uuid.uuid4().hex[:12]}/"
    yield prefix
    if not s3.managed or s3.is_running():
        remove_prefix(s3, prefix)


class TestS3ArtifactStore(ArtifactStoreContract):
    @pytest.fixture
    def store(self, s3: S3Server, s3_prefix: str) -> S3ArtifactStore:
        return make_store(s3, s3_prefix)

    def corrupt(self, store: S3ArtifactStore, oid: str) -> None:  # type: ignore[override]
        client = store._client
        response = client.get_object(store.bucket, store.object_key(oid))
        try:
            data = bytearray(response.read())
        finally:
            response.close()
            response.release_conn()
        data[len(data) // 2] ^= 0xFF
        client.put_object(store.bucket, store.object_key(oid), io.BytesIO(data), len(data))

    def test_layout_is_lfs_objects_under_the_prefix(
        self, s3: S3Server, store: S3ArtifactStore, s3_prefix: str
    ) -> None:
        ref = store.put_bytes(b"layout")
        key = f"{s3_prefix}lfs/objects/{ref.oid[:2]}/{ref.oid[2:4]}/{ref.oid}"
        assert store.object_key(ref.oid) == key
        assert s3.client().stat_object(s3.bucket, key).size == 6

    def test_unreachable_server_is_an_artifact_error(self, tmp_path: Path) -> None:
        store = S3ArtifactStore(
            "http://127.0.0.1:9",
            access_key="a",
            secret_key="b",
            bucket="none",
            retries=0,
            timeout_s=2,
        )
        with pytest.raises(ArtifactError):
            store.put_bytes(b"x")
        with pytest.raises(ArtifactError):
            store.exists("0" * 64)


@pytest.mark.slow
def test_server_stopped_mid_upload_leaves_no_object(
    s3: S3Server, s3_prefix: str, tmp_path: Path
) -> None:
    if not s3.managed:
        pytest.fail("REEF_TEST_S3_ENDPOINT points at a server the tests cannot stop and restart")
    source = tmp_path / "weights.bin"
    expected = write_random_file(source, 48 * MIB)
    store = make_store(s3, s3_prefix, retries=1)  # keep the shared server's downtime short
    stopped = False

    def stop_server_midway(done: int) -> None:
        nonlocal stopped
        if done >= 20 * MIB and not stopped:
            stopped = True
            s3.stop()  # two parts are uploaded, the third is being read

    try:
        with pytest.raises(ArtifactError):
            store.put_file(source, progress=stop_server_midway)
    finally:
        if stopped:
            s3.start()
    assert stopped

    store = make_store(s3, s3_prefix)
    assert not store.exists(expected.oid)
    assert store.put_file(source) == expected
    assert store.get_to_file(expected.oid, tmp_path / "back.bin") == expected
    assert file_ref(tmp_path / "back.bin") == expected
