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
foreach(entry ${COLOSSALC_TINY_MODELS})
  colossalc_tiny_model("${entry}")
  add_test(NAME lower_${tiny_name} COMMAND test_lower ${tiny_model} ${tiny_config})
endforeach()
