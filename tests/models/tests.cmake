# Parameter names, shapes and counts of every model against PyTorch modules built
# independently (tests/models/param_reference.py, run by Debian's python3-torch).
set(COLOSSALC_TORCH_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with torch, for reference tests")
add_test(NAME models_param_reference
         COMMAND ${COLOSSALC_TORCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/param_reference.py
                 --check $<TARGET_FILE:colossalc>
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
colossalc_label("fast;reference" models_param_reference) # about 1.5 s
