"""A worked analytics example: tokens per release, score per release, report fates.

    python docs/analytics.py                         # the deployment the REEF_* settings name
    python docs/analytics.py --scenario support-bot  # one scenario
    python docs/analytics.py --exports DIR           # Parquet files written by `reef export`

Reads four topics through :mod:`reef.history` (either log; sealed bodies opened, erased
exchanges marked ``erased``) into pyarrow tables, or from the Parquet files
``reef export --topic T --format parquet -o DIR/T.parquet`` wrote, and computes with
``pyarrow.compute`` and ``Table.group_by`` / ``Table.join`` only (the same queries read
naturally in DuckDB: ``SELECT ... FROM 'DIR/reef.inference.parquet' GROUP BY ...``):

- **tokens per release**: the exchanges each release served (``served_release_id``, the
  release an engine reported, else ``release_id``, the head when the request came), their
  input and output tokens, and how many were erased since (their token counts stay:
  erasure removes content, not metadata; an export leaves erased exchanges out);
- **score per release**: how many samples were joined (accepted reports, one per report)
  over the releases that served their exchanges, and their mean score (a report of
  feedback alone has none and is left out of the mean);
- **report fates**: per report, what the join decided (``rejected`` with its reason, or
  ``accepted``), ``consumed`` once a committed release trained on its sample, ``pending``
  while undecided: the first decision per report counts, as in ``GET /reef/reports/{id}``.

``tests/e2e/test_history_analytics.py`` runs it against a deployment on both logs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

INFERENCE, REPORTS, SAMPLES, RELEASES = (
    "reef.inference",
    "reef.reports",
    "reef.samples",
    "reef.releases",
)
TOPICS = (INFERENCE, REPORTS, SAMPLES, RELEASES)


def of_type(table: pa.Table, event_type: str) -> pa.Table:
    return table.filter(pc.equal(table["type"], event_type))


def renamed(table: pa.Table, names: dict[str, str]) -> pa.Table:
    return table.rename_columns([names.get(n, n) for n in table.column_names])


def exploded(table: pa.Table, column: str, keep: list[str]) -> pa.Table:
    """One row per item of the list column ``column`` (with the ``keep`` columns)."""
    parents = pc.list_parent_indices(table[column])
    out = {name: pc.take(table[name], parents) for name in keep}
    return pa.table({**out, column: pc.list_flatten(table[column])})


def tokens_per_release(inference: pa.Table) -> pa.Table:
    exchanges = of_type(inference, "InferenceRecorded")
    if "erased" not in exchanges.column_names:  # an export: erased exchanges are absent
        exchanges = exchanges.append_column("erased", pa.repeat(False, exchanges.num_rows))
    exchanges = exchanges.append_column(
        "release", pc.coalesce(exchanges["served_release_id"], exchanges["release_id"])
    ).append_column("erased_n", pc.cast(exchanges["erased"], pa.int64()))
    grouped = exchanges.group_by(["scenario", "release"]).aggregate(
        [
            ("event_id", "count"),
            ("input_tokens", "sum"),
            ("output_tokens", "sum"),
            ("erased_n", "sum"),
            ("occurred_at", "min"),
        ]
    )
    names = {
        "event_id_count": "exchanges",
        "input_tokens_sum": "input_tokens",
        "output_tokens_sum": "output_tokens",
        "erased_n_sum": "erased",
        "occurred_at_min": "first_served",
    }
    table = renamed(grouped, names).sort_by(
        [("scenario", "ascending"), ("first_served", "ascending")]
    )
    return table.select(
        ["scenario", "release", "exchanges", "input_tokens", "output_tokens", "erased"]
    )


def score_per_release(samples: pa.Table) -> pa.Table:
    joined = of_type(samples, "SampleJoined")
    rows = exploded(joined, "release_ids", ["scenario", "score"])
    grouped = rows.group_by(["scenario", "release_ids"]).aggregate(
        [("score", "count", pc.CountOptions(mode="all")), ("score", "mean")]
    )
    names = {"release_ids": "release", "score_count": "samples", "score_mean": "mean_score"}
    table = renamed(grouped, names).sort_by([("scenario", "ascending"), ("release", "ascending")])
    return table.select(["scenario", "release", "samples", "mean_score"])


def report_fates(reports: pa.Table, samples: pa.Table, releases: pa.Table) -> pa.Table:
    """One row per report: its fate (status, reason) and the release that consumed it."""
    submitted = renamed(
        of_type(reports, "ReportSubmitted").select(["scenario", "event_id", "score"]),
        {"event_id": "report_id"},
    )
    decisions = samples.select(["scenario", "report_id", "type", "event_id", "reason"])
    first = decisions.group_by(["scenario", "report_id"], use_threads=False).aggregate(
        [("type", "first"), ("event_id", "first"), ("reason", "first")]
    )
    first = renamed(
        first, {"type_first": "decision", "event_id_first": "sample_id", "reason_first": "reason"}
    )
    commits = exploded(of_type(releases, "ReleaseCommitted"), "sample_ids", ["release_id"])
    consumed = commits.group_by("sample_ids", use_threads=False).aggregate(
        [("release_id", "first")]
    )
    consumed = renamed(consumed, {"sample_ids": "sample_id", "release_id_first": "consumed_by"})
    table = submitted.join(first, ["scenario", "report_id"], join_type="left outer")
    table = table.join(consumed, "sample_id", join_type="left outer")
    status = pc.if_else(
        pc.is_null(table["decision"]),
        "pending",
        pc.if_else(
            pc.equal(table["decision"], "ReportRejected"),
            "rejected",
            pc.if_else(pc.is_null(table["consumed_by"]), "accepted", "consumed"),
        ),
    )
    table = table.append_column("status", status)
    columns = ["scenario", "report_id", "score", "status", "reason", "consumed_by"]
    return table.select(columns).sort_by([("scenario", "ascending"), ("report_id", "ascending")])


def fate_counts(fates: pa.Table) -> pa.Table:
    grouped = fates.group_by(["scenario", "status", "reason"]).aggregate([("report_id", "count")])
    table = renamed(grouped, {"report_id_count": "reports"})
    order = [("scenario", "ascending"), ("status", "ascending"), ("reason", "ascending")]
    return table.select(["scenario", "status", "reason", "reports"]).sort_by(order)


def analyse(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    fates = report_fates(tables[REPORTS], tables[SAMPLES], tables[RELEASES])
    return {
        "tokens per release": tokens_per_release(tables[INFERENCE]),
        "score per release": score_per_release(tables[SAMPLES]),
        "report fates": fate_counts(fates),
        "reports": fates,
    }


def from_exports(folder: Path, scenario: str | None) -> dict[str, pa.Table]:
    tables = {topic: pq.read_table(folder / f"{topic}.parquet") for topic in TOPICS}
    if scenario is None:
        return tables
    return {t: table.filter(pc.equal(table["scenario"], scenario)) for t, table in tables.items()}


def from_stream(config: Path | None, scenario: str | None) -> dict[str, pa.Table]:
    from reef.history import read_tables
    from reef.settings import load_settings

    settings = load_settings(config_file=config).settings
    return asyncio.run(read_tables(settings, TOPICS, scenario=scenario))


def show(results: dict[str, pa.Table]) -> None:
    for title, table in results.items():
        print(f"== {title}")
        rows = [[_text(v) for v in row.values()] for row in table.to_pylist()]
        names = table.column_names
        widths = [max([len(n), *(len(r[i]) for r in rows)]) for i, n in enumerate(names)]
        for line in [names, *rows]:
            print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
        print()


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "-" if value is None else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, help="A reef config file (else REEF_* settings).")
    parser.add_argument("--exports", type=Path, help="A folder of `reef export` Parquet files.")
    parser.add_argument("--scenario", help="Only this scenario.")
    parser.add_argument("--json", action="store_true", help="JSON instead of text tables.")
    args = parser.parse_args()
    if args.exports is not None:
        tables = from_exports(args.exports, args.scenario)
    else:
        tables = from_stream(args.config, args.scenario)
    results = analyse(tables)
    if args.json:
        print(json.dumps({k: t.to_pylist() for k, t in results.items()}, default=str))
    else:
        show(results)


if __name__ == "__main__":
    main()
