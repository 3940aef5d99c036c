# The LLVM CPU emitter (codegen/llvm.c) against the reference evaluator, and its IR.
add_executable(test_llvm ${CMAKE_CURRENT_SOURCE_DIR}/codegen/test_llvm.c)
target_link_libraries(test_llvm PRIVATE colossalc_core ${CMAKE_DL_LIBS})
set(CODEGEN_TEST_WORK ${CMAKE_CURRENT_BINARY_DIR}/codegen-work)
file(MAKE_DIRECTORY ${CODEGEN_TEST_WORK})
add_test(NAME codegen_llvm_numerics COMMAND test_llvm numerics WORKING_DIRECTORY ${CODEGEN_TEST_WORK})
add_test(NAME codegen_llvm_ir COMMAND test_llvm ir WORKING_DIRECTORY ${CODEGEN_TEST_WORK})
colossalc_label(fast codegen_llvm_numerics codegen_llvm_ir)
# Every kernel of small configurations of the model zoo, compiled, against kernel_eval.
foreach(entry ${COLOSSALC_TINY_MODELS})
  colossalc_tiny_model("${entry}")
  add_test(NAME codegen_llvm_lowered_${tiny_name} COMMAND test_llvm lowered ${tiny_model} ${tiny_config}
           WORKING_DIRECTORY ${CODEGEN_TEST_WORK})
  add_test(NAME codegen_llvm_lowered_${tiny_name}_fused COMMAND test_llvm lowered ${tiny_model} --attention=fused
           --classifier=fused ${tiny_config} WORKING_DIRECTORY ${CODEGEN_TEST_WORK})
  colossalc_label(fast codegen_llvm_lowered_${tiny_name} codegen_llvm_lowered_${tiny_name}_fused)
endforeach()
# and gpt2-tiny in bf16 mixed precision
add_test(NAME codegen_llvm_lowered_gpt2_tiny_bf16 COMMAND test_llvm lowered ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model
         --precision=bf16 batch=2 seq=16 layers=2 WORKING_DIRECTORY ${CODEGEN_TEST_WORK})
# and with the fused kernels (bf16 q, k, v read by flash_attention; seq 40: a key block and a part)
add_test(NAME codegen_llvm_lowered_gpt2_tiny_bf16_fused COMMAND test_llvm lowered ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model
         --precision=bf16 --attention=fused --classifier=fused batch=2 seq=40 layers=2 WORKING_DIRECTORY ${CODEGEN_TEST_WORK})
# and in fp8 (the quantizing kernels' e4m3 and e5m2 stores, the fp8 GEMMs' descaling, the
# scaling states' update)
add_test(NAME codegen_llvm_lowered_gpt2_tiny_fp8 COMMAND test_llvm lowered ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model
         --precision=fp8 --attention=fused batch=2 seq=16 layers=2 WORKING_DIRECTORY ${CODEGEN_TEST_WORK})
colossalc_label(fast codegen_llvm_lowered_gpt2_tiny_bf16 codegen_llvm_lowered_gpt2_tiny_bf16_fused
                codegen_llvm_lowered_gpt2_tiny_fp8)
