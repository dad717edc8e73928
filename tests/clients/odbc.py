#!/usr/bin/env python3
"""psqlODBC against a culprit server: the path Excel, Power BI and Tableau take.

    python3 tests/clients/odbc.py HOST PORT USER PASSWORD [--input DIR] [-v] [-k NAME]

Drives Debian's psqlODBC driver ("PostgreSQL Unicode", package
odbc-postgresql) through pyodbc and unixODBC's `isql`, over a DSN-less
connection string. The server must serve the demo store (`culprit generate
--out DIR` then `culprit ingest --store S DIR`); `--input DIR` is that
folder, and every expected value is computed from those input files (CSV,
JSON lines, or Parquet when pyarrow is installed), never from another answer
of the server. Without `--input`, the demo's input is generated again
(`culprit generate --format csv`, the defaults) with `--culprit BIN`,
$CULPRIT_BIN or this repository's target/release/culprit.

Each check runs in a child process (this script, `--child NAME`): psqlODBC
segfaults on some of the server's error paths, and a crash is a failure
naming the check. The clients connect through a small wire proxy in this
process that records the statements sent and the server's ErrorResponses:
a server error the driver swallowed is a failure too (PostgreSQL raises none
on these paths), and every failure names the server's error.

Prints `ok <name>` or `FAIL <name>: <reason>` per check; exit 1 if any
check failed, 2 if pyodbc, the driver or isql is missing.
"""

import argparse
import csv
import glob
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback

DRIVER = "PostgreSQL Unicode"
DATABASE = "culprit"

# interchange.md: the columns of `tasks`, in the order of its table, then
# `attrs` (docs/sql-reference.md), with the spec's type and `required`.
TASKS_COLUMNS = [
    ("task_id", "string", True),
    ("query_id", "string", True),
    ("stage_id", "string", True),
    ("host", "string", True),
    ("executor_id", "string", False),
    ("ready_time", "timestamp", False),
    ("launch_time", "timestamp", True),
    ("finish_time", "timestamp", True),
    ("status", "string", False),
    ("input_bytes", "float", False),
    ("output_bytes", "float", False),
    ("shuffle_read_bytes", "float", False),
    ("shuffle_write_bytes", "float", False),
    ("cpu_seconds", "float", False),
    ("gc_seconds", "float", False),
    ("disk_read_blocked", "float", False),
    ("disk_write_blocked", "float", False),
    ("network_blocked", "float", False),
    ("cpu_blocked", "float", False),
    ("memory_blocked", "float", False),
    ("scheduler_delay", "float", False),
    ("attrs", "string", False),
]
# The eight tables of docs/sql-reference.md ("the eight tables of the
# interchange format"), all in schema public, and its view.
TABLES = ["queries", "stages", "tasks", "task_windows", "host_windows",
          "executors", "record_lineage", "partition_latency"]
VIEWS = ["task_runs"]
# Tables of the scheduled reports: schema cron, never public.
CRON_TABLES = ["job", "job_run_details", "report_pages"]
# docs/sql-reference.md: the scalar and table functions.
FUNCTIONS = ["ratp", "ratp_blocked", "ratp_max", "slowdown",
             "blame", "culprits", "iqc_nodes", "iqc_edges", "victims",
             "aggressive_queries", "hot_resources", "slow_nodes",
             "culprits_series", "aggressive_queries_series", "critical_path",
             "stage_ratp", "what_if", "stragglers", "estimate",
             "expensive_inputs", "skewed_tasks"]
# docs/sql-reference.md, `culprits(victim [, from [, to]] ...)` and its columns.
CULPRITS_ARGS = ["victim", "from", "to"]
CULPRITS_COLUMNS = ["victim_query", "culprit_kind", "culprit_query", "blame_seconds",
                    "dor", "naive_overlap_seconds", "deep_overlap_seconds"]

# ODBC SQL types (sql.h / sqlext.h).
SQL_TYPES = {
    "string": {12: "SQL_VARCHAR", -9: "SQL_WVARCHAR", -1: "SQL_LONGVARCHAR", -10: "SQL_WLONGVARCHAR"},
    "float": {8: "SQL_DOUBLE", 6: "SQL_FLOAT"},
    "timestamp": {93: "SQL_TYPE_TIMESTAMP"},
}
SQL_NO_NULLS, SQL_NULLABLE = 0, 1
SQL_PARAM_INPUT, SQL_RESULT_COL = 1, 3
SQL_TABLE_STAT = 0


class Failed(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Failed(msg)


# --------------------------------------------------------------------------
# The input: the files `culprit generate --out DIR` wrote
# --------------------------------------------------------------------------
def _table_of(path, root):
    """interchange.md "Rules": `tasks.csv`, `tasks-0003.parquet`,
    `task_windows/part-1.jsonl`."""
    rel = os.path.relpath(path, root)
    parts = rel.split(os.sep)
    if len(parts) > 1:
        return parts[-2]
    stem = os.path.basename(path).split(".")[0]
    return re.sub(r"-\d+$", "", stem)


def load_input(root):
    """{table: [row dict]} read from the files under `root`, with Python's
    own readers: csv, json, pyarrow for Parquet."""
    if not os.path.isdir(root):
        raise Failed("input folder %s does not exist" % root)
    tables = {}
    files = sorted(glob.glob(os.path.join(root, "**", "*"), recursive=True))
    for path in files:
        if not os.path.isfile(path):
            continue
        name = os.path.basename(path).lower()
        table = _table_of(path, root)
        if name.endswith(".csv"):
            with open(path, newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
            # CSV: an empty field is a missing value.
            rows = [{k: (v if v != "" else None) for k, v in r.items()} for r in rows]
        elif name.endswith((".jsonl", ".json", ".ndjson")):
            with open(path, encoding="utf-8") as f:
                rows = [json.loads(l) for l in f if l.strip()]
        elif name.endswith(".parquet"):
            try:
                import pyarrow.parquet as pq
            except ImportError:
                raise Failed("%s is Parquet and pyarrow is not installed: give CSV or JSON lines input "
                             "(culprit generate --format csv)" % path)
            rows = pq.read_table(path).to_pylist()
        else:
            continue
        tables.setdefault(table, []).extend(rows)
    expect("tasks" in tables and tables["tasks"], "no tasks rows in the input folder %s" % root)
    return tables


class Input:
    def __init__(self, root, victim):
        self.root = root
        self.t = load_input(root)
        self.tasks = self.t["tasks"]
        self.query_ids = sorted({r["query_id"] for r in self.t.get("queries", [])}
                                | {r["query_id"] for r in self.tasks})
        self.victim = victim
        expect(victim in self.query_ids,
               "victim %r is not a query of the input (%s)" % (victim, ", ".join(self.query_ids)))

    def tasks_of(self, query_id):
        return sum(1 for r in self.tasks if r["query_id"] == query_id)

    def floats(self, column):
        return [float(r[column]) for r in self.tasks if r.get(column) not in (None, "")]


# --------------------------------------------------------------------------
# Connections
# --------------------------------------------------------------------------
def _odbc_value(v):
    v = str(v)
    if re.search(r"[;{}\s=]", v) or v == "":
        return "{" + v.replace("}", "}}") + "}"
    return v


def conn_string(a, extra=""):
    return ("Driver={%s};Server=%s;Port=%d;Database=%s;Uid=%s;Pwd=%s;SSLmode=disable;%s"
            % (DRIVER, a.via_host, a.via_port, DATABASE, _odbc_value(a.user), _odbc_value(a.password), extra))


def connect(a, autocommit, extra=""):
    import pyodbc
    return pyodbc.connect(conn_string(a, extra), autocommit=autocommit, timeout=30)


def _names(rows, attr):
    return [getattr(r, attr) for r in rows]


# --------------------------------------------------------------------------
# Checks: each gets the arguments and the Input, raises on a failure
# --------------------------------------------------------------------------
def check_connect_autocommit(a, inp):
    cn = connect(a, True)
    expect(cn.autocommit is True, "autocommit is %r" % cn.autocommit)
    n = cn.cursor().execute("SELECT count(*) FROM queries").fetchone()[0]
    want = len(inp.t.get("queries", []))
    expect(n == want, "SELECT count(*) FROM queries gave %r, the input has %d queries" % (n, want))
    cn.close()


def check_connect_manual_commit(a, inp):
    import pyodbc
    cn = pyodbc.connect(conn_string(a), timeout=30)  # pyodbc's default: autocommit=False
    expect(cn.autocommit is False, "autocommit is %r" % cn.autocommit)
    c = cn.cursor()
    n = c.execute("SELECT count(*) FROM tasks").fetchone()[0]
    expect(n == len(inp.tasks), "SELECT count(*) FROM tasks gave %r, the input has %d tasks" % (n, len(inp.tasks)))
    cn.commit()
    n = c.execute("SELECT count(*) FROM queries").fetchone()[0]
    cn.rollback()
    want = len(inp.t.get("queries", []))
    expect(n == want, "SELECT count(*) FROM queries gave %r after a commit, the input has %d" % (n, want))
    cn.close()


def check_tables(a, inp):
    cn = connect(a, True)
    c = cn.cursor()
    rows = c.tables().fetchall()
    got = {}
    for r in rows:
        got.setdefault(r.table_name, []).append((r.table_schem, r.table_type))
    for t in TABLES:
        expect(("public", "TABLE") in got.get(t, []),
               "tables() has no public.%s of type TABLE (it has %r)" % (t, got.get(t)))
    for v in VIEWS:
        expect(("public", "VIEW") in got.get(v, []),
               "tables() has no public.%s of type VIEW (it has %r)" % (v, got.get(v)))
    for t in CRON_TABLES:
        expect(all(s != "public" for s, _ in got.get(t, [])),
               "tables() lists cron's %s in schema public: %r" % (t, got.get(t)))
    views = c.tables(tableType="VIEW").fetchall()
    vnames = {(r.table_schem, r.table_name) for r in views}
    expect(("public", "task_runs") in vnames, "tables(tableType='VIEW') lacks task_runs: %r" % sorted(vnames))
    bad = [n for s, n in vnames if n in TABLES]
    expect(not bad, "tables(tableType='VIEW') lists base tables %r" % bad)
    one = c.tables(table="tasks", schema="public").fetchall()
    expect([(r.table_schem, r.table_name, r.table_type) for r in one] == [("public", "tasks", "TABLE")],
           "tables(table='tasks', schema='public') gave %r" % [tuple(r) for r in one])
    cn.close()


def check_columns_tasks(a, inp):
    cn = connect(a, True)
    rows = cn.cursor().columns(table="tasks", schema="public").fetchall()
    names = _names(rows, "column_name")
    want = [n for n, _, _ in TASKS_COLUMNS]
    expect(names == want, "columns(table='tasks') gave %r, interchange.md has %r" % (names, want))
    # The input file has the same columns (interchange.md: fixed names).
    in_cols = set(inp.tasks[0].keys())
    missing = [n for n in want if n not in in_cols and n != "attrs"]
    expect(not missing, "the input's tasks have no columns %r" % missing)
    for i, (r, (name, kind, required)) in enumerate(zip(rows, TASKS_COLUMNS)):
        expect(r.table_schem == "public" and r.table_name == "tasks",
               "%s: table %s.%s" % (name, r.table_schem, r.table_name))
        expect(r.data_type in SQL_TYPES[kind],
               "%s (%s, %s) has ODBC type %r (%s), want one of %s"
               % (name, kind, r.type_name, r.data_type, r.type_name, sorted(SQL_TYPES[kind].values())))
        expect(r.ordinal_position == i + 1, "%s: ordinal_position %r, want %d" % (name, r.ordinal_position, i + 1))
        want_null = SQL_NO_NULLS if required else SQL_NULLABLE
        expect(r.nullable == want_null,
               "%s: nullable %r, want %r (required %s in interchange.md)" % (name, r.nullable, want_null,
                                                                            "yes" if required else "no"))
    cn.close()


def _param_counts(c, inp):
    for q in inp.query_ids:
        n = c.execute("SELECT count(*) FROM tasks WHERE query_id = ?", q).fetchone()[0]
        expect(n == inp.tasks_of(q),
               "SELECT count(*) FROM tasks WHERE query_id = ? with %r gave %r, the input has %d"
               % (q, n, inp.tasks_of(q)))


def _culprits(c, inp):
    rows = c.execute("SELECT * FROM culprits('%s')" % inp.victim.replace("'", "''")).fetchall()
    cols = [d[0] for d in c.description]
    expect(cols == CULPRITS_COLUMNS, "culprits() has columns %r, sql-reference.md says %r" % (cols, CULPRITS_COLUMNS))
    expect(rows, "culprits(%r) returned no rows" % inp.victim)
    for r in rows:
        expect(r.victim_query == inp.victim, "culprits(%r) row for victim %r" % (inp.victim, r.victim_query))
        expect(r.culprit_query is None or r.culprit_query in inp.query_ids,
               "culprits(%r) names %r, not a query of the input" % (inp.victim, r.culprit_query))
    return rows


def check_param_query_autocommit(a, inp):
    cn = connect(a, True)
    c = cn.cursor()
    _param_counts(c, inp)
    _culprits(c, inp)
    cn.close()


def check_param_query_manual_commit(a, inp):
    import pyodbc
    cn = pyodbc.connect(conn_string(a), timeout=30)  # autocommit=False
    c = cn.cursor()
    _param_counts(c, inp)
    # A second statement in the same transaction.
    _culprits(c, inp)
    cn.commit()
    # The connection is still usable after the commit.
    n = c.execute("SELECT count(*) FROM tasks WHERE query_id = ?", inp.victim).fetchone()[0]
    expect(n == inp.tasks_of(inp.victim), "after commit: %r tasks of %s, the input has %d"
           % (n, inp.victim, inp.tasks_of(inp.victim)))
    cn.commit()
    cn.close()


def check_param_types(a, inp):
    """A float and a timestamp parameter (a BI tool's range filter)."""
    import datetime
    cn = connect(a, True)
    c = cn.cursor()
    cpu = sorted(set(inp.floats("cpu_seconds")))
    expect(len(cpu) > 2, "the input's tasks have too few cpu_seconds values")
    lo, hi = cpu[len(cpu) // 2 - 1], cpu[len(cpu) // 2]
    thr = round((lo + hi) / 2, 6)
    if not lo < thr < hi:
        thr = (lo + hi) / 2
    want = sum(1 for v in inp.floats("cpu_seconds") if v > thr)
    n = c.execute("SELECT count(*) FROM tasks WHERE cpu_seconds > ?", thr).fetchone()[0]
    expect(n == want, "cpu_seconds > ? with %r gave %r, the input has %d" % (thr, n, want))

    def ts(s):
        if isinstance(s, datetime.datetime):
            return s.astimezone(datetime.timezone.utc).replace(tzinfo=None) if s.tzinfo else s
        if isinstance(s, (int, float)):
            return datetime.datetime.fromtimestamp(s / 1000, datetime.timezone.utc).replace(tzinfo=None)
        s = s.replace("Z", "+00:00")
        d = datetime.datetime.fromisoformat(s)
        return d.astimezone(datetime.timezone.utc).replace(tzinfo=None) if d.tzinfo else d
    launches = sorted({ts(r["launch_time"]) for r in inp.tasks})
    cut = launches[len(launches) // 2].replace(microsecond=0)
    want = sum(1 for r in inp.tasks if ts(r["launch_time"]) >= cut)
    n = c.execute("SELECT count(*) FROM tasks WHERE launch_time >= ?", cut).fetchone()[0]
    expect(n == want, "launch_time >= ? with %s (UTC) gave %r, the input has %d" % (cut, n, want))
    cn.close()


def check_primary_keys(a, inp):
    cn = connect(a, True)
    rows = cn.cursor().primaryKeys("tasks", schema="public").fetchall()
    expect(rows == [], "primaryKeys('tasks') gave %r (culprit's tables have no keys)" % [tuple(r) for r in rows])
    cn.close()


def check_foreign_keys(a, inp):
    cn = connect(a, True)
    c = cn.cursor()
    rows = c.foreignKeys(table="tasks", schema="public").fetchall()
    expect(rows == [], "foreignKeys(table='tasks') gave %r" % [tuple(r) for r in rows])
    rows = c.foreignKeys(foreignTable="tasks", foreignSchema="public").fetchall()
    expect(rows == [], "foreignKeys(foreignTable='tasks') gave %r" % [tuple(r) for r in rows])
    cn.close()


def check_statistics(a, inp):
    cn = connect(a, True)
    rows = cn.cursor().statistics("tasks", schema="public").fetchall()
    idx = [tuple(r) for r in rows if r.type != SQL_TABLE_STAT]
    expect(idx == [], "statistics('tasks') lists indexes %r" % idx)
    cn.close()


def check_procedures(a, inp):
    cn = connect(a, True)
    rows = cn.cursor().procedures().fetchall()
    public = {r.procedure_name for r in rows if r.procedure_schem == "public"}
    missing = [f for f in FUNCTIONS if f not in public]
    expect(not missing, "procedures() lacks %r in schema public (it has %d there: %s)"
           % (missing, len(public), ", ".join(sorted(public)[:30])))
    cn.close()


def check_procedure_columns(a, inp):
    cn = connect(a, True)
    rows = cn.cursor().procedureColumns(procedure="culprits", schema="public").fetchall()
    got = [(r.column_name, r.column_type) for r in rows]
    args = [n for n, t in got if t == SQL_PARAM_INPUT]
    expect(args == CULPRITS_ARGS, "procedureColumns('culprits') input arguments %r, want %r (all: %r)"
           % (args, CULPRITS_ARGS, got))
    cols = [n for n, t in got if t == SQL_RESULT_COL]
    expect(cols == CULPRITS_COLUMNS, "procedureColumns('culprits') result columns %r, want %r"
           % (cols, CULPRITS_COLUMNS))
    cn.close()


def check_declare_fetch(a, inp):
    cn = connect(a, True, "UseDeclareFetch=1;Fetch=10;")
    c = cn.cursor()
    rows = c.execute("SELECT task_id FROM tasks ORDER BY task_id").fetchall()
    got = sorted(r[0] for r in rows)
    want = sorted(r["task_id"] for r in inp.tasks)
    expect(len(want) > 10, "the input has only %d tasks: the check needs more than Fetch=10" % len(want))
    expect(got == want, "UseDeclareFetch=1;Fetch=10 read %d task ids, the input has %d%s"
           % (len(got), len(want), "" if len(got) != len(want) else " (different ids)"))
    cn.close()


def check_isql(a, inp):
    isql = _which("isql")
    expect(isql, "isql is not installed (apt-get install unixodbc)")
    driver = driver_path()
    # A DSN in a private odbc.ini (ODBCSYSINI / ODBCINI name the folder).
    with tempfile.TemporaryDirectory(prefix="culprit-odbc-") as d:
        write_odbcinst(d, driver)
        with open(os.path.join(d, "odbc.ini"), "w") as f:
            f.write("[culprit_isql]\nDriver = %s\nServername = %s\nPort = %d\nDatabase = %s\nSSLmode = disable\n"
                    % (DRIVER, a.via_host, a.via_port, DATABASE))
        env = dict(os.environ, ODBCSYSINI=d, ODBCINI=os.path.join(d, "odbc.ini"))
        sep = "\x1f"
        p = subprocess.run([isql, "-v", "-b", "-c", "-x0x1f", "culprit_isql", a.user, a.password],
                           input="SELECT count(*) AS n FROM tasks WHERE query_id = '%s'\nhelp tasks\n" % inp.victim,
                           capture_output=True, text=True, timeout=120, env=env)
    out = p.stdout + p.stderr
    expect(p.returncode == 0, "isql exited %d: %s" % (p.returncode, out.strip()[-600:]))
    expect("[ISQL]ERROR" not in out and "[unixODBC]" not in out, "isql reported an error: %s" % out.strip()[-600:])
    lines = p.stdout.splitlines()
    expect(len(lines) >= 2 and lines[0].strip() == "n",
           "isql: no result of the SELECT: %s" % p.stdout[:400])
    expect(lines[1].strip() == str(inp.tasks_of(inp.victim)),
           "isql: %s tasks of %s, the input has %d" % (lines[1].strip(), inp.victim, inp.tasks_of(inp.victim)))
    header = [l for l in lines if l.startswith("TABLE_QUALIFIER" + sep) or l.startswith("TABLE_CAT" + sep)]
    expect(header, "isql: `help tasks` printed no column list: %s" % p.stdout[-400:])
    cols = header[0].split(sep)
    ci, ti = cols.index("COLUMN_NAME"), cols.index("TABLE_NAME")
    names = [l.split(sep)[ci] for l in lines[lines.index(header[0]) + 1:]
             if sep in l and l.split(sep)[ti] == "tasks"]
    want = [n for n, _, _ in TASKS_COLUMNS]
    expect(names == want, "isql `help tasks` lists %r, interchange.md has %r" % (names, want))


CHECKS = [
    ("connect_autocommit", check_connect_autocommit, ()),
    ("connect_manual_commit", check_connect_manual_commit, ()),
    ("tables", check_tables, ()),
    ("columns_tasks", check_columns_tasks, ()),
    ("param_query_autocommit", check_param_query_autocommit, ()),
    ("param_query_manual_commit", check_param_query_manual_commit, ()),
    ("param_types", check_param_types, ()),
    ("primary_keys", check_primary_keys, ()),
    ("foreign_keys", check_foreign_keys, ()),
    ("statistics", check_statistics, ()),
    ("procedures", check_procedures, ()),
    ("procedure_columns", check_procedure_columns, ()),
    ("declare_fetch", check_declare_fetch, ()),
    ("isql", check_isql, ()),
]


def _which(prog):
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = os.path.join(d, prog)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


# --------------------------------------------------------------------------
# The wire proxy: records statements and ErrorResponses per check
# --------------------------------------------------------------------------
class WireLog:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.label = None
        self.errors = []  # (label, statement, error)
        self.sent = []  # (label, statement, [command tags]) in order
        self.lock = threading.Lock()

    def start(self):
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()
        return self.srv.getsockname()[1]

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(c,), daemon=True).start()

    @staticmethod
    def _recvn(s, n):
        b = b""
        while len(b) < n:
            chunk = s.recv(n - len(b))
            if not chunk:
                raise EOFError
            b += chunk
        return b

    def _read(self, s, typed=True):
        t = self._recvn(s, 1) if typed else b""
        hdr = self._recvn(s, 4)
        (ln,) = struct.unpack("!i", hdr)
        return t, hdr, self._recvn(s, ln - 4)

    def _session(self, c):
        label = self.label
        state = {"last": None, "tags": None}
        s = None
        try:
            while True:  # startup: refuse TLS and GSS (SSLmode=disable sends neither)
                _, hdr, body = self._read(c, typed=False)
                if struct.unpack_from("!i", body, 0)[0] in (80877103, 80877104):
                    c.sendall(b"N")
                    continue
                break
            s = socket.create_connection((self.host, self.port))
            s.sendall(hdr + body)
            threading.Thread(target=self._backend, args=(s, c, label, state), daemon=True).start()
            while True:
                t, hdr, body = self._read(c)
                sql = None
                if t == b"Q":
                    sql = body.rstrip(b"\0").decode("utf-8", "replace")
                elif t == b"P":
                    parts = body.split(b"\0")
                    if len(parts) >= 2:
                        sql = parts[1].decode("utf-8", "replace")
                if sql is not None:
                    with self.lock:
                        state["last"], state["tags"] = sql, []
                        self.sent.append((label, sql, state["tags"]))
                s.sendall(t + hdr + body)
        except (EOFError, OSError, struct.error):
            pass
        finally:
            for x in (c, s):
                if x is not None:
                    try:
                        x.close()
                    except OSError:
                        pass

    def _backend(self, s, c, label, state):
        try:
            while True:
                t, hdr, body = self._read(s)
                if t == b"E":
                    f = {chr(x[0]): x[1:].decode("utf-8", "replace") for x in body.split(b"\0") if x}
                    with self.lock:
                        self.errors.append((label, state["last"],
                                            "%s %s: %s" % (f.get("S", "ERROR"), f.get("C", ""), f.get("M", ""))))
                elif t == b"C" and state["tags"] is not None:
                    with self.lock:
                        state["tags"].append(body.rstrip(b"\0").decode("utf-8", "replace"))
                c.sendall(t + hdr + body)
        except (EOFError, OSError, struct.error):
            pass
        finally:
            for x in (s, c):
                try:
                    x.close()
                except OSError:
                    pass

    def errors_of(self, label):
        with self.lock:
            return [(sql, e) for lab, sql, e in self.errors if lab == label]

    def sent_of(self, label):
        """[(statement, its command tags)] the clients of `label` sent."""
        with self.lock:
            return [(sql, list(tags)) for lab, sql, tags in self.sent if lab == label]


def _one_line(s, n=300):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[:n] + "..."


# --------------------------------------------------------------------------
# Parent and child
# --------------------------------------------------------------------------
def run_child(a):
    """Runs one check; prints one `@@result {json}` line."""
    fn = {n: f for n, f, _ in CHECKS}[a.child]
    try:
        if not a.input:
            raise Failed("needs --input DIR (the files `culprit generate --out DIR` wrote)")
        inp = Input(a.input, a.victim)
        fn(a, inp)
        res = {"ok": True}
    except Failed as e:
        res = {"ok": False, "err": str(e)}
    except Exception as e:  # noqa: BLE001 the driver's own errors
        res = {"ok": False, "err": "%s: %s" % (type(e).__name__, e)}
        if a.verbose:
            res["trace"] = traceback.format_exc()
    sys.stdout.write("@@result " + json.dumps(res) + "\n")
    sys.stdout.flush()
    os._exit(0)


def driver_path():
    """The driver's library as unixODBC's registration names it."""
    out = subprocess.run(["odbcinst", "-q", "-d", "-n", DRIVER], capture_output=True, text=True)
    lines = [l.split("=", 1)[1].strip() for l in out.stdout.splitlines() if l.lower().startswith("driver=")]
    expect(lines, "odbcinst does not know the driver %r: %s" % (DRIVER, out.stdout + out.stderr))
    return lines[0]


def write_odbcinst(d, driver=None):
    with open(os.path.join(d, "odbcinst.ini"), "w") as f:
        f.write("[%s]\nDriver = %s\nDebug = 0\nCommLog = 0\n" % (DRIVER, driver or driver_path()))
    open(os.path.join(d, "odbc.ini"), "a").close()


def generate_input(a, tmp):
    """Without --input: the demo's input (`culprit generate`, its defaults:
    what `culprit demo` and the e2e tests' demo store hold), as CSV."""
    here = os.path.dirname(os.path.abspath(__file__))
    bins = [a.culprit, os.environ.get("CULPRIT_BIN"),
            os.path.join(here, "..", "..", "target", "release", "culprit")]
    bin_ = next((os.path.normpath(b) for b in bins if b and os.access(b, os.X_OK)), None)
    if not bin_:
        print("error: no --input DIR, and no culprit binary to generate it (--culprit BIN or $CULPRIT_BIN)",
              file=sys.stderr, flush=True)
        sys.exit(2)
    out = os.path.join(tmp, "in")
    p = subprocess.run([bin_, "generate", "--out", out, "--format", "csv"], capture_output=True, text=True)
    if p.returncode != 0:
        print("error: %s generate failed: %s" % (bin_, p.stderr), file=sys.stderr, flush=True)
        sys.exit(2)
    print("input: generated by %s generate --format csv (the demo's defaults)" % bin_, flush=True)
    return out


def preflight():
    try:
        import pyodbc
    except ImportError as e:
        return "pyodbc is not installed (python3 -m pip install pyodbc): %s" % e
    if DRIVER not in pyodbc.drivers():
        return ("the ODBC driver %r is not registered with unixODBC (apt-get install odbc-postgresql "
                "unixodbc); registered: %r" % (DRIVER, pyodbc.drivers()))
    for prog in ("isql", "odbcinst"):
        if not _which(prog):
            return "%s is not installed (apt-get install unixodbc)" % prog
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("user")
    ap.add_argument("password")
    ap.add_argument("--input", help="the folder `culprit generate --out DIR` wrote (the store's input); "
                    "without it, the demo's input is generated with --culprit")
    ap.add_argument("--culprit", help="the culprit binary that generates the input when --input is absent "
                    "(default $CULPRIT_BIN, else target/release/culprit of this repository)")
    ap.add_argument("--victim", default="q-victim", help="a victim query of the input (default q-victim)")
    ap.add_argument("-k", "--only", action="append", help="run only this check (repeatable)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each failure's statements and errors")
    ap.add_argument("--timeout", type=int, default=180, help="seconds per check")
    ap.add_argument("--no-proxy", action="store_true", help="connect straight to the server (no wire log)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--via", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.input:
        a.input = os.path.abspath(a.input)
    a.via_host, a.via_port = a.host, a.port
    if a.via:
        a.via_host, a.via_port = "127.0.0.1", int(a.via)
    if a.child:
        run_child(a)
        return

    names = [n for n, _, _ in CHECKS]
    for k in a.only or []:
        if k not in names:
            print("error: no check %r (checks: %s)" % (k, ", ".join(names)), file=sys.stderr)
            sys.exit(2)
    missing = preflight()
    if missing:
        print("error: " + missing, file=sys.stderr, flush=True)
        sys.exit(2)
    # The children see a private unixODBC configuration: this driver alone,
    # no logs (Debian's registration turns CommLog on: a file in /tmp per
    # connection), no user DSNs.
    odbc_dir = tempfile.TemporaryDirectory(prefix="culprit-odbcinst-")
    try:
        write_odbcinst(odbc_dir.name)
    except Failed as e:
        print("error: %s" % e, file=sys.stderr, flush=True)
        sys.exit(2)
    os.environ["ODBCSYSINI"] = odbc_dir.name
    os.environ["ODBCINI"] = os.path.join(odbc_dir.name, "odbc.ini")
    tmp = None
    if not a.input:
        tmp = tempfile.TemporaryDirectory(prefix="culprit-odbc-input-")
        a.input = generate_input(a, tmp.name)
    try:
        Input(a.input, a.victim)
    except Failed as e:
        print("error: the input: %s" % e, file=sys.stderr, flush=True)
        sys.exit(2)

    wire = None
    if not a.no_proxy:
        wire = WireLog(a.host, a.port)
        proxy_port = wire.start()
    failed = 0
    for name, _fn, allowed in CHECKS:
        if a.only and name not in a.only:
            continue
        if wire:
            wire.label = name
        cmd = [sys.executable, os.path.abspath(__file__), a.host, str(a.port), a.user, a.password,
               "--child", name, "--victim", a.victim]
        if a.input:
            cmd += ["--input", a.input]
        if a.verbose:
            cmd.append("-v")
        if wire:
            cmd += ["--via", str(proxy_port)]
        reason, detail = None, ""
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            res = [l for l in p.stdout.splitlines() if l.startswith("@@result ")]
            if p.returncode < 0:
                try:
                    sig = signal.Signals(-p.returncode).name
                except ValueError:
                    sig = "signal %d" % -p.returncode
                reason = "the client crashed (%s)" % sig
            elif not res:
                reason = "the child exited %d without a result: %s" % (p.returncode, _one_line(p.stderr[-600:]))
            else:
                r = json.loads(res[-1][len("@@result "):])
                if not r["ok"]:
                    reason = r["err"]
                    detail = r.get("trace", "")
        except subprocess.TimeoutExpired:
            reason = "timed out after %d s" % a.timeout
        errs = [(sql, e) for sql, e in (wire.errors_of(name) if wire else [])
                if not any(x in e for x in allowed)]
        if reason is None and errs:
            reason = "the driver hid %d server error(s)" % len(errs)
        if reason is None:
            print("ok %s" % name, flush=True)
            continue
        failed += 1
        if errs:
            sql, e = errs[0]
            reason += " [server: %s, on: %s]" % (_one_line(e, 200), _one_line(sql, 200))
        elif wire and wire.sent_of(name):
            # No server error: the last statements and their command tags.
            reason += " [no server error; last statements: %s]" % " | ".join(
                "%s -> tags %s" % (_one_line(sql, 250), ", ".join(tags) or "none")
                for sql, tags in wire.sent_of(name)[-2:])
        print("FAIL %s: %s" % (name, _one_line(reason, 1200)), flush=True)
        if a.verbose:
            for sql, tags in (wire.sent_of(name) if wire else []):
                print("    sent: %s -> %s" % (_one_line(sql, 400), ", ".join(tags) or "-"))
            for sql, e in errs:
                print("    SQL: %s\n    ERR: %s" % (sql, e))
            if detail:
                print("    " + detail.replace("\n", "\n    "))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
