# Fault injection (tests/labels.cmake: faults).
include(${CMAKE_CURRENT_SOURCE_DIR}/faults/ckpt.cmake)
