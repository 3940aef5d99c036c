"""Every step of a --log file: the device memory the run measured at the step's peak
(device_memory_peak, the largest rank's) equals the compiler's prediction
(device_memory_plan, codegen/zero.h's predicted_memory plus the device's own bytes),
to the byte.

Usage: check_memory.py LOG.jsonl"""
import json
import sys

steps = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r and "device_memory_peak" in r]
bad = [r["step"] for r in steps if r.get("device_memory_plan") is None or r["device_memory_peak"] != r["device_memory_plan"]]
if not steps:
    sys.exit("memory: no step records with device_memory_peak")
for r in steps[:1] + [s for s in steps if s["step"] in bad]:
    print("step %d: measured %s bytes, planned %s" % (r["step"], r["device_memory_peak"], r.get("device_memory_plan")))
print("memory: %d steps, %s" % (len(steps), "the peak equals the plan" if not bad else "FAIL at steps %s" % bad))
sys.exit(1 if bad else 0)
