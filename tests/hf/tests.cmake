# transformers checkpoints both ways (runtime/io/hf.h), against transformers from PyPI
# (scripts/setup.sh pins it for Debian's torch): `train --init-from` what
# save_pretrained writes (one file, shards, F16 and BF16) and what the hub holds (no
# prefix, buffers), 3 AdamW steps, `--save-hf` loaded back by from_pretrained; the
# first loss and the logits after the steps within 1e-5 of transformers' own.
# NAME|FAMILY LAYOUT DTYPE SHARD FROM [export] (tests/hf/run_hf.sh)
set(HF_WORK ${CMAKE_BINARY_DIR}/hf-work)
file(MAKE_DIRECTORY ${HF_WORK})
set(HF_CASES
  "gpt2_pretrained|gpt2 pretrained f32 none dir export"
  "gpt2_sharded|gpt2 pretrained f32 500KB index"
  "gpt2_hub|gpt2 hub f32 none file"
  "gpt2_f16|gpt2 pretrained f16 none dir"
  "llama_pretrained|llama pretrained f32 none file export"
  "llama_sharded|llama pretrained f32 200KB dir"
  "llama_bf16_sharded|llama pretrained bf16 100KB index"
  "llama_hub|llama hub f32 none file"
  "llama_tied_f16|llama tied f16 none dir"
  # grouped-query attention (LLaMA 3), a sliding window (Mistral), q/k/v biases and one
  # key/value head (Qwen2)
  "llama3_pretrained|llama3 pretrained f32 none dir export"
  "llama31_scaled|llama31 pretrained f32 none file"
  "mistral_sharded|mistral pretrained f32 200KB index export"
  "qwen2_bf16|qwen2 pretrained bf16 none file export")
foreach(case ${HF_CASES})
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  list(TRANSFORM args REPLACE "^export$" $<TARGET_FILE:colossalc-export>)
  add_test(NAME hf_${name}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/hf/run_hf.sh $<TARGET_FILE:colossalc>
                   $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}
                   ${HF_WORK}/${name} ${args})
  colossalc_label(reference hf_${name}) # 3 to 5 s: transformers is slow to import
endforeach()
# damaged checkpoints and models that are not transformers models: one message, exit 1
add_test(NAME hf_errors
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/hf/run_hf_errors.sh $<TARGET_FILE:colossalc>
                 $<TARGET_FILE:colossalc-export> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR} ${HF_WORK}/errors)
colossalc_label(reference hf_errors)
# the same on a mesh of CPU ranks under mpirun: every rank reads the checkpoint and
# takes its slices, --save-hf gathers the split and staged parameters (GPT-2's tied
# embedding held by the first and last stage)
if(MPIEXEC_EXECUTABLE)
  string(STRIP "${MPIEXEC_EXECUTABLE} ${COLOSSALC_MPIEXEC_FLAGS}" hf_mpirun)
  foreach(case "gpt2_hub_tp2_pp2|1 2 2|gpt2 hub f32 none file"
               "llama_sharded_dp2_tp2|2 2 1|llama pretrained f32 200KB dir"
               # key/value heads split (LLaMA 3, Mistral) and one taken from a whole copy (Qwen2's one head on tp 2)
               "llama3_tp2_pp2|1 2 2|llama3 pretrained f32 none dir"
               "mistral_sharded_dp2_tp2|2 2 1|mistral pretrained f32 200KB index"
               "qwen2_tp2|1 2 1|qwen2 pretrained f32 none file")
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 mesh)
    list(GET parts 2 args)
    separate_arguments(args UNIX_COMMAND "${args}")
    add_test(NAME hf_${name}
             COMMAND ${CMAKE_COMMAND} -E env "MESH=${mesh}" "MPIRUN=${hf_mpirun}"
                     sh ${CMAKE_CURRENT_SOURCE_DIR}/hf/run_hf.sh $<TARGET_FILE:colossalc>
                     $<TARGET_FILE:colossalc-mktokens> ${COLOSSALC_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}
                     ${HF_WORK}/${name} ${args})
    colossalc_label(reference hf_${name})
    if(COLOSSALC_SANITIZE) # Open MPI's own leaks, as for the multi-rank tests
      set_tests_properties(hf_${name} PROPERTIES ENVIRONMENT
        "OMPI_MCA_mca_base_component_disable_dlclose=1;ASAN_OPTIONS=${COLOSSALC_ASAN_OPTIONS}:fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/multirank/lsan.supp:print_suppressions=0")
    endif()
  endforeach()
endif()
