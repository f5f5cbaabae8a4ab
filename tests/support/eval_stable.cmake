# kvcomp eval is reproducible: two runs with the same seed report identical scores and bytes for the
# uncompressed method (baseline_value) and the method under test, bit for bit in the JSON. EXE is
# kvcomp, MODEL the default model.
function(scores seed out)
  execute_process(COMMAND ${EXE} eval -m ${MODEL} -b cpu -t perplexity --contexts 64 --examples 2 --seed ${seed}
                          --method window --method-opt window=16 --json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE json ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "eval failed (${rc}): ${err}")
  endif()
  # Everything but the row's timestamp.
  string(REGEX REPLACE "\"date\": \"[^\"]*\"" "" json "${json}")
  set(${out} "${json}" PARENT_SCOPE)
endfunction()
scores(7 a)
scores(7 b)
string(REGEX MATCHALL "\"(value|baseline_value)\": [0-9.e+-]+" va "${a}")
list(LENGTH va n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "expected a value and a baseline_value in: ${a}")
endif()
if(NOT a STREQUAL b)
  message(FATAL_ERROR "same seed, different results:\n${a}\n---\n${b}")
endif()
message(STATUS "eval stable for a seed: ${va}")
