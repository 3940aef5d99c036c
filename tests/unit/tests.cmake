# Unit tests: no backend needed.
foreach(t shapes frontend gradcheck interp_torch)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_${t}.c)
    add_executable(test_${t} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_${t}.c)
    target_link_libraries(test_${t} PRIVATE colossalc_core)
    add_test(NAME unit_${t} COMMAND test_${t})
  endif()
endforeach()

# Lowering (fusion, views, memory plan, every kernel rule) against the interpreter.
add_executable(test_lower ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_lower.c)
target_link_libraries(test_lower PRIVATE colossalc_core)
add_test(NAME lower_gpt2_tiny COMMAND test_lower models/gpt2-tiny.model batch=2 seq=16 layers=2
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME lower_llama_tiny COMMAND test_lower models/llama.model vocab=64 d=32 heads=4 layers=2 ffn=48 batch=2 seq=8
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME lower_bert_tiny COMMAND test_lower models/bert.model vocab=64 ctx=16 d=32 heads=4 layers=2 ffn=48 batch=2 seq=8 pdrop=0.2
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME lower_vit_tiny COMMAND test_lower models/vit.model image=16 patch=8 classes=10 d=32 heads=4 layers=2 mlp_dim=48 batch=2 pdrop=0.2
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
