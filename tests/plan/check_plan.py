#!/usr/bin/python3
"""The plan search from the command line (issue 4's acceptance and tests).

    check_plan.py CHECK COLOSSALC

CHECK is one of: acceptance, text_svg, forced, infeasible, cluster_files,
from_file, determinism, offload, offload_state, compile, memory_compiled, calibrate,
collectives_compiled, time_reported, lamb, zb_h1, ulysses. Run from the repository root. Prints what it checked; exit
status 1 on the first failure."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.dom.minidom

import progtext

GPT3 = ["models/gpt3.model", "--gpus", "1024", "--gpus-per-node", "8", "--gpu", "a100-80g"]
GPT2 = ["models/gpt2.model", "--gpus", "8"]
CLUSTERS = "tests/plan/clusters"


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(args, expect_ok=True):
    r = subprocess.run([COLOSSALC] + args, capture_output=True, text=True)
    if expect_ok and r.returncode != 0:
        fail("colossalc %s: exit %d\n%s" % (" ".join(args), r.returncode, r.stderr))
    if not expect_ok and r.returncode != 1:
        fail("colossalc %s: expected exit 1, got %d\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def plan_json(args):
    r = run(args + ["--dump-plan=json"])
    try:
        return json.loads(r.stdout)
    except ValueError as e:
        fail("not JSON (%s): %s" % (e, r.stdout[:400]))


def expect_error(args, *needles):
    r = run(args, expect_ok=False)
    if r.stdout:
        fail("an error printed on stdout: " + r.stdout[:200])
    for n in needles:
        if n not in r.stderr:
            fail("colossalc %s: stderr lacks %r:\n%s" % (" ".join(args), n, r.stderr))
    print("ok   rejected %-60s %s" % (" ".join(args[2:])[:60], r.stderr.strip().splitlines()[0][:160]))


def check_plan_keys(d, gpus, batch):
    mesh = d["mesh"]
    for k in ("dp", "tp", "pp"):
        if not isinstance(mesh[k], int) or mesh[k] < 1:
            fail("mesh.%s = %r" % (k, mesh[k]))
    if mesh["dp"] * mesh["tp"] * mesh["pp"] != gpus:
        fail("mesh %r does not use %d GPUs" % (mesh, gpus))
    if d["zero_stage"] not in (0, 1, 2, 3) or d["recompute"] not in ("none", "selective", "full"):
        fail("zero_stage/recompute: %r %r" % (d["zero_stage"], d["recompute"]))
    if mesh["dp"] * d["microbatch_size"] * d["microbatches"] != batch:
        fail("dp x microbatch_size x microbatches != %d" % batch)
    p = d["predicted"]
    if not (p["step_time_s"] > 0 and p["tflops_per_gpu"] > 0 and 0 < p["mfu"] < 1):
        fail("predicted: %r" % p)
    m = d["memory"]
    if not 0 < m["peak_bytes_per_device"] <= m["usable_bytes"] < m["capacity_bytes"]:
        fail("memory: %r" % m)
    if d["parameters"] <= 0:
        fail("parameters: %r" % d["parameters"])


def acceptance():
    d = plan_json(GPT3)
    check_plan_keys(d, 1024, 1536)
    if abs(d["parameters"] - 174.6e9) > 0.1e9:
        fail("gpt3 parameters %r" % d["parameters"])
    p, m = d["predicted"], d["mesh"]
    print("ok   gpt3 on 1024 a100-80g: dp %d tp %d pp %d, ZeRO-%d, %d x %d, recompute %s: %.2f s, %.1f TFLOP/s, MFU %.1f%%, "
          "%.1f GiB of %.1f" % (m["dp"], m["tp"], m["pp"], d["zero_stage"], d["microbatches"], d["microbatch_size"],
                               d["recompute"], p["step_time_s"], p["tflops_per_gpu"], 100 * p["mfu"],
                               d["memory"]["peak_bytes_per_device"] / 2**30, d["memory"]["usable_bytes"] / 2**30))
    if len(d["runners_up"]) < 3 or not all(r["why"] for r in d["runners_up"]):
        fail("runners-up without reasons")
    print("ok   %d runners-up, each with why it lost" % len(d["runners_up"]))


def text_svg():
    t = run(GPT3 + ["--dump-plan"]).stdout
    for needle in ("mesh: dp", "ZeRO stage", "predicted step time", "pipeline bubble", "exposed communication",
                   "stages (layers", "sharding along", "collectives per step", "runners-up:", "memory per device"):
        if needle not in t:
            fail("text dump lacks %r" % needle)
    print("ok   text dump of gpt3 (%d lines)" % t.count("\n"))
    for args in (GPT3, GPT2 + ["--pp", "4", "--set", "batch=32"], GPT2 + ["--pp", "2", "--schedule", "interleaved",
                                                                         "--set", "batch=16"]):
        svg = run(args + ["--dump-plan=svg"]).stdout
        doc = xml.dom.minidom.parseString(svg)
        if doc.documentElement.tagName != "svg" or len(doc.getElementsByTagName("rect")) < 5:
            fail("svg without a timeline")
        print("ok   svg of %s parses: %d rects" % (" ".join(args[:3]), len(doc.getElementsByTagName("rect"))))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.svg")
        r = run(GPT2 + ["--dump-plan=svg", "--plan-out", out])
        if r.stdout or not os.path.exists(out):
            fail("--plan-out did not write the file")
        xml.dom.minidom.parse(out)
        print("ok   --plan-out writes the svg to a file")


def forced():
    args = GPT3 + ["--dp", "8", "--tp", "8", "--pp", "16", "--zero", "1", "--microbatch-size", "2", "--schedule",
                   "interleaved", "--virtual-stages", "3", "--recompute", "full"]
    d = plan_json(args)
    want = {"mesh": {"dp": 8, "tp": 8, "pp": 16}, "zero_stage": 1, "microbatch_size": 2, "microbatches": 96,
            "recompute": "full", "schedule": "interleaved", "virtual_stages": 3}
    for k, v in want.items():
        if d[k] != v:
            fail("forced %s: got %r, want %r" % (k, d[k], v))
    check_plan_keys(d, 1024, 1536)
    print("ok   fully forced plan priced: %.2f s, %.1f TFLOP/s" % (d["predicted"]["step_time_s"],
                                                                d["predicted"]["tflops_per_gpu"]))
    d = plan_json(GPT3 + ["--tp", "8", "--recompute", "selective"])
    if d["mesh"]["tp"] != 8 or d["recompute"] != "selective":
        fail("partly forced plan: %r" % d["mesh"])
    print("ok   partly forced plan: tp 8, the search chose dp %d pp %d" % (d["mesh"]["dp"], d["mesh"]["pp"]))
    d = plan_json(GPT2 + ["--tp", "2", "--zero", "0", "--gpu", "h100-sxm"])
    if d["mesh"]["tp"] != 2 or d["zero_stage"] != 0 or d["cluster"]["gpu"] != "h100-sxm":
        fail("forced gpt2 plan")
    print("ok   gpt2 forced tp 2, ZeRO-0 on h100-sxm")


def infeasible():
    expect_error(GPT3 + ["--dp", "1024", "--tp", "1", "--pp", "1"], "1536", "1024")
    expect_error(GPT3 + ["--dp", "128", "--tp", "8", "--pp", "1", "--zero", "0"], "does not fit", "over by", "GiB",
                 "weights", "activations")
    expect_error(GPT3 + ["--set", "batch=2048", "--dp", "1024", "--tp", "1", "--pp", "1", "--zero", "0"],
                 "does not fit", "over by")
    expect_error(GPT3 + ["--tp", "16"], "inside a node")
    expect_error(GPT3 + ["--pp", "4", "--zero", "3"], "ZeRO stage 3")
    expect_error(GPT3 + ["--dp", "8", "--tp", "8", "--pp", "8"], "512 GPUs")
    expect_error(GPT3 + ["--pp", "1024", "--tp", "1"], "layers")
    expect_error(GPT2 + ["--pp", "1", "--schedule", "interleaved"], "pipeline")
    expect_error(GPT3 + ["--gpu", "tpu"], "unknown GPU profile")
    expect_error(GPT3 + ["--recompute", "some"], "--recompute takes")
    expect_error(["models/gpt2.model", "--gpus", "12", "--dump-plan"], "multiple of --gpus-per-node")


def cluster_files():
    d = plan_json(["models/gpt3.model", "--cluster", CLUSTERS + "/dgx_a100_full.json"])
    check_plan_keys(d, 256, 1536)
    ref = plan_json(["models/gpt3.model", "--gpus", "256", "--gpu", "a100-80g"])
    if d["predicted"] != ref["predicted"] or d["mesh"] != ref["mesh"]:
        fail("a cluster file with the a100-80g figures plans differently from --gpu a100-80g")
    print("ok   cluster file with every field = the built-in a100-80g profile")
    d = plan_json(["models/gpt3.model", "--cluster", CLUSTERS + "/h100_roce.json", "--gpus", "512"])
    check_plan_keys(d, 512, 1536)
    if d["cluster"]["gpus"] != 512 or "RoCE" not in d["cluster"]["name"]:
        fail("cluster file based on h100-sxm: %r" % d["cluster"])
    print("ok   cluster file on base h100-sxm, --gpus overrides: %s" % d["cluster"]["name"])
    collectives_measured()
    bad = {"bad_unknown_field.json": "unknown field 'device.peak_bf16_tflop'",
           "bad_negative.json": "intra_node.bandwidth_gbs must be a positive number, got -300",
           "bad_missing.json": "missing field 'device.memory_bandwidth_gbs'",
           "bad_syntax.json": "not valid JSON", "bad_efficiency.json": "device.gemm_efficiency must be in (0, 1]",
           "bad_nodes.json": "12 GPUs do not fill nodes of 8", "bad_base.json": "base must name a built-in profile",
           "bad_type.json": "device.memory_gib must be a number",
           "bad_collective_points.json": "intra_node.collectives.reduce must be 1 to 16 points [bytes, us], bytes "
                                         "increasing",
           "bad_collective_kind.json": "unknown collective 'allreduce' in intra_node.collectives",
           "bad_collective_ranks.json": "intra_node.collectives.ranks must be the number of ranks measured"}
    for f, msg in sorted(bad.items()):
        expect_error(["models/gpt2.model", "--dump-plan", "--cluster", os.path.join(CLUSTERS, f)], f, msg)
    expect_error(["models/gpt2.model", "--dump-plan", "--cluster", CLUSTERS + "/none.json"], "cannot read cluster file")


def collectives_measured():
    """A compiled ZeRO plan's collectives are what its program issues: each parameter's
    gradient reduced onto its owner and the parameter broadcast from there (priced for
    another system, --what-if: a reduce-scatter and an all-gather). A kind measured in the
    cluster file (intra_node.collectives, as --calibrate writes it) is priced by its curve:
    linear between its points, the same on 2 ranks, on 4 with the chain's 3 steps of
    latency (a reduce's bytes cross each link once whatever the ranks); a kind not
    measured keeps the link's ring figures."""
    path = CLUSTERS + "/cpu_collectives.json"
    curves = json.load(open(path))["intra_node"]["collectives"]

    def at(kind, b):
        pts = curves[kind]
        i = 1
        while i < len(pts) - 1 and pts[i][0] < b:
            i += 1
        (b0, t0), (b1, t1) = pts[i - 1], pts[i]
        return max(pts[0][1], t0 + (t1 - t0) * (b - b0) / (b1 - b0)) * 1e-6

    tiny = ["models/gpt2-tiny.model", "--cluster", path, "--zero", "1", "--tp", "1", "--pp", "1"]
    for n in (2, 4):
        d = plan_json(tiny + ["--gpus", str(n), "--dp", str(n)])
        colls = {c["kind"]: c for c in d["collectives"] if c["axis"] == "dp"}
        if sorted(colls) != ["broadcast", "reduce"]:
            fail("a compiled ZeRO-1 plan on %d ranks prices %s, not a reduce and a broadcast" % (n, sorted(colls)))
        for kind in ("reduce", "broadcast"):
            c = colls[kind]
            want = at(kind, c["bytes"]) + (n - 2) * curves[kind][0][1] * 1e-6
            if abs(c["time_per_step_s"] - want) > 1e-9 + 1e-9 * want:
                fail("%s of %d bytes on %d ranks priced %g s, its curve says %g" % (kind, c["bytes"], n,
                                                                                   c["time_per_step_s"], want))
        print("ok   ZeRO-1 on %d ranks: reduce %.3g ms, broadcast %.3g ms of %d bytes, as measured" %
              (n, 1e3 * colls["reduce"]["time_per_step_s"], 1e3 * colls["broadcast"]["time_per_step_s"],
               colls["reduce"]["bytes"]))
    w = plan_json(tiny + ["--gpus", "2", "--dp", "2", "--what-if"])
    colls = {c["kind"]: c for c in w["collectives"] if c["axis"] == "dp"}
    if sorted(colls) != ["all-gather", "reduce-scatter"]:
        fail("a ZeRO-1 plan for another system (--what-if) prices %s" % sorted(colls))
    b = colls["reduce-scatter"]["bytes"]
    want = 0.5 * b / 4e9 + 2e-6  # the link's ring: (n-1)/n of the bytes, n-1 steps
    if abs(colls["reduce-scatter"]["time_per_step_s"] - want) > 1e-9 * want:
        fail("reduce-scatter not measured: %g s, the link's ring says %g" % (colls["reduce-scatter"]["time_per_step_s"],
                                                                            want))
    print("ok   --what-if prices ZeRO-1 as a reduce-scatter and an all-gather on the link's figures")


def plan_file():
    with tempfile.TemporaryDirectory() as tmp:
        for args in (GPT3, GPT2 + ["--pp", "2", "--set", "batch=16"]):
            d = plan_json(args)
            path = os.path.join(tmp, "plan.json")
            with open(path, "w") as f:
                json.dump(d, f)
            e = plan_json(args + ["--plan", path])
            for k in ("mesh", "zero_stage", "microbatch_size", "recompute", "schedule", "virtual_stages", "predicted",
                      "sharding", "memory"):
                if d[k] != e[k]:
                    fail("--plan of a dumped plan changed %s: %r -> %r" % (k, d[k], e[k]))
            print("ok   --plan reproduces the dumped plan of %s" % args[0])
        part = os.path.join(tmp, "part.json")
        with open(part, "w") as f:
            json.dump({"mesh": {"tp": 4}, "recompute": "full"}, f)
        e = plan_json(GPT3 + ["--plan", part])
        if e["mesh"]["tp"] != 4 or e["recompute"] != "full":
            fail("partial plan file not followed")
        print("ok   a partial plan file fixes tp 4 and full recompute")
        e = plan_json(GPT3 + ["--plan", part, "--tp", "8"])
        if e["mesh"]["tp"] != 8:
            fail("--tp does not override the plan file")
        print("ok   flags override the plan file")
        d = plan_json(GPT2 + ["--tp", "2"])
        d["sharding"][1]["ops"][1] = {"index": 1, "strategy": "row"}
        with open(part, "w") as f:
            json.dump(d, f)
        e = plan_json(GPT2 + ["--plan", part])
        if e["sharding"][1]["ops"][1]["strategy"] != "row":
            fail("a forced op strategy was not kept")
        print("ok   a plan file forces one op's strategy (%s of %s -> row)" % (e["sharding"][1]["ops"][1]["op"],
                                                                            e["sharding"][1]["segments"][0]))
        for content, msg in (({"mesh": {"tp": 0}}, "mesh.tp must be an integer from 1"),
                             ({"recompute": "most"}, "recompute must be one of none, selective, full"),
                             ({"mesh": {"tp": 2}, "colour": 1}, "unknown field 'colour'"),
                             ({"sharding": [{"segments": ["h.0"], "ops": [{"index": 1, "strategy": "diagonal"}]}],
                               "mesh": {"tp": 2}}, "strategy 'diagonal'"),
                             ({"sharding": [{"segments": ["h.99"], "ops": []}]}, "segment 'h.99'")):
            with open(part, "w") as f:
                json.dump(content, f)
            expect_error(GPT2 + ["--dump-plan", "--plan", part], msg)


TINY_3090 = ["models/gpt2-tiny.model", "--gpus", "1", "--gpu", "rtx3090"]


def saved_offload_plan(tmp, kind):
    """gpt2-tiny's --what-if plan for one RTX 3090 with --offload KIND, saved to a file
    in tmp: the choice is kept, and read back from the file; returns the file."""
    r = run(TINY_3090 + ["--offload", kind, "--what-if", "--dump-plan=json"])
    if json.loads(r.stdout)["offload"] != kind:
        fail("--offload %s was not kept" % kind)
    plan = os.path.join(tmp, "p.json")
    with open(plan, "w") as f:
        f.write(r.stdout)
    if plan_json(TINY_3090 + ["--what-if", "--plan", plan])["offload"] != kind:
        fail("a plan file's %s offload was not read back" % kind)
    return plan


def offload():
    """LLaMA-7B does not fit one A100-80GB with its AdamW state (16 bytes a parameter);
    with the optimizer state on the host (ZeRO-Offload) it does: the search weighs it
    and takes it, its memory table holds no optimizer state, its host need is printed,
    and the optimizer step pays for the transfers and the CPU AdamW. On 8 GPUs the
    state shards instead and no offload wins. Forcing --offload none on one GPU is
    refused with what does not fit, and a plan file keeps the choice. Optimizer offload
    of a plan is priced, not compiled: only --what-if weighs it, and without --what-if
    forcing it is refused; without --what-if, the whole state offloaded in fp32 fits with
    fused attention (as compiled) and does not with the scores materialized."""
    one = ["models/llama.model", "--gpus", "1", "--gpu", "a100-80g", "--what-if"]
    d = plan_json(one)
    if d["offload"] != "optimizer":
        fail("llama on one A100-80GB: offload %r, expected optimizer" % d["offload"])
    if d["memory"]["peak_bytes_per_device"] > 80 * 2**30:
        fail("the offloaded plan does not fit: %r" % d["memory"])
    opt = d["predicted"]["breakdown"]["optimizer_s"]
    params = d["parameters"]
    # gradients down and weights up (2 + 2 bytes a parameter) over 32 GB/s, and CPU AdamW
    # streaming 2 x 16 bytes a parameter at 70% of 409.6 GB/s (one GPU has the node's memory)
    want = params * 4 / 32e9 + params * 32 / (409.6e9 * 0.7)
    if abs(opt - want) > 0.01 * want:
        fail("optimizer step %.4g s, expected %.4g s" % (opt, want))
    text = run(one + ["--dump-plan"]).stdout
    if "offload: the optimizer state" not in text:
        fail("the text plan does not say it offloads:\n" + text[:600])
    eight = plan_json(["models/llama.model", "--gpus", "8", "--gpu", "a100-80g", "--what-if"])
    if eight["offload"] != "none":
        fail("llama on 8 A100-80GB: offload %r, expected none" % eight["offload"])
    expect_error(one + ["--offload", "none", "--dump-plan"], "no plan fits", "over by", "the training state alone")
    with tempfile.TemporaryDirectory() as tmp:
        expect_error(["models/gpt2-tiny.model", "--gpus", "1", "--gpu", "rtx3090", "--offload", "optimizer",
                      "--dump-plan"], "priced, not compiled yet", "--what-if")
        # sequences of 16K tokens: the materialized scores of one layer are 16 GiB
        expect_error(one[:-1] + ["--set", "ctx=16384", "--set", "seq=16384", "--attention", "materialized",
                                 "--dump-plan"], "no plan fits", "offloaded, it has", "--what-if also weighs")
        compiled = plan_json(one[:-1])
        if (compiled["offload"], compiled["attention"]) != ("state", "fused"):
            fail("llama on one A100-80GB as compiled: offload %r, attention %r, expected the state offloaded and "
                 "fused attention" % (compiled["offload"], compiled["attention"]))
        plan = saved_offload_plan(tmp, "optimizer")
        expect_error(TINY_3090 + ["--plan", plan, "-o", os.path.join(tmp, "x")], "priced, not compiled yet")
    print("ok   llama-7B on 1 A100-80GB offloads its optimizer (%.1f s of %.0f s a step), on 8 it does not" %
          (opt, d["predicted"]["step_time_s"]))


def determinism():
    a = run(GPT3 + ["--dump-plan=json"]).stdout
    b = run(GPT3 + ["--dump-plan=json"]).stdout
    if a != b:
        fail("two runs gave different JSON")
    c = run(GPT2 + ["--dump-plan=svg"]).stdout
    if c != run(GPT2 + ["--dump-plan=svg"]).stdout:
        fail("two runs gave different SVG")
    print("ok   two runs give identical JSON (%d bytes) and SVG" % len(a))


def compiled_programs(args, tmp):
    """Compiles args with -o, also writing the program (--emit-program, read by
    tests/plan/progtext.py): the plan printed on stderr, and each pipeline stage's
    fields with "codes" (the kernels' names), "memory" (its predicted peaks) and "runs"
    (what one training step executes, loops and calls expanded)."""
    r, prog = progtext.compile(COLOSSALC, args, tmp, check=False)
    if r.returncode != 0:
        fail("colossalc %s: exit %d\n%s" % (" ".join(args), r.returncode, r.stderr))
    if not os.access(os.path.join(tmp, "train"), os.X_OK):
        fail("no executable written")
    codes = [c["name"] for c in prog["codes"]]
    return r.stderr, [dict(st, codes=codes, memory=st["ints"]["memory"], runs=progtext.runs(prog, s))
                      for s, st in enumerate(prog["stages"])]


def compiled_program(args, tmp):
    """compiled_programs' stderr and its first program"""
    err, progs = compiled_programs(args, tmp)
    return err, progs[0]


def compile_plan():
    """--gpus N -o prints the plan it compiles, which is the plan --dump-plan shows for
    the same options, and compiles it (the program's mesh, ZeRO stage and micro-batches
    are the plan's); --plan FILE compiles a saved plan exactly; a model with no plan
    says why with the closest plans; --dump-after works for every pass."""
    tiny = ["models/gpt2-tiny.model", "--set", "layers=2", "--set", "seq=32", "--gpu", "cpu"]
    tiny4 = ["models/gpt2-tiny.model", "--set", "layers=4", "--set", "seq=32", "--gpu", "cpu"]
    with tempfile.TemporaryDirectory() as tmp:
        for extra in (["--gpus", "4"], ["--gpus", "8", "--dp", "2", "--tp", "2", "--pp", "2", "--microbatch-size", "1"]):
            d = plan_json(tiny + extra)
            err, prog = compiled_program(tiny + extra, tmp)
            m = d["mesh"]
            want = "dp %d x tp %d x pp %d (%d ranks), ZeRO-%d, %d micro-batch%s of %d, recompute %s" % (
                m["dp"], m["tp"], m["pp"], m["dp"] * m["tp"] * m["pp"], d["zero_stage"], d["microbatches"],
                "" if d["microbatches"] == 1 else "es", d["microbatch_size"], d["recompute"])
            if want not in err:
                fail("-o printed a plan other than --dump-plan's %r:\n%s" % (want, err))
            mesh = {k: prog[k] for k in ("dp", "tp", "pp")}
            if (mesh["dp"], mesh["tp"], mesh["pp"], prog["zero_stage"], prog["microbatches"]) != (
                    m["dp"], m["tp"], m["pp"], d["zero_stage"], d["microbatches"]):
                fail("the compiled program is not the plan: %r, zero %r, %r micro-batches" %
                     (mesh, prog["zero_stage"], prog["microbatches"]))
            if "priced in fp32 with attention fused" not in err or "wrote" not in err:
                fail("-o does not say what it compiled:\n" + err)
            if not any("flash_attention" in k for k in prog["codes"]):
                fail("the plan prices fused attention and the program has no fused attention kernel")
            print("ok   %s -o compiles the plan --dump-plan shows: %s" % (" ".join(extra), want))
        plan = os.path.join(tmp, "plan.json")
        with open(plan, "w") as f:
            f.write(run(tiny4 + ["--gpus", "8", "--tp", "2", "--pp", "2", "--dp", "2", "--microbatch-size", "1",
                                 "--schedule", "interleaved", "--dump-plan=json"]).stdout)
        saved = json.load(open(plan))
        err, prog = compiled_program(tiny4 + ["--gpus", "8", "--plan", plan], tmp)
        mesh = {k: prog[k] for k in ("dp", "tp", "pp")}
        if mesh != {"dp": 2, "tp": 2, "pp": 2} or prog["microbatches"] != saved["microbatches"]:
            fail("--plan FILE -o compiled %r with %r micro-batches" % (mesh, prog["microbatches"]))
        if "dp 2 x tp 2 x pp 2" not in err:
            fail("--plan FILE -o printed another plan:\n" + err)
        print("ok   --plan FILE -o compiles the saved plan (dp 2 x tp 2 x pp 2, interleaved)")
    codes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for layers in (2, 8):
            kern = os.path.join(tmp, "k.txt")
            run(["models/gpt2-tiny.model", "--set", "layers=%d" % layers, "--emit-kernels", kern])
            head = open(kern).readline().split()
            codes[layers] = (int(head[1]), int(head[4]))
    if codes[2][1] != codes[8][1] or codes[8][0] <= codes[2][0]:
        fail("kernels and their codes for 2 and 8 layers: %r" % codes)
    print("ok   gpt2-tiny: %d kernels of 2 layers and %d of 8 share the same %d codes" %
          (codes[2][0], codes[8][0], codes[8][1]))
    never = os.path.join(tempfile.gettempdir(), "colossalc-never")  # not written: no plan fits
    expect_error(["models/gpt3.model", "--gpus", "8", "--host-memory", "100G", "--nvme", "100G", "-o", never],
                 "no plan fits", "  1. ", "  2. ", "  3. ", "over by", "the training state alone", "616.0 GiB usable",
                 "100.0 GiB of NVMe")
    passes = ["partition", "decompose", "autodiff", "recompute", "lower", "zero", "compose", "offload", "lists",
              "share"]
    for extra in ([], ["--gpus", "4", "--tp", "2", "--pp", "2"]):
        for p in passes:
            out = run(tiny + extra + ["--dump-after=" + p]).stdout
            marker = "program " if passes.index(p) >= 4 else "%"
            if marker not in out:
                fail("--dump-after=%s %s printed no %r" % (p, " ".join(extra), marker))
    expect_error(tiny + ["--dump-after=parse"], "--dump-after takes partition")
    print("ok   --dump-after works after each of %s, one rank and tp 2 x pp 2" % ", ".join(passes))


def memory_compiled():
    """The memory a plan prices per device is what its compiled program needs (the
    programs' predicted_memory, the figure train reports beside the measured peak),
    within 5 %: f32 weights and gradients and 16-bit activations under mixed precision,
    ZeRO's pieces, a pipeline stage's slots (each micro-batch's stash and the activations
    it receives), the one working set they share, a layer's backward working set beside the
    stash of the layers before it, and ZeRO-3's gathered parameters (the one in use and the
    next). ZB-H1's stages hold a micro-batch until its weight gradients (W) run: the
    stash and the first gradient W keeps at B's start, what W reads at its end."""
    configs = [GPT2, GPT2 + ["--precision", "fp32"], GPT2 + ["--zero", "2"], GPT2 + ["--zero", "3"],
               GPT2 + ["--dp", "2", "--tp", "2", "--pp", "2", "--schedule", "interleaved"],
               GPT2 + ["--dp", "2", "--tp", "2", "--pp", "2", "--schedule", "1f1b"],
               GPT2 + ["--dp", "2", "--tp", "2", "--pp", "2", "--schedule", "zb-h1"],
               GPT2 + ["--dp", "1", "--tp", "8", "--pp", "1"],
               GPT2 + ["--dp", "1", "--tp", "1", "--pp", "8"],  # the search's schedule: zb-h1
               GPT2 + ["--dp", "1", "--tp", "1", "--pp", "8", "--schedule", "1f1b"],
               GPT2 + ["--dp", "2", "--tp", "1", "--pp", "4", "--recompute", "full", "--schedule", "zb-h1"],
               GPT2 + ["--dp", "2", "--tp", "1", "--pp", "4", "--recompute", "selective", "--schedule", "zb-h1"],
               GPT2 + ["--recompute", "full"],
               # DeepSpeed-Ulysses (the search's at 4,096 tokens): weights whole, all-to-alls
               ["models/gpt2.model", "--gpus", "4", "--dp", "1", "--tp", "4", "--pp", "1", "--set", "seq=4096",
                "--set", "ctx=4096", "--set", "batch=1"],
               ["models/gpt2.model", "--gpus", "8", "--gpu", "h100-sxm", "--precision", "fp8"],
               # grouped-query attention: LLaMA 3's 8 key/value heads on tp 8, Mistral's window on tp2 x pp4
               ["models/llama3.model", "--set", "layers=4", "--set", "batch=16", "--set", "seq=2048", "--gpus", "8",
                "--dp", "1", "--tp", "8", "--pp", "1"],
               ["models/mistral.model", "--set", "layers=4", "--set", "batch=8", "--set", "seq=8192", "--set",
                "window=1024", "--gpus", "8", "--dp", "1", "--tp", "2", "--pp", "4"],
               ["models/gpt2-tiny.model", "--gpu", "cpu", "--gpus", "4", "--dp", "1", "--tp", "2", "--pp", "2",
                "--set", "batch=8"]]
    # activations outweigh the training state: the backward's working set shows
    tiny = ["models/gpt2-tiny.model", "--gpu", "cpu", "--set", "d=256", "--set", "heads=4", "--set", "seq=128",
            "--set", "batch=16"]
    configs += [tiny + ["--gpus", "1", "--dp", "1"], tiny + ["--gpus", "2", "--dp", "2", "--tp", "1", "--pp", "1"],
                tiny + ["--gpus", "2", "--dp", "1", "--tp", "2", "--pp", "1"],
                tiny + ["--gpus", "2", "--dp", "2", "--tp", "1", "--pp", "1", "--zero", "3"],
                tiny + ["--gpus", "4", "--dp", "4", "--tp", "1", "--pp", "1", "--zero", "3"],
                tiny + ["--gpus", "1", "--dp", "1", "--recompute", "full"]]
    with tempfile.TemporaryDirectory() as tmp:
        for args in configs:
            priced = plan_json(args)["memory"]["peak_bytes_per_device"]
            progs = compiled_programs(args, tmp)[1]
            compiled = max(max(p["memory"]) for p in progs)
            # an interleaved stage runs one pass of its chunks at a time: their working set
            # is in the region its slots share, not in each slot
            if "interleaved" in args:
                for s, p in enumerate(progs):
                    if p["slots"] > 1 and p["work_shared"] <= 0:
                        fail("%s: stage %d holds %d slots and no shared working set" %
                             (" ".join(args), s, p["slots"]))
            ratio = compiled / priced
            if not 1 / 1.05 <= ratio <= 1.05:
                fail("%s: the plan prices %.1f MiB per device, the compiled program needs %.1f MiB (ratio %.3f)" %
                     (" ".join(args), priced / 2**20, compiled / 2**20, ratio))
            print("ok   %-66s priced %8.1f MiB, compiled %8.1f MiB (%.3f)" %
                  (" ".join(args[1:]), priced / 2**20, compiled / 2**20, ratio))


def collectives_compiled():
    """A tensor-parallel plan's compiled step runs the collectives the plan prices: a
    sharded activation gathered before a split contraction (sequence parallelism)
    gets its gradient back by one reduce-scatter, not an all-reduce and a split of its
    result; and the backward pass gathers it again from its shard rather than keeping
    it whole from the forward pass."""
    configs = [["models/gpt2-tiny.model", "--gpu", "cpu", "--gpus", "2", "--dp", "1", "--tp", "2", "--pp", "1"],
               ["models/gpt2-tiny.model", "--gpu", "cpu", "--gpus", "8", "--dp", "2", "--tp", "2", "--pp", "2",
                "--set", "batch=8"],
               # 8 micro-batches of a tensor axis used as batch splitting: the replicated
               # weights' gradients summed once, the tied embedding's in each micro-batch
               ["models/gpt2-tiny.model", "--gpu", "cpu", "--gpus", "2", "--dp", "1", "--tp", "2", "--pp", "1",
                "--microbatch-size", "2", "--set", "batch=16"]]
    with tempfile.TemporaryDirectory() as tmp:
        for args in configs:
            d = plan_json(args)
            priced = sum(c["count_per_step"] for c in d["collectives"]
                         if c["axis"] == "tp" and c["kind"] == "reduce-scatter")
            progs = compiled_programs(args, tmp)[1]
            # the plan lists the collectives of a step of its slowest stage: what that
            # stage's program runs in a step (loops and calls expanded)
            crit = progs[d["predicted"]["critical_stage"]]
            compiled = sum(i["op"] == "comm" and i["kind"] == "reduce_scatter" for i in crit["runs"])
            # the gradients of weights replicated over the tensor-parallel ranks (partial
            # sums there) are all-reduced over tp once a step, after the micro-batches,
            # those read by other ops too in each micro-batch's backward (f32 here)

            def ar_bytes(seq):
                return sum(4 * i["outer"] * i["n"] * i["inner"] for i in seq
                           if i["op"] == "comm" and i["kind"] == "all_reduce" and i["group"] == "tp")
            ar_priced = sum(c["bytes"] * c["count_per_step"] for c in d["collectives"]
                            if c["axis"] == "tp" and c["kind"] == "all-reduce")
            ar_compiled = ar_bytes(crit["runs"])
            if not ar_compiled or abs(ar_priced - ar_compiled) > 1e-6 * ar_compiled:
                fail("%s: the plan lists %d bytes of tensor-parallel all-reduce a step, the program runs %d" %
                     (" ".join(args), ar_priced, ar_compiled))
            print("ok   %-66s %d bytes of tp all-reduce a step, priced and compiled" % (" ".join(args[1:]),
                                                                                     ar_compiled))
            # the IR after the recompute pass, chunk by chunk (ids are a chunk's own)
            chunks = run(args + ["--dump-after=recompute"]).stdout.split("\n# chunk ")
            split_sums = 0
            for ir in chunks:
                ops = dict(re.findall(r"^(%\d+) = (\w+)", ir, re.M))
                split_sums += sum(ops[x] == "all_reduce" for x in re.findall(r"^%\d+ = split (%\d+)", ir, re.M))
            if split_sums or compiled != priced:
                fail("%s: the plan prices %d reduce-scatters a step; the program runs %d, and %d splits of an "
                     "all-reduce's result" % (" ".join(args), priced, compiled, split_sums))
            print("ok   %-66s %d reduce-scatters a step, priced and compiled" % (" ".join(args[1:]), compiled))
            if len(chunks) > 1:
                continue
            # one program: the nodes after the loss (the backward pass) read no gathered
            # value of a layer's forward pass, and gather such values again from the
            # forward pass's shards
            ir = chunks[0]
            loss = int(re.search(r"^train %(\d+)", ir, re.M).group(1))
            ops = {int(i): (op, [int(x) for x in re.findall(r"%(\d+)", ins)], " layer=" in rest)
                   for i, op, ins, rest in re.findall(r"^%(\d+) = (\w+) ([^:]*)(.*)", ir, re.M)}

            def gathered(i):
                op, ins, _ = ops[i]
                return op == "all_gather" or (op in ("tp_copy", "reshape") and gathered(ins[0]))
            kept = [x for i, (_, ins, _) in ops.items() if i > loss for x in ins
                    if x < loss and ops[x][2] and gathered(x)]
            regathered = sum(i > loss and op == "all_gather" and ins[0] < loss for i, (op, ins, _) in ops.items())
            if kept or not regathered:
                fail("%s: the backward pass reads %d gathered values kept from the forward pass (%s) and gathers "
                     "%d again" % (" ".join(args), len(kept), kept[:4], regathered))
            print("ok   %-66s the backward pass gathers %d activations again" % (" ".join(args[1:]), regathered))


def calibrate():
    """colossalc --calibrate measures this machine (GEMMs, memory bandwidth, kernel
    launches, all-reduce among MPI ranks it starts itself, copies, a file) into a
    cluster file that --cluster reads: a CPU whose figures the ranks on it share, so a
    rank of two has half the peak, memory bandwidth and memory of one."""
    expect_error(["--calibrate"], "--calibrate needs -o FILE")
    expect_error(["models/gpt2-tiny.model", "--calibrate", "-o", "x.json"], "it takes no model file")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "machine.json")
        t0 = time.time()
        r = run(["--calibrate", "-o", path])
        took = time.time() - t0
        if took > 300:
            fail("--calibrate took %.0f s, more than 5 minutes" % took)
        with open(path) as f:
            c = json.load(f)
        dev = c["device"]
        if not (dev["shares_host"] and dev["fp32_only"] and dev["peak_fp32_tflops"] > 0 and
                dev["memory_bandwidth_gbs"] > 0 and dev["gemm_half_dim"] > 0 and c["intra_node"]["bandwidth_gbs"] > 0
                and c["host"]["nvme_bandwidth_gbs"] > 0):
            fail("a calibrated figure is missing or not positive: %s" % json.dumps(c))
        for what in ("gemm ", "streaming kernel", "all-reduce fitted", "file in"):
            if what not in r.stderr:
                fail("--calibrate does not report %r:\n%s" % (what, r.stderr))
        # the kinds programs issue, each by size among the ranks measured
        coll = c["intra_node"]["collectives"]
        kinds = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send/recv", "reduce", "broadcast")
        if coll["ranks"] < 2 or sorted(k for k in coll if k != "ranks") != sorted(kinds):
            fail("the calibrated collectives are not the kinds programs issue: %r" % coll)
        for k in kinds:
            pts = coll[k]
            if not (len(pts) >= 8 and all(b1 > b0 and t1 >= t0 > 0 for (b0, t0), (b1, t1) in zip(pts, pts[1:]))):
                fail("%s: not a curve of increasing sizes and times: %r" % (k, pts))
            if re.search(r"^  %s +over %d ranks:" % (re.escape(k), coll["ranks"]), r.stderr, re.M) is None:
                fail("--calibrate does not report its %s times:\n%s" % (k, r.stderr))
        one = plan_json(["models/gpt2-tiny.model", "--cluster", path, "--gpus", "1"])
        two = plan_json(["models/gpt2-tiny.model", "--cluster", path, "--gpus", "2"])
        p1, p2 = one["cluster"]["peak_tflops"], two["cluster"]["peak_tflops"]
        if abs(p1 - dev["peak_fp32_tflops"]) > 1e-3 * p1 or abs(p2 - p1 / 2) > 1e-3 * p1:
            fail("peaks per rank: one rank %g, two %g TFLOP/s, of the machine's %g" % (p1, p2, dev["peak_fp32_tflops"]))
        if two["cluster"]["gpus_per_node"] != 2:
            fail("two ranks of a calibrated machine are on one node, got %r" % two["cluster"])
        # the plan prices a two-rank ZeRO-1 reduce by the measured curve, not the link's ring
        z = plan_json(["models/gpt2-tiny.model", "--cluster", path, "--gpus", "2", "--dp", "2", "--tp", "1", "--pp",
                       "1", "--zero", "1"])
        red = [x for x in z["collectives"] if x["kind"] == "reduce"]
        pts = coll["reduce"]
        i = next((i for i in range(1, len(pts)) if pts[i][0] >= red[0]["bytes"]), len(pts) - 1)
        (b0, t0), (b1, t1) = pts[i - 1], pts[i]
        want = 1e-6 * max(pts[0][1], t0 + (t1 - t0) * (red[0]["bytes"] - b0) / (b1 - b0))
        if len(red) != 1 or abs(red[0]["time_per_step_s"] - want) > 1e-3 * want:
            fail("ZeRO-1's reduce of %r priced off its measured curve %r" % (red, pts))
    print("ok   --calibrate in %.0f s: %.0f GFLOP/s, %.1f GB/s, all-reduce %.1f GB/s, reduce of %.1f MB %.2f ms; a rank of "
          "two has half" % (took, dev["peak_fp32_tflops"] * 1e3, dev["memory_bandwidth_gbs"],
                            c["intra_node"]["bandwidth_gbs"], red[0]["bytes"] / 1e6, red[0]["time_per_step_s"] * 1e3))


def time_reported():
    """train holds the plan's step time to the run: a program compiled with a plan logs
    it in every record ("predicted_ms", the compiler's "s a step") and prints it in every
    step line beside the measured time; 20 steps in a row more than 25% apart give one
    warning naming the cluster planned for (an A100 plan run on this CPU: far apart). A
    program compiled without a plan logs null and prints nothing of the kind."""
    mk = os.path.join(os.path.dirname(COLOSSALC), "tools", "colossalc-mktokens")
    tiny = ["models/gpt2-tiny.model", "--set", "layers=2", "--set", "seq=32"]
    step_time = re.compile(r"^step [0-9]+/[0-9]+ .*\| [0-9.]+ ms \(plan ([0-9.e+-]+) ms\) \|")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "g.bin")
        subprocess.run([mk, "data/genesis.txt", data], check=True, capture_output=True)
        r = run(tiny + ["--gpus", "1", "--gpu", "a100-80g", "-o", os.path.join(tmp, "planned")])
        m = re.search(r": ([0-9.e+-]+) s a step", r.stderr)
        if not m:
            fail("no step time in the compiler's plan:\n" + r.stderr)
        want = 1e3 * float(m.group(1))
        for name, steps in (("planned", 22), ("plain", 3)):
            if name == "plain":
                run(tiny + ["-o", os.path.join(tmp, name)])
            log = os.path.join(tmp, name + ".jsonl")
            t = subprocess.run([os.path.join(tmp, name), "--data", data, "--steps", str(steps), "--threads", "1",
                                "--log", log], capture_output=True, text=True)
            if t.returncode != 0:
                fail("%s: exit %d\n%s" % (name, t.returncode, t.stderr))
            recs = [json.loads(line) for line in open(log) if '"ms"' in line]
            lines = [line for line in t.stdout.splitlines() if line.startswith("step ")]
            warns = [line for line in t.stderr.splitlines() if "steps in a row" in line]
            if len(recs) != steps or len(lines) != steps:
                fail("%s: %d records and %d step lines for %d steps" % (name, len(recs), len(lines), steps))
            if name == "plain":
                if any(rec["predicted_ms"] is not None for rec in recs) or any(step_time.match(x) for x in lines) or warns:
                    fail("a program without a plan reports a predicted time:\n" + "\n".join(lines + warns))
                continue
            for rec in recs:
                if rec["predicted_ms"] is None or abs(rec["predicted_ms"] / want - 1) > 1e-3:
                    fail("step %d logs predicted_ms %s, the plan %.4g" % (rec["step"], rec["predicted_ms"], want))
            for line in lines:
                s = step_time.match(line)
                if not s or abs(float(s.group(1)) / want - 1) > 5e-3:
                    fail("a step line without the plan's %.3g ms: %s" % (want, line))
            if len(warns) != 1 or "20 steps in a row" not in warns[0] or "a100-80g" not in warns[0]:
                fail("want one warning after 20 steps far from the plan, got:\n" + t.stderr)
            print("ok   %d steps log and print the plan's %.3g ms; one warning: %s" % (steps, want, warns[0][:150]))
    print("ok   a program without a plan logs predicted_ms null and prints no plan time")


def offload_state():
    """GPT-3 on 8 A100-80GB: its 16 bytes a parameter (2.6 TB) do not fit the devices
    (616 GiB); the search finds a ZeRO-3 plan whose shards live on the node's host memory
    (2 TB, the DGX A100's) and, beyond it, NVMe, the devices holding a layer at a time:
    without --what-if a data-parallel one in bf16 (what code generation compiles; the
    default on GPUs), with it any mesh. The state's homes add up to the whole state, the host link
    carries every micro-batch's weights up and gradients down, the limits move the state
    (--host-memory) or leave no plan (--nvme), and the choice survives a plan file and
    compiles."""
    gpt3 = ["models/gpt3.model", "--gpus", "8", "--gpu", "a100-80g"]
    c = plan_json(gpt3)
    if (c["offload"], c["zero_stage"], c["mesh"]["tp"], c["mesh"]["pp"], c["precision"]) != ("state", 3, 1, 1, "bf16-mixed"):
        fail("gpt3 on 8 GPUs, compilable: offload %r ZeRO-%r tp %r pp %r %r, expected state, 3, 1, 1, bf16-mixed" %
             (c["offload"], c["zero_stage"], c["mesh"]["tp"], c["mesh"]["pp"], c["precision"]))
    d = plan_json(gpt3 + ["--what-if"])
    if d["offload"] != "state" or d["zero_stage"] != 3:
        fail("gpt3 on 8 GPUs: offload %r ZeRO-%r, expected state with ZeRO-3" % (d["offload"], d["zero_stage"]))
    if d["memory"]["peak_bytes_per_device"] > 77 * 2**30:
        fail("the offloaded plan does not fit the device: %r" % d["memory"])
    off = d["predicted"]["offload"]
    state = d["parameters"] * 16
    homes = off["host_bytes_per_node"] + off["nvme_bytes_per_node"]
    if not (0.99 * state <= homes <= 1.05 * state):
        fail("host %.4g + NVMe %.4g bytes, expected the state's %.4g" % (off["host_bytes_per_node"],
                                                                     off["nvme_bytes_per_node"], state))
    if abs(off["host_bytes_per_node"] - 2e12) > 1e6 or off["nvme_bytes_per_node"] <= 0:
        fail("the host (2 TB) should fill before NVMe: %r" % off)
    mesh = d["mesh"]
    shard = homes / 16 / (mesh["dp"] * mesh["tp"])  # parameters a device owns
    want = d["microbatches"] * shard * (2 * 2 + 2)  # bf16 weights up twice, gradients down
    if abs(off["host_link_bytes_per_device"] - want) > 0.05 * want:
        fail("host link %.4g bytes a step, expected about %.4g" % (off["host_link_bytes_per_device"], want))
    text = run(gpt3 + ["--what-if", "--dump-plan"]).stdout
    if "lives on its node" not in text or "NVMe" not in text or "exposed host transfers" not in text:
        fail("the text plan does not show where the state lives:\n" + text[:800])
    big = plan_json(gpt3 + ["--what-if", "--host-memory", "4T"])["predicted"]["offload"]
    if big["nvme_bytes_per_node"] != 0:
        fail("with 4 TiB of host memory nothing should go to NVMe: %r" % big)
    expect_error(gpt3 + ["--what-if", "--dump-plan", "--nvme", "100G"], "no plan fits", "100.0 GiB of NVMe")
    with tempfile.TemporaryDirectory() as tmp:
        plan = saved_offload_plan(tmp, "state")
        r = run(TINY_3090 + ["--plan", plan, "-o", os.path.join(tmp, "x")])
        if r.returncode != 0 or "state on the host" not in r.stderr or "wrote" not in r.stderr:
            fail("the saved state-offload plan did not compile:\n" + r.stderr)
    print("ok   gpt3 on 8 A100-80GB (--what-if): ZeRO-3 state on the host (%.0f GiB) and NVMe (%.0f GiB) a node, "
          "%.0f s a step" % (off["host_bytes_per_node"] / 2**30, off["nvme_bytes_per_node"] / 2**30,
                             d["predicted"]["step_time_s"]))


def lamb():
    """LAMB (--optimizer lamb): Adam's two moments, so the state AdamW's; its update
    streams 3 weights, 1 gradient and 4 moments a parameter against AdamW's 2 of each
    (plan/search.c), so the plan's optimizer step is 1.5 times AdamW's on the same plan;
    where AdamW's state must be offloaded, LAMB's is too, on the CPU (its three passes over
    the chunks: tests/multirank's offload_lamb tests run them)."""
    summ = {o: run(["models/gpt2.model", "--optimizer", o, "--summary"]).stdout for o in ("adamw", "lamb")}
    line = {o: [l for l in summ[o].splitlines() if l.startswith("training state")] for o in summ}
    if not line["lamb"] or "LAMB moments" not in line["lamb"][0]:
        fail("--summary with lamb does not name LAMB's moments:\n" + summ["lamb"][:600])
    if line["lamb"][0].split(":")[1] != line["adamw"][0].split(":")[1]:
        fail("LAMB's training state %r differs from AdamW's %r" % (line["lamb"][0], line["adamw"][0]))
    forced_plan = GPT2 + ["--dp", "8", "--tp", "1", "--pp", "1", "--zero", "1"]
    opt = {o: plan_json(forced_plan + ["--optimizer", o])["predicted"]["breakdown"]["optimizer_s"]
           for o in ("adamw", "lamb")}
    if abs(opt["lamb"] / opt["adamw"] - 1.5) > 1e-6:
        fail("LAMB's optimizer step %.6g s, AdamW's %.6g s: expected 1.5 times" % (opt["lamb"], opt["adamw"]))
    with tempfile.TemporaryDirectory() as tmp:
        small = os.path.join(tmp, "small.json")  # 16 MiB devices: AdamW's state must be offloaded
        with open(small, "w") as f:
            json.dump({"base": "cpu", "gpus": 2, "gpus_per_node": 2,
                       "device": {"memory_gib": 0.015625, "reserved_gib": 0}}, f)
        cfg = ["models/gpt2-tiny.model", "--set", "seq=16", "--set", "d=256", "--set", "batch=2", "--cluster", small]
        for o, name in (("adamw", "AdamW"), ("lamb", "LAMB")):
            text = run(cfg + ["--optimizer", o, "--dump-plan"]).stdout
            if "lives on its node" not in text or name + " on the CPU" not in text:
                fail("%s on 16 MiB devices should offload its state, %s on the CPU:\n%s" % (o, name, text[:900]))
    print("ok   lamb: AdamW's state, optimizer step %.3g s against AdamW's %.3g s, offloaded where AdamW's is" %
          (opt["lamb"], opt["adamw"]))


def zb_h1():
    """--schedule zb-h1 (plan/schedule.c): on the same pipeline its bubble is smaller than
    1F1B's (each stage's cool-down filled with its weight-gradient passes, W, half the
    backward's compute as priced) and its memory no less (stage s holds min(pp, m)
    micro-batches, each until its W); the JSON and a plan file carry the schedule, --plan
    compiles it back, the SVG timeline draws B and W, and without a pipeline it is refused
    in one line. The search picks it where it is the fastest that fits, and 1F1B where
    only 1F1B's memory fits, naming the other schedule among the runners-up."""
    mesh = GPT2 + ["--dp", "2", "--tp", "1", "--pp", "4"]
    plans = {s: plan_json(mesh + ["--schedule", s]) for s in ("1f1b", "zb-h1")}
    searched = plan_json(mesh)
    if searched["schedule"] != "zb-h1":
        fail("the search chose %r on pp 4 with room to spare, not zb-h1" % searched["schedule"])
    if not any(r["schedule"] == "1f1b" and "other schedule" in r["why"] for r in searched["runners_up"]):
        fail("no 1f1b runner-up on the same mesh: %s" % [r["why"] for r in searched["runners_up"]])
    bub = {s: plans[s]["predicted"]["breakdown"]["bubble_s"] for s in plans}
    step = {s: plans[s]["predicted"]["step_time_s"] for s in plans}
    peak = {s: plans[s]["memory"]["peak_bytes_per_device"] for s in plans}
    if plans["zb-h1"]["schedule"] != "zb-h1":
        fail("the plan's schedule is %r, not zb-h1" % plans["zb-h1"]["schedule"])
    if not 0 < bub["zb-h1"] < bub["1f1b"] or not step["zb-h1"] < step["1f1b"]:
        fail("zb-h1's bubble %.4g s (step %.4g s) should be below 1f1b's %.4g s (step %.4g s)" %
             (bub["zb-h1"], step["zb-h1"], bub["1f1b"], step["1f1b"]))
    if peak["zb-h1"] < peak["1f1b"]:
        fail("zb-h1 priced %.1f MiB, below 1f1b's %.1f MiB" % (peak["zb-h1"] / 2**20, peak["1f1b"] / 2**20))
    with tempfile.TemporaryDirectory() as tmp:
        # devices with room for 1F1B's plan and not for any of ZB-H1's on this mesh
        gib = (peak["1f1b"] * 1.1) / 2**30
        small = os.path.join(tmp, "small.json")
        with open(small, "w") as f:
            json.dump({"name": "small A100s", "base": "a100-80g", "device": {"memory_gib": gib, "reserved_gib": 0}}, f)
        tight = plan_json(["models/gpt2.model", "--cluster", small, "--gpus", "8", "--dp", "2", "--tp", "1", "--pp", "4"])
        if tight["schedule"] == "zb-h1":
            fail("in %.2f GiB the search chose zb-h1 (%.1f MiB)" % (gib, tight["memory"]["peak_bytes_per_device"] / 2**20))
        why = [r["why"] for r in tight["runners_up"] if r["schedule"] == "zb-h1" and "other schedule" in r["why"]]
        if not why or "does not fit" not in why[0]:
            fail("in %.2f GiB no zb-h1 runner-up that does not fit: %s" % (gib, [r["why"] for r in tight["runners_up"]]))
        path = os.path.join(tmp, "zb.json")
        run(mesh + ["--schedule", "zb-h1", "--dump-plan=json", "--plan-out", path])
        again = plan_json(["models/gpt2.model", "--gpus", "8", "--plan", path])
        if again["schedule"] != "zb-h1" or again["mesh"]["pp"] != 4:
            fail("--plan of a zb-h1 plan file planned schedule %r on pp %d" % (again["schedule"], again["mesh"]["pp"]))
    svg = run(mesh + ["--schedule", "zb-h1", "--dump-plan=svg"]).stdout
    if "weight gradients (W)" not in svg or "input gradients (B)" not in svg:
        fail("the zb-h1 timeline does not draw B and W passes")
    expect_error(GPT2 + ["--pp", "1", "--schedule", "zb-h1", "--dump-plan"], "the zb-h1 schedule needs a pipeline")
    print("ok   zb-h1 on pp 4: bubble %.3g s against 1f1b's %.3g s, step %.3g s against %.3g s, %.0f MiB against %.0f" %
          (bub["zb-h1"], bub["1f1b"], step["zb-h1"], step["1f1b"], peak["zb-h1"] / 2**20, peak["1f1b"] / 2**20))
    print("ok   the search picks zb-h1 with room, %s in %.2f GiB (%s)" % (tight["schedule"], gib, why[0]))


def ulysses():
    """S(i) -> S(j) is one all-to-all (passes/partition.c, exchange), priced as compiled:
    the search takes DeepSpeed-Ulysses's sharding for GPT-2 at 8,192 tokens on a tensor
    axis of 4 (the linear layers by the sequence, attention by heads), faster than
    Megatron's forced; and a compiled Ulysses plan runs the all-to-alls the plan lists,
    each of the tensor's part on a rank."""
    mesh = ["models/gpt2.model", "--gpus", "4", "--dp", "1", "--tp", "4", "--pp", "1", "--set", "seq=8192", "--set",
            "ctx=8192", "--set", "batch=1"]
    with tempfile.TemporaryDirectory() as tmp:
        with open("tests/multirank/megatron-tiny.plan.json") as f:
            meg = json.load(f)
        meg["sharding"][0]["segments"] = ["h.%d" % i for i in range(12)]
        path = os.path.join(tmp, "megatron.json")
        with open(path, "w") as f:
            json.dump(meg, f)
        plans = {"searched": plan_json(mesh), "megatron": plan_json(mesh + ["--plan", path])}
    a2a = {k: sum(c["count_per_step"] for c in d["collectives"] if c["kind"] == "all-to-all")
           for k, d in plans.items()}
    step = {k: d["predicted"]["step_time_s"] for k, d in plans.items()}
    if a2a["searched"] < 2 * 12 or not step["searched"] < step["megatron"]:
        fail("at 8,192 tokens the search's plan runs %d all-to-alls a step in %.4g s, Megatron's %.4g s" %
             (a2a["searched"], step["searched"], step["megatron"]))
    print("ok   gpt2 at 8192 tokens on tp 4: %d all-to-alls a step, %.4g s against Megatron's %.4g s" %
          (a2a["searched"], step["searched"], step["megatron"]))
    tiny = ["models/gpt2-tiny.model", "--set", "layers=4", "--set", "seq=32", "--set", "batch=4", "--gpu", "cpu",
            "--gpus", "2", "--dp", "1", "--tp", "2", "--pp", "1", "--microbatch-size", "1", "--precision", "fp32",
            "--plan", "tests/multirank/ulysses-tiny.plan.json"]
    d = plan_json(tiny)
    priced = sorted((c["bytes"], c["count_per_step"]) for c in d["collectives"] if c["kind"] == "all-to-all")
    with tempfile.TemporaryDirectory() as tmp:
        runs = compiled_programs(tiny, tmp)[1][0]["runs"]
    t = d["mesh"]["tp"]  # a rank exchanges its part, 1/t of the tensor the plan counts
    sizes = [4 * i["outer"] * i["n"] * i["inner"] * t for i in runs if i["op"] == "comm" and i["kind"] == "all_to_all"]
    compiled = sorted((b, sizes.count(b)) for b in set(sizes))
    if not priced or priced != compiled:
        fail("the Ulysses plan lists all-to-alls (bytes, count a step) %s, the program runs %s" % (priced, compiled))
    print("ok   the Ulysses plan on tp 2: all-to-alls (bytes, count a step) %s, priced and compiled" % priced)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    COLOSSALC = sys.argv[2]
    {"acceptance": acceptance, "text_svg": text_svg, "forced": forced, "infeasible": infeasible,
     "cluster_files": cluster_files, "from_file": plan_file, "determinism": determinism,
     "offload": offload, "offload_state": offload_state, "compile": compile_plan,
     "memory_compiled": memory_compiled, "collectives_compiled": collectives_compiled,
     "time_reported": time_reported, "calibrate": calibrate, "lamb": lamb, "zb_h1": zb_h1,
     "ulysses": ulysses}[sys.argv[1]]()
    print("ok")
