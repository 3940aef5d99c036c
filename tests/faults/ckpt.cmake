# Damaged checkpoints, resharding and the soak (tests/faults/run_damage.sh, run_reshard.sh,
# run_soak.sh): the checkpoint half of the fault tests, included by tests/faults/tests.cmake.
add_test(NAME faults_ckpt_damage
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/faults/run_damage.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/faults-work)
set_tests_properties(faults_ckpt_damage PROPERTIES TIMEOUT 300)
colossalc_label(faults faults_ckpt_damage)
add_test(NAME faults_reshard
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/faults/run_reshard.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> $<TARGET_FILE:colossalc-export> ${CMAKE_BINARY_DIR}/faults-work ${COLOSSALC_TORCH_PYTHON}
                 ${CMAKE_SOURCE_DIR} "${MR_MPIRUN}")
set_tests_properties(faults_reshard PROPERTIES TIMEOUT 900)
colossalc_label("faults;slow" faults_reshard)
add_test(NAME faults_soak
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/faults/run_soak.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/faults-work "${MR_MPIRUN}")
set_tests_properties(faults_soak PROPERTIES TIMEOUT 1800)
colossalc_label("faults;slow" faults_soak)
