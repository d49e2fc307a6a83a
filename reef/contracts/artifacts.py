"""The ArtifactStore contract: one suite every adapter must pass (not collected by itself).

Subclass :class:`ArtifactStoreContract` in a ``test_*.py`` module, provide a ``store``
fixture (an empty store of the adapter) and implement :meth:`corrupt`.

Memory is measured as the growth of the process's *peak* resident set size
(``VmHWM``) over its RSS when the measurement starts. On Linux the peak is reset
first (writing ``5`` to ``/proc/self/clear_refs``), so peaks from earlier tests in
this long-lived pytest process cannot hide growth; elsewhere ``ru_maxrss`` is used
(which can under-report for the same reason, and says so). RSS, not tracemalloc,
because the bytes that matter (urllib3/ssl buffers, hashlib, file I/O) are not all
allocated through Python's allocator and tracemalloc would miss some of them.
"""

from __future__ import annotations

import abc
import contextlib
import gc
import hashlib
import os
import re
import resource
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reef.artifacts import (
    ArtifactCorruptError,
    ArtifactError,
    ArtifactNotFoundError,
    ArtifactStore,
    ClaimCheck,
    Manifest,
    ManifestEntry,
    ObjectRef,
    UnsafePathError,
    materialise,
    materialise_cached,
    missing_objects,
    publish_dir,
    publish_files,
)

MIB = 1024 * 1024
BIG_FILE_BYTES = 200 * MIB
MAX_RSS_GROWTH = 64 * MIB
UNKNOWN_OID = "0" * 64


def write_random_file(path: Path, size: int, *, seed: bytes = b"") -> ObjectRef:
    """A file of pseudo-random bytes written in 1 MiB chunks; its sha256 and size."""
    digest = hashlib.sha256()
    block = hashlib.sha256(seed + path.name.encode()).digest() * (MIB // 32)
    with path.open("wb") as out:
        written = 0
        counter = 0
        while written < size:
            chunk = (counter.to_bytes(8, "big") + block)[: min(MIB, size - written)]
            out.write(chunk)
            digest.update(chunk)
            written += len(chunk)
            counter += 1
    return ObjectRef(digest.hexdigest(), size)


def file_ref(path: Path) -> ObjectRef:
    digest = hashlib.sha256()
    with path.open("rb") as src:
        while chunk := src.read(MIB):
            digest.update(chunk)
    return ObjectRef(digest.hexdigest(), path.stat().st_size)


@dataclass
class RssProbe:
    method: str
    start_bytes: int = 0
    peak_bytes: int = 0

    @property
    def growth(self) -> int:
        return max(0, self.peak_bytes - self.start_bytes)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    assert match is not None
    return int(match.group(1))


@contextlib.contextmanager
def peak_rss_growth() -> Iterator[RssProbe]:
    """How far the process's peak RSS rises above its RSS at entry (see the module doc)."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        probe = RssProbe("VmHWM after reset", _status_kib("VmRSS") * 1024)
        yield probe
        probe.peak_bytes = _status_kib("VmHWM") * 1024
    except OSError:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        probe = RssProbe("ru_maxrss (may under-report)", usage.ru_maxrss * 1024)
        yield probe
        probe.peak_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def fingerprint_tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    """{relative path: (bytes, executable)} of every file under ``root``."""
    out: dict[str, tuple[bytes, bool]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            rel = path.relative_to(root).as_posix()
            out[rel] = (path.read_bytes(), bool(path.stat().st_mode & 0o100))
    return out


def make_tree(root: Path) -> None:
    (root / "prompts").mkdir(parents=True)
    (root / "prompts" / "system.md").write_text("You are careful.\n")
    (root / "prompts" / "copy-of-system.md").write_text("You are careful.\n")
    (root / "skills" / "search").mkdir(parents=True)
    run = root / "skills" / "search" / "run.sh"
    run.write_text("#!/bin/sh\necho search\n")
    run.chmod(0o755)
    (root / "weights").mkdir()
    (root / "weights" / "adapter.safetensors").write_bytes(bytes(range(256)) * 64 + b"\0")
    (root / "empty.txt").write_bytes(b"")
    (root / "notes ünïcode ☃.txt").write_text("naïve\n")
    (root / "empty-dir").mkdir()


class ArtifactStoreContract(abc.ABC):
    """Behaviour every ArtifactStore adapter shares, given the subclass's ``store`` fixture
    (an empty store of the adapter) and :meth:`corrupt`."""

    @abc.abstractmethod
    def corrupt(self, store: ArtifactStore, oid: str) -> None:
        """Flip one byte of the stored object behind the store's back (same length)."""

    # -- objects ----------------------------------------------------------------------

    def test_bytes_round_trip(self, store: ArtifactStore) -> None:
        ref = store.put_bytes(b"hello artifacts")
        assert ref == ObjectRef(hashlib.sha256(b"hello artifacts").hexdigest(), 15)
        assert store.exists(ref.oid)
        assert store.size(ref.oid) == 15
        assert store.get_bytes(ref.oid) == b"hello artifacts"
        with store.open(ref.oid) as reader:
            assert reader.read(5) == b"hello"
            assert reader.read() == b" artifacts"

    def test_empty_object_round_trip(self, store: ArtifactStore, tmp_path: Path) -> None:
        ref = store.put_bytes(b"")
        assert ref.oid == hashlib.sha256(b"").hexdigest()
        assert store.get_to_file(ref.oid, tmp_path / "out") == ref
        assert (tmp_path / "out").read_bytes() == b""

    def test_unknown_object_is_not_found(self, store: ArtifactStore, tmp_path: Path) -> None:
        assert not store.exists(UNKNOWN_OID)
        with pytest.raises(ArtifactNotFoundError):
            store.size(UNKNOWN_OID)
        with pytest.raises(ArtifactNotFoundError):
            store.get_bytes(UNKNOWN_OID)
        with pytest.raises(ArtifactNotFoundError):
            store.get_to_file(UNKNOWN_OID, tmp_path / "out")
        assert not (tmp_path / "out").exists()

    @pytest.mark.parametrize("oid", ["../../etc/passwd", "A" * 64, "abc", "0" * 63 + "/"])
    def test_invalid_oid_is_refused(self, store: ArtifactStore, oid: str) -> None:
        with pytest.raises(ArtifactError):
            store.get_bytes(oid)
        with pytest.raises(ArtifactError):
            store.exists(oid)

    @pytest.mark.slow
    def test_200_mb_round_trip_streams_in_bounded_memory(
        self, store: ArtifactStore, tmp_path: Path
    ) -> None:
        source = tmp_path / "big.bin"
        expected = write_random_file(source, BIG_FILE_BYTES)
        started = time.perf_counter()
        with peak_rss_growth() as probe:
            ref = store.put_file(source)
            got = store.get_to_file(ref.oid, tmp_path / "back.bin")
        elapsed = time.perf_counter() - started
        print(
            f"\n[{type(store).__name__}] 200 MB put+get {elapsed:.2f} s, "
            f"peak RSS growth {probe.growth / MIB:.1f} MiB ({probe.method})"
        )
        assert ref == expected == got
        assert file_ref(tmp_path / "back.bin") == expected
        assert probe.growth < MAX_RSS_GROWTH

    def test_corrupted_object_is_detected_on_read(
        self, store: ArtifactStore, tmp_path: Path
    ) -> None:
        ref = store.put_bytes(b"precious weights " * 1000)
        self.corrupt(store, ref.oid)
        with pytest.raises(ArtifactCorruptError):
            store.get_bytes(ref.oid)
        with pytest.raises(ArtifactCorruptError), store.open(ref.oid) as reader:
            while reader.read(4096):
                pass
        with pytest.raises(ArtifactCorruptError):
            store.get_to_file(ref.oid, tmp_path / "out" / "weights.bin")
        assert list((tmp_path / "out").iterdir()) == []

    def test_reading_exactly_size_bytes_verifies(self, store: ArtifactStore) -> None:
        ref = store.put_bytes(b"x" * 10_000)
        self.corrupt(store, ref.oid)
        with pytest.raises(ArtifactCorruptError), store.open(ref.oid) as reader:
            reader.read(ref.size)

    def test_concurrent_puts_of_one_object_are_safe(
        self, store: ArtifactStore, tmp_path: Path
    ) -> None:
        source = tmp_path / "shared.bin"
        expected = write_random_file(source, 12 * MIB)
        results: list[ObjectRef] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(6)

        def put(index: int) -> None:
            try:
                barrier.wait()
                if index % 2:
                    results.append(store.put_file(source))
                else:
                    results.append(store.put_bytes(source.read_bytes()))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=put, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == []
        assert results == [expected] * 6
        assert store.get_to_file(expected.oid, tmp_path / "back.bin") == expected
        assert file_ref(tmp_path / "back.bin") == expected

    def test_re_put_is_a_no_op(self, store: ArtifactStore, tmp_path: Path) -> None:
        source = tmp_path / "model.bin"
        expected = write_random_file(source, 3 * MIB)
        copied: list[int] = []
        assert store.put_file(source, progress=copied.append) == expected
        assert copied and copied[-1] == expected.size
        copied.clear()
        assert store.put_file(source, progress=copied.append) == expected
        assert store.put_bytes(source.read_bytes()) == expected
        assert copied == []  # nothing was copied or uploaded the second time
        assert store.get_bytes(expected.oid) == source.read_bytes()

    def test_failed_put_leaves_no_object(self, store: ArtifactStore, tmp_path: Path) -> None:
        source = tmp_path / "doomed.bin"
        expected = write_random_file(source, 20 * MIB)

        class Interrupted(Exception):
            pass

        def interrupt(done: int) -> None:
            if done >= 10 * MIB:
                raise Interrupted

        with pytest.raises(Interrupted):
            store.put_file(source, progress=interrupt)
        assert not store.exists(expected.oid)
        assert store.put_file(source) == expected
        assert store.exists(expected.oid)

    def test_download_url_is_none_or_serves_the_object(self, store: ArtifactStore) -> None:
        import datetime
        import urllib.request

        ref = store.put_bytes(b"served directly")
        url = store.download_url(ref.oid, datetime.timedelta(minutes=5))
        if url is not None:
            with urllib.request.urlopen(url, timeout=10) as response:
                assert response.read() == b"served directly"

    # -- manifests ----------------------------------------------------------------

    def test_publish_and_materialise_round_trip(self, store: ArtifactStore, tmp_path: Path) -> None:
        make_tree(tmp_path / "src")
        manifest = publish_dir(store, tmp_path / "src")
        assert sorted(manifest) == [
            "empty.txt",
            "notes ünïcode ☃.txt",
            "prompts/copy-of-system.md",
            "prompts/system.md",
            "skills/search/run.sh",
            "weights/adapter.safetensors",
        ]
        assert manifest["skills/search/run.sh"].mode == "100755"
        assert manifest["prompts/system.md"].mode == "100644"
        assert missing_objects(store, manifest) == []
        assert Manifest.from_json(manifest.to_json()) == manifest
        assert Manifest.from_json(manifest.to_json()).content_id == manifest.content_id

        out = materialise(store, manifest, tmp_path / "out")
        expected = fingerprint_tree(tmp_path / "src")
        assert fingerprint_tree(out) == expected
        assert publish_dir(store, out).content_id == manifest.content_id

        cache = tmp_path / "cache"
        cached = materialise_cached(store, manifest, cache)
        assert cached == cache / manifest.content_id
        assert fingerprint_tree(cached) == expected
        assert materialise_cached(store, manifest, cache) == cached
        assert [p.name for p in cache.iterdir()] == [manifest.content_id]

    def test_materialise_is_all_or_nothing(self, store: ArtifactStore, tmp_path: Path) -> None:
        manifest = publish_files(store, {"a.txt": "alpha " * 500, "b/c.txt": "gamma " * 500})
        self.corrupt(store, manifest["b/c.txt"].oid)
        with pytest.raises(ArtifactCorruptError):
            materialise(store, manifest, tmp_path / "out")
        assert list(tmp_path.iterdir()) == []
        with pytest.raises(ArtifactCorruptError):
            materialise_cached(store, manifest, tmp_path / "cache")
        assert list((tmp_path / "cache").iterdir()) == []

    def test_materialise_refuses_an_existing_destination(
        self, store: ArtifactStore, tmp_path: Path
    ) -> None:
        manifest = publish_files(store, {"a.txt": "alpha"})
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "keep.txt").write_text("mine")
        with pytest.raises(ArtifactError):
            materialise(store, manifest, tmp_path / "out")
        assert fingerprint_tree(tmp_path / "out") == {"keep.txt": (b"mine", False)}

    def test_missing_objects_are_reported(self, store: ArtifactStore) -> None:
        present = store.put_bytes(b"present")
        manifest = Manifest(
            {
                "ok.txt": ManifestEntry(present.oid, present.size),
                "gone.bin": ManifestEntry("f" * 64, 10),
                "wrong-size.txt": ManifestEntry(present.oid, present.size + 1),
            }
        )
        assert missing_objects(store, manifest) == sorted(["f" * 64, present.oid])

    def test_publish_files_round_trip(self, store: ArtifactStore, tmp_path: Path) -> None:
        files: dict[str, bytes | str] = {"prompts/system.md": "Be brief.\n", "bin/run": b"\x00\x01"}
        manifest = publish_files(store, files, executable={"bin/run"})
        out = materialise(store, manifest, tmp_path / "out")
        assert fingerprint_tree(out) == {
            "bin/run": (b"\x00\x01", True),
            "prompts/system.md": (b"Be brief.\n", False),
        }

    # -- unsafe trees -------------------------------------------------------------

    def test_symlink_in_tree_is_refused_before_any_upload(
        self, store: ArtifactStore, tmp_path: Path
    ) -> None:
        tree = tmp_path / "tree"
        tree.mkdir()
        (tree / "a-unique.txt").write_text("uploaded only if the tree is safe 8c1f")
        (tree / "link").symlink_to("/etc/passwd")
        with pytest.raises(UnsafePathError, match="link"):
            publish_dir(store, tree)
        assert not store.exists(file_ref(tree / "a-unique.txt").oid)

    def test_symlinked_directory_is_refused(self, store: ArtifactStore, tmp_path: Path) -> None:
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "secret").write_text("s")
        tree = tmp_path / "tree"
        (tree / "sub").mkdir(parents=True)
        (tree / "sub" / "escape").symlink_to(outside, target_is_directory=True)
        with pytest.raises(UnsafePathError):
            publish_dir(store, tree)

    def test_fifo_is_refused(self, store: ArtifactStore, tmp_path: Path) -> None:
        (tmp_path / "tree").mkdir()
        os.mkfifo(tmp_path / "tree" / "pipe")
        with pytest.raises(UnsafePathError):
            publish_dir(store, tmp_path / "tree")

    @pytest.mark.parametrize(
        "path", ["../escape.txt", "a/../../b", "/etc/passwd", "a//b", "./a", ".git/config"]
    )
    def test_unsafe_paths_are_refused(self, store: ArtifactStore, path: str) -> None:
        with pytest.raises(UnsafePathError):
            publish_files(store, {path: "x", "fine.txt": "unique 5d1e"})
        assert not store.exists(hashlib.sha256(b"unique 5d1e").hexdigest())
        entry = {"oid": hashlib.sha256(b"x").hexdigest(), "size": 1, "mode": "100644"}
        with pytest.raises(UnsafePathError):
            Manifest.from_json({path: entry})

    # -- claim check --------------------------------------------------------------

    def test_claim_check_round_trip(self, store: ArtifactStore) -> None:
        check = ClaimCheck(store, threshold_bytes=64)
        assert check.offload("short") == ("short", None)
        assert check.resolve("short", None) == "short"
        body = "é" * 40  # 80 bytes of UTF-8: over the threshold, though 40 characters
        inline, ref = check.offload(body)
        assert inline is None and ref == "sha256:" + hashlib.sha256(body.encode()).hexdigest()
        assert check.resolve(None, ref) == body

    def test_claim_check_detects_corruption_and_bad_refs(self, store: ArtifactStore) -> None:
        check = ClaimCheck(store, threshold_bytes=8)
        _, ref = check.offload("a long body that is offloaded")
        assert ref is not None
        self.corrupt(store, ref.removeprefix("sha256:"))
        with pytest.raises(ArtifactCorruptError):
            check.resolve(None, ref)
        with pytest.raises(ArtifactNotFoundError):
            check.resolve(None, "sha256:" + UNKNOWN_OID)
        for inline, bad in [(None, "md5:abc"), ("both", ref), (None, None)]:
            with pytest.raises(ArtifactError):
                check.resolve(inline, bad)
