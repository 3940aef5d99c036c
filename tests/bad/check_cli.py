#!/usr/bin/python3
"""Command-line mistakes: each fails with exit status 1 and one line on standard error
that says what is wrong (no usage dump, no crash), before any compile work.

    check_cli.py COLOSSALC   (run from the repository root)"""
import os
import subprocess
import sys
import tempfile

MODEL = "models/gpt2-tiny.model"


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        a_file = os.path.join(tmp, "plain")
        open(a_file, "w").close()
        cases = [
            ([MODEL, "--bogus"], "unknown option '--bogus'"),
            ([MODEL, "-x"], "unknown option '-x'"),
            ([MODEL, "--gpus"], "--gpus needs a value"),
            ([], "no model file given"),
            ([MODEL, MODEL], "more than one model file given"),
            ([MODEL, "--gpus", "0"], "--gpus takes a positive integer"),
            ([MODEL, "-o", os.path.join(tmp, "missing", "train")], "cannot write in " + os.path.join(tmp, "missing")),
            ([MODEL, "-o", tmp], "is a folder"),
            ([MODEL, "-o", os.path.join(a_file, "train")], "is not a folder"),
        ]
        for args, want in cases:
            r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=60)
            lines = r.stderr.strip().splitlines()
            if r.returncode != 1 or len(lines) != 1 or want not in lines[0] or not lines[0].startswith("colossalc:"):
                sys.exit("FAIL colossalc %s: exit %d, stderr:\n%s\n(wanted one line with %r)" %
                         (" ".join(args), r.returncode, r.stderr, want))
            print("ok   colossalc %-40s %s" % (" ".join(args)[:40], lines[0]))
    print("ok")


if __name__ == "__main__":
    main()
