# The CUDA device without a GPU: host emulations of the driver, NVRTC, cuBLASLt and NCCL,
# built under the vendors' sonames into one directory that the tests put first on
# LD_LIBRARY_PATH, so the real `train` runs --device cuda on this machine (driver.c,
# nvrtc.c, cublaslt.c, nccl.c). And real NVRTC: the kernels compiled for sm_80 and sm_90 at
# start-up, into the kernel cache (train --compile-kernels needs no GPU).
# Labels (tests/labels.cmake): all cuda_emul, none fast (each compiles and runs a train).
set(CUDA_EMUL_LIB ${CMAKE_BINARY_DIR}/cuda-emul/lib)
file(MAKE_DIRECTORY ${CUDA_EMUL_LIB})
foreach(lib cuda:driver:1 nvrtc:nvrtc:13 cublasLt:cublaslt:13)
  string(REPLACE ":" ";" parts ${lib})
  list(GET parts 0 name)
  list(GET parts 1 src)
  list(GET parts 2 so)
  add_library(cuda_emul_${src} SHARED ${CMAKE_CURRENT_LIST_DIR}/${src}.c)
  set_target_properties(cuda_emul_${src} PROPERTIES OUTPUT_NAME ${name} SOVERSION ${so}
                        LIBRARY_OUTPUT_DIRECTORY ${CUDA_EMUL_LIB})
  target_include_directories(cuda_emul_${src} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
endforeach()
# The kernels the emulated NVRTC builds are checked by the shim itself (every access's
# bounds and races, host_shim.h) and are not instrumented by the sanitizers even in
# their build: whole trainings run through them, and AddressSanitizer there would add
# little to the shim's per-buffer checks at several times the cost. The shim's own code
# runs under the sanitizers in the emitter's tests (test_codegen_cuda,
# COLOSSALC_HOST_CXX_FLAGS).
target_compile_definitions(cuda_emul_nvrtc PRIVATE
  COLOSSALC_HOST_CXX="${COLOSSALC_HOST_CXX}" COLOSSALC_HOST_CXX_FLAGS="" COLOSSALC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
target_link_libraries(cuda_emul_cublaslt PRIVATE ${COLOSSALC_OPENBLAS} ${CMAKE_DL_LIBS})
find_package(Threads REQUIRED)
target_link_libraries(cuda_emul_driver PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
# NCCL with NCCL's semantics (nccl.c; MPI makes its communicators), for `train --device cuda`
# under mpirun.
find_package(MPI REQUIRED COMPONENTS C)
add_library(cuda_emul_nccl SHARED ${CMAKE_CURRENT_LIST_DIR}/nccl.c)
set_target_properties(cuda_emul_nccl PROPERTIES OUTPUT_NAME nccl SOVERSION 2 LIBRARY_OUTPUT_DIRECTORY ${CUDA_EMUL_LIB})
target_include_directories(cuda_emul_nccl SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(cuda_emul_nccl PRIVATE MPI::MPI_C ${CMAKE_DL_LIBS})

# Bugs seeded in test kernels: races (shared memory, a block's threads, two blocks), a
# write out of bounds, launches past a GPU's limits; the emulation catches each.
add_executable(cuda_emul_seeded ${CMAKE_CURRENT_LIST_DIR}/seeded.c)
target_link_libraries(cuda_emul_seeded PRIVATE colossalc_train colossalc_core ${CMAKE_DL_LIBS})
target_include_directories(cuda_emul_seeded SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
add_test(NAME cuda_emul_seeded COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_seeded.sh $<TARGET_FILE:cuda_emul_seeded>
                                       ${CUDA_EMUL_LIB} ${CMAKE_BINARY_DIR}/cuda-work/seeded)
add_dependencies(cuda_emul_seeded cuda_emul_driver cuda_emul_nvrtc)
colossalc_label(cuda_emul cuda_emul_seeded)

# NCCL's semantics seeded with the bugs they catch: deadlocks (a rendezvous send outside a
# group, a collective one rank leaves out), a message of another size (seeded_nccl.c)
add_executable(cuda_emul_seeded_nccl ${CMAKE_CURRENT_LIST_DIR}/seeded_nccl.c)
target_link_libraries(cuda_emul_seeded_nccl PRIVATE cuda_emul_driver cuda_emul_nccl MPI::MPI_C)
target_include_directories(cuda_emul_seeded_nccl SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
add_test(NAME cuda_emul_seeded_nccl COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_seeded_nccl.sh
                                            $<TARGET_FILE:cuda_emul_seeded_nccl> ${CUDA_EMUL_LIB}
                                            ${CMAKE_BINARY_DIR}/cuda-work/seeded-nccl)
colossalc_label(cuda_emul cuda_emul_seeded_nccl) # its environment: after cuda_mr_env below

set(CUDA_WORK ${CMAKE_BINARY_DIR}/cuda-work)
file(MAKE_DIRECTORY ${CUDA_WORK})
set(cuda_run sh ${CMAKE_CURRENT_LIST_DIR}/run_cuda.sh $<TARGET_FILE:colossalc> $<TARGET_FILE:colossalc-mktokens>
    ${CMAKE_SOURCE_DIR} ${CUDA_WORK} ${COLOSSALC_TORCH_PYTHON} ${CUDA_EMUL_LIB})
# One rank through the emulated CUDA device equals the CPU device; the second start
# finds every kernel in the cache; a damaged entry is rebuilt.
add_test(NAME cuda_emul_one_rank COMMAND ${cuda_run} one_rank)
add_test(NAME cuda_emul_bf16 COMMAND ${cuda_run} bf16) # bf16 mixed precision: 16-bit cuBLASLt layouts
add_test(NAME cuda_emul_fused COMMAND ${cuda_run} fused) # the fused classifier (attention: fused by default)
add_test(NAME cuda_emul_gqa COMMAND ${cuda_run} gqa) # grouped-query attention in a window, f32 and bf16
add_test(NAME cuda_emul_fp8 COMMAND ${cuda_run} fp8) # fp8: 8-bit cuBLASLt layouts, TN only
# The GPU script's tolerances against a GEMM summed in another order (tests/gpu/run.sh)
# (slow: numerics alone, the emulated kernels not instrumented: not in the sanitizer pass)
add_test(NAME cuda_emul_gpu_bounds COMMAND ${cuda_run} gpu_bounds)
colossalc_label("cuda_emul;slow" cuda_emul_gpu_bounds)
# Real NVRTC, no GPU: every kernel of the program compiles for sm_80 and sm_90, the
# second time from the cache, a damaged entry again.
add_test(NAME cuda_nvrtc_cache COMMAND ${cuda_run} nvrtc_cache)
# Without a GPU, --device cuda is one clear line and exit status 1.
add_test(NAME cuda_no_gpu COMMAND ${cuda_run} no_gpu)
# The libraries where users have them (CUDA_HOME, a Python environment's NVIDIA wheels),
# train --device-info, and a run from there.
add_test(NAME cuda_emul_libsearch COMMAND ${cuda_run} libsearch)
# More ranks on a node than GPUs: one clear line, not NCCL's failure.
add_test(NAME cuda_too_few_gpus COMMAND ${cuda_run} too_few_gpus)
# A GPU that fails on one rank of two: its error, and every rank ended.
add_test(NAME cuda_gpu_fails COMMAND ${cuda_run} gpu_fails)
set_tests_properties(cuda_too_few_gpus cuda_gpu_fails
                     PROPERTIES ENVIRONMENT "MPIRUN=${MPIEXEC_EXECUTABLE} ${COLOSSALC_MPIEXEC_FLAGS}" TIMEOUT 300)
# colossalc-calibrate --device cuda on 2 emulated GPUs (NCCL's all-reduce under mpirun),
# and the cluster file it writes planned for (run_calibrate.sh)
add_test(NAME cuda_emul_calibrate
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_calibrate.sh $<TARGET_FILE:colossalc-calibrate>
                 $<TARGET_FILE:colossalc> ${CMAKE_SOURCE_DIR} ${CUDA_WORK}/calibrate ${COLOSSALC_TORCH_PYTHON}
                 ${CUDA_EMUL_LIB} "${MPIEXEC_EXECUTABLE} ${COLOSSALC_MPIEXEC_FLAGS}")
set_tests_properties(cuda_emul_calibrate PROPERTIES TIMEOUT 300)
colossalc_label(cuda_emul cuda_emul_calibrate)
if(COLOSSALC_SANITIZE) # Open MPI's own leaks suppressed as for the multi-rank tests
  set_tests_properties(cuda_emul_calibrate PROPERTIES ENVIRONMENT
    "OMPI_MCA_mca_base_component_disable_dlclose=1;ASAN_OPTIONS=${COLOSSALC_ASAN_OPTIONS}:fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/multirank/lsan.supp:print_suppressions=0")
endif()
set_tests_properties(cuda_emul_one_rank cuda_emul_bf16 cuda_nvrtc_cache cuda_no_gpu PROPERTIES TIMEOUT 900)
colossalc_label(cuda_emul cuda_emul_one_rank cuda_emul_bf16 cuda_emul_fused cuda_emul_gqa cuda_emul_fp8 cuda_nvrtc_cache
                cuda_no_gpu cuda_too_few_gpus cuda_gpu_fails cuda_emul_libsearch)
if(COLOSSALC_SANITIZE)
  set_tests_properties(cuda_emul_one_rank cuda_emul_bf16 cuda_nvrtc_cache cuda_emul_libsearch PROPERTIES ENVIRONMENT
    "ASAN_OPTIONS=${COLOSSALC_ASAN_OPTIONS};LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp:print_suppressions=0")
endif()

# The multi-rank equality tests again, the ranks on the emulated CUDA device: their
# collectives and pipeline messages through NCCL (the emulation's, on MPI), against one
# rank on the CPU device (tests/multirank/device.sh). Data parallelism with ZeRO 0-3
# (the runtime's), ZeRO 3 compiled into the step, TP, PP 1F1B and interleaved (with the
# tied embedding's gradient summed over the stages), and DP x TP x PP on 8 ranks.
# The sanitizer build runs the meshes that reach every path of the device layer once
# (DP x TP x PP on 8 ranks, ZeRO-3 in the runtime and compiled into the step, offload,
# the overlapped buckets); the normal build runs them all. The others run the same
# code with other schedules and precisions, and took 14 of the 45 minutes .ci/run may
# take under ASan.
set(cuda_mr_tests cuda_emul_dp2_tp2_pp2 cuda_emul_dp2_zero3 cuda_emul_dp2_zero3_step cuda_emul_offload_dp2
    cuda_emul_offload_dp2_zero3 cuda_emul_dp2_overlap)
add_test(NAME cuda_emul_dp2_zero3 COMMAND ${mr_equal} 2 3)
add_test(NAME cuda_emul_dp2_tp2_pp2 COMMAND ${mr_mesh} dp2_tp2_pp2 2 2 2 --microbatch-size 1 ${megatron})
if(NOT COLOSSALC_SANITIZE)
  foreach(z 0 1 2)
    add_test(NAME cuda_emul_dp2_zero${z} COMMAND ${mr_equal} 2 ${z})
    list(APPEND cuda_mr_tests cuda_emul_dp2_zero${z})
  endforeach()
  # tp2 with LAMB: its kernels and its "trust" (the norms read back from the device,
  # reduced on the host, the ratios written), a replicated parameter's counted on tp rank
  # 0 (AdamW's update runs on tp2 in cuda_emul_dp2_tp2_pp2)
  add_test(NAME cuda_emul_tp2
           COMMAND ${CMAKE_COMMAND} -E env OPTIMIZER=lamb ${mr_mesh} lamb_tp2 1 2 1 --microbatch-size 2 ${megatron})
  add_test(NAME cuda_emul_pp2_1f1b COMMAND ${mr_mesh} pp2_1f1b 1 1 2 --microbatch-size 1 --schedule 1f1b)
  add_test(NAME cuda_emul_pp2_interleaved
           COMMAND ${mr_mesh} pp2_interleaved 1 1 2 --microbatch-size 1 --schedule interleaved --virtual-stages 2)
  # and in bf16 (f32 collectives and pipeline messages; 16-bit cuBLASLt layouts)
  add_test(NAME cuda_emul_dp2_tp2_pp2_bf16
           COMMAND ${CMAKE_COMMAND} -E env PRECISION=bf16 ${mr_mesh} dp2_tp2_pp2_bf16 2 2 2 --microbatch-size 1 ${megatron})
  # and in fp8 on 2 stages: each stage's scaling states shared by the micro-batches'
  # slots, checkpointed from the device and resumed bit for bit (against the CPU's one
  # rank as fp8 plans compare: the CUDA C's last bits move fp8 roundings)
  add_test(NAME cuda_emul_pp2_fp8
           COMMAND ${CMAKE_COMMAND} -E env PRECISION=fp8 RESUME=1 ${mr_mesh} pp2_fp8 1 1 2 --microbatch-size 1
                   --schedule 1f1b)
  # DeepSpeed-Ulysses's all_to_alls: NCCL sends and receives in a group
  add_test(NAME cuda_emul_tp2_ulysses
           COMMAND ${mr_mesh} tp2_ulysses 1 2 1 --microbatch-size 1 --plan ${MR_DIR}/ulysses-tiny.plan.json)
  list(APPEND cuda_mr_tests cuda_emul_tp2 cuda_emul_pp2_1f1b cuda_emul_pp2_interleaved cuda_emul_dp2_tp2_pp2_bf16
       cuda_emul_pp2_fp8 cuda_emul_tp2_ulysses)
endif()
add_test(NAME cuda_emul_dp2_zero3_step COMMAND ${mr_zero} dp2_zero3_step 2 1 3)
add_test(NAME cuda_emul_offload_dp2 COMMAND ${mr_offload} 2 host) # offload across 2 ranks, moves on copy streams
add_test(NAME cuda_emul_offload_dp2_zero3 COMMAND ${mr_offload} 2 host 3) # ZeRO-3's chunks: NCCL broadcasts and reduces
# a data-parallel plan: its gradient buckets overlap backward on the communication stream
add_test(NAME cuda_emul_dp2_overlap COMMAND ${mr_mesh} dp2_overlap 2 1 1 --microbatch-size 2)
# The streams lag behind the host (each operation 50 us late, as on a busy GPU), so
# that work the runtime orders wrongly shows.
set(cuda_mr_env DEVICE=cuda EMUL=${CUDA_EMUL_LIB} COLOSSALC_EMUL_STREAM_DELAY_US=50)
if(COLOSSALC_SANITIZE)
  # Open MPI's leaks and the emulated NVRTC's, in one suppressions file
  file(READ ${CMAKE_SOURCE_DIR}/tests/multirank/lsan.supp mr_supp)
  file(READ ${CMAKE_CURRENT_LIST_DIR}/lsan.supp emul_supp)
  file(WRITE ${CMAKE_BINARY_DIR}/cuda-emul/lsan-mpi.supp "${mr_supp}${emul_supp}")
  list(APPEND cuda_mr_env OMPI_MCA_mca_base_component_disable_dlclose=1 ASAN_OPTIONS=${COLOSSALC_ASAN_OPTIONS}:fast_unwind_on_malloc=0
       LSAN_OPTIONS=suppressions=${CMAKE_BINARY_DIR}/cuda-emul/lsan-mpi.supp:print_suppressions=0)
endif()
set_tests_properties(${cuda_mr_tests} PROPERTIES FIXTURES_REQUIRED multirank_bins TIMEOUT 900
                     ENVIRONMENT "${cuda_mr_env}")
set_tests_properties(cuda_emul_seeded_nccl PROPERTIES TIMEOUT 600 ENVIRONMENT
                     "MPIRUN=${MPIEXEC_EXECUTABLE} ${COLOSSALC_MPIEXEC_FLAGS};${cuda_mr_env}")
colossalc_label(cuda_emul ${cuda_mr_tests})
# The stream ordering is what makes those equal: the emulated streams are threads, and
# with the runtime's cross-stream waits taken out (the emulated cuStreamWaitEvent doing
# nothing), the pipeline's sends go out before the compute stream has copied their data
# and the run differs from one rank.
# (Not in the sanitizer build: they check ordering, which ASan does not see, and would
# take 4 of .ci/run's 45 minutes there.)
if(NOT COLOSSALC_SANITIZE)
add_test(NAME cuda_emul_stream_hazard COMMAND ${mr_mesh} pp2_hazard 1 1 2 --microbatch-size 1 --schedule 1f1b)
# And the communication stream's: with the waits out, a data-parallel plan's gradient
# buckets, overlapped with backward on their own stream, are summed before the compute
# stream has written them (its operations lag), and the run differs from one rank.
add_test(NAME cuda_emul_overlap_hazard COMMAND ${mr_mesh} dp2_overlap_hazard 2 1 1 --microbatch-size 2)
set_tests_properties(cuda_emul_stream_hazard cuda_emul_overlap_hazard PROPERTIES FIXTURES_REQUIRED multirank_bins
                     TIMEOUT 900 ENVIRONMENT "${cuda_mr_env};COLOSSALC_EMUL_DROP_WAITS=1;EXPECT_DIFFER=1")
colossalc_label(cuda_emul cuda_emul_stream_hazard cuda_emul_overlap_hazard)
endif()

# Offload under device budgets on the emulated CUDA device: its moves on the copy
# stream, the optimizer of host-resident chunks on the CPU (tests/e2e/run_offload.sh).
add_test(NAME cuda_emul_offload
         COMMAND sh ${CMAKE_SOURCE_DIR}/tests/e2e/run_offload.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${CUDA_WORK}/offload ${COLOSSALC_TORCH_PYTHON})
set(cuda_off_env DEVICE=cuda EMUL=${CUDA_EMUL_LIB} COLOSSALC_EMUL_STREAM_DELAY_US=50 COLOSSALC_EMUL_PINNED_ONLY=4096)
if(COLOSSALC_SANITIZE)
  list(APPEND cuda_off_env ASAN_OPTIONS=${COLOSSALC_ASAN_OPTIONS} LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp:print_suppressions=0)
endif()
set_tests_properties(cuda_emul_offload PROPERTIES TIMEOUT 900 ENVIRONMENT "${cuda_off_env}")
# And the copy stream's: with the waits dropped (and the streams lagging, as above),
# offload's moves copy parts before the compute stream has written them and unmap
# memory its kernels still use: the run differs from the reference or faults.
add_test(NAME cuda_emul_offload_hazard
         COMMAND sh ${CMAKE_SOURCE_DIR}/tests/e2e/run_offload.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${CUDA_WORK}/offload-hazard ${COLOSSALC_TORCH_PYTHON})
set_tests_properties(cuda_emul_offload_hazard PROPERTIES TIMEOUT 900
                     ENVIRONMENT "${cuda_off_env};COLOSSALC_EMUL_DROP_WAITS=1;EXPECT_DIFFER=1")
colossalc_label(cuda_emul cuda_emul_offload cuda_emul_offload_hazard)
