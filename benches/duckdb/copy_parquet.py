"""Copies the Parquet files of a `culprit generate` folder with DuckDB and
prints the time and the peak memory: the baseline of `culprit ingest`'s
speed (docs/performance.md, "Ingest streams"). A plain copy, table by
table, into zstd Parquet files (CODEC=snappy chooses Snappy, which culprit
writes for the time tables, nearly all the bytes, and zstd for the others;
compare with both), on every core.

    pip install duckdb
    culprit generate --out /tmp/g1e6 --tasks 1000000 --hosts 500
    python3 benches/duckdb/copy_parquet.py /tmp/g1e6 [OUT]

OUT (default: a new temporary folder) gets the copies; it is removed at the
end unless given.
"""
import os
import resource
import shutil
import sys
import tempfile
import time

import duckdb

TABLES = ["queries", "stages", "tasks", "task_windows", "host_windows"]

data = sys.argv[1]
codec = os.environ.get("CODEC", "zstd")
out = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="duckdb-copy-")
os.makedirs(out, exist_ok=True)
con = duckdb.connect()
rows = 0
start = time.time()
for t in TABLES:
    src = os.path.join(data, f"{t}.parquet")
    if not os.path.exists(src):
        continue
    dst = os.path.join(out, f"{t}.parquet")
    con.execute(
        f"COPY (SELECT * FROM read_parquet('{src}')) TO '{dst}' (FORMAT parquet, COMPRESSION {codec})"
    )
    rows += con.execute(f"SELECT count(*) FROM read_parquet('{dst}')").fetchone()[0]
elapsed = time.time() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"duckdb {duckdb.__version__} copy ({codec}): {rows} rows, {elapsed:.2f} s, peak {peak:.0f} MiB")
if len(sys.argv) <= 2:
    shutil.rmtree(out)
