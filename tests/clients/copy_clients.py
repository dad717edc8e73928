"""COPY through real Python clients against a running culprit server (the demo workload).

usage: python3 copy_clients.py HOST PORT SUITE [USER PASSWORD [ROLE]]
  SUITE: psycopg2 psycopg asyncpg
  USER PASSWORD: log in with a password (a server with a users file); without
  them the script logs in as `culprit` and only reads.
  ROLE: what USER may do, `write` (the default) or `read`. psycopg as a write
  user copies rows into the user table teams2 and reads them back; as a read
  user it reads teams2 with COPY TO and its COPY FROM is refused with 42501.

Every COPY TO is checked against the same query run as a plain SELECT: the
same column names, the same rows in the same order, the same values (floats
parsed, NULLs as NULLs). Every check prints one line; the script exits 1 on
the first difference, and its last line is `done SUITE`.
"""

import os
import sys

# This file is named copy_clients.py and Python puts the script's folder first on
# sys.path, where it would shadow the standard library's `copy` module (which
# the clients import): take the folder off before importing anything else.
_HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != _HERE]

import asyncio  # noqa: E402
import io  # noqa: E402
import math  # noqa: E402

HOST, PORT, SUITE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
USER = sys.argv[4] if len(sys.argv) > 4 else "culprit"
PASSWORD = sys.argv[5] if len(sys.argv) > 5 else None
ROLE = sys.argv[6] if len(sys.argv) > 6 else ("write" if PASSWORD is not None else None)
assert ROLE in (None, "read", "write"), f"ROLE is read or write, not {ROLE}"

# Ties broken on every column, so that two runs list the rows in one order.
CULPRITS = (
    "SELECT culprit_kind, culprit_query, blame_seconds, dor FROM culprits('q-victim') "
    "ORDER BY blame_seconds DESC, culprit_kind, culprit_query, dor"
)
CULPRITS_TYPES = ["text", "text", "float8", "float8"]
AGGRESSIVE = (
    "SELECT culprit_query, blame_seconds, dor_sum, victims FROM aggressive_queries() "
    "ORDER BY dor_sum DESC, culprit_query"
)
AGGRESSIVE_TYPES = ["text", "float8", "float8", "int8"]
TASKS = "SELECT task_id, host, launch_time, cpu_seconds FROM tasks ORDER BY task_id"
TASKS_TYPES = ["text", "text", "timestamptz", "float8"]

# What a write user copies into teams2 (text format: psycopg escapes the tab
# and the backslash, \N is NULL).
TEAMS2 = [
    ("alice", "dashboards", 1250.5, 3),
    ("bob", "tab\there, back\\slash", None, 12),
    ("mallory", 'etl "night" shift', 0.1, None),
]


def ok(what):
    print(f"ok  {what}", flush=True)


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    ok(what)


def parse_csv(text, delimiter=",", null=""):
    """PostgreSQL's CSV: a field in double quotes may hold anything (a quote
    doubled); an unquoted field equal to the NULL string is NULL (None)."""
    rows, row, field = [], [], []
    quoted = in_quotes = False
    i, n = 0, len(text)

    def end_field():
        s = "".join(field)
        row.append(None if not quoted and s == null else s)

    while i < n:
        c = text[i]
        if in_quotes:
            if c == '"':
                if text[i + 1 : i + 2] == '"':
                    field.append('"')
                    i += 1
                else:
                    in_quotes = False
            else:
                field.append(c)
        elif c == '"':
            in_quotes = quoted = True
        elif c == delimiter:
            end_field()
            field, quoted = [], False
        elif c == "\n":
            end_field()
            rows.append(row)
            row, field, quoted = [], [], False
        elif c == "\r" and text[i + 1 : i + 2] == "\n":
            pass
        else:
            field.append(c)
        i += 1
    if in_quotes:
        raise AssertionError(f"CSV: an unterminated quoted field in {text[-200:]!r}")
    if field or row or quoted:
        end_field()
        rows.append(row)
    return rows


_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def unescape(field):
    out, i = [], 0
    while i < len(field):
        c = field[i]
        if c == "\\" and i + 1 < len(field):
            nxt = field[i + 1]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
                continue
            if nxt in "01234567":
                j = i + 1
                while j < len(field) and j < i + 4 and field[j] in "01234567":
                    j += 1
                out.append(chr(int(field[i + 1 : j], 8)))
                i = j
                continue
            out.append(nxt)
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_text(text, null="\\N"):
    """PostgreSQL's text format: a line per row, tab-separated, \\N is NULL,
    backslash escapes."""
    if not text:
        return []
    if not text.endswith("\n"):
        raise AssertionError(f"text format: the last row has no newline: {text[-200:]!r}")
    return [
        [None if f == null else unescape(f) for f in line.split("\t")]
        for line in text[:-1].split("\n")
    ]


def same_value(want, got):
    """`got` (a COPY field, text or None) holds the SELECT's value `want`."""
    if want is None or got is None:
        return want is None and got is None
    if isinstance(want, bool):
        return got == ("t" if want else "f")
    if isinstance(want, float):
        g = float(got)
        return g == want or (math.isnan(g) and math.isnan(want))
    if isinstance(want, int):
        return int(got) == want
    return got == str(want)


def check_rows(what, want, got):
    """COPY's fields `got` (text or None) equal the SELECT's rows `want`."""
    if len(got) != len(want):
        raise AssertionError(
            f"{what}: COPY gave {len(got)} rows, SELECT {len(want)}\n"
            f"COPY: {got[:5]!r}\nSELECT: {[tuple(w) for w in want[:5]]!r}"
        )
    for i, (w, g) in enumerate(zip(want, got)):
        w = tuple(w)
        if len(w) != len(g) or not all(same_value(a, b) for a, b in zip(w, g)):
            raise AssertionError(f"{what}: row {i} differs: COPY {g!r}, SELECT {w!r}")
    ok(f"{what}: {len(got)} rows equal to the SELECT's")


def check_selected(what, want, first_column):
    """The SELECT itself returns the demo's rows (so that an empty COPY of an
    empty result cannot pass)."""
    check(
        len(want) > 0 and want[0][0 if first_column is None else first_column] is not None,
        f"{what}: the SELECT returns {len(want)} rows, first {tuple(want[0]) if want else None}",
    )


def check_first_culprit(what, want, column):
    check(
        len(want) > 0 and want[0][column] == "q-culprit",
        f"{what}: q-culprit ranked first -> {tuple(want[0]) if want else 'no rows'}",
    )


def nulls(rows):
    return sum(v is None for r in rows for v in r)


# -- psycopg2 ---------------------------------------------------------------


def psycopg2_suite():
    import psycopg2

    conn = psycopg2.connect(host=HOST, port=PORT, user=USER, password=PASSWORD, dbname="culprit")
    conn.autocommit = True
    try:
        cur = conn.cursor()
        for name, q, first in (("culprits", CULPRITS, 1), ("aggressive_queries", AGGRESSIVE, 0)):
            cur.execute(q)
            want = cur.fetchall()
            names = [d.name for d in cur.description]
            check_first_culprit(f"psycopg2: SELECT {name}", want, first)
            check(
                any(isinstance(v, float) for v in want[0]),
                f"psycopg2: {name} has float columns -> {want[0]!r}",
            )
            buf = io.StringIO()
            cur.copy_expert(f"COPY ({q}) TO STDOUT WITH CSV HEADER", buf)
            check(cur.rowcount == len(want), f"psycopg2: COPY tag of {name} -> rowcount {cur.rowcount}")
            rows = parse_csv(buf.getvalue())
            check(rows and rows[0] == names, f"psycopg2: CSV header of {name} -> {rows[:1]} (want {names})")
            check_rows(f"psycopg2: COPY ({name}) TO STDOUT WITH CSV HEADER", want, rows[1:])

        # The options of the new syntax: a delimiter and a NULL string.
        cur.execute(CULPRITS)
        want = cur.fetchall()
        names = [d.name for d in cur.description]
        buf = io.StringIO()
        cur.copy_expert(
            f"COPY ({CULPRITS}) TO STDOUT WITH (FORMAT csv, HEADER true, DELIMITER ';', NULL 'none')",
            buf,
        )
        text = buf.getvalue()
        check(
            text.split("\n", 1)[0] == ";".join(names),
            f"psycopg2: DELIMITER ';' header -> {text.splitlines()[:1]}",
        )
        rows = parse_csv(text, delimiter=";", null="none")
        check_rows(
            f"psycopg2: COPY WITH (FORMAT csv, DELIMITER ';', NULL 'none') ({nulls(want)} NULLs)",
            want,
            rows[1:],
        )

        # A table with a column list, in the default text format.
        cur.execute('SELECT query_id, "user" FROM queries')
        want = sorted(cur.fetchall(), key=str)
        check(len(want) > 0, f"psycopg2: SELECT queries -> {len(want)} rows")
        buf = io.StringIO()
        cur.copy_expert('COPY queries (query_id, "user") TO STDOUT', buf)
        check(cur.rowcount == len(want), f"psycopg2: COPY queries tag -> rowcount {cur.rowcount}")
        got = sorted((tuple(r) for r in parse_text(buf.getvalue())), key=str)
        check_rows('psycopg2: COPY queries (query_id, "user") TO STDOUT', want, got)
    finally:
        conn.close()


# -- psycopg 3 --------------------------------------------------------------


def psycopg_suite():
    import psycopg

    with psycopg.connect(
        host=HOST, port=PORT, user=USER, password=PASSWORD, dbname="culprit", autocommit=True
    ) as conn:
        for name, q, types, first in (
            ("culprits", CULPRITS, CULPRITS_TYPES, 1),
            ("aggressive_queries", AGGRESSIVE, AGGRESSIVE_TYPES, 0),
            ("tasks", TASKS, TASKS_TYPES, None),
        ):
            want = conn.execute(q).fetchall()
            if first is None:
                check_selected(f"psycopg: SELECT {name}", want, None)
            else:
                check_first_culprit(f"psycopg: SELECT {name}", want, first)
            for fmt, opts in (("text", ""), ("binary", " WITH (FORMAT binary)")):
                with conn.cursor() as cur:
                    with cur.copy(f"COPY ({q}) TO STDOUT{opts}") as copy:
                        copy.set_types(types)
                        got = list(copy.rows())
                    check(
                        cur.rowcount == len(want),
                        f"psycopg: COPY tag of {name} ({fmt}) -> rowcount {cur.rowcount}",
                    )
                if got != want:
                    diff = next(
                        (i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want))
                    )
                    raise AssertionError(
                        f"psycopg: COPY ({name}) {fmt}: {len(got)} rows vs {len(want)}, first difference "
                        f"at row {diff}: COPY {got[diff] if diff < len(got) else None!r}, "
                        f"SELECT {want[diff] if diff < len(want) else None!r}"
                    )
                ok(f"psycopg: COPY ({name}) TO STDOUT {fmt} -> {len(got)} rows equal to the SELECT's")

        if ROLE == "write":
            psycopg_write(conn)
        elif ROLE == "read":
            psycopg_read(conn, psycopg)


def psycopg_write(conn):
    import psycopg

    conn.execute("DROP TABLE IF EXISTS teams2")
    conn.execute('CREATE TABLE teams2 ("user" text, team text, budget double precision, seats bigint)')
    with conn.cursor() as cur:
        with cur.copy("COPY teams2 FROM STDIN") as copy:
            for r in TEAMS2:
                copy.write_row(r)
        check(cur.rowcount == len(TEAMS2), f"psycopg: COPY teams2 FROM STDIN tag -> rowcount {cur.rowcount}")
    got = conn.execute('SELECT "user", team, budget, seats FROM teams2 ORDER BY "user"').fetchall()
    check(got == TEAMS2, f"psycopg: teams2 holds what write_row wrote -> {got!r}")
    # A column list in CSV: the other columns are NULL.
    with conn.cursor() as cur:
        with cur.copy('COPY teams2 ("user", team) FROM STDIN WITH (FORMAT csv)') as copy:
            copy.write('zoe,"ml, search"\n')
        check(cur.rowcount == 1, f"psycopg: COPY teams2 (cols) FROM STDIN csv tag -> rowcount {cur.rowcount}")
    got = conn.execute("SELECT \"user\", team, budget, seats FROM teams2 WHERE \"user\" = 'zoe'").fetchall()
    check(got == [("zoe", "ml, search", None, None)], f"psycopg: a column list leaves the rest NULL -> {got!r}")
    # Another session sees the rows.
    with psycopg.connect(
        host=HOST, port=PORT, user=USER, password=PASSWORD, dbname="culprit", autocommit=True
    ) as other:
        n = other.execute("SELECT count(*) FROM teams2").fetchone()[0]
        check(n == len(TEAMS2) + 1, f"psycopg: another session sees teams2 -> {n} rows")


def psycopg_read(conn, psycopg):
    want = conn.execute('SELECT "user", team, budget, seats FROM teams2 ORDER BY "user"').fetchall()
    check(len(want) > 0, f"psycopg: a read user sees teams2 (written by a write user) -> {len(want)} rows")
    with conn.cursor() as cur:
        with cur.copy('COPY (SELECT "user", team, budget, seats FROM teams2 ORDER BY "user") TO STDOUT') as copy:
            copy.set_types(["text", "text", "float8", "int8"])
            got = list(copy.rows())
    check(got == want, f"psycopg: a read user's COPY teams2 TO STDOUT -> {got!r}")
    with conn.cursor() as cur:
        try:
            with cur.copy("COPY teams2 FROM STDIN") as copy:
                copy.write_row(("eve", "intruders", 1.0, 1))
        except psycopg.errors.InsufficientPrivilege as e:
            check("read-only" in str(e), f"psycopg: a read user's COPY FROM refused with 42501 -> {e}")
        else:
            raise AssertionError("psycopg: a read user's COPY teams2 FROM STDIN was accepted")
    n = conn.execute("SELECT count(*) FROM teams2").fetchone()[0]
    check(n == len(want), f"psycopg: teams2 unchanged after the refusal -> {n} rows")


# -- asyncpg ----------------------------------------------------------------


async def asyncpg_main():
    import asyncpg

    conn = await asyncpg.connect(host=HOST, port=PORT, user=USER, password=PASSWORD, database="culprit")
    try:
        for name, q, first in (("culprits", CULPRITS, 1), ("aggressive_queries", AGGRESSIVE, 0)):
            stmt = await conn.prepare(q)
            names = [a.name for a in stmt.get_attributes()]
            want = [tuple(r) for r in await conn.fetch(q)]
            check_first_culprit(f"asyncpg: fetch {name}", want, first)
            # asyncpg sends COPY (q) TO STDOUT (FORMAT 'csv', HEADER True).
            buf = io.BytesIO()
            status = await conn.copy_from_query(q, output=buf, format="csv", header=True)
            check(status == f"COPY {len(want)}", f"asyncpg: copy_from_query({name}, csv) -> {status!r}")
            rows = parse_csv(buf.getvalue().decode())
            check(rows and rows[0] == names, f"asyncpg: CSV header of {name} -> {rows[:1]} (want {names})")
            check_rows(f"asyncpg: copy_from_query({name}, format='csv', header=True)", want, rows[1:])
            # The default, text format.
            buf = io.BytesIO()
            status = await conn.copy_from_query(q, output=buf)
            check(status == f"COPY {len(want)}", f"asyncpg: copy_from_query({name}, text) -> {status!r}")
            check_rows(f"asyncpg: copy_from_query({name}) text", want, parse_text(buf.getvalue().decode()))
        # A table with quoted column names: COPY "queries" ("query_id", "user") TO STDOUT (FORMAT 'csv').
        want = sorted((tuple(r) for r in await conn.fetch('SELECT query_id, "user" FROM queries')), key=str)
        check(len(want) > 0, f"asyncpg: fetch queries -> {len(want)} rows")
        buf = io.BytesIO()
        status = await conn.copy_from_table("queries", columns=["query_id", "user"], output=buf, format="csv")
        check(status == f"COPY {len(want)}", f"asyncpg: copy_from_table(queries) -> {status!r}")
        got = sorted((tuple(r) for r in parse_csv(buf.getvalue().decode())), key=str)
        check_rows("asyncpg: copy_from_table('queries', columns=[query_id, user], format='csv')", want, got)
    finally:
        await conn.close()


def asyncpg_suite():
    asyncio.run(asyncpg_main())


SUITES = {
    "psycopg2": psycopg2_suite,
    "psycopg": psycopg_suite,
    "asyncpg": asyncpg_suite,
}

if __name__ == "__main__":
    print(f"== {SUITE} as {USER} ({ROLE or 'no password'})", flush=True)
    SUITES[SUITE]()
    print(f"done {SUITE}", flush=True)
