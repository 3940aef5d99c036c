#!/bin/sh
# The GPU's calibration through the CUDA device, on the emulated driver, cuBLASLt and NCCL
# (tests/cuda_emul/tests.cmake). colossalc-calibrate --device cuda --quick with 2 ranks:
#   - it reports each GEMM in f32, bf16 and fp16, the streaming kernel, each collective
#     programs issue over the 2 GPUs (NCCL's, under mpirun) and the file;
#   - its file starts from the emulated H100's profile (h100-sxm), one GPU a rank (no
#     shares_host), 8 GPUs a node as the emulated driver shows, its figures positive, and
#     the link between GPUs the one measured, with each kind's curve by size;
#   - `colossalc --cluster FILE --gpus 16 --dump-plan=json` plans for it: a rank's peak is
#     the bf16 curve's measured peak (not split: the GPU is the rank's own), 2 nodes of 8,
#     the network between them the profile's;
#   - without the emulated driver, --device cuda is one line naming libcuda.so.1.
# Usage: run_calibrate.sh CALIBRATE COLOSSALC SRCDIR WORKDIR PYTHON EMUL_LIB_DIR "MPIRUN"
set -eu
cal=$1 cc=$2 src=$3 work=$4 py=$5 emul=$6 mpirun=$7
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

if "$cal" --device cuda --quick -o none.json > out 2> err; then fail "--device cuda ran without a GPU"; fi
cat err
[ "$(wc -l < err)" -eq 1 ] && grep -q "libcuda.so.1" err || fail "expected one line naming libcuda.so.1, got: $(cat err)"

LD_LIBRARY_PATH="$emul${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" TMPDIR="$work" \
  "$cal" --device cuda --quick --ranks 2 --mpirun "$mpirun" -o gpu.json 2> cal.err || { cat cal.err; fail "calibration failed"; }
cat cal.err
for what in "gemm f32" "gemm bf16" "gemm fp16" "GEMM fit bf16" "streaming kernel" "all-reduce +over 2 GPUs" \
  "reduce +over 2 GPUs" "broadcast +over 2 GPUs" "send/recv +over 2 GPUs" "all-reduce fitted" "file in"; do
  grep -Eq "$what" cal.err || fail "the calibration does not report '$what'"
done
"$cc" "$src/models/gpt2-tiny.model" --cluster gpu.json --gpus 16 --dump-plan=json --plan-out plan.json 2> plan.err ||
  { cat plan.err; fail "--cluster gpu.json does not plan"; }
"$py" - gpu.json plan.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
plan = json.load(open(sys.argv[2]))
d = c["device"]
def fail(why):
    print("FAIL:", why, json.dumps(c, indent=1))
    sys.exit(1)
if c["base"] != "h100-sxm" or c["gpus_per_node"] != 8 or d["shares_host"] or d["fp32_only"]:
    fail("the GPU's file is not an H100's of one GPU a rank, 8 a node")
for k in ("peak_fp32_tflops", "peak_bf16_tflops", "peak_fp16_tflops", "gemm_half_dim", "memory_gib",
          "memory_bandwidth_gbs", "kernel_overhead_us", "commit_bandwidth_gbs"):
    if not d[k] > 0:
        fail("device.%s is not positive" % k)
if not (c["intra_node"]["bandwidth_gbs"] > 0 and "NCCL among 2 GPUs" in c["intra_node"]["name"]):
    fail("the link between GPUs is not the one measured")
coll = c["intra_node"]["collectives"]
kinds = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send/recv", "reduce", "broadcast")
if coll["ranks"] != 2 or sorted(k for k in coll if k != "ranks") != sorted(kinds):
    fail("NCCL's collectives are not each measured among the 2 GPUs")
for k in kinds:
    if not all(b1 > b0 and t1 >= t0 > 0 for (b0, t0), (b1, t1) in zip(coll[k], coll[k][1:])):
        fail("%s: not a curve of increasing sizes and times" % k)
if not (c["host"]["link_bandwidth_gbs"] > 0 and c["host"]["nvme_bandwidth_gbs"] > 0):
    fail("the host's figures are not measured")
pc = plan["cluster"]
if abs(pc["peak_tflops"] - d["peak_bf16_tflops"]) > 1e-3 * d["peak_bf16_tflops"]:
    fail("a rank's peak %g TFLOP/s is not the measured bf16 peak %g" % (pc["peak_tflops"], d["peak_bf16_tflops"]))
if pc["gpus_per_node"] != 8 or pc["gpus"] != 16:
    fail("16 GPUs of the calibrated machine are not 2 nodes of 8: %r" % pc)
print("ok   calibrated emulated GPU: bf16 %.3g TFLOP/s (half-dim %.0f), %.3g GB/s, NCCL %.3g GB/s; planned for 16" %
      (d["peak_bf16_tflops"], d["gemm_half_dim"], d["memory_bandwidth_gbs"], c["intra_node"]["bandwidth_gbs"]))
PY
