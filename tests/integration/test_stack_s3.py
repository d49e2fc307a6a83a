"""The local S3-compatible store (SeaweedFS) through the ``minio`` client."""

from __future__ import annotations

import io
import uuid
from typing import TYPE_CHECKING

import pytest
from minio.error import S3Error

if TYPE_CHECKING:
    from tests.support.stack import S3Server

pytestmark = pytest.mark.s3


def test_bucket_round_trip(s3: S3Server) -> None:
    client = s3.client()
    assert client.bucket_exists(s3.bucket)
    key = f"reef-test/{uuid.uuid4().hex}/hello.txt"
    body = b"hello from reef"

    client.put_object(s3.bucket, key, io.BytesIO(body), len(body), content_type="text/plain")
    assert client.stat_object(s3.bucket, key).size == len(body)
    response = client.get_object(s3.bucket, key)
    try:
        assert response.read() == body
    finally:
        response.close()
        response.release_conn()
    listed = [o.object_name for o in client.list_objects(s3.bucket, prefix=key, recursive=True)]
    assert listed == [key]

    client.remove_object(s3.bucket, key)
    with pytest.raises(S3Error) as missing:
        client.stat_object(s3.bucket, key)
    assert missing.value.code in {"NoSuchKey", "NoSuchObject", "ResourceNotFound"}


def test_create_and_remove_bucket(s3: S3Server) -> None:
    client = s3.client()
    bucket = f"reef-tmp-{uuid.uuid4().hex[:12]}"
    client.make_bucket(bucket)
    try:
        assert client.bucket_exists(bucket)
        client.put_object(bucket, "x", io.BytesIO(b"x"), 1)
        assert client.get_object(bucket, "x").read() == b"x"
        client.remove_object(bucket, "x")
    finally:
        client.remove_bucket(bucket)
    assert not client.bucket_exists(bucket)


@pytest.mark.slow
def test_objects_survive_server_restart(s3: S3Server) -> None:
    if not s3.managed:
        pytest.fail("REEF_TEST_S3_ENDPOINT points at a server the tests cannot stop and restart")
    client = s3.client()
    key = f"reef-test/{uuid.uuid4().hex}"
    client.put_object(s3.bucket, key, io.BytesIO(b"durable"), 7)
    s3.stop()
    s3.start()
    client = s3.client()
    response = client.get_object(s3.bucket, key)
    try:
        assert response.read() == b"durable"
    finally:
        response.close()
        response.release_conn()
    client.remove_object(s3.bucket, key)
