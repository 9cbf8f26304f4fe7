"""``python -m bench.profile postgres`` sorts ``perf script`` samples of the backends into the
stages of a statement; the first listed stage found anywhere on a stack takes the sample."""

from __future__ import annotations

from bench.profile import summarize_perf

# perf script -F comm,pid,ip,sym: a header line per sample, then its frames, leaf first
SCRIPT = """postgres  4242
\t    55d8419f6 heap_hot_search_buffer+0x12
\t    55d8419f7 index_fetch_heap+0x33
\t    55d8419f8 standard_ExecutorRun+0x9
\t    55d8419f9 PortalRun+0x1
\t    55d8419fa PostgresMain+0x2

postgres  4242
\t    55d841a01 pg_strtok+0x4
\t    55d841a02 [unknown]
\t    55d841a03 build_column_default+0x5
\t    55d841a04 ExecInitStoredGenerated+0x1
\t    55d841a05 standard_ExecutorStart+0x1
\t    55d841a06 PostgresMain+0x2

postgres  4242
\t    55d841b01 fdatasync+0x4
\t    55d841b02 XLogFlush+0x5
\t    55d841b03 CommitTransaction+0x1
\t    55d841b04 PostgresMain+0x2

postgres  4242
\t    55d841c01 ginHeapTupleFastInsert+0x4
\t    55d841c02 gininsert+0x5
\t    55d841c03 ExecInsertIndexTuples+0x1
\t    55d841c04 standard_ExecutorRun+0x1
\t    55d841c05 ExecCallTriggerFunc+0x1
\t    55d841c06 AfterTriggerFireDeferred+0x1
\t    55d841c07 CommitTransaction+0x1
"""


def test_samples_are_counted_by_stage_and_by_leaf() -> None:
    summary = summarize_perf(SCRIPT)
    assert summary["samples"] == 4
    share = summary["share"]
    # a deferred trigger's GIN insert during the commit is the commit's
    assert share == {"executor (the statements' own work)": 0.25,
                     "statement start (ExecutorStart)": 0.25,
                     "commit (WAL flush, NOTIFY queue, locks released)": 0.5}
    leaves = dict(summary["top_self"])
    assert leaves == {"heap_hot_search_buffer": 0.25, "pg_strtok": 0.25, "fdatasync": 0.25,
                      "ginHeapTupleFastInsert": 0.25}


def test_an_empty_recording_is_no_samples() -> None:
    assert summarize_perf("") == {"samples": 0, "share": {}, "top_self": []}
