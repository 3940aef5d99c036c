"""train --profile's table and --log record (run_profile.sh): OUT LOG STEPS RANKS PLAN, a
pipeline of RANKS stages, one rank each, profiled over STEPS steps, compiled for the plan
PLAN (--plan-out)."""
import json
import sys

out, log, steps, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
plan_stages = json.load(open(sys.argv[5]))["stages"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


lines = open(out).read().splitlines()
head = [i for i, line in enumerate(lines) if line.startswith("profile: ms per step over %d steps" % steps)]
if len(head) != 1:
    fail("no profile header for %d steps in:\n%s" % (steps, "\n".join(lines[-8:])))
cols = lines[head[0] + 1].split()
if cols[:5] != ["rank", "stage", "dp", "tp", "step"] or cols[-3:] != ["outside", "compute", "planned"]:
    fail("profile columns: %r" % cols)
rows = [dict(zip(cols, (float(x) if x != "-" else None for x in line.split())))
        for line in lines[head[0] + 2:head[0] + 2 + ranks]]
recs = [json.loads(line) for line in open(log) if '"profile"' in line]
if len(recs) != 1 or recs[0]["profile"]["steps"] != steps or len(recs[0]["profile"]["ranks"]) != ranks:
    fail("want one --log profile record of %d steps and %d ranks, got %r" % (steps, ranks, recs))
step_ms = [r["ms"] for r in (json.loads(line) for line in open(log)) if "ms" in r and "step" in r]
for r, rec in zip(rows, recs[0]["profile"]["ranks"]):
    if len(r) != len(cols) or r["rank"] != rec["rank"] or r["stage"] != r["rank"] or rec["stage"] != r["stage"]:
        fail("rank %r: its line and record disagree, or it is not the stage of its rank: %r %r" % (r["rank"], r, rec))
    ops = {k: v for k, v in r.items() if k not in ("rank", "stage", "dp", "tp", "step", "outside", "compute", "planned")}
    if any(abs(ops[k] - rec["ms"].get(k, 0)) > 0.01 + 1e-4 * ops[k] for k in ops) or \
            abs(r["step"] - rec["step_ms"]) > 0.01 + 1e-4 * r["step"]:
        fail("rank %d: printed %r, logged %r" % (r["rank"], r, rec))
    # the profiled steps are the log's (rank 0's) steps after the first; every rank's
    # step ends in the ranks' agreement, so theirs are about as long
    want = sum(step_ms[1:]) / steps
    if abs(r["step"] / want - 1) > (1e-3 if r["rank"] == 0 else 0.2):
        fail("rank %d: a step of %.3f ms profiled, the log's steps 2 on %.3f ms" % (r["rank"], r["step"], want))
    if not (ops.get("gemm", 0) > 0 and ops.get("kernel", 0) > 0):
        fail("rank %d computed nothing: %r" % (r["rank"], r))
    if r["outside"] < -0.01 or sum(ops.values()) > r["step"] + 0.01:
        fail("rank %d: its instructions took %.3f ms of a %.3f ms step" % (r["rank"], sum(ops.values()), r["step"]))
    if ops.get("recv", 0) <= 0:
        fail("stage %d received nothing: %r" % (r["stage"], r))
    if r["stage"] < ranks - 1 and ops.get("send", 0) <= 0:
        fail("stage %d sent nothing: %r" % (r["stage"], r))
    if abs(r["compute"] - (ops["gemm"] + ops["kernel"] + ops.get("zero", 0))) > 0.02 or \
            abs(r["compute"] - rec["compute_ms"]) > 0.01 + 1e-4 * r["compute"]:
        fail("rank %d: compute %r is not its GEMMs, kernels and zeroing %r" % (r["rank"], r["compute"], rec))
    # compiled with a plan: the stage's compute as planned, in the line and the record
    if not (r["planned"] and r["planned"] > 0 and abs(r["planned"] - rec["planned_compute_ms"]) < 0.01 + 1e-4 * r["planned"]):
        fail("rank %d: no planned compute, or the line and the record differ: %r %r" % (r["rank"], r, rec))
    want = 1e3 * plan_stages[int(r["stage"])]["compute_per_step_s"]
    if abs(rec["planned_compute_ms"] - want) > 1e-4 + 1e-6 * want:  # the log keeps 4 decimals
        fail("stage %d: planned compute %.6g ms, its plan's %.6g" % (r["stage"], rec["planned_compute_ms"], want))
    waited = sum(ops.get(k, 0) for k in ("send", "recv", "comm", "join", "norm"))
    computed = ops["gemm"] + ops["kernel"] + ops.get("zero", 0)
    print("ok   rank %d (stage %d): %.2f ms a step, computing %.2f (planned %.2f), waiting %.2f (%s)" %
          (r["rank"], r["stage"], r["step"], computed, r["planned"], waited,
           ", ".join("%s %.2f" % (k, v) for k, v in sorted(ops.items()) if v > 0)))
