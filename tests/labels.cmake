# Test tiers: every CTest test is labelled by what it costs.
#   fast       seconds at most, also while other runs share the machine's cores:
#              unit, IR, passes, plan, lowering, golden and bad-input tests, the
#              runtime's pieces (its hand-written programs, under mpirun too), and
#              the few quick tests of the areas below. Most of those compile a model,
#              link a `train` and run it, under mpirun or beside torch: a second or two
#              alone, several times that on a busy machine, so not fast. `ctest -L fast`
#              (scripts/test.sh --fast) runs the tier in a few minutes.
# A test that is not fast carries exactly one of these; a fast one may carry its
# area's too (`fast;reference`), so that `ctest -L AREA` runs the whole area:
#   e2e        `colossalc -o train`, then train, against its own runs (resume,
#              recompute, offload, the loss after training)
#   multirank  train under mpirun against one rank; the Comm interface
#   cuda_emul  the CUDA path without a GPU: NVRTC at full size, the emitter's host
#              shim, `train --device cuda` on the emulated driver, NVRTC, cuBLASLt, NCCL
#   reference  against PyTorch, onnxruntime or transformers
#   fuzz       the fuzz targets over their corpora, random inputs
#   faults     train under injected faults: killed and stopped ranks, signals, damaged
#              and full disks, NaN (tests/faults)
# And one beside the area: slow, on the long fault runs (the soak, 8-rank kills, the
# resharding matrix) and the emulated GPU's 20-step numerics (cuda_emul_gpu_bounds).
# And vendor, beside fast, on a test whose time is a vendor tool's: NVRTC compiling the
# emitted CUDA C (nvrtc_*_sm_80; the emitting, nvrtc_emit_*, is ours and stays). The
# sanitizer pass leaves them out: its sanitizers would watch NVRTC's run, not ours (about
# 160 s of its time), and the source they compile is the same as in the normal pass.
# For the same reason the emitter's lowered tests (codegen_cuda_lowered_*) skip their
# NVRTC compile in the sanitizer build and keep the rest (the host shim under the
# sanitizers against kernel_eval).
# The sanitizer pass of scripts/test.sh runs the fast tier and the tests labelled
# sanitize (beside their area: tests/CMakeLists.txt names them), never slow ones. Under
# AddressSanitizer a trained program runs 5 to 12 times slower (30 times under mpirun,
# whose leak checks unwind every allocation), so the pass takes a sample of each area:
# the cheapest tests that reach the runtime code the fast tier does not (ranks under
# MPI, ZeRO, pipelines, offload, checkpoints, faults, the CUDA device on its emulation),
# not every mesh and precision again.
# The older area labels stay beside these: bad, onnx, gpu.
#
# colossalc_label(LABELS TEST...) adds LABELS (one label, or a list such as
# "fast;reference") to each TEST. Call it in the directory that added the tests
# (tests/ or runtime/): set_property(TEST) sees no other directory's.
include_guard(GLOBAL)
function(colossalc_label labels)
  set_property(TEST ${ARGN} APPEND PROPERTY LABELS ${labels})
endfunction()
