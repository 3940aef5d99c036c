# The CUDA device without a GPU: host emulations of the driver, NVRTC and cuBLASLt,
# built under the vendors' sonames into one directory that the tests put first on
# LD_LIBRARY_PATH, so the real `train` runs --device cuda on this machine (driver.c,
# nvrtc.c, cublaslt.c). And real NVRTC: the kernels compiled for sm_80 and sm_90 at
# start-up, into the kernel cache (train --compile-kernels needs no GPU).
set(CUDA_EMUL_LIB ${CMAKE_BINARY_DIR}/cuda-emul/lib)
file(MAKE_DIRECTORY ${CUDA_EMUL_LIB})
foreach(lib cuda:driver:1 nvrtc:nvrtc:13 cublasLt:cublaslt:13)
  string(REPLACE ":" ";" parts ${lib})
  list(GET parts 0 name)
  list(GET parts 1 src)
  list(GET parts 2 so)
  add_library(cuda_emul_${src} SHARED ${CMAKE_CURRENT_LIST_DIR}/${src}.c)
  set_target_properties(cuda_emul_${src} PROPERTIES OUTPUT_NAME ${name} SOVERSION ${so}
                        LIBRARY_OUTPUT_DIRECTORY ${CUDA_EMUL_LIB})
  target_include_directories(cuda_emul_${src} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
endforeach()
target_compile_definitions(cuda_emul_nvrtc PRIVATE
  COLOSSALC_HOST_CXX="${COLOSSALC_HOST_CXX}" COLOSSALC_HOST_CXX_FLAGS="${COLOSSALC_HOST_CXX_FLAGS}"
  COLOSSALC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
target_link_libraries(cuda_emul_cublaslt PRIVATE ${COLOSSALC_OPENBLAS})
target_link_libraries(cuda_emul_driver PRIVATE ${CMAKE_DL_LIBS})

set(CUDA_WORK ${CMAKE_BINARY_DIR}/cuda-work)
file(MAKE_DIRECTORY ${CUDA_WORK})
set(cuda_run sh ${CMAKE_CURRENT_LIST_DIR}/run_cuda.sh $<TARGET_FILE:colossalc> $<TARGET_FILE:colossalc-mktokens>
    ${CMAKE_SOURCE_DIR} ${CUDA_WORK} ${COLOSSALC_TORCH_PYTHON} ${CUDA_EMUL_LIB})
# One rank through the emulated CUDA device equals the CPU device; the second start
# finds every kernel in the cache; a damaged entry is rebuilt.
add_test(NAME cuda_emul_one_rank COMMAND ${cuda_run} one_rank)
# Real NVRTC, no GPU: every kernel of the program compiles for sm_80 and sm_90, the
# second time from the cache, a damaged entry again.
add_test(NAME cuda_nvrtc_cache COMMAND ${cuda_run} nvrtc_cache)
# Without a GPU, --device cuda is one clear line and exit status 1.
add_test(NAME cuda_no_gpu COMMAND ${cuda_run} no_gpu)
# What the CUDA device does not run yet (several ranks, offload) is refused with why.
string(STRIP "${MPIEXEC_EXECUTABLE} ${COLOSSALC_MPIEXEC_FLAGS}" cuda_mpirun)
add_test(NAME cuda_emul_refusals COMMAND ${cuda_run} refusals "${cuda_mpirun}")
set_tests_properties(cuda_emul_one_rank cuda_nvrtc_cache cuda_no_gpu cuda_emul_refusals PROPERTIES TIMEOUT 900)
if(COLOSSALC_SANITIZE)
  set_tests_properties(cuda_emul_one_rank cuda_nvrtc_cache PROPERTIES ENVIRONMENT
    "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_LIST_DIR}/lsan.supp:print_suppressions=0")
  # mpirun: Open MPI's own leaks, as for the multi-rank tests
  set_tests_properties(cuda_emul_refusals PROPERTIES ENVIRONMENT
    "OMPI_MCA_mca_base_component_disable_dlclose=1;ASAN_OPTIONS=fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/multirank/lsan.supp:print_suppressions=0")
endif()
