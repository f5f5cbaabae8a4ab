# Runs EXE with ARGS ('|'-separated) and passes when it exits non-zero (but not by a signal) and
# its stderr contains EXPECT (or each of its '|'-separated parts): a bad input must give a clear
# message, never a crash or success.
# FRESH (optional): a file removed first, e.g. a sweep's CSV, so every run starts from nothing.
if(FRESH)
  file(REMOVE ${FRESH})
endif()
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND ${EXE} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "expected failure, got exit code 0; stdout: ${out}")
endif()
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "crashed (${rc}); stderr: ${err}")
endif()
string(REPLACE "|" ";" expects "${EXPECT}")
foreach(e IN LISTS expects)
  string(FIND "${err}" "${e}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "stderr lacks '${e}': ${err}")
  endif()
endforeach()
message(STATUS "failed as expected (exit ${rc}): ${err}")
