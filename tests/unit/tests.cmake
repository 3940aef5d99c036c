# Unit tests: no backend needed.
foreach(t shapes frontend gradcheck interp_torch pipeline half)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_${t}.c)
    add_executable(test_${t} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_${t}.c)
    target_link_libraries(test_${t} PRIVATE colossalc_core)
    add_test(NAME unit_${t} COMMAND test_${t})
    colossalc_label(fast unit_${t})
  endif()
endforeach()

# The program format (program/program.h): written, read, printed, and refused damaged.
add_executable(test_program ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_program.c)
target_link_libraries(test_program PRIVATE colossalc_program)
add_test(NAME unit_program COMMAND test_program)
colossalc_label(fast unit_program)

# Lowering (fusion, views, memory plan, every kernel rule) against the interpreter.
add_executable(test_lower ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_lower.c)
target_link_libraries(test_lower PRIVATE colossalc_core)
foreach(entry ${COLOSSALC_TINY_MODELS})
  colossalc_tiny_model("${entry}")
  add_test(NAME lower_${tiny_name} COMMAND test_lower ${tiny_model} ${tiny_config})
  # mixed precision (passes/autocast.c): 16-bit tensors and GEMM operands, rounded where
  # the interpreter rounds them
  add_test(NAME lower_${tiny_name}_bf16 COMMAND test_lower ${tiny_model} --precision=bf16 ${tiny_config})
  # fused attention (flash_attention and its gradients' kernels) and the fused classifier
  # (classifier_ce: chunked GEMMs and cross-entropy), in f32 and bf16
  add_test(NAME lower_${tiny_name}_fused COMMAND test_lower ${tiny_model} --attention=fused --classifier=fused
           ${tiny_config})
  add_test(NAME lower_${tiny_name}_fused_bf16 COMMAND test_lower ${tiny_model} --precision=bf16 --attention=fused
           --classifier=fused ${tiny_config})
  colossalc_label(fast lower_${tiny_name} lower_${tiny_name}_bf16 lower_${tiny_name}_fused
                  lower_${tiny_name}_fused_bf16)
endforeach()
add_test(NAME lower_gpt2_tiny_fp16 COMMAND test_lower ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model --precision=fp16
         batch=2 seq=16 layers=2)
colossalc_label(fast lower_gpt2_tiny_fp16)

# The partition pass in exact arithmetic: every rank of a tensor-/pipeline-parallel
# plan interpreted side by side against the whole graph (test_partition.c says how).
add_executable(test_partition ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_partition.c)
target_link_libraries(test_partition PRIVATE colossalc_core)
set(part_gpt2 ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model layers=4 seq=16 batch=4 d=32 heads=4 vocab=64 ctx=32)
# name | model and config | TP PP V strategies
set(part_cases
  "gpt2_tp2_search|gpt2|2 1 1 search" "gpt2_tp2_megatron|gpt2|2 1 1 megatron" "gpt2_tp4_megatron|gpt2|4 1 1 megatron"
  "gpt2_pp2|gpt2|1 2 1 search" "gpt2_pp4|gpt2|1 4 1 search" "gpt2_pp2_interleaved|gpt2|1 2 2 search"
  "gpt2_tp2_pp2_megatron|gpt2|2 2 1 megatron" "gpt2_tp2_pp2_interleaved|gpt2|2 2 2 megatron"
  "llama_tp2_pp2|llama|2 2 1 search" "bert_tp2_megatron|bert|2 1 1 megatron" "bert_tp2_search|bert|2 1 1 search" "vit_tp2_pp2|vit|2 2 1 search"
  "gpt2_tp2_ulysses|gpt2|2 1 1 ulysses" "gpt2_tp4_ulysses|gpt2|4 1 1 ulysses" "llama_tp2_pp2_ulysses|llama|2 2 1 ulysses"
  # grouped-query attention: key/value heads split with the query heads (2 on tp 2), or
  # each rank's one taken from a whole copy (2 on tp 4, 1 on tp 2: Strat.regroup)
  "llama3_tp2_megatron|llama3|2 1 1 megatron" "llama3_tp4_megatron|llama3|4 1 1 megatron"
  "llama3_tp2_pp2|llama3|2 2 1 search" "mistral_tp2_megatron|mistral|2 1 1 megatron"
  "qwen2_tp2_pp2_megatron|qwen2|2 2 1 megatron")
foreach(entry ${COLOSSALC_TINY_MODELS})
  colossalc_tiny_model("${entry}")
  string(REPLACE "_tiny" "" short ${tiny_name})
  set(part_${short} ${tiny_model} ${tiny_config})
endforeach()
set(part_gpt2 ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model layers=4 seq=16 batch=4 d=32 heads=4 vocab=64 ctx=32)
foreach(c ${part_cases})
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 name)
  list(GET parts 1 model)
  list(GET parts 2 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  list(GET part_${model} 0 file)
  set(config ${part_${model}})
  list(REMOVE_AT config 0)
  add_test(NAME partition_${name} COMMAND test_partition ${file} ${args} ${config})
  colossalc_label(fast partition_${name})
endforeach()

# Recompute: bit-exact values, lower work peaks, clone FLOPs against the plan's cost
# model, the DP against brute force and its choices lowered under each budget.
add_executable(test_recompute ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_recompute.c)
target_link_libraries(test_recompute PRIVATE colossalc_core)
foreach(entry ${COLOSSALC_TINY_MODELS})
  colossalc_tiny_model("${entry}")
  add_test(NAME recompute_${tiny_name} COMMAND test_recompute ${tiny_model} ${tiny_config})
  colossalc_label(fast recompute_${tiny_name})
endforeach()
# six layers (brute force over 3^6 choices); attention scores dominate the activations
add_test(NAME recompute_gpt2_scores COMMAND test_recompute --selective-drops ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model
         layers=6 d=32 heads=8 seq=128 ctx=128 batch=2 vocab=64)
colossalc_label(fast recompute_gpt2_scores)

# Offload plans walked independently: parts where kernels need them, the device under
# its capacity, every part home at the end, predicted peaks equal to the walk's.
add_executable(test_verify ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_verify.c)
target_link_libraries(test_verify PRIVATE colossalc_core)
add_test(NAME verify_program_gpt2_tiny COMMAND test_verify ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model batch=2 seq=32)
add_executable(test_offload ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_offload.c)
target_link_libraries(test_offload PRIVATE colossalc_core)
add_test(NAME offload_gpt2_tiny COMMAND test_offload ${CMAKE_SOURCE_DIR}/models/gpt2-tiny.model batch=2 seq=32)
add_test(NAME offload_llama_tiny COMMAND test_offload ${CMAKE_SOURCE_DIR}/models/llama.model
         vocab=512 d=128 heads=4 layers=4 ffn=344 batch=2 seq=16)
colossalc_label(fast verify_program_gpt2_tiny offload_gpt2_tiny offload_llama_tiny)
