"""The composed step (codegen/compose.h), read from the program colossalc writes
(--emit-program, tests/plan/progtext.py): for plans of gpt2-tiny, the gradient sums (overlapped with
backward in `step` where the plan is data-parallel only), the norm's counting and
the update's owners are what the plan needs, checked from the program's own fields
(params, owners, tiers, instruction operands) rather than from the compiler's code.
Usage: check_compose.py COLOSSALC"""
import shutil
import sys
import tempfile

import progtext

CC = sys.argv[1]
BUCKET = 25 << 20
TMP = tempfile.mkdtemp()
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def stages(args):
    """Each stage of the program for args: its fields with its train list's phases
    (progtext.phases), "kernels" the program's kernels."""
    _, prog = progtext.compile(CC, args, TMP, out=False)
    return [dict(st, kernels=prog["kernels"], **progtext.phases(prog, s)) for s, st in enumerate(prog["stages"])]


def programs(*flags):
    return stages(["models/gpt2-tiny.model", "--set", "layers=2", "--set", "seq=32", *flags])


def plan(dp, tp, pp, zero, *extra):
    return programs("--set", "batch=%d" % (2 * dp), "--gpus", str(dp * tp * pp), "--gpu", "cpu", "--dp", str(dp),
                    "--tp", str(tp), "--pp", str(pp), "--zero", str(zero), "--microbatch-size", "2", *extra)


def numel(q):
    n = 1
    for d in q["shape"]:
        n *= d
    return n


def kernels_by_param(p, lst, tier):
    """{param index: [instructions]} for the kernels of lst by the parameters whose bytes
    in tier their binding there meets: one kernel a parameter, or a run of consecutive
    parameters in one multi-tensor kernel."""
    out = {}
    for ins in p[lst]:
        if ins["op"] != "kernel":
            continue
        args = p["kernels"][ins["id"]]["args"]
        spans = [(a["offset"], a["offset"] + a["bytes"]) for a in args if a["tier"] == tier]
        hits = [i for i, q in enumerate(p["params"]) for lo, hi in spans if q["offset"] < hi and lo < q["offset"] + 4 * numel(q)]
        check(len(spans) == 1 and hits, "%s kernel covers parameters: %s" % (lst, args))
        for i in hits:
            out.setdefault(i, []).append(ins)
    return out


def kernels(p, lst):
    return [i for i in p[lst] if i["op"] == "kernel"]


def dp_sums(p):
    return [c for c in p["sync"] + p["step"] if c["op"] == "comm" and c.get("group") == "dp"]


def touched(p, ins):
    """(tier, lo, hi) ranges an instruction reads or writes (kernels, zero, GEMMs)."""
    if ins["op"] == "kernel":
        return [(a["tier"], a["offset"], a["offset"] + a["bytes"]) for a in p["kernels"][ins["id"]]["args"]]
    if ins["op"] == "zero":
        return [(ins["tier"], ins["offset"], ins["offset"] + ins["bytes"])]
    if ins["op"] == "gemm":
        out = []
        rows = [(ins["k"] if ins["ta"] else ins["m"], ins["lda"]), (ins["n"] if ins["tb"] else ins["k"], ins["ldb"]),
                (ins["m"], ins["ldc"])]
        for x, (r, ld) in enumerate(rows):
            st = ins["stride"][2 * x:2 * x + 2]
            last = (ins["batch"][0] - 1) * st[0] + (ins["batch"][1] - 1) * st[1] + r * ld
            out.append((ins["tier"][x], ins["off"][x], ins["off"][x] + 4 * last))
        return out
    return []


def check_overlapped(p, name):
    """dp sums in `step` on its last micro-batch, overlapping what follows: nothing
    after one touches its bytes, and each follows an instruction that touches them
    (or ends the list)."""
    step = p["step"]
    for i, c in enumerate(step):
        if c["op"] != "comm" or c.get("group") != "dp":
            continue
        check(c.get("overlap") == 1 and c.get("last") == 1, name + ": a dp sum in step overlaps, on the last micro-batch")
        lo, hi = c["off"][0], c["off"][0] + 4 * c["outer"] * c["n"] * c["inner"]
        meets = lambda ins: any(t == "grads" and a < hi and lo < b for t, a, b in touched(p, ins))
        check(not any(meets(x) for x in step[i + 1:]), name + ": nothing after the dp sum at %d touches its gradients" % i)
        prev = [x for x in step[:i] if x["op"] != "comm"]
        check(i == len(step) - 1 or (prev and meets(prev[-1])), name + ": the dp sum at %d follows its gradients' last touch" % i)


def covers_grads(p, name):
    spans = sorted((c["off"][0], c["off"][0] + 4 * c["outer"] * c["n"] * c["inner"]) for c in dp_sums(p))
    check(all(c["kind"] == "all_reduce" and c["off"][0] == c["off"][1] and c["tier"] == ["grads", "grads"]
              for c in dp_sums(p)),
          name + ": dp sums are in-place all-reduces of GRADS")
    at = 0
    for lo, hi in spans:
        check(lo == at, name + ": dp buckets tile GRADS (gap or overlap at %d)" % at)
        at = hi
    check(at == p["tiers"][1], name + ": dp buckets end at the GRADS tier's end")
    starts = {q["offset"] for q in p["params"]}
    for lo, hi in spans:
        check(lo in starts, name + ": a bucket starts at a parameter")
        many = sum(1 for q in p["params"] if lo <= q["offset"] < hi) > 1
        check(hi - lo <= BUCKET or not many, name + ": a bucket of several parameters is at most 25 MiB")


def check_prefetch(p, name):
    """ZeRO-3 gathers issued ahead ("overlap"): nothing touches the parameter before
    the next join, and every parameter is gathered before each use."""
    step, params = p["step"], p["params"]
    ahead = [i for i, x in enumerate(step) if x["op"] == "zero_gather" and x.get("overlap")]
    check(len(ahead) > len(params) // 2, name + ": most gathers are prefetched (%d of %d parameters)" % (len(ahead), len(params)))
    for i in ahead:
        q = params[step[i]["index"]]
        lo, hi = q["offset"], q["offset"] + 4 * numel(q)
        for x in step[i + 1:]:
            if x["op"] == "join":
                break
            check(not any(t == "params" and a < hi and lo < b for t, a, b in touched(p, x)),
                  name + ": %s used before the join after its prefetch at %d" % (q["name"], i))
    held = set()
    for x in step:
        if x["op"] == "zero_gather":
            held.add(x["index"])
        elif x["op"] == "zero_release":
            held.discard(x["index"])
        for t, a, b in touched(p, x):
            for k, q in enumerate(params):
                if t == "params" and q["owner"] != 0 and a < q["offset"] + 4 and q["offset"] < b:
                    check(k in held, name + ": %s read on rank 0 without a gather" % q["name"])


def check_norm_zeroed(p, name):
    """Where only some ranks count a parameter, the norm's parts are zeroed first, one
    f32 each, as many as the norm sums."""
    gn, norm = p["gradnorm"], p["norm"]
    check(gn[0]["op"] == "zero" and gn[0]["tier"] == "work" and gn[0]["offset"] == norm["offset"]
          and gn[0]["bytes"] == 4 * norm["count"] and norm["count"] == p["norm_parts"]
          and norm["microbatches"] == p["microbatches"], name + ": gradnorm first zeroes its parts, the norm sums them")


# No plan: a program for any number of data-parallel ranks.
[p] = programs("--set", "batch=2")
check(p["dp"] == 0, "no plan: dp any")
covers_grads(p, "no plan")
check(p["sync"] == [], "no plan: the dp sums are in step")
check_overlapped(p, "no plan")
check_norm_zeroed(p, "no plan")
gn = kernels_by_param(p, "gradnorm", "grads")
check(len(gn) == len(p["params"]) and all(i.get("dp_rank") == 0 for ins in gn.values() for i in ins), "no plan: the norm on dp rank 0")
check(all("dp_rank" not in i and "tp_rank" not in i for i in p["update"]), "no plan: every rank updates")
# one multi-tensor kernel updates every parameter, one sums the norm
check(len(kernels(p, "update")) == 1 and len(kernels_by_param(p, "update", "params")) == len(p["params"]),
      "no plan: one update kernel for every parameter (%d)" % len(kernels(p, "update")))
check(len(kernels(p, "gradnorm")) == 1, "no plan: the norm in one kernel (%d)" % len(kernels(p, "gradnorm")))

# GPT-2 124M: its 498 MB of gradients in buckets, each overlapping the rest of backward.
[p] = stages(["models/gpt2.model", "--set", "batch=1", "--set", "seq=64"])
covers_grads(p, "gpt2")
check_overlapped(p, "gpt2")
at = [i for i, c in enumerate(p["step"]) if c["op"] == "comm"]
check(len(at) >= 10 and at[0] < len(p["step"]) // 2, "gpt2: many buckets, the first in the first half of the step (%s)" % at[:3])

# A plan of one rank: nothing to compose.
[p] = plan(1, 1, 1, 0)
check(p["sync"] == [], "one rank: empty sync")
check(all("dp_rank" not in i and "tp_rank" not in i for i in p["gradnorm"] + p["update"]), "one rank: no conditions")
check([len(kernels(p, l)) for l in ("gradnorm", "update")] == [1, 1], "one rank: one norm kernel, one update kernel")

# Data parallelism, ZeRO 0 to 3.
for zero in range(4):
    name = "dp2 zero%d" % zero
    [p] = plan(2, 1, 1, zero)
    nparams = len(p["params"])
    if zero == 0:
        covers_grads(p, name)
        check_overlapped(p, name)
    elif zero == 1:
        red = {c["off"][0]: c["root"] for c in p["step"] if c["op"] == "comm" and c["kind"] == "reduce" and c.get("group") == "dp"}
        check(red == {q["offset"]: q["owner"] for q in p["params"]}, name + ": every gradient reduced onto its owner")
        check(not [c for c in dp_sums(p) if c["kind"] != "reduce"], name + ": no all-reduce")
        check_overlapped(p, name)
    else:
        check(dp_sums(p) == [] and any(x["op"] == "zero_reduce" for x in p["step"]),
              name + ": the step reduces, sync does not")
    check_norm_zeroed(p, name)
    gn = kernels_by_param(p, "gradnorm", "grads")
    check(len(gn) == nparams and all(len(ins) == 1 for ins in gn.values()), name + ": every parameter in one norm kernel")
    for i, ins in gn.items():
        want = p["params"][i]["owner"] if zero >= 1 else 0
        check(all(x.get("dp_rank") == want for x in ins), name + ": norm of %s on dp rank %d" % (p["params"][i]["name"], want))
    up = kernels_by_param(p, "update", "params")
    check(len(up) == nparams and all(len(ins) == 1 for ins in up.values()), name + ": every parameter updated by one kernel")
    for i, ins in up.items():
        want = p["params"][i]["owner"] if zero >= 1 else None
        check(ins[0].get("dp_rank") == want, name + ": update of %s where it is owned" % p["params"][i]["name"])
    if zero == 0:
        check(len(kernels(p, "update")) == 1, name + ": one update kernel (%d)" % len(kernels(p, "update")))
    if zero == 3:
        check_prefetch(p, name)
    bcast = [c for c in p["update"] if c["op"] == "comm"]
    if zero in (1, 2):
        roots = {c["off"][0]: c["root"] for c in bcast if c["kind"] == "broadcast" and c["group"] == "dp"}
        check(roots == {q["offset"]: q["owner"] for q in p["params"]}, name + ": every parameter broadcast from its owner")
    else:
        check(bcast == [], name + ": no broadcast after the update")

# Tensor and pipeline parallelism: the tied embedding, replicated parameters.
st = plan(1, 2, 2, 0)
check(len(st) == 2 and all(s["ints"]["groups"] == [2, 0, 1] for s in st), "tp2 pp2: one stage group, both stages")
names = [{q["name"] for q in s["params"]} for s in st]
tied = names[0] & names[1]
check(tied == {"wte.weight"}, "tp2 pp2: the token embedding is the tied parameter (%s)" % sorted(tied))
for s, p in enumerate(st):
    sums = [c for c in p["sync"] if c.get("group") == "stages"]
    off = {q["name"]: q["offset"] for q in p["params"]}
    check([(c["kind"], c["off"][0], c["root"]) for c in sums] == [("reduce", off["wte.weight"], 0), ("broadcast", off["wte.weight"], 0)],
          "stage %d: the tied gradient reduced onto stage 0 and broadcast back" % s)
    check(dp_sums(p) == [], "stage %d: dp 1, no dp sums" % s)
    gn = kernels_by_param(p, "gradnorm", "grads")
    for i, q in enumerate(p["params"]):
        if q["name"] in tied and s > 0:
            check(i not in gn, "stage %d: %s counted on its lowest stage only" % (s, q["name"]))
            continue
        want = None if q["tp_dim"] >= 0 else 0
        check(i in gn and all(x.get("tp_rank") == want for x in gn[i]),
              "stage %d: %s counted on %s" % (s, q["name"], "every tp rank" if want is None else "tp rank 0"))
    check(len(kernels(p, "update")) == 1, "stage %d: one update kernel (%d)" % (s, len(kernels(p, "update"))))
    check_norm_zeroed(p, "stage %d" % s)

shutil.rmtree(TMP)
if failures:
    print("%d check(s) FAILED" % len(failures))
    sys.exit(1)
print("compose: all checks passed")
