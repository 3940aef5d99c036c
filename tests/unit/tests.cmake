# Unit tests: no backend needed.
foreach(t shapes frontend)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_${t}.c)
    add_executable(test_${t} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_${t}.c)
    target_link_libraries(test_${t} PRIVATE colossalc_core)
    add_test(NAME unit_${t} COMMAND test_${t})
  endif()
endforeach()
