"""End-to-end: proposal.nearest_ids at N rows (own tables, key 2), unfiltered and filtered.
Usage: SV=019|0110 venv/bin/python bench_proposal.py N   (reuses meta from bench2's DB)."""
import json, os, sys, time
import numpy as np
import proposal as P
import svload
from bench2 import emit, exact_topk, timed, recall, calibrate
SV = os.environ.get("SV", "019")
n = int(sys.argv[1])
NQ = int(os.environ.get("NQ", "200"))
x = np.ascontiguousarray(np.load("/work/notes/real_100k.npy", mmap_mode="r")[:n])
q = np.load("/work/notes/real_queries.npy")[:NQ].astype(np.float32)
conn = svload.connect(f"/tmp/coarse/db/b2_sv{SV}_{n}.db")
conn.execute("PRAGMA journal_mode = WAL")
if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vecq_2'").fetchone():
    t0 = time.perf_counter()
    with conn:
        P.create_vector_tables(conn, 2, 384)
    for s in range(0, n, 500):
        with conn:
            P.insert_vectors(conn, 2, [(i + 1, x[i].tobytes()) for i in range(s, min(s + 500, n))])
    emit(what="insert", layout=f"PROPOSAL insert_vectors (vec_N + vecf_N + vecq_N P={P.PARTITIONS})",
         n=n, rows_per_s=round(n / (time.perf_counter() - t0)))
for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'vec%2%'").fetchall():
    conn.execute(f'SELECT count(*) FROM "{t}"').fetchall()
emit(what="calibration", numpy_100k_ms=calibrate(), load=os.getloadavg()[0])
calls = {}
for fn in ("_exact", "_exact_over_ids", "_coarse_rescored", "_coarse_postfiltered"):
    orig = getattr(P, fn)
    setattr(P, fn, (lambda o, name: lambda *a, **kw: (calls.__setitem__(name, calls.get(name, 0) + 1), o(*a, **kw))[1])(orig, fn))

def go(label, truth, sql=None, params=(), mask=None, k=10):
    calls.clear()
    allowed = set((np.nonzero(mask)[0] + 1).tolist()) if mask is not None else None
    def run(v):
        with conn:  # one read transaction, as in the store
            hits = P.nearest_ids(conn, 2, v, k, allowed_sql=sql, allowed_params=params, row_count=n)
        ids = [h[0] for h in hits]
        if allowed is not None:
            assert all(i in allowed for i in ids), "filter violated"
        return ids
    got, p50, p95 = timed(run, q)
    emit(what="knn", method=f"PROPOSAL {label}", n=n, cpu_p50_ms=round(timed.cpu[0], 2),
         cpu_p95_ms=round(timed.cpu[1], 2), wall_p50_ms=round(p50, 2), wall_p95_ms=round(p95, 2),
         recall10=round(recall(got, truth), 4), nq=len(got), paths=dict(calls))

go("unfiltered", exact_topk(x, q, 10))
meta = np.array(conn.execute("SELECT r, f FROM meta ORDER BY id").fetchall())
for col, pct in (("r", 1), ("r", 3), ("r", 10), ("r", 25), ("r", 50), ("f", 1), ("f", 10), ("f", 50)):
    mask = meta[:, 0 if col == "r" else 1] < pct
    go(f"filtered {'random rows' if col == 'r' else 'whole files'} {pct}% ({int(mask.sum())} rows)",
       exact_topk(x, q, 10, mask), f"SELECT id FROM meta WHERE {col} < ?", (pct,), mask)
