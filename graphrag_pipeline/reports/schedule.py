"""Writing the reports of many communities: which to reuse, in which order, how many at once.

A community id names its content, so a report already stored for an id by the same writer (an id
that came back after an edit was undone, or a partition run again) is kept, not paid for twice.
Every community whose tables fit the prompt is written at once (the client bounds the calls in
flight); the large ones follow in waves, deepest level first, so they can use the reports of their
sub-communities. Each report is stored as soon as it exists: when the work is interrupted (the run
terminated, the endpoint's circuit breaker opened) the client is cancelled, the calls not yet
started are dropped, what is finished stays stored and the exception goes on to the caller.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from graphrag_pipeline import progress
from graphrag_pipeline.llm.client import LLMCancelled, LLMError
from graphrag_pipeline.reports.llm import fits_budget, llm_report, report_generator
from graphrag_pipeline.reports.offline import CommunityReport, extractive_report

_LOG = logging.getLogger(__name__)


@dataclass
class ReportsResult:
    written: dict[str, CommunityReport] = field(default_factory=dict)  # community id -> report stored now
    reused: list[str] = field(default_factory=list)  # ids whose stored report was kept
    superseded: list[str] = field(default_factory=list)  # ids that no longer name a community
    fallbacks: list[dict] = field(default_factory=list)  # {community, reason}: LLM answer unusable
    sizes: dict[str, int] = field(default_factory=dict)  # community id -> member count, for the written ones

    @property
    def extractive(self) -> int:
        return sum(1 for r in self.written.values() if r.extractive)


def report_waves(
    keys: list[str], table: dict[str, dict], children: dict[str, list[str]], nodes, edges, use_llm: bool
) -> list[list[str]]:
    """The order reports are written in: first every community that fits the prompt, then the
    large ones (with sub-communities) one level at a time, deepest first."""
    large = [k for k in keys if use_llm and children.get(k) and not fits_budget(table[k], nodes, edges)]
    waves = [[k for k in keys if k not in set(large)]]
    for level in sorted({table[k]["level"] for k in large}, reverse=True):
        waves.append([k for k in large if table[k]["level"] == level])
    return waves


def write_reports(
    store, partition_keys: list[str], client=None, *, language: str = "English", log=None
) -> ReportsResult:
    """Write the report of each community in ``partition_keys`` (extractive without ``client``).

    ``log`` takes ``info`` and ``warning`` calls (a logger, or Dagster's ``context.log``)."""
    log = log or _LOG
    table = {r["community_id"]: r for r in store.read_communities().to_dicts()}
    children: dict[str, list[str]] = {}
    for row in table.values():
        if row["parent_id"]:
            children.setdefault(row["parent_id"], []).append(row["community_id"])
    result = ReportsResult()
    result.superseded = [k for k in partition_keys if k not in table]
    generator = report_generator(client, language)
    result.reused = [
        k for k in partition_keys if k in table and (r := store.read_report(k)) and r.generator == generator
    ]
    keys = [k for k in partition_keys if k in table and k not in set(result.reused)]
    written = result.written
    # only the members of the communities to write, and the edges among them, are read
    nodes, edges = store.read_graph_among("resolved_graph", [m for k in keys for m in table[k]["nodes"]])

    def sub_reports(cid: str) -> dict[str, CommunityReport]:
        found = {}
        for child in children.get(cid, []):
            rep = written.get(child) or store.read_report(child)
            if rep is not None:
                found[child] = rep
        return found

    def make(cid: str):
        community = table[cid]
        if client is None:
            return extractive_report(community, nodes, edges), None
        outcome = llm_report(
            client,
            community,
            nodes,
            edges,
            language=language,
            sub_reports=sub_reports(cid),
            children=children.get(cid, []),
        )
        return outcome.report, (outcome.error or "unparsable answer") if outcome.fallback else None

    waves = report_waves(keys, table, children, nodes, edges, client is not None)
    pool = ThreadPoolExecutor(max_workers=client.max_concurrent if client else 1, thread_name_prefix="report")
    progress.start("reports", len(keys), "reports", "writing reports")
    try:
        for wave in waves:
            for cid, (report, fallback) in zip(wave, pool.map(make, wave)):
                store.write_report(report)
                written[cid] = report
                progress.advance("reports")
                result.sizes[cid] = table[cid]["size"]
                if fallback:
                    result.fallbacks.append({"community": cid, "reason": fallback})
                    log.warning(f"report of {cid}: LLM answer unusable ({fallback}); extractive report written instead")
            log.info(f"reports: {len(written)}/{len(keys)} written")
    except BaseException as exc:
        # run terminated or endpoint failed: stop all LLM work now; finished reports stay stored
        stopping = client is not None and client.cancelled  # a stop asked for, before this cancel
        if client is not None:
            client.cancel()
        # after a call that failed (not a stop asked for), the answers already on the wire are paid
        # for: they are awaited (each bounded by the client's deadlines), so the step's usage, recorded
        # as the failure leaves the step, counts them; a stop does not wait for them
        settle = client is not None and not stopping and isinstance(exc, LLMError) and not isinstance(exc, LLMCancelled)
        pool.shutdown(wait=settle, cancel_futures=True)
        raise
    finally:
        progress.finish("reports")
    pool.shutdown()
    if result.superseded:
        log.warning(
            f"{len(result.superseded)} report partitions no longer match a community (superseded by a newer build)"
        )
    if result.reused:
        log.info(f"{len(result.reused)} reports were already stored for their community ids and are kept")
    return result


def reportable_ids(communities) -> list[str]:
    """The communities that get a report: those of two or more members."""
    import polars as pl

    return communities.filter(pl.col("size") >= 2)["community_id"].to_list()


def report_partition_changes(wanted: list[str], existing, written) -> tuple[list[str], list[str]]:
    """(keys to add, keys to delete) for one report partition per id in ``wanted``. The keys to add
    list the returning ids (their reports are stored: in ``written``) first, then the ones needing
    a report: those end up contiguous at the end of the partition order, one partition range, so
    one run writes them."""
    existing = set(existing)
    new = sorted((k for k in wanted if k not in existing), key=lambda k: k not in written)
    gone = sorted(existing - set(wanted))
    return new, gone
