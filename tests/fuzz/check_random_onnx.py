#!/usr/bin/python3
"""Runs colossalc on random ONNX graphs (gen_onnx.py writes them) and checks that each
one imports or is refused cleanly: exit status 0 or 1 (not a signal, not a sanitizer's
status), and on 1 exactly one line on stderr, naming the file. A file that fails is kept
under WORK for replay.

    check_random_onnx.py COLOSSALC WORK COUNT SEED"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_onnx  # noqa: E402


def main():
    cc, work, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    shutil.rmtree(work, ignore_errors=True)
    gen_onnx.write_graphs(work, count, seed)
    bad, imported = 0, 0
    for name in sorted(os.listdir(work)):
        path = os.path.join(work, name)
        r = subprocess.run([cc, path], capture_output=True, timeout=60)
        lines = r.stderr.decode("utf-8", "replace").splitlines()
        ok = r.returncode == 0 or (r.returncode == 1 and len(lines) == 1 and lines[0].startswith(path + ":"))
        imported += r.returncode == 0
        if ok:
            os.remove(path)
            continue
        bad += 1
        print(f"FAIL: {path}: exit status {r.returncode}; stderr:")
        print("\n".join(lines[:30]))
    print(f"{count} random graphs: {imported} imported, {count - imported - bad} refused with one error, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
