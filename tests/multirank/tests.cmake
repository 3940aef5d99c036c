# Multi-rank: `train` under mpirun against one-rank runs, and the Comm interface.
# Every test here launches ranks with ${MPIEXEC_EXECUTABLE} ${COLOSSALC_MPIEXEC_FLAGS};
# the scripts take both as one argument, MPIRUN, split into words.
set(MR_WORK ${CMAKE_BINARY_DIR}/multirank-work)
set(MR_DIR ${CMAKE_CURRENT_SOURCE_DIR}/multirank)
separate_arguments(MR_MPI_FLAGS UNIX_COMMAND "${COLOSSALC_MPIEXEC_FLAGS}")
string(STRIP "${MPIEXEC_EXECUTABLE} ${COLOSSALC_MPIEXEC_FLAGS}" MR_MPIRUN)

# Comm conformance: self backend, 3 MPI ranks, and 3 ranks with 3-element chunks.
add_test(NAME multirank_comm_self COMMAND test_comm)
add_test(NAME multirank_comm_np3
         COMMAND ${MPIEXEC_EXECUTABLE} ${MR_MPI_FLAGS} -np 3 $<TARGET_FILE:test_comm>)
add_test(NAME multirank_comm_np3_chunked
         COMMAND ${MPIEXEC_EXECUTABLE} ${MR_MPI_FLAGS} -np 3 $<TARGET_FILE:test_comm>)
set_tests_properties(multirank_comm_np3_chunked PROPERTIES ENVIRONMENT COLOSSALC_MPI_CHUNK=3)
set_tests_properties(multirank_comm_self multirank_comm_np3 multirank_comm_np3_chunked
                     PROPERTIES TIMEOUT 120)

# The executor's reserved tiers, which hold the shards (one process, no MPI).
add_test(NAME multirank_reserve COMMAND test_reserve)
set_tests_properties(multirank_reserve PROPERTIES TIMEOUT 120)
# these take under a second (tests/labels.cmake); the rest below train compiled programs
colossalc_label("fast;multirank" multirank_comm_self multirank_comm_np3 multirank_comm_np3_chunked multirank_reserve)

add_test(NAME multirank_build
         COMMAND sh ${MR_DIR}/build.sh $<TARGET_FILE:colossalc> $<TARGET_FILE:colossalc-mktokens>
                 ${CMAKE_SOURCE_DIR} ${MR_WORK})
set_tests_properties(multirank_build PROPERTIES FIXTURES_SETUP multirank_bins TIMEOUT 600)

set(mr_equal sh ${MR_DIR}/run_equal.sh ${MR_WORK} ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}
    "${MR_MPIRUN}")
foreach(z 0 1 2 3)
  add_test(NAME multirank_dp2_zero${z} COMMAND ${mr_equal} 2 ${z})
  add_test(NAME multirank_dp4_zero${z} COMMAND ${mr_equal} 4 ${z})
  list(APPEND mr_tests multirank_dp2_zero${z} multirank_dp4_zero${z})
endforeach()
add_test(NAME multirank_resume_zero2
         COMMAND sh ${MR_DIR}/run_resume.sh ${MR_WORK} ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}
                 "${MR_MPIRUN}" $<TARGET_FILE:colossalc-export>)
add_test(NAME multirank_errors COMMAND sh ${MR_DIR}/run_errors.sh ${MR_WORK} "${MR_MPIRUN}")
add_test(NAME multirank_singleton COMMAND sh ${MR_DIR}/run_singleton.sh ${MR_WORK})
add_test(NAME multirank_plan_dp2_microbatches
         COMMAND sh ${MR_DIR}/run_plan.sh $<TARGET_FILE:colossalc> ${MR_WORK} ${COLOSSALC_TORCH_PYTHON}
                 ${CMAKE_SOURCE_DIR} "${MR_MPIRUN}")
# train --profile on 2 pipeline stages: where each rank's step went
add_test(NAME multirank_profile
         COMMAND sh ${MR_DIR}/run_profile.sh $<TARGET_FILE:colossalc> ${MR_WORK} ${COLOSSALC_TORCH_PYTHON}
                 ${CMAKE_SOURCE_DIR} "${MR_MPIRUN}")
list(APPEND mr_tests multirank_resume_zero2 multirank_errors multirank_singleton multirank_plan_dp2_microbatches
     multirank_profile)

# Tensor and pipeline parallelism (and with data parallelism): every mesh of the
# issue's list against one rank (run_mesh.sh). "megatron" forces Megatron-LM's
# column/row/heads strategies on the layers (megatron-tiny.plan.json), the search
# picking the rest; tp2_search takes the search's own sharding.
set(mr_mesh sh ${MR_DIR}/run_mesh.sh $<TARGET_FILE:colossalc> ${MR_WORK} ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}
    "${MR_MPIRUN}")
set(megatron --plan ${MR_DIR}/megatron-tiny.plan.json)
add_test(NAME multirank_tp2 COMMAND ${mr_mesh} tp2 1 2 1 --microbatch-size 2 ${megatron})
# the search's own strategies: token ids and targets split by rows, the loss too, its
# classifier fused (classifier_ce on each rank's rows)
add_test(NAME multirank_tp2_search COMMAND ${mr_mesh} tp2_search 1 2 1 --microbatch-size 4 --classifier fused)
add_test(NAME multirank_pp2_1f1b COMMAND ${mr_mesh} pp2_1f1b 1 1 2 --microbatch-size 1 --schedule 1f1b)
add_test(NAME multirank_pp2_interleaved
         COMMAND ${mr_mesh} pp2_interleaved 1 1 2 --microbatch-size 1 --schedule interleaved --virtual-stages 2)
add_test(NAME multirank_dp2_tp2 COMMAND ${mr_mesh} dp2_tp2 2 2 1 --microbatch-size 1 ${megatron})
add_test(NAME multirank_dp2_pp2 COMMAND ${mr_mesh} dp2_pp2 2 1 2 --microbatch-size 1)
add_test(NAME multirank_tp2_pp2 COMMAND ${mr_mesh} tp2_pp2 1 2 2 --microbatch-size 1 ${megatron})
add_test(NAME multirank_dp2_tp2_pp2 COMMAND ${mr_mesh} dp2_tp2_pp2 2 2 2 --microbatch-size 1 ${megatron})
# The other zoo models (llama, bert, vit; small configs, Megatron's sharding) on dp2 x tp2 x pp2
# equal one rank (run_zoo_mesh.sh); gpt2's is multirank_dp2_tp2_pp2
foreach(model llama bert vit)
  add_test(NAME multirank_zoo_${model}_dp2_tp2_pp2
           COMMAND sh ${MR_DIR}/run_zoo_mesh.sh $<TARGET_FILE:colossalc> $<TARGET_FILE:colossalc-mkdata>
                   $<TARGET_FILE:colossalc-mktokens> ${MR_WORK} ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}
                   "${MR_MPIRUN}" ${model} 2 2 2)
  list(APPEND mr_tests multirank_zoo_${model}_dp2_tp2_pp2)
endforeach()
# grouped-query attention: 2 key/value heads split over dp2 x tp2 x pp2; on tp 4 each
# rank takes its one from a whole copy, as Mistral's single head on tp2 x pp2 (in a window)
foreach(case "llama3_dp2_tp2_pp2|llama3|2 2 2" "llama3_tp4|llama3|1 4 1|CLUSTER=${MR_DIR}/cpu4.cluster.json"
             "mistral_tp2_pp2|mistral|1 2 2")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 name)
  list(GET parts 1 model)
  list(GET parts 2 mesh)
  separate_arguments(mesh UNIX_COMMAND "${mesh}")
  set(env "")
  list(LENGTH parts nparts)
  if(nparts GREATER 3)
    list(GET parts 3 env)
  endif()
  add_test(NAME multirank_zoo_${name}
           COMMAND ${CMAKE_COMMAND} -E env ${env} sh ${MR_DIR}/run_zoo_mesh.sh $<TARGET_FILE:colossalc> $<TARGET_FILE:colossalc-mkdata>
                   $<TARGET_FILE:colossalc-mktokens> ${MR_WORK} ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}
                   "${MR_MPIRUN}" ${model} ${mesh})
  list(APPEND mr_tests multirank_zoo_${name})
endforeach()
# bert's masked-LM loss split by rows over tp2 (micro-batches of 4: the search's
# "rows" for cross_entropy, each rank's mean scaled by its share of the counted labels,
# which differ between the ranks). Not under the sanitizers: multirank_tp2_search runs
# the same code there (gpt2's loss split by rows, the classifier fused).
if(NOT COLOSSALC_SANITIZE)
  add_test(NAME multirank_zoo_bert_tp2_loss_rows
           COMMAND sh ${MR_DIR}/run_zoo_mesh.sh $<TARGET_FILE:colossalc> $<TARGET_FILE:colossalc-mkdata>
                   $<TARGET_FILE:colossalc-mktokens> ${MR_WORK} ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}
                   "${MR_MPIRUN}" bert 1 2 1 --microbatch-size 4)
  list(APPEND mr_tests multirank_zoo_bert_tp2_loss_rows)
endif()
# --shuffle: the same shuffled batches on the 8 ranks as on one
add_test(NAME multirank_dp2_tp2_pp2_shuffle
         COMMAND ${CMAKE_COMMAND} -E env SHUFFLE=1 ${mr_mesh} dp2_tp2_pp2_shuffle 2 2 2 --microbatch-size 1 ${megatron})
list(APPEND mr_tests multirank_dp2_tp2_pp2_shuffle)
# bf16 mixed precision with tensor and pipeline parallelism (f32 collectives and sends),
# against one rank in bf16
set(mr_mesh_bf16 ${CMAKE_COMMAND} -E env PRECISION=bf16 ${mr_mesh})
add_test(NAME multirank_tp2_bf16 COMMAND ${mr_mesh_bf16} tp2_bf16 1 2 1 --microbatch-size 2 ${megatron})
add_test(NAME multirank_pp2_bf16 COMMAND ${mr_mesh_bf16} pp2_bf16 1 1 2 --microbatch-size 1 --schedule 1f1b)
add_test(NAME multirank_pp2_interleaved_bf16
         COMMAND ${mr_mesh_bf16} pp2_interleaved_bf16 1 1 2 --microbatch-size 1 --schedule interleaved --virtual-stages 2)
add_test(NAME multirank_dp2_tp2_pp2_bf16 COMMAND ${mr_mesh_bf16} dp2_tp2_pp2_bf16 2 2 2 --microbatch-size 1 ${megatron})
# fp8 with data, tensor and pipeline parallelism (the amaxes reduced over each stage's
# tp and dp groups), against one rank in fp8
set(mr_mesh_fp8 ${CMAKE_COMMAND} -E env PRECISION=fp8 ${mr_mesh})
add_test(NAME multirank_tp2_fp8 COMMAND ${mr_mesh_fp8} tp2_fp8 1 2 1 --microbatch-size 2 ${megatron})
add_test(NAME multirank_dp2_tp2_fp8 COMMAND ${mr_mesh_fp8} dp2_tp2_fp8 2 2 1 --microbatch-size 1 ${megatron})
add_test(NAME multirank_dp2_tp2_pp2_fp8 COMMAND ${mr_mesh_fp8} dp2_tp2_pp2_fp8 2 2 2 --microbatch-size 1 ${megatron})
# dp alone, and pp alone: the amaxes reduced over the ranks (a stage's states its own
# layers') make the scales one rank's, so the plan equals one rank of the same
# micro-batches as fp32 does; resumed from a checkpoint, the plan repeats itself bit
# for bit (the scaling states restored on every rank), and one rank resumes it too.
# dp2 runs one micro-batch of 2 a rank, so that its all-reduce adds the two
# micro-batches' gradients as one rank does: with two a rank, (g1 + g2) + (g3 + g4)
# against ((g1 + g2) + g3) + g4 differ in the last bits, which fp8's roundings can
# turn into whole steps of small tensors (they did on an AVX-512 CPU)
set(mr_mesh_fp8_one ${CMAKE_COMMAND} -E env PRECISION=fp8 ONE_MICROBATCH=1 RESUME=1 ${mr_mesh})
add_test(NAME multirank_dp2_fp8 COMMAND ${CMAKE_COMMAND} -E env PRECISION=fp8 ONE_MICROBATCH=2 RESUME=1 ${mr_mesh}
                                        dp2_fp8 2 1 1 --microbatch-size 2)
add_test(NAME multirank_pp2_fp8 COMMAND ${mr_mesh_fp8_one} pp2_fp8 1 1 2 --microbatch-size 1 --schedule 1f1b)
add_test(NAME multirank_pp2_interleaved_fp8
         COMMAND ${mr_mesh_fp8_one} pp2_interleaved_fp8 1 1 2 --microbatch-size 1 --schedule interleaved --virtual-stages 2)
# ZB-H1 (each backward split into B and W, a stage's Ws deferred by its index): pp 2 and
# 4 in fp32; pp 4 in fp8 with one micro-batch as above, resumed bit for bit; dp x tp x pp
# on 8 ranks with Megatron's strategies
add_test(NAME multirank_pp2_zbh1 COMMAND ${mr_mesh} pp2_zbh1 1 1 2 --microbatch-size 1 --schedule zb-h1)
add_test(NAME multirank_pp4_zbh1_fp8 COMMAND ${mr_mesh_fp8_one} pp4_zbh1_fp8 1 1 4 --microbatch-size 1 --schedule zb-h1)
add_test(NAME multirank_dp2_tp2_pp2_zbh1
         COMMAND ${mr_mesh} dp2_tp2_pp2_zbh1 2 2 2 --microbatch-size 1 --schedule zb-h1 ${megatron})
list(APPEND mr_tests multirank_pp2_zbh1 multirank_pp4_zbh1_fp8 multirank_dp2_tp2_pp2_zbh1)
# DeepSpeed-Ulysses on the tensor axis (ulysses-tiny.plan.json): the linear layers split
# along the sequence with their weights whole, attention by heads, all_to_alls between
# (passes/partition.c, exchange); tp 2 (resumed from its checkpoint bit for bit, and by
# one rank) and 4 (a node of 4 ranks: cpu4.cluster.json), with dp in bf16, with pp
set(ulysses --plan ${MR_DIR}/ulysses-tiny.plan.json)
add_test(NAME multirank_tp2_ulysses COMMAND ${CMAKE_COMMAND} -E env RESUME=1 ONE_MICROBATCH=1 ${mr_mesh} tp2_ulysses 1 2 1
                                            --microbatch-size 1 ${ulysses})
add_test(NAME multirank_tp4_ulysses COMMAND ${CMAKE_COMMAND} -E env CLUSTER=${MR_DIR}/cpu4.cluster.json ${mr_mesh}
                                            tp4_ulysses 1 4 1 --microbatch-size 1 ${ulysses})
add_test(NAME multirank_dp2_tp2_ulysses_bf16
         COMMAND ${mr_mesh_bf16} dp2_tp2_ulysses_bf16 2 2 1 --microbatch-size 1 ${ulysses})
add_test(NAME multirank_tp2_pp2_ulysses COMMAND ${mr_mesh} tp2_pp2_ulysses 1 2 2 --microbatch-size 1 ${ulysses})
list(APPEND mr_tests multirank_tp2_ulysses multirank_tp4_ulysses multirank_dp2_tp2_ulysses_bf16
     multirank_tp2_pp2_ulysses)
add_test(NAME multirank_dp2_pp2_1f1b_zero1
         COMMAND ${mr_mesh} dp2_pp2_1f1b_zero1 2 1 2 --microbatch-size 1 --schedule 1f1b --zero 1)
add_test(NAME multirank_dp2_tp2_zero3 COMMAND ${mr_mesh} dp2_tp2_zero3 2 2 1 --microbatch-size 2 --zero 3 ${megatron})
add_test(NAME multirank_dp2_tp2_zero1 COMMAND ${mr_mesh} dp2_tp2_zero1 2 2 1 --microbatch-size 1 --zero 1 ${megatron})
list(APPEND mr_tests multirank_dp2_pp2_1f1b_zero1 multirank_dp2_tp2_zero3 multirank_dp2_tp2_zero1)
# LAMB (OPTIMIZER=lamb, run_mesh.sh): each parameter's trust ratio from norms summed over
# its tensor-parallel shards (tp rank 0 alone for a replicated one), its ZeRO owner's
# pieces (with 1 layer and 32 positions ZeRO deals the MLP's weights in two), and the
# lowest stage of the tied embedding; equal to one rank's LAMB (and on ZeRO-1, resumed
# from its checkpoint bit for bit: the moments are AdamW's)
set(mr_mesh_lamb ${CMAKE_COMMAND} -E env OPTIMIZER=lamb ${mr_mesh})
add_test(NAME multirank_lamb_dp2_tp2_pp2 COMMAND ${mr_mesh_lamb} lamb_dp2_tp2_pp2 2 2 2 --microbatch-size 1 ${megatron})
add_test(NAME multirank_lamb_dp2_tp2_zero1
         COMMAND ${CMAKE_COMMAND} -E env RESUME=1 ${mr_mesh_lamb} lamb_dp2_tp2_zero1 2 2 1 --microbatch-size 1 --zero 1 ${megatron})
add_test(NAME multirank_lamb_dp2_zero3_pieces
         COMMAND ${CMAKE_COMMAND} -E env "SETS=--set layers=1 --set ctx=32" ${mr_mesh_lamb} lamb_dp2_zero3_pieces 2 1 1
                 --microbatch-size 2 --zero 3)
list(APPEND mr_tests multirank_lamb_dp2_tp2_pp2 multirank_lamb_dp2_tp2_zero1 multirank_lamb_dp2_zero3_pieces)

# ZeRO inside the step (codegen/zero.h): data-parallel plans compiled with --zero 2 and
# 3 (and dp2 x tp2 with 3), 2 micro-batches per rank, equal one rank, and the peak of
# the sharded tiers over the steps stays under the bound run_zero.sh derives.
set(mr_zero sh ${MR_DIR}/run_zero.sh $<TARGET_FILE:colossalc> ${MR_WORK} ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}
    "${MR_MPIRUN}")
add_test(NAME multirank_plan_dp2_zero2_step COMMAND ${mr_zero} dp2_zero2_step 2 1 2)
add_test(NAME multirank_plan_dp2_zero3_step COMMAND ${mr_zero} dp2_zero3_step 2 1 3)
add_test(NAME multirank_plan_dp2_tp2_zero3_step COMMAND ${mr_zero} dp2_tp2_zero3_step 2 2 3 ${megatron})
list(APPEND mr_tests multirank_plan_dp2_zero2_step multirank_plan_dp2_zero3_step multirank_plan_dp2_tp2_zero3_step)

# Offload across data-parallel ranks (run_offload_dp.sh): 2 ranks with the state at home
# on the host, 4 with it on NVMe, 2 with 2 micro-batches each, each equal to one rank
# without a budget; the same at ZeRO stage 3 (each rank its own chunks at home, and a
# checkpoint resumed); and with tensor or pipeline parallelism.
set(mr_offload sh ${MR_DIR}/run_offload_dp.sh $<TARGET_FILE:colossalc> ${MR_WORK} ${COLOSSALC_TORCH_PYTHON}
    ${CMAKE_SOURCE_DIR} "${MR_MPIRUN}")
add_test(NAME multirank_offload_dp2 COMMAND ${mr_offload} 2 host)
add_test(NAME multirank_offload_dp4_nvme COMMAND ${mr_offload} 4 nvme)
add_test(NAME multirank_offload_dp2_mb2 COMMAND ${mr_offload} 2 mb2)
add_test(NAME multirank_offload_dp2_zero3 COMMAND ${mr_offload} 2 host 3)
add_test(NAME multirank_offload_dp4_zero3_nvme COMMAND ${mr_offload} 4 nvme 3)
add_test(NAME multirank_offload_dp2_zero3_mb2 COMMAND ${mr_offload} 2 mb2 3)
# dp x tp, dp x pp and tp x pp with offload under tight budgets, at ZeRO 0 and (dp x tp) 3
add_test(NAME multirank_offload_dp2_tp2 COMMAND ${mr_offload} 4 tp2)
add_test(NAME multirank_offload_dp2_tp2_zero3 COMMAND ${mr_offload} 4 tp2 3)
add_test(NAME multirank_offload_dp2_pp2 COMMAND ${mr_offload} 4 pp2)
# (tp x pp under ZB-H1: each stage's offload plan walks its B and W passes; dp x pp 1F1B)
add_test(NAME multirank_offload_tp2_pp2 COMMAND ${CMAKE_COMMAND} -E env SCHEDULE=zb-h1 ${mr_offload} 4 tp2pp2)
# no budget given: the search offloads the state for 16 MiB devices, -o compiles it
add_test(NAME multirank_offload_planned COMMAND ${mr_offload} 2 planned)
# LAMB's three passes over the chunks: ZeRO-3's owners with the state on NVMe, and
# resumed (the same code runs for every mesh above; plan_lamb checks that the search
# offloads LAMB's state where it offloads AdamW's)
add_test(NAME multirank_offload_lamb_dp2_zero3_nvme COMMAND ${CMAKE_COMMAND} -E env OPTIMIZER=lamb ${mr_offload} 2 nvme 3)
list(APPEND mr_tests multirank_offload_lamb_dp2_zero3_nvme)
list(APPEND mr_tests multirank_offload_dp2 multirank_offload_dp4_nvme multirank_offload_dp2_mb2
     multirank_offload_dp2_zero3 multirank_offload_dp4_zero3_nvme multirank_offload_dp2_zero3_mb2
     multirank_offload_dp2_tp2 multirank_offload_dp2_tp2_zero3 multirank_offload_dp2_pp2 multirank_offload_tp2_pp2
     multirank_offload_planned)
list(APPEND mr_tests multirank_tp2 multirank_tp2_search multirank_pp2_1f1b multirank_pp2_interleaved multirank_dp2_tp2
     multirank_dp2_pp2 multirank_tp2_pp2 multirank_dp2_tp2_pp2 multirank_tp2_bf16 multirank_pp2_bf16
     multirank_pp2_interleaved_bf16 multirank_dp2_tp2_pp2_bf16 multirank_tp2_fp8 multirank_dp2_tp2_fp8 multirank_dp2_fp8
     multirank_dp2_tp2_pp2_fp8 multirank_pp2_fp8 multirank_pp2_interleaved_fp8)
set_tests_properties(${mr_tests} PROPERTIES FIXTURES_REQUIRED multirank_bins TIMEOUT 600)
# 1 to 8 s each on an idle machine, several times that when other runs share its two
# cores (their ranks outnumber the cores): not fast
colossalc_label(multirank multirank_build ${mr_tests})

# Under the sanitizers, Open MPI's own leaks are suppressed (lsan.supp says how);
# mpirun passes its environment on to the ranks it starts on this machine.
if(COLOSSALC_SANITIZE)
  set(mr_env OMPI_MCA_mca_base_component_disable_dlclose=1
      ASAN_OPTIONS=${COLOSSALC_ASAN_OPTIONS}:fast_unwind_on_malloc=0
      LSAN_OPTIONS=suppressions=${MR_DIR}/lsan.supp:print_suppressions=0)
  set_tests_properties(${mr_tests} multirank_comm_self multirank_comm_np3 PROPERTIES
                       ENVIRONMENT "${mr_env}")
  set_tests_properties(multirank_comm_np3_chunked PROPERTIES
                       ENVIRONMENT "${mr_env};COLOSSALC_MPI_CHUNK=3")
endif()
