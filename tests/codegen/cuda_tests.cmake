# Tests of the CUDA emitter (codegen/cuda.c), included when the CUDA toolkit is found.
# Only this test links NVRTC (the product will dlopen it). The host tier compiles the
# emitted source as C++ behind a shim of the CUDA built-ins and compares every kernel
# with kernel_eval; the GPU tier does the same on a GPU and skips (77) without one.
find_program(COLOSSALC_HOST_CXX NAMES c++ g++ clang++ DOC "C++ compiler for the CUDA emitter's host-shim test")
if(NOT COLOSSALC_HOST_CXX)
  set(COLOSSALC_HOST_CXX c++)   # codegen_cuda_host then fails and says why
endif()
set(COLOSSALC_HOST_CXX_FLAGS "")
if(COLOSSALC_SANITIZE)
  set(COLOSSALC_HOST_CXX_FLAGS "-fsanitize=address,undefined -fno-sanitize-recover=all")
endif()

add_executable(test_codegen_cuda ${CMAKE_CURRENT_LIST_DIR}/test_cuda.c)
# libnvrtc itself, not CUDA::nvrtc: that target drags CUDA::cuda_driver along, and
# where the linker keeps unused libraries (the sanitizer build) the test would then
# need libcuda.so.1 to start, on machines that have no GPU driver.
target_link_libraries(test_codegen_cuda PRIVATE colossalc_core ${CUDA_nvrtc_LIBRARY} ${CMAKE_DL_LIBS})
target_include_directories(test_codegen_cuda PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_compile_definitions(test_codegen_cuda PRIVATE
  COLOSSALC_HOST_CXX="${COLOSSALC_HOST_CXX}" COLOSSALC_HOST_CXX_FLAGS="${COLOSSALC_HOST_CXX_FLAGS}"
  COLOSSALC_SOURCE_DIR="${CMAKE_SOURCE_DIR}")

add_test(NAME codegen_cuda_emit COMMAND test_codegen_cuda emit)
add_test(NAME codegen_cuda_nvrtc_sm80 COMMAND test_codegen_cuda nvrtc sm_80)
add_test(NAME codegen_cuda_nvrtc_sm90 COMMAND test_codegen_cuda nvrtc sm_90)
add_test(NAME codegen_cuda_nvrtc_compute90 COMMAND test_codegen_cuda nvrtc compute_90)
add_test(NAME codegen_cuda_nvrtc_report COMMAND test_codegen_cuda nvrtc-report)
add_test(NAME codegen_cuda_host COMMAND test_codegen_cuda host WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
add_test(NAME codegen_cuda_gpu COMMAND test_codegen_cuda gpu)
set_tests_properties(codegen_cuda_host PROPERTIES TIMEOUT 900)
set_tests_properties(codegen_cuda_gpu PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)
colossalc_label(fast codegen_cuda_emit codegen_cuda_nvrtc_sm80 codegen_cuda_nvrtc_sm90 codegen_cuda_nvrtc_compute90
                codegen_cuda_nvrtc_report codegen_cuda_host codegen_cuda_gpu)

# Every kernel lowering makes of small configurations of the model zoo: NVRTC compiles
# them, the host shim runs the whole step against kernel_eval.
foreach(entry ${COLOSSALC_TINY_MODELS})
  colossalc_tiny_model("${entry}")
  add_test(NAME codegen_cuda_lowered_${tiny_name}
           COMMAND test_codegen_cuda lowered ${tiny_model} ${tiny_config}
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(codegen_cuda_lowered_${tiny_name} PROPERTIES TIMEOUT 900)
  add_test(NAME codegen_cuda_lowered_${tiny_name}_fused
           COMMAND test_codegen_cuda lowered ${tiny_model} --attention=fused --classifier=fused ${tiny_config}
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(codegen_cuda_lowered_${tiny_name}_fused PROPERTIES TIMEOUT 900)
  colossalc_label(fast codegen_cuda_lowered_${tiny_name} codegen_cuda_lowered_${tiny_name}_fused) # 1 to 3 s
endforeach()
# and gpt2-tiny in bf16 mixed precision (16-bit buffers, GEMM operands and roundings)
add_test(NAME codegen_cuda_lowered_gpt2_tiny_bf16
         COMMAND test_codegen_cuda lowered ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model --precision=bf16
                 batch=2 seq=16 layers=2
         WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(codegen_cuda_lowered_gpt2_tiny_bf16 PROPERTIES TIMEOUT 900)
add_test(NAME codegen_cuda_lowered_gpt2_tiny_bf16_fused
         COMMAND test_codegen_cuda lowered ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model --precision=bf16 --attention=fused
                 --classifier=fused batch=2 seq=40 layers=2
         WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(codegen_cuda_lowered_gpt2_tiny_bf16_fused PROPERTIES TIMEOUT 900)
# attention on tensor cores where the emulation can tell a wrong fragment: bf16 with a
# head of 64 (four k steps), 70 rows (a block's tail; three key blocks, the last partial);
# BERT's in f16, not causal, a head of 16 (one k step)
add_test(NAME codegen_cuda_lowered_gpt2_tiny_bf16_mma
         COMMAND test_codegen_cuda lowered ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model --precision=bf16 --attention=fused
                 d=128 heads=2 batch=2 seq=70 layers=1
         WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
add_test(NAME codegen_cuda_lowered_bert_f16_mma
         COMMAND test_codegen_cuda lowered ${CMAKE_SOURCE_DIR}/models/bert.model --precision=fp16 --attention=fused
                 vocab=64 ctx=40 d=64 heads=4 layers=1 ffn=48 batch=2 seq=36
         WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(codegen_cuda_lowered_gpt2_tiny_bf16 codegen_cuda_lowered_gpt2_tiny_bf16_mma
                     codegen_cuda_lowered_bert_f16_mma PROPERTIES TIMEOUT 900)
colossalc_label(fast codegen_cuda_lowered_gpt2_tiny_bf16 codegen_cuda_lowered_gpt2_tiny_bf16_fused
                codegen_cuda_lowered_gpt2_tiny_bf16_mma codegen_cuda_lowered_bert_f16_mma)
add_test(NAME codegen_cuda_lowered_gpt2_tiny_fp8
         COMMAND test_codegen_cuda lowered ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model --precision=fp8 --attention=fused
                 batch=2 seq=16 layers=2
         WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(codegen_cuda_lowered_gpt2_tiny_fp8 PROPERTIES TIMEOUT 900)
colossalc_label(cuda_emul codegen_cuda_lowered_gpt2_tiny_fp8) # about 5 s
# fused attention's warp per row where a head is not a whole number of warps (40
# columns: lanes past the head idle) and the keys are three blocks of 32, the last partial
add_test(NAME codegen_cuda_lowered_gpt2_attn_blocks
         COMMAND test_codegen_cuda lowered ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model --attention=fused
                 d=80 heads=2 batch=2 seq=70 layers=1
         WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(codegen_cuda_lowered_gpt2_attn_blocks PROPERTIES TIMEOUT 900)
colossalc_label(fast codegen_cuda_lowered_gpt2_attn_blocks)

# The CUDA source of every kernel of every model in models/, at its real size, compiles
# through NVRTC for sm_80 and sm_90; for sm_90 no kernel uses local memory (no stack
# frame, no spills) or more than 64 registers (at most 1,024 resident threads of 2,048
# an SM holds), from ptxas's report. The sm_90 checks compile twice (the second time for
# that report), 2 to 6 s a model: not in the fast tier.
add_executable(nvrtc_check ${CMAKE_CURRENT_LIST_DIR}/nvrtc_check.c)
target_link_libraries(nvrtc_check PRIVATE ${CUDA_nvrtc_LIBRARY})
target_include_directories(nvrtc_check PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
file(GLOB nvrtc_models CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/models/*.model)
foreach(model ${nvrtc_models})
  get_filename_component(stem ${model} NAME_WE)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/cuda-${stem})
  add_test(NAME nvrtc_emit_${stem} COMMAND colossalc ${model} --emit-cuda ${dir})
  set_tests_properties(nvrtc_emit_${stem} PROPERTIES FIXTURES_SETUP cuda_${stem})
  add_test(NAME nvrtc_${stem}_sm_80 COMMAND nvrtc_check ${dir}/kernels.cu sm_80)
  add_test(NAME nvrtc_${stem}_sm_90 COMMAND nvrtc_check ${dir}/kernels.cu sm_90 64)
  set_tests_properties(nvrtc_${stem}_sm_80 nvrtc_${stem}_sm_90 PROPERTIES FIXTURES_REQUIRED cuda_${stem} TIMEOUT 900)
  colossalc_label(fast nvrtc_emit_${stem} nvrtc_${stem}_sm_80)
  colossalc_label(vendor nvrtc_${stem}_sm_80)
  colossalc_label(cuda_emul nvrtc_${stem}_sm_90)
endforeach()
# GPT-2's bf16 and fp16 programs (their 16-bit loads, stores and roundings; attention on
# tensor cores: mma.sync in every attention kernel's PTX, registers and shared memory within
# the two resident blocks its launch bounds ask for, no spills) and fp8 program (its 8-bit
# stores and loads: the quantizing and descaling kernels)
foreach(prec bf16 fp16 fp8)
  add_test(NAME nvrtc_emit_gpt2_${prec} COMMAND colossalc ${CMAKE_SOURCE_DIR}/models/gpt2.model --precision ${prec}
           --emit-cuda ${CMAKE_CURRENT_BINARY_DIR}/cuda-gpt2-${prec})
  set_tests_properties(nvrtc_emit_gpt2_${prec} PROPERTIES FIXTURES_SETUP cuda_gpt2_${prec})
  set(cu ${CMAKE_CURRENT_BINARY_DIR}/cuda-gpt2-${prec}/kernels.cu)
  set(mma "")
  if(NOT prec STREQUAL "fp8")
    set(mma --mma) # attention on tensor cores (bf16, f16)
  endif()
  add_test(NAME nvrtc_gpt2_${prec}_sm_80 COMMAND nvrtc_check ${cu} sm_80 64 ${mma})
  add_test(NAME nvrtc_gpt2_${prec}_sm_90 COMMAND nvrtc_check ${cu} sm_90 64 ${mma})
  set_tests_properties(nvrtc_gpt2_${prec}_sm_80 nvrtc_gpt2_${prec}_sm_90 PROPERTIES FIXTURES_REQUIRED cuda_gpt2_${prec}
                       TIMEOUT 900)
  colossalc_label(fast nvrtc_emit_gpt2_${prec} nvrtc_gpt2_${prec}_sm_80)
  colossalc_label(vendor nvrtc_gpt2_${prec}_sm_80)
  colossalc_label(cuda_emul nvrtc_gpt2_${prec}_sm_90)
endforeach()
# LLaMA's head of 128 in bf16: the widest tiles and the most registers of the tensor-core
# attention (three [32][128] tiles, the A fragments of two operands), still no spills
add_test(NAME nvrtc_emit_llama_bf16 COMMAND colossalc ${CMAKE_SOURCE_DIR}/models/llama.model --precision bf16
         --emit-cuda ${CMAKE_CURRENT_BINARY_DIR}/cuda-llama-bf16)
set_tests_properties(nvrtc_emit_llama_bf16 PROPERTIES FIXTURES_SETUP cuda_llama_bf16)
add_test(NAME nvrtc_llama_bf16_sm_90 COMMAND nvrtc_check ${CMAKE_CURRENT_BINARY_DIR}/cuda-llama-bf16/kernels.cu sm_90 64
                                             --mma)
set_tests_properties(nvrtc_llama_bf16_sm_90 PROPERTIES FIXTURES_REQUIRED cuda_llama_bf16 TIMEOUT 900)
colossalc_label(cuda_emul nvrtc_emit_llama_bf16 nvrtc_llama_bf16_sm_90)
