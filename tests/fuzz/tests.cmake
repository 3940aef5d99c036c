# The fuzz target over the seed inputs once (no mutation), when the fuzz build is
# on (scripts/fuzz.sh configures it): a crash found by fuzzing and then added to
# tests/bad/ shows up here as a regression. Long fuzzing runs are scripts/fuzz.sh.
if(COLOSSALC_FUZZ)
  set(fuzz_scratch ${CMAKE_CURRENT_BINARY_DIR}/fuzz_corpus_scratch)
  file(MAKE_DIRECTORY ${fuzz_scratch})
  add_test(NAME fuzz_frontend_corpus
           COMMAND fuzz_frontend -runs=0 -timeout=10 -rss_limit_mb=2048 ${fuzz_scratch}
                   ${CMAKE_SOURCE_DIR}/models ${CMAKE_SOURCE_DIR}/tests/bad ${CMAKE_SOURCE_DIR}/tests/golden
                   ${CMAKE_CURRENT_LIST_DIR}/seeds)
  set_tests_properties(fuzz_frontend_corpus PROPERTIES TIMEOUT 300)
  set(fuzz_onnx_scratch ${CMAKE_CURRENT_BINARY_DIR}/fuzz_onnx_scratch)
  file(MAKE_DIRECTORY ${fuzz_onnx_scratch})
  add_test(NAME fuzz_onnx_corpus
           COMMAND fuzz_onnx -runs=0 -timeout=10 -rss_limit_mb=2048 ${fuzz_onnx_scratch}
                   ${CMAKE_CURRENT_LIST_DIR}/onnx ${CMAKE_SOURCE_DIR}/tests/onnx/bad ${CMAKE_SOURCE_DIR}/tests/onnx/models)
  set_tests_properties(fuzz_onnx_corpus PROPERTIES TIMEOUT 300)
  set(fuzz_files_scratch ${CMAKE_CURRENT_BINARY_DIR}/fuzz_files_scratch)
  file(MAKE_DIRECTORY ${fuzz_files_scratch})
  add_test(NAME fuzz_files_corpus
           COMMAND fuzz_files -runs=0 -timeout=10 -rss_limit_mb=2048 ${fuzz_files_scratch} ${CMAKE_CURRENT_LIST_DIR}/files)
  set_tests_properties(fuzz_files_corpus PROPERTIES TIMEOUT 300)
  colossalc_label(fuzz fuzz_frontend_corpus fuzz_onnx_corpus fuzz_files_corpus)
endif()
# Random ONNX graphs of the supported ops with edge-value constants and attributes
# (gen_onnx.py), through colossalc: each imports or is refused with one line. In
# every build, so that the sanitizer build checks them too.
add_test(NAME onnx_random_graphs
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_random_onnx.py ${COLOSSALC_BIN}
                 ${CMAKE_CURRENT_BINARY_DIR}/onnx_random 600 1)
set_tests_properties(onnx_random_graphs PROPERTIES LABELS bad TIMEOUT 300)
colossalc_label(fuzz onnx_random_graphs) # about 17 s
