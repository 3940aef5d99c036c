"""The program colossalc compiles, read back from its printed form (`--emit-program
FILE`, program/print.c: every record of every section, each field by name), and the
instructions a list runs, its loops and calls expanded.

    prog = progtext.compile(colossalc, args, tmpdir)     # or progtext.read(path)
    prog["stages"][s]                                    # a stage's fields, params, ...
    progtext.runs(prog, s, "train")                      # what one step executes
"""
import os
import re
import subprocess

FIELD = re.compile(r'(\w+)=("[^"]*"|\[[^\]]*\]|[^\s;]+)')
LISTS = ("train", "eval", "forward", "gather", "release")  # a stage's list=[...] (ProgListKind)


def value(text):
    if text.startswith("["):
        return [value(v.strip()) for v in text[1:-1].split(",") if v.strip()]
    if text.startswith('"'):
        return text[1:-1]
    if text == "-":
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def fields(text):
    return {k: value(v) for k, v in FIELD.findall(text)}


def read(path):
    """{"stages": [stage, ...], "model": stage, "codes", "kernels", "lists"}: each stage
    its fields with "params", "inputs", "chunks" and "ints"; each list its fields and
    "instrs" (each {"op": name, field: value}); each kernel {"code", "name", "args"}."""
    prog = {"stages": [], "codes": [], "kernels": [], "lists": []}
    rec = None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            head, _, rest = line.strip().partition(":")
            if line.startswith("program "):
                prog["header"] = line
            elif line.startswith(("model:", "stage ")):
                rec = dict(fields(rest), params=[], inputs=[], chunks=[], ints={})
                if line.startswith("model:"):
                    prog["model"] = rec
                else:
                    prog["stages"].append(rec)
            elif line.startswith("  ints:"):
                rec["ints"] = fields(rest)
            elif line.startswith(("  param ", "  input ", "  chunk ")):
                x = fields(rest)
                if "ndim" in x:
                    x["shape"] = x["shape"][:x["ndim"]]  # shape[8], its first ndim used
                rec[head.split()[0] + "s"].append(x)
            elif line.startswith("code "):
                prog["codes"].append(fields(rest))
            elif line.startswith("kernel "):
                m = re.match(r"kernel \d+: code (\d+) \(([^)]*)\), args(.*)", line)
                args = [fields(a) for a in m.group(3).split(";") if a.strip()]
                prog["kernels"].append({"code": int(m.group(1)), "name": m.group(2), "args": args})
            elif line.startswith("list "):
                rec = dict(fields(rest), instrs=[])
                prog["lists"].append(rec)
            elif re.match(r"  \d+ \w", line):
                words = line.split(None, 2)
                rec["instrs"].append(dict(fields(words[2] if len(words) > 2 else ""), op=words[1]))
    return prog


def compile(cc, args, tmp, check=True, out=True):
    """Compiles args (to tmp/train where out), writing the program; (the run, the
    program)."""
    path = os.path.join(tmp, "program.txt")
    exe = ["-o", os.path.join(tmp, "train")] if out else []
    r = subprocess.run([cc] + args + exe + ["--emit-program", path], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit("colossalc %s failed:\n%s" % (" ".join(args), r.stderr))
    return r, read(path) if r.returncode == 0 else None


def stage_list(prog, s, kind):
    """A stage's list of kind (LISTS) as its instructions, or None."""
    at = prog["stages"][s]["list"][LISTS.index(kind)]
    return None if at < 0 else prog["lists"][at]["instrs"]


def expand(prog, instrs, last=True):
    """The instructions a list executes, in order: loops repeated, calls replaced by
    their lists; an instruction marked last runs only where last holds: at the top, and
    in a final loop's last iteration (runtime/executor.c, run_range)."""
    out, i = [], 0
    while i < len(instrs):
        x = instrs[i]
        if x["op"] == "loop":
            body = instrs[i + 1:i + 1 + x["body"]]
            for it in range(x["count"]):
                out += expand(prog, body, last and bool(x["final"]) and it == x["count"] - 1)
            i += 1 + x["body"]
            continue
        if x.get("last") and not last:
            pass
        elif x["op"] == "call":
            out += expand(prog, prog["lists"][x["list"]]["instrs"], last)
        else:
            out.append(x)
        i += 1
    return out


def runs(prog, s, kind="train"):
    """What stage s executes in one run of its list kind."""
    return expand(prog, stage_list(prog, s, kind))


def phases(prog, s):
    """The train list of stage s cut where the step's parts meet: "step" (the
    micro-batches: the lists they call, each once: an unscheduled step's list, or the
    schedule and its chunks' lists, without the calls), "sync" (the collectives after the micro-batches),
    "gradnorm" (what follows, to the norm), "norm" (the
    instruction) and "update" (after it)."""
    train = stage_list(prog, s, "train")
    norm = next(i for i, x in enumerate(train) if x["op"] == "norm")
    end = i = 0  # the end of the micro-batches: their loops, calls, inputs, losses, sends
    while i < norm:
        x = train[i]
        if x["op"] in ("loop", "call", "loss", "send", "recv", "slot", "input"):
            end = i + 1 + (x["body"] if x["op"] == "loop" else 0)
        i += 1 + (x["body"] if x["op"] == "loop" else 0)
    gn = end
    while train[gn]["op"] == "comm":
        gn += 1
    called = []  # the lists the micro-batches call, each once, in the order first called

    def visit(instrs):
        for x in instrs:
            if x["op"] == "call" and x["list"] not in called:
                called.append(x["list"])
                visit(prog["lists"][x["list"]]["instrs"])
    visit(train[:end])
    step = [y for c in called for y in prog["lists"][c]["instrs"] if y["op"] != "call"]
    return {"step": step, "sync": train[end:gn], "gradnorm": train[gn:norm], "norm": train[norm], "update": train[norm + 1:]}
