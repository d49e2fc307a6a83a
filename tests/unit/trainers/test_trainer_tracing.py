"""A traced trainer: one ``reef.train`` span per batch, naming the release the chain
committed and linked to the spans of its samples' reports (SDK in-memory exporter; the
trainer runs over a real embedded log and the real release chain)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from recipes.registry import build_recipe
from reef.core import topics
from reef.core.events import SampleJoined
from reef.observability.tracing import Tracing
from tests.support.trainer_harness import FAKE, Harness, until
from trainers.consumer import Trainer, TrainerConfig


async def test_a_training_step_span_names_its_release_and_links_the_reports(
    harness: Harness, running: Any
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider.get_tracer("test"), "openai")
    r0 = await harness.create("s")
    ids = [await harness.sample("s", r0) for _ in range(2)]
    samples = [e for e in await harness.events(topics.SAMPLES) if isinstance(e, SampleJoined)]
    reported = samples[0]  # this process received its report; the other one's went elsewhere
    with tracing.report({}, scenario="s", report_id=reported.report_id, score=1.0, references=[]):
        pass
    recipe = build_recipe(FAKE, {"batching": {"batch_size": 2}})
    config = TrainerConfig(FAKE, "test", harness.tmp / "trainer")
    trainer = Trainer(recipe, harness.store, harness.content, config, tracing=tracing)
    async with running(trainer):
        await until(lambda: trainer.status()["candidates"]["accepted"] == 1)
        # the step's span ends after the decision is counted: wait for it, then stop
        await until(lambda: len(exporter.get_finished_spans()) == 2)
    (release,) = await harness.committed()
    report_span, train = exporter.get_finished_spans()
    provider.shutdown()
    assert (train.name, train.kind) == ("reef.train", SpanKind.INTERNAL)
    assert dict(train.attributes or {}) == {
        "reef.scenario": "s",
        "reef.train.samples": 2,
        "reef.release_id": release.release_id,
    }
    (link,) = train.links
    assert link.context == report_span.context
    assert dict(link.attributes or {}) == {
        "reef.sample_id": reported.event_id,
        "reef.report_id": reported.report_id,
    }
    assert sorted(release.sample_ids) == sorted(ids)
