# ONNX import (docs/onnx.md): torch models exported with torch.onnx, compiled, their
# forward loss against onnxruntime's and 5 AdamW steps against PyTorch's (run_onnx.sh);
# the imported GPT-2's plans against models/gpt2.model's (run_plans.sh); malformed
# and unsupported files (tests/onnx/bad, check_bad.py).
set(ONNX_WORK ${CMAKE_BINARY_DIR}/onnx-work)
foreach(kind mlp gpt2 llama)
  add_test(NAME onnx_${kind}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_onnx.sh $<TARGET_FILE:colossalc> $<TARGET_FILE:colossalc-mktokens>
                   ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR} ${ONNX_WORK}/${kind} ${kind})
  set_tests_properties(onnx_${kind} PROPERTIES LABELS onnx TIMEOUT 300)
  colossalc_label(reference onnx_${kind}) # 3 to 8 s
endforeach()
add_test(NAME onnx_gpt2_plans
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_plans.sh $<TARGET_FILE:colossalc> ${COLOSSALC_TORCH_PYTHON}
                 ${CMAKE_SOURCE_DIR} ${ONNX_WORK}/plans)
set_tests_properties(onnx_gpt2_plans PROPERTIES LABELS onnx TIMEOUT 300)
colossalc_label(reference onnx_gpt2_plans)
# Malformed and unsupported files (tests/onnx/bad/make.py writes them): exit status 1 and
# one line naming the file and the node, initialiser or input at fault. One test a file.
file(GLOB COLOSSALC_BAD_ONNX CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/bad/*.onnx)
foreach(file ${COLOSSALC_BAD_ONNX})
  get_filename_component(stem ${file} NAME_WE)
  add_test(NAME onnx_bad_${stem} COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_bad_onnx.py ${COLOSSALC_BIN} ${file})
  set_tests_properties(onnx_bad_${stem} PROPERTIES LABELS bad TIMEOUT 60)
  colossalc_label(fast onnx_bad_${stem})
endforeach()
# The imported GPT-2 compiled for tensor and pipeline parallelism (4 ranks under mpirun)
# against the same one-process reference
if(MPIEXEC_EXECUTABLE)
  string(STRIP "${MPIEXEC_EXECUTABLE} ${COLOSSALC_MPIEXEC_FLAGS}" onnx_mpirun)
  add_test(NAME onnx_gpt2_tp2_pp2
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_onnx.sh $<TARGET_FILE:colossalc> $<TARGET_FILE:colossalc-mktokens>
                   ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR} ${ONNX_WORK}/gpt2-tp2-pp2 gpt2 "${onnx_mpirun}"
                   --gpus,4,--gpu,cpu,--dp,1,--tp,2,--pp,2)
  set_tests_properties(onnx_gpt2_tp2_pp2 PROPERTIES LABELS onnx TIMEOUT 300)
  colossalc_label(reference onnx_gpt2_tp2_pp2)
  if(COLOSSALC_SANITIZE) # Open MPI's own leaks, as for the multi-rank tests (tests/multirank/lsan.supp)
    set_tests_properties(onnx_gpt2_tp2_pp2 PROPERTIES ENVIRONMENT
      "OMPI_MCA_mca_base_component_disable_dlclose=1;ASAN_OPTIONS=${COLOSSALC_ASAN_OPTIONS}:fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/multirank/lsan.supp:print_suppressions=0")
  endif()
endif()
