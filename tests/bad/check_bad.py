#!/usr/bin/python3
"""Runs colossalc on one malformed model and checks how it fails.

    check_bad.py COLOSSALC FILE

FILE's first line says what to expect:

    # expect: LINE:COL: error: SUBSTRING     a located error in FILE
    # expect: error: SUBSTRING               an error about the command line
    # args: --set d=abc                      (optional second line) extra arguments

Files that cannot hold a comment (empty, binary) have their lines in expect.txt
beside them, as `NAME: expect: ...` and `NAME: args: ...`.

Checked: exit status exactly 1 (not a signal, not a sanitizer's status); nothing on
stdout; stderr is exactly `FILE:LINE:COL: error: MESSAGE` with SUBSTRING in MESSAGE,
then the source line and a caret under COL as ir/diag.c print_line draws them
(a leading space, control bytes as '?', long lines windowed), and nothing else,
so any sanitizer report or extra output fails the test."""
import os
import shlex
import subprocess
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def spec_of(path):
    """The expect: and args: lines for path, from its head or from expect.txt."""
    spec = {}
    with open(path, "rb") as f:
        head = f.read(4096).split(b"\n")[:2]
    for line in head:
        text = line.decode("utf-8", "replace")
        for key in ("expect", "args"):
            if text.startswith("# %s:" % key):
                spec[key] = text[len(key) + 3:].strip()
    table = os.path.join(os.path.dirname(os.path.abspath(path)), "expect.txt")
    if "expect" not in spec and os.path.exists(table):
        name = os.path.basename(path)
        for line in open(table, encoding="utf-8"):
            if line.startswith("#") or ":" not in line:
                continue
            fname, rest = line.split(":", 1)
            rest = rest.strip()
            for key in ("expect", "args"):
                if fname == name and rest.startswith(key + ":"):
                    spec[key] = rest[len(key) + 1:].strip()
    if "expect" not in spec:
        fail("%s: no '# expect:' line and no entry in expect.txt" % path)
    return spec


def source_window(text, line, col):
    """The two lines print_line in ir/diag.c writes for line:col of text."""
    lines = text.split(b"\n")
    src = lines[line - 1] if 0 < line <= len(lines) else b""
    width, col = len(src), max(col, 1)
    start = col - 80 if width > 160 and col > 80 else 0
    width = min(width, start + 160)
    shown = bytes(c if c == 9 or (c >= 32 and c != 127) else ord("?") for c in src[start:width])
    pad = bytes(9 if c == 9 else 32 for c in src[start:max(start, min(col - 1, width))])
    return b" " + shown, b" " + pad + b"^"


def main():
    if len(sys.argv) != 3:
        fail("usage: check_bad.py COLOSSALC FILE")
    exe, path = sys.argv[1], sys.argv[2]
    spec = spec_of(path)
    cmd = [exe, path, "--summary"] + shlex.split(spec.get("args", ""))
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20, env=env)
    except subprocess.TimeoutExpired:
        fail("%s: still running after 20 s" % " ".join(cmd))
    err = p.stderr
    shown = err.decode("utf-8", "replace")
    if p.returncode != 1:
        fail("exit status %d, expected 1\n%s" % (p.returncode, shown))
    if p.stdout:
        fail("output on stdout:\n" + p.stdout.decode("utf-8", "replace")[:2000])
    lines = err.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    want = spec["expect"]
    if want.startswith("error:"):  # a command-line error: one line, no location
        first = "colossalc: error: "
        if len(lines) != 1 or not shown.startswith(first) or want[6:].strip() not in shown:
            fail("expected one line 'colossalc: error: ...%s...', got:\n%s" % (want[6:].strip(), shown))
        return
    loc, _, msg = want.partition(": error: ")
    try:
        line, col = (int(x) for x in loc.split(":"))
    except ValueError:
        fail("bad expectation '%s'" % want)
    prefix = ("%s:%d:%d: error: " % (path, line, col)).encode()
    if len(lines) != 3:
        fail("expected 3 lines on stderr (error, source, caret), got %d:\n%s" % (len(lines), shown))
    if not lines[0].startswith(prefix):
        fail("expected the error at %s:%d:%d, got:\n%s" % (path, line, col, shown))
    if msg.encode() not in lines[0]:
        fail("message lacks '%s':\n%s" % (msg, shown))
    with open(path, "rb") as f:
        src, caret = source_window(f.read(), line, col)
    if lines[1] != src or lines[2] != caret:
        fail("source line or caret wrong; expected:\n%s\n%s\ngot:\n%s" % (
            src.decode("utf-8", "replace"), caret.decode("utf-8", "replace"), shown))


if __name__ == "__main__":
    main()
