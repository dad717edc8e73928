#!/usr/bin/env python3
"""A recorded Trino coordinator for tests/e2e/trino.rs.

No Trino server can be installed where the tests run, so this serves real
QueryInfo documents (a file written by a real coordinator) the way a
coordinator does:

  GET /v1/query        the list of queries it knows (BasicQueryInfo: queryId,
                       state, query, session, queryStats, ...)
  GET /v1/query/{id}   one query's QueryInfo; 410 Gone once it has expired

and, like a coordinator without authentication, refuses a request without
an X-Trino-User (or X-Presto-User) header with 401.

Usage: coordinator.py --log LOG QUERYINFO [--copy NEW_ID:RUNNING:NOT_FINAL]...
                      [--expired ID]...

  QUERYINFO       a QueryInfo file served as it is
  --copy          also serve the same QueryInfo under another query id (every
                  occurrence of the id replaced): listed as RUNNING for the
                  first RUNNING list requests, then FINISHED, its QueryInfo
                  not final (finalQueryInfo false) for its first NOT_FINAL
                  fetches
  --expired       list a FINISHED query whose QueryInfo is gone (410)
  --log           each request is appended as "METHOD PATH USER"

It prints "listening on PORT" (port 0 picks a free one) and serves until
killed.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Query:
    def __init__(self, text, running=0, not_final=0):
        self.text = text
        self.info = json.loads(text)
        self.id = self.info["queryId"]
        self.running = running
        self.not_final = not_final

    def state(self):
        return "RUNNING" if self.running > 0 else self.info["state"]

    def basic(self):
        """BasicQueryInfo, as GET /v1/query lists it."""
        i = self.info
        stats = i["queryStats"]
        keep = [
            "createTime", "endTime", "queuedTime", "elapsedTime", "executionTime",
            "totalCpuTime", "totalScheduledTime", "totalBlockedTime",
            "peakUserMemoryReservation", "progressPercentage",
        ]
        return {
            "queryId": self.id,
            "session": {k: i["session"][k] for k in ("queryId", "user", "source") if k in i["session"]},
            "resourceGroupId": i.get("resourceGroupId"),
            "state": self.state(),
            "scheduled": i.get("scheduled", True),
            "self": i.get("self"),
            "query": i.get("query"),
            "queryStats": {k: stats[k] for k in keep if k in stats},
            "queryType": i.get("queryType"),
            "retryPolicy": i.get("retryPolicy"),
        }

    def document(self):
        """The QueryInfo, not final yet for the first fetches."""
        if self.not_final > 0:
            self.not_final -= 1
            info = dict(self.info)
            info["finalQueryInfo"] = False
            return json.dumps(info).encode()
        return self.text.encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("queryinfo")
    ap.add_argument("--copy", action="append", default=[])
    ap.add_argument("--expired", action="append", default=[])
    ap.add_argument("--log", required=True)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()

    text = open(args.queryinfo, encoding="utf-8").read()
    original = Query(text)
    queries = [original]
    for spec in args.copy:
        new_id, running, not_final = spec.split(":")
        queries.append(Query(text.replace(original.id, new_id), int(running), int(not_final)))
    lock = threading.Lock()
    log = open(args.log, "a", encoding="utf-8")

    class Handler(BaseHTTPRequestHandler):
        def reply(self, status, body, kind="application/json"):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            user = self.headers.get("X-Trino-User") or self.headers.get("X-Presto-User")
            with lock:
                log.write(f"GET {self.path} {user}\n")
                log.flush()
                if not user:
                    self.reply(401, b"Unauthorized: no X-Trino-User header", "text/plain")
                    return
                path = self.path.split("?")[0].rstrip("/")
                if path == "/v1/query":
                    listed = [q.basic() for q in queries]
                    for q in queries:
                        q.running = max(0, q.running - 1)
                    for gone in args.expired:
                        b = original.basic()
                        b["queryId"] = gone
                        listed.append(b)
                    self.reply(200, json.dumps(listed).encode())
                    return
                if path.startswith("/v1/query/"):
                    qid = path[len("/v1/query/"):]
                    for q in queries:
                        if q.id == qid:
                            self.reply(200, q.document())
                            return
                    self.reply(410, b"Query not found", "text/plain")
                    return
                self.reply(404, b"Not found", "text/plain")

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
