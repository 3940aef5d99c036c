# Malformed models: each file in tests/bad must fail with exit status 1 and one
# located error (`FILE:LINE:COL: error: ...`, the source line, a caret), as its first
# line or expect.txt says; check_bad.py runs it. One test per file: bad_<stem>.
file(GLOB COLOSSALC_BAD_MODELS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.model)
foreach(model ${COLOSSALC_BAD_MODELS})
  get_filename_component(stem ${model} NAME_WE)
  get_filename_component(name ${model} NAME)
  add_test(NAME bad_${stem}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_bad.py ${COLOSSALC_BIN} ${name}
           WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR})
  set_tests_properties(bad_${stem} PROPERTIES LABELS bad TIMEOUT 60)
  colossalc_label(fast bad_${stem})
endforeach()

# Command-line mistakes: one line each, exit status 1 (check_cli.py).
add_test(NAME bad_command_line COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_cli.py ${COLOSSALC_BIN}
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(bad_command_line PROPERTIES LABELS bad TIMEOUT 120)
colossalc_label(fast bad_command_line)
