# Golden IR dumps of every model, and the IR text round trip on each of them.
add_executable(test_irparse ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_irparse.c)
target_link_libraries(test_irparse PRIVATE colossalc_core)
file(GLOB golden_models RELATIVE ${CMAKE_SOURCE_DIR} CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/models/*.model)
foreach(model ${golden_models})
  get_filename_component(stem ${model} NAME_WE)
  set(golden ${CMAKE_CURRENT_SOURCE_DIR}/golden/${stem}.ir)
  add_test(NAME golden_${stem}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/golden/check_dump.sh $<TARGET_FILE:colossalc> ${model} ${golden}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  add_test(NAME irparse_${stem} COMMAND test_irparse ${golden})
  colossalc_label(fast golden_${stem} irparse_${stem})
endforeach()
