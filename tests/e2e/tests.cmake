# End-to-end: `colossalc -o train`, then train against PyTorch and across a resume.
set(E2E_WORK ${CMAKE_BINARY_DIR}/e2e-work)
add_test(NAME e2e_gpt2_vs_torch
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_vs_torch.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR} ${E2E_WORK}/torch)
add_test(NAME e2e_resume
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/e2e/run_resume.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-mktokens> ${CMAKE_SOURCE_DIR} ${E2E_WORK}/resume)
set_tests_properties(e2e_gpt2_vs_torch e2e_resume PROPERTIES TIMEOUT 600)
