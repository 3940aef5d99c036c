# The LLVM CPU emitter (codegen/llvm.c) against the reference evaluator, and its IR.
add_executable(test_llvm ${CMAKE_CURRENT_SOURCE_DIR}/codegen/test_llvm.c)
target_link_libraries(test_llvm PRIVATE colossalc_core ${CMAKE_DL_LIBS})
set(CODEGEN_TEST_WORK ${CMAKE_CURRENT_BINARY_DIR}/codegen-work)
file(MAKE_DIRECTORY ${CODEGEN_TEST_WORK})
add_test(NAME codegen_llvm_numerics COMMAND test_llvm numerics WORKING_DIRECTORY ${CODEGEN_TEST_WORK})
add_test(NAME codegen_llvm_ir COMMAND test_llvm ir WORKING_DIRECTORY ${CODEGEN_TEST_WORK})
# Every kernel of small configurations of the model zoo, compiled, against kernel_eval.
set(LLVM_LOWERED_MODELS
  "gpt2_tiny|gpt2-tiny.model|batch=2 seq=16 layers=2"
  "llama_tiny|llama.model|vocab=64 d=32 heads=4 layers=2 ffn=48 batch=2 seq=8"
  "bert_tiny|bert.model|vocab=64 ctx=16 d=32 heads=4 layers=2 ffn=48 batch=2 seq=8 pdrop=0.2"
  "vit_tiny|vit.model|image=16 patch=8 classes=10 d=32 heads=4 layers=2 mlp_dim=48 batch=2 pdrop=0.2")
foreach(entry ${LLVM_LOWERED_MODELS})
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 model)
  list(GET parts 2 config)
  separate_arguments(config UNIX_COMMAND "${config}")
  add_test(NAME codegen_llvm_lowered_${name}
           COMMAND test_llvm lowered ${CMAKE_SOURCE_DIR}/models/${model} ${config}
           WORKING_DIRECTORY ${CODEGEN_TEST_WORK})
endforeach()
