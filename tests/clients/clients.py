"""Real Python clients against a running culprit server (the demo workload).

usage: python3 clients.py HOST PORT CLIENT...   (CLIENT: psycopg asyncpg sqlalchemy pgcli grafana grafana_dashboard)

Each client does what its users do; every check prints one line, and the
script exits 1 on the first failure with the client's own error.
"""

import asyncio
import datetime
import sys

HOST, PORT = sys.argv[1], int(sys.argv[2])
DSN = f"postgresql://culprit@{HOST}:{PORT}/culprit"

# Grafana's query-builder table list (postgresMetaQuery.ts: showTables with
# the search_path constraint).
GRAFANA_TABLES = """select quote_ident(table_name) as "table" from information_schema.tables
    where quote_ident(table_schema) not in ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
      and
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"""


def ok(what):
    print(f"ok  {what}", flush=True)


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    ok(what)


def psycopg_suite():
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        # Server-side binding (the extended protocol), text results.
        cur = conn.execute(
            "SELECT culprit_kind, culprit_query, blame_seconds FROM culprits(%s) "
            "ORDER BY blame_seconds DESC",
            ["q-victim"],
        )
        rows = cur.fetchall()
        check(rows and rows[0][1] == "q-culprit", f"psycopg: culprits with a bound parameter -> {rows[0]}")
        check(isinstance(rows[0][2], float), "psycopg: float result")
        # Lists (a stage's parent ids) as text[], in text and binary.
        q = "SELECT string_to_array(parent_ids, ',') FROM stages WHERE parent_ids <> '' LIMIT 1"
        for binary in (False, True):
            parents = conn.execute(q, binary=binary).fetchone()[0]
            check(isinstance(parents, list) and all(isinstance(p, str) for p in parents), f"psycopg: list (binary={binary}) -> {parents}")
        # Binary results.
        cur = conn.cursor(binary=True)
        cur.execute("SELECT count(*), sum(cpu_seconds) FROM tasks WHERE query_id = %s", ["q-victim"])
        n, cpu = cur.fetchone()
        check(n > 0 and cpu > 0, f"psycopg: binary results -> {n}, {cpu:.2f}")
        # Timestamps with time zone.
        cur = conn.execute("SELECT launch_time FROM tasks ORDER BY launch_time LIMIT 1")
        (t,) = cur.fetchone()
        check(
            isinstance(t, datetime.datetime) and t.tzinfo is not None,
            f"psycopg: timestamptz -> {t!r}",
        )
        cur = conn.cursor(binary=True)
        cur.execute("SELECT launch_time FROM tasks ORDER BY launch_time LIMIT 1")
        (tb,) = cur.fetchone()
        check(tb == t, f"psycopg: binary timestamptz equals text -> {tb!r}")
        # Timestamp parameters.
        cur = conn.execute(
            "SELECT count(*) FROM tasks WHERE launch_time >= %s", [t]
        )
        check(cur.fetchone()[0] > 0, "psycopg: timestamptz parameter")
        # NULLs, text, JSON text.
        cur = conn.execute("SELECT query_id, tags FROM queries WHERE query_id = %s", ["q-victim"])
        row = cur.fetchone()
        check(row[0] == "q-victim" and (row[1] is None or isinstance(row[1], str)), f"psycopg: text column -> {row}")


async def asyncpg_main():
    import asyncpg

    conn = await asyncpg.connect(host=HOST, port=PORT, user="culprit", database="culprit")
    try:
        stmt = await conn.prepare(
            "SELECT culprit_query, blame_seconds FROM culprits($1) ORDER BY blame_seconds DESC"
        )
        rows = await stmt.fetch("q-victim")
        check(rows[0]["culprit_query"] == "q-culprit", f"asyncpg: prepared statement -> {tuple(rows[0])}")
        attrs = [a.name for a in stmt.get_attributes()]
        check("blame_seconds" in attrs, f"asyncpg: statement attributes {attrs}")
        t = await conn.fetchval("SELECT min(launch_time) FROM tasks")
        check(isinstance(t, datetime.datetime) and t.tzinfo is not None, f"asyncpg: timestamptz -> {t!r}")
        n = await conn.fetchval("SELECT count(*) FROM tasks WHERE query_id = $1 AND launch_time >= $2", "q-victim", t)
        check(n > 0, f"asyncpg: text and timestamp parameters -> {n}")
        v = await conn.fetchval("SELECT 'NaN'::double precision")
        check(v != v, "asyncpg: NaN")
    finally:
        await conn.close()


def asyncpg_suite():
    asyncio.run(asyncpg_main())


def sqlalchemy_suite():
    import pandas
    import sqlalchemy

    engine = sqlalchemy.create_engine(f"postgresql+psycopg://culprit@{HOST}:{PORT}/culprit")
    insp = sqlalchemy.inspect(engine)
    tables = insp.get_table_names()
    check({"queries", "stages", "tasks", "task_windows", "host_windows", "executors"} <= set(tables), f"sqlalchemy: get_table_names -> {sorted(tables)}")
    cols = {c["name"]: c for c in insp.get_columns("tasks")}
    check(
        isinstance(cols["launch_time"]["type"], sqlalchemy.TIMESTAMP)
        and cols["launch_time"]["type"].timezone
        and isinstance(cols["cpu_seconds"]["type"], sqlalchemy.Double)
        and cols["task_id"]["nullable"] is False
        and cols["cpu_seconds"]["nullable"] is True
        and cols["task_id"]["default"] is None,
        f"sqlalchemy: get_columns -> {len(cols)} columns",
    )
    df = pandas.read_sql("SELECT * FROM culprits('q-victim')", engine)
    check(len(df) > 0 and df.iloc[0]["culprit_query"] == "q-culprit", f"pandas.read_sql -> {len(df)} rows")
    df = pandas.read_sql(
        sqlalchemy.text("SELECT q.\"user\", sum(b.blame_seconds) AS s FROM blame(NULL) b JOIN queries q ON b.culprit_query = q.query_id GROUP BY q.\"user\" ORDER BY s DESC"),
        engine,
    )
    check(len(df) > 0, f"pandas: blame joined with queries by user -> {df.iloc[0].to_dict()}")


def pgcli_suite():
    from pgcli.pgexecute import PGExecute

    ex = PGExecute(database="culprit", user="culprit", password=None, host=HOST, port=PORT, dsn=None)
    schemas = list(ex.schemata())
    check("public" in schemas, f"pgcli: schemata -> {schemas}")
    tables = list(ex.tables())
    check(("public", "tasks") in tables, f"pgcli: tables -> {len(tables)}")
    cols = list(ex.table_columns())
    check(any(c[1] == "tasks" and c[2] == "launch_time" for c in cols), f"pgcli: table_columns -> {len(cols)}")
    views = list(ex.views())
    check(("public", "task_runs") in views, f"pgcli: views -> {views}")
    funcs = [f for f in ex.functions() if f.func_name == "abs"]
    check(
        len(funcs) > 0 and all(f.return_type and len(f.arg_types) == 1 for f in funcs),
        f"pgcli: functions -> abs{[f.arg_types for f in funcs]}",
    )
    types = list(ex.datatypes())
    # culprit defines no types of its own (no enums, domains or composites).
    check(all(t[0] != "public" for t in types), f"pgcli: datatypes -> {types[:5]}")
    dbs = list(ex.databases())
    check("culprit" in dbs, f"pgcli: databases -> {dbs}")
    for result in ex.run("SELECT count(*) FROM culprits('q-victim')"):
        check(result[1] is not None, f"pgcli: run a query -> {result[3]}")


def grafana_suite():
    """The SQL Grafana's PostgreSQL data source sends, macros expanded."""
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        one = conn.execute("SELECT 1").fetchone()
        check(one == (1,), f"grafana: health check -> {one}")
        # Query builder metadata: the tables on the search_path.
        tables = {r[0] for r in conn.execute(GRAFANA_TABLES).fetchall()}
        check(
            {"queries", "stages", "tasks", "task_windows", "host_windows", "executors"} <= tables,
            f"grafana: table list -> {sorted(tables)}",
        )
        rows = conn.execute(
            "SELECT quote_ident(column_name) AS \"column\", data_type AS \"type\" FROM information_schema.columns "
            "WHERE quote_ident(table_name) = 'tasks'"
        ).fetchall()
        check(len(rows) > 5, f"grafana: column list -> {len(rows)}")
        # A time series: $__timeGroupAlias(launch_time, 1m) and $__timeFilter(launch_time).
        lo, hi = conn.execute("SELECT min(launch_time), max(finish_time) FROM tasks").fetchone()
        rows = conn.execute(
            "SELECT floor(extract(epoch from launch_time)/60)*60 AS \"time\", count(*) AS tasks, "
            "sum(cpu_seconds) AS cpu FROM tasks "
            f"WHERE launch_time BETWEEN '{lo.isoformat()}' AND '{hi.isoformat()}' "
            "GROUP BY 1 ORDER BY 1"
        ).fetchall()
        check(len(rows) > 0 and rows[0][0] is not None, f"grafana: time series -> {len(rows)} points")
        rows = conn.execute(
            "SELECT to_timestamp(floor(extract(epoch from launch_time)/60)*60) AS \"time\", "
            "query_id AS metric, count(*) AS value FROM tasks GROUP BY 1, 2 ORDER BY 1"
        ).fetchall()
        check(isinstance(rows[0][0], datetime.datetime), f"grafana: time column as a timestamp -> {rows[0][0]!r}")


def grafana_dashboard_suite():
    """docs/grafana/culprit-dashboard.json: every panel's SQL and the victim
    variable's, macros expanded as Grafana's PostgreSQL data source does
    ($__timeFrom() and $__timeTo() as quoted RFC 3339 times, $__interval as
    '1s'), run over the demo workload, whose injected culprit is known."""
    import json
    import os

    import psycopg

    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "grafana", "culprit-dashboard.json")
    with open(path) as f:
        dash = json.load(f)
    check(dash["__inputs"][0]["pluginId"] == "grafana-postgresql-datasource", "dashboard: PostgreSQL data source input")

    def expand(sql, victim=None):
        sql = (
            sql.replace("$__timeFrom()", "'2026-01-01T00:00:00Z'")
            .replace("$__timeTo()", "'2026-01-01T00:01:00Z'")
            .replace("$__interval", "1s")
        )
        if victim is not None:
            sql = sql.replace("$victim", victim)
        assert "$" not in sql, f"an unexpanded macro or variable in {sql}"
        return sql

    with psycopg.connect(DSN, autocommit=True) as conn:
        var = dash["templating"]["list"][0]
        victims = [r[0] for r in conn.execute(expand(var["query"])).fetchall()]
        check("q-victim" in victims, f"dashboard: the victim variable lists the queries -> {victims}")
        results = {}
        for panel in dash["panels"]:
            target = panel["targets"][0]
            cur = conn.execute(expand(target["rawSql"], "q-victim"))
            columns = [d.name for d in cur.description]
            rows = cur.fetchall()
            check(len(rows) > 0, f"dashboard: panel {panel['id']} ({panel['title']}) -> {len(rows)} rows")
            if target["format"] == "time_series":
                check(
                    columns[0] == "time" and "metric" in columns and isinstance(rows[0][0], datetime.datetime),
                    f"dashboard: panel {panel['id']} is a time series -> {columns}, {rows[0]!r}",
                )
            results[panel["id"]] = (columns, rows)

    # What the demo injected: q-culprit slows q-victim.
    _, dor = results[1]
    culprit_dor = max(r[2] for r in dor if r[1] == "q-culprit")
    check(culprit_dor > 0.5, f"dashboard: q-culprit dominates a window of the victim -> DOR {culprit_dor}")
    _, aggressive = results[2]
    totals = {}
    for _, q, v in aggressive:
        totals[q] = totals.get(q, 0.0) + v
    top = max(totals, key=totals.get)
    check(top == "q-culprit", f"dashboard: the most aggressive query over the range -> {top} of {totals}")
    check(results[3][1][0][0] == "q-culprit", f"dashboard: the top culprit of the victim -> {results[3][1][0]}")
    check("slots" in {r[0] for r in results[4][1]}, "dashboard: blame by resource lists slots")
    check("*" in {r[0] for r in results[5][1]}, "dashboard: blame by host lists the slots' *")
    row = [r for r in results[6][1] if r[0] == "q-victim"]
    check(row and row[0][4] == "q-culprit", f"dashboard: victims() names the victim's top culprit -> {row}")


SUITES = {
    "psycopg": psycopg_suite,
    "asyncpg": asyncpg_suite,
    "sqlalchemy": sqlalchemy_suite,
    "pgcli": pgcli_suite,
    "grafana": grafana_suite,
    "grafana_dashboard": grafana_dashboard_suite,
}

if __name__ == "__main__":
    for name in sys.argv[3:]:
        print(f"== {name}", flush=True)
        SUITES[name]()
