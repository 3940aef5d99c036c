# Plan search and cost model: formulas, published runs, the command line.
foreach(t plan_cost plan_published)
  add_executable(test_${t} ${CMAKE_CURRENT_SOURCE_DIR}/plan/test_${t}.c)
  target_link_libraries(test_${t} PRIVATE colossalc_core)
  add_test(NAME ${t} COMMAND test_${t} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  colossalc_label(fast ${t})
endforeach()
set(COLOSSALC_PLAN_PYTHON /usr/bin/python3 CACHE FILEPATH "Python for the plan command-line tests")
foreach(t acceptance text_svg forced infeasible cluster_files from_file determinism offload offload_state compile
          memory_compiled collectives_compiled time_reported calibrate lamb zb_h1 ulysses)
  add_test(NAME plan_${t}
           COMMAND ${COLOSSALC_PLAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/plan/check_plan.py ${t} $<TARGET_FILE:colossalc>
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
endforeach()
add_test(NAME plan_compose
         COMMAND ${COLOSSALC_PLAN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/plan/check_compose.py $<TARGET_FILE:colossalc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
colossalc_label(fast plan_acceptance plan_text_svg plan_forced plan_infeasible plan_cluster_files plan_from_file
                plan_determinism plan_offload plan_offload_state plan_compile plan_collectives_compiled plan_compose
                plan_lamb plan_zb_h1 plan_ulysses)
# compiles and links eleven programs (-o train): about 10 s
colossalc_label(e2e plan_memory_compiled)
# compiles two programs and trains 25 steps: about 5 s
colossalc_label(e2e plan_time_reported)
# measures the machine (MPI ranks, a 256 MiB file): about 5 s; under the sanitizers Open
# MPI's own leaks are suppressed as for the multi-rank tests (tests/multirank/lsan.supp)
colossalc_label(e2e plan_calibrate)
if(COLOSSALC_SANITIZE)
  set_tests_properties(plan_calibrate PROPERTIES ENVIRONMENT
    "OMPI_MCA_mca_base_component_disable_dlclose=1;ASAN_OPTIONS=${COLOSSALC_ASAN_OPTIONS}:fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/multirank/lsan.supp:print_suppressions=0")
endif()
