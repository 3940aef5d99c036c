# Faults: train under injected faults (tests/labels.cmake, "faults"): ranks killed
# (SIGKILL) and stopped (SIGSTOP) under mpirun, SIGTERM and SIGINT during a step, NaN
# written into a gradient (COLOSSALC_FAULT_NAN), an offload move that fails
# (COLOSSALC_FAULT_MOVE), folders that do not exist yet. The
# programs are small (build.sh), so that each test takes seconds; the 8-rank kill is
# labelled slow too.
set(FT_WORK ${CMAKE_BINARY_DIR}/faults-work)
set(FT_DIR ${CMAKE_CURRENT_SOURCE_DIR}/faults)
string(STRIP "${MPIEXEC_EXECUTABLE} ${COLOSSALC_MPIEXEC_FLAGS}" FT_MPIRUN)

add_test(NAME faults_build
         COMMAND sh ${FT_DIR}/build.sh $<TARGET_FILE:colossalc> $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR}
                 ${FT_WORK})
set_tests_properties(faults_build PROPERTIES FIXTURES_SETUP faults_bins TIMEOUT 600)

# a random rank killed at a random step: 4 data-parallel ranks, and 8 ranks of dp2 x tp2 x pp2
add_test(NAME faults_kill_dp4 COMMAND sh ${FT_DIR}/run_kill.sh ${FT_WORK} "${FT_MPIRUN}" 4 train-dp4)
add_test(NAME faults_kill_dp2_tp2_pp2 COMMAND sh ${FT_DIR}/run_kill.sh ${FT_WORK} "${FT_MPIRUN}" 8 train-mesh8)
# a random rank stopped: the job ends after --collective-timeout 5
add_test(NAME faults_stop_dp4 COMMAND sh ${FT_DIR}/run_stop.sh ${FT_WORK} "${FT_MPIRUN}" 4 train-dp4)
add_test(NAME faults_stop_pp2 COMMAND sh ${FT_DIR}/run_stop.sh ${FT_WORK} "${FT_MPIRUN}" 2 train-pp2)
add_test(NAME faults_sigterm COMMAND sh ${FT_DIR}/run_sigterm.sh ${FT_WORK} "${FT_MPIRUN}")
# NaN in a gradient: one rank (fp32, bf16), ZeRO-2 on rank 1 of 2, each stage of a pipeline
set(ft_nan sh ${FT_DIR}/run_nan.sh ${FT_WORK} "${FT_MPIRUN}")
add_test(NAME faults_nan_one COMMAND ${ft_nan} 1 train-b2 0)
add_test(NAME faults_nan_bf16 COMMAND ${ft_nan} 1 train-bf16 0)
add_test(NAME faults_nan_dp2_zero2 COMMAND ${ft_nan} 2 train-dp2-zero2 1)
add_test(NAME faults_nan_pp2_stage0 COMMAND ${ft_nan} 2 train-pp2 0)
add_test(NAME faults_nan_pp2_stage1 COMMAND ${ft_nan} 2 train-pp2 1)
add_test(NAME faults_nan_stop COMMAND sh ${FT_DIR}/run_nan_stop.sh ${FT_WORK} "${FT_MPIRUN}")
add_test(NAME faults_dirs COMMAND sh ${FT_DIR}/run_dirs.sh ${FT_WORK})
# an offload move that fails on one rank: in a pipeline stage (either) and across dp ranks
add_test(NAME faults_move_pp2_stage0 COMMAND sh ${FT_DIR}/run_move.sh ${FT_WORK} "${FT_MPIRUN}" train-pp2-off 0)
add_test(NAME faults_move_pp2_stage1 COMMAND sh ${FT_DIR}/run_move.sh ${FT_WORK} "${FT_MPIRUN}" train-pp2-off 1)
add_test(NAME faults_move_dp2 COMMAND sh ${FT_DIR}/run_move.sh ${FT_WORK} "${FT_MPIRUN}" train-dp2-off 1)
set(ft_tests
    faults_kill_dp4
    faults_kill_dp2_tp2_pp2
    faults_stop_dp4
    faults_stop_pp2
    faults_sigterm
    faults_nan_one
    faults_nan_bf16
    faults_nan_dp2_zero2
    faults_nan_pp2_stage0
    faults_nan_pp2_stage1
    faults_nan_stop
    faults_dirs
    faults_move_pp2_stage0
    faults_move_pp2_stage1
    faults_move_dp2)
set_tests_properties(${ft_tests} PROPERTIES FIXTURES_REQUIRED faults_bins TIMEOUT 300)
# the new flags are in train --help (the table of train_opts.c)
add_test(NAME faults_help COMMAND ${FT_WORK}/train-b2 --help)
set_tests_properties(faults_help PROPERTIES FIXTURES_REQUIRED faults_bins PASS_REGULAR_EXPRESSION
                     "--collective-timeout S.*--on-nan skip\\|stop.*--max-bad-steps N")
colossalc_label(faults faults_build faults_help ${ft_tests})
colossalc_label(slow faults_kill_dp2_tp2_pp2)

# damaged checkpoints, resharding, the soak
include(${CMAKE_CURRENT_SOURCE_DIR}/faults/ckpt.cmake)

# Under the sanitizers, Open MPI's own leaks are suppressed as in the multi-rank tests
# (tests/multirank/lsan.supp); the slow ones do not run there (scripts/test.sh).
if(COLOSSALC_SANITIZE)
  set_tests_properties(${ft_tests} faults_ckpt_damage PROPERTIES ENVIRONMENT
    "OMPI_MCA_mca_base_component_disable_dlclose=1;ASAN_OPTIONS=${COLOSSALC_ASAN_OPTIONS}:fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${MR_DIR}/lsan.supp:print_suppressions=0")
endif()
