# link_check: links a program object into `train` the way the colossalc driver will:
#     CC OBJ $(lines of link_flags.txt) -o OUT
# then runs OUT for two steps on DATA. Run with cmake -P and -DCC= -DOBJ= -DFLAGS=
# -DOUT= -DDATA=.
file(STRINGS ${FLAGS} link_args)
if(NOT link_args)
  message(FATAL_ERROR "link_check: ${FLAGS} is empty")
endif()
execute_process(COMMAND ${CC} ${OBJ} ${link_args} -o ${OUT}
                RESULT_VARIABLE rc ERROR_VARIABLE errors)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "link_check: linking failed (${rc}):\n${errors}")
endif()
execute_process(COMMAND ${OUT} --data ${DATA} --steps 2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE errors)
if(NOT rc EQUAL 0 OR NOT out MATCHES "step 2/2 \\| loss [0-9.]+ \\| lr")
  message(FATAL_ERROR "link_check: ${OUT} failed (${rc}):\n${out}\n${errors}")
endif()
message(STATUS "link_check: ${OUT} linked from ${FLAGS} and trained 2 steps")
