"""Runs duckdb/level4.sql over `culprit generate` Parquet output and prints
the time, the result size and the peak memory, for the comparison with
culprit's own level 4 (benches/benches/blame.rs).

    pip install duckdb
    culprit generate --out /tmp/big --tasks 1000000 --hosts 500
    python3 benches/duckdb/level4.py /tmp/big
"""
import os
import resource
import sys
import time

import duckdb

data = sys.argv[1]
sql = open(os.path.join(os.path.dirname(__file__), "level4.sql")).read().replace("DIR", data)
con = duckdb.connect()
start = time.time()
rows, total = con.execute(f"SELECT count(*), sum(blame_seconds) FROM ({sql})").fetchone()
elapsed = time.time() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024
print(f"duckdb level 4: {rows} rows, {total:.1f} blame seconds, {elapsed:.1f} s, peak {peak:.2f} GiB")
