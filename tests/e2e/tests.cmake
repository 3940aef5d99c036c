# End-to-end: `colossalc -o train`, then train against PyTorch and across a resume.
# Labels (tests/labels.cmake): e2e, or reference where PyTorch is the check. Only
# e2e_emit_llvm is fast: the others compile and link a train, and most start torch.
set(E2E_WORK ${CMAKE_BINARY_DIR}/e2e-work)
file(MAKE_DIRECTORY ${E2E_WORK})
add_test(NAME e2e_gpt2_vs_torch
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_vs_torch.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR} ${E2E_WORK}/torch)
# the fused classifier (classifier_ce, the logits a chunk of rows at a time) against the same reference
add_test(NAME e2e_gpt2_vs_torch_fused_classifier
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_vs_torch.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR} ${E2E_WORK}/torch-fc fp32
                 --classifier,fused)
# bf16 mixed precision (--precision bf16): 20 steps against the reference with the same casts
add_test(NAME e2e_gpt2_vs_torch_bf16
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_vs_torch.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR} ${E2E_WORK}/torch-bf16 bf16)
# fp8 (--precision fp8): 12 steps against the reference's delayed scaling (ml_dtypes rounding)
add_test(NAME e2e_gpt2_vs_torch_fp8
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_vs_torch.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR} ${E2E_WORK}/torch-fp8 fp8)
# ... with the classifier's GEMM in fp8 too (--fp8-classifier; the reference's --fp8-head)
add_test(NAME e2e_gpt2_vs_torch_fp8_classifier
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_vs_torch.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}
                 ${E2E_WORK}/torch-fp8-classifier fp8 --fp8-classifier)
colossalc_label(reference e2e_gpt2_vs_torch e2e_gpt2_vs_torch_fused_classifier e2e_gpt2_vs_torch_bf16
                e2e_gpt2_vs_torch_fp8 e2e_gpt2_vs_torch_fp8_classifier)
# training quality: 1,000 steps of gpt2-tiny in bf16 within 2 % of fp32's final loss, fp8
# within 4 % (about 2 minutes alone; not under the sanitizers, where it would take several times that)
if(NOT COLOSSALC_SANITIZE)
  add_test(NAME e2e_quality_mixed
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_quality.sh $<TARGET_FILE:colossalc>
                   $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${E2E_WORK}/quality)
  set_tests_properties(e2e_quality_mixed PROPERTIES TIMEOUT 1200)
  colossalc_label(e2e e2e_quality_mixed)
endif()
# fp16 with dynamic loss scaling, from a scale that overflows at first
add_test(NAME e2e_gpt2_vs_torch_fp16
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_vs_torch.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR} ${E2E_WORK}/torch-fp16 fp16)
colossalc_label(reference e2e_gpt2_vs_torch_fp16)
# LAMB (--optimizer lamb) against the reference's implementation of ColossalAI's formulas
add_test(NAME e2e_gpt2_vs_torch_lamb
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_vs_torch.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR} ${E2E_WORK}/torch-lamb fp32
                 --optimizer,lamb)
colossalc_label(reference e2e_gpt2_vs_torch_lamb)
# fused kernels equal the materialized ones: the loss and every gradient of one SGD step, to
# 1e-5; attention causal and not, head sizes 32 to 128, sequence lengths off and on the key
# block; the classifier with w [d, V] and tied [V, d], rows the chunk does not divide
foreach(what attention classifier)
  add_test(NAME e2e_fused_${what}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_fused.sh ${what} $<TARGET_FILE:colossalc>
                   $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR} ${E2E_WORK}/fused-${what})
endforeach()
colossalc_label(e2e e2e_fused_attention e2e_fused_classifier)
# bert, vit (from record files) and llama against their PyTorch references (zoo_reference.py):
# 5 AdamW steps, each loss and every final parameter to a relative 1e-4
foreach(what bert vit llama)
  add_test(NAME e2e_${what}_vs_torch
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_zoo_vs_torch.sh $<TARGET_FILE:colossalc>
                   $<TARGET_FILE:colossalc-mkdata> $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON}
                   ${CMAKE_SOURCE_DIR} ${E2E_WORK}/torch-${what} ${what})
  colossalc_label(reference e2e_${what}_vs_torch)
endforeach()
# The zoo trains from its data files: bert and vit from record files (colossalc-mkdata),
# a vocabulary of 70,001 from a uint32 token file
foreach(what bert vit gpt2-u32)
  add_test(NAME e2e_zoo_train_${what}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_zoo_train.sh $<TARGET_FILE:colossalc>
                   $<TARGET_FILE:colossalc-mkdata> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}
                   ${E2E_WORK}/zoo-train-${what} ${what})
  colossalc_label(e2e e2e_zoo_train_${what})
endforeach()
add_test(NAME e2e_resume
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_resume.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${E2E_WORK}/resume)
add_test(NAME e2e_resume_fp16 # the loss scale and the skipped steps carried over
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_resume.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${E2E_WORK}/resume-fp16 fp16)
add_test(NAME e2e_resume_fp8 # the scaling states carried over
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_resume.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${E2E_WORK}/resume-fp8 fp8)
colossalc_label(e2e e2e_resume e2e_resume_fp16 e2e_resume_fp8)
# recompute: values bit for bit as without, one rank and (under mpirun) tp 2 and pp 2
set(rc_mpirun "")
if(MPIEXEC_EXECUTABLE)
  string(STRIP "${MPIEXEC_EXECUTABLE} ${COLOSSALC_MPIEXEC_FLAGS}" rc_mpirun)
endif()
add_test(NAME e2e_recompute
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_recompute.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${E2E_WORK}/recompute
                 "${rc_mpirun}")
# offload: bit for bit under device budgets down to a quarter of the state, peaks as predicted
add_test(NAME e2e_offload
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_offload.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${E2E_WORK}/offload ${COLOSSALC_TORCH_PYTHON})
# and in fp16, whose skipped steps still move the chunks
add_test(NAME e2e_offload_fp16
         COMMAND ${CMAKE_COMMAND} -E env PRECISION=fp16 sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_offload.sh
                 $<TARGET_FILE:colossalc> $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${E2E_WORK}/offload-fp16
                 ${COLOSSALC_TORCH_PYTHON})
add_test(NAME e2e_offload_fp8
         COMMAND ${CMAKE_COMMAND} -E env PRECISION=fp8 sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_offload.sh
                 $<TARGET_FILE:colossalc> $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${E2E_WORK}/offload-fp8
                 ${COLOSSALC_TORCH_PYTHON})
set_tests_properties(e2e_gpt2_vs_torch e2e_resume e2e_recompute e2e_offload e2e_offload_fp16 e2e_offload_fp8 PROPERTIES TIMEOUT 600)
colossalc_label(e2e e2e_recompute e2e_offload e2e_offload_fp16 e2e_offload_fp8)
# e2e_recompute runs mpirun: under the sanitizers, Open MPI's own leaks are suppressed
# as for the multi-rank tests (tests/multirank/lsan.supp says how)
if(COLOSSALC_SANITIZE)
  set_tests_properties(e2e_recompute PROPERTIES ENVIRONMENT
    "OMPI_MCA_mca_base_component_disable_dlclose=1;ASAN_OPTIONS=${COLOSSALC_ASAN_OPTIONS}:fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/multirank/lsan.supp:print_suppressions=0")
endif()
# --emit-llvm writes the optimised module: every kernel, vectorised (AVX or wider).
add_test(NAME e2e_emit_llvm
         COMMAND sh -c "$0 $1 --emit-llvm $2 && grep -c '^define void @k' $2 && grep -q '<[0-9]* x float>' $2"
                 $<TARGET_FILE:colossalc> ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model ${E2E_WORK}/gpt2-tiny.ll)
colossalc_label("fast;e2e" e2e_emit_llvm) # no train: the LLVM module only
# the CPU kernels' builds: a train compiled here runs on older x86-64 CPUs (qemu-x86_64
# -cpu Haswell: the portable build; -cpu Nehalem: refused in one line, or --cpu x86-64-v2);
# not under the sanitizers, whose shadow memory the emulator cannot map
if(NOT COLOSSALC_SANITIZE)
  add_test(NAME e2e_cpu_builds
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_cpu_builds.sh $<TARGET_FILE:colossalc>
                   $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${E2E_WORK}/cpu-builds)
  set_tests_properties(e2e_cpu_builds PROPERTIES SKIP_RETURN_CODE 77)
  colossalc_label(e2e e2e_cpu_builds)
endif()
