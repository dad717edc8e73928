-- The level-4 attribution of method.md section 5 (window form, per host
-- resources; slot waits left out) in plain SQL, for DuckDB, over the Parquet
-- files of `culprit generate --out DIR`. Run with duckdb/level4.py.
-- Elementary windows: every row boundary per (host, resource); rows spread
-- uniformly; a victim row's blocked seconds split over the other consumers
-- in proportion to their units (its own stage's other tasks included) and
-- the free capacity (`unknown`, from host_windows capacity); the query rows
-- are returned (culprit_kind query and self).
WITH w AS (
  SELECT tw.task_id, t.query_id, t.stage_id, t.host, tw.resource,
         epoch_us(tw.window_start) AS s, epoch_us(tw.window_end) AS e,
         tw.blocked, tw.acquired, coalesce(tw.gc, 0) AS gc
  FROM read_parquet('DIR/task_windows.parquet') tw
  JOIN read_parquet('DIR/tasks.parquet') t USING (task_id)
  WHERE tw.window_end > tw.window_start
),
hw AS (
  SELECT host, resource, epoch_us(window_start) AS s, epoch_us(window_end) AS e, capacity
  FROM read_parquet('DIR/host_windows.parquet') WHERE capacity IS NOT NULL AND window_end > window_start
),
b AS (
  SELECT host, resource, s AS t FROM w UNION SELECT host, resource, e FROM w
  UNION SELECT host, resource, s FROM hw UNION SELECT host, resource, e FROM hw
),
el AS (
  SELECT host, resource, t AS ws, lead(t) OVER (PARTITION BY host, resource ORDER BY t) AS we FROM b
),
pieces AS (
  SELECT w.*, el.ws, (el.we - el.ws)::DOUBLE / (w.e - w.s) AS f
  FROM w JOIN el ON el.host = w.host AND el.resource = w.resource AND el.ws >= w.s AND el.we <= w.e
),
capw AS (
  SELECT el.host, el.resource, el.ws, sum(hw.capacity * (el.we - el.ws) / 1e6) AS cap
  FROM el JOIN hw ON hw.host = el.host AND hw.resource = el.resource AND el.ws >= hw.s AND el.we <= hw.e
  GROUP BY ALL
),
tot AS (
  SELECT p.host, p.resource, p.ws, sum(p.acquired * p.f) AS total,
         greatest(coalesce(any_value(c.cap), 0) - sum(p.acquired * p.f), 0) AS unknown
  FROM pieces p LEFT JOIN capw c USING (host, resource, ws) GROUP BY ALL
),
st AS (SELECT host, resource, ws, query_id, stage_id, sum(acquired * f) AS a FROM pieces GROUP BY ALL),
v AS (
  SELECT p.host, p.resource, p.ws, p.query_id, p.stage_id, p.acquired * p.f AS a_v,
         (CASE WHEN p.resource = 'cpu' THEN greatest(p.blocked, p.gc) - p.gc ELSE p.blocked END) * p.f AS rest,
         tot.total, tot.unknown
  FROM pieces p JOIN tot USING (host, resource, ws)
  WHERE p.blocked > 0
)
SELECT v.query_id AS victim_query, v.stage_id AS victim_stage, v.resource, v.host,
       st.query_id AS culprit_query, st.stage_id AS culprit_stage,
       sum(v.rest * (st.a - CASE WHEN st.query_id = v.query_id AND st.stage_id = v.stage_id THEN v.a_v ELSE 0 END)
           / nullif(v.total - v.a_v + v.unknown, 0)) AS blame_seconds
FROM v JOIN st USING (host, resource, ws)
GROUP BY ALL
