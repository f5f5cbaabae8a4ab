# bench_ops --sweeps / --sweep-rows pick decode sweep rows by name: exactly the matching rows reach
# the CSV, and an unknown sweep is refused with its name. EXE is bench_ops, DIR scratch.
set(csv ${DIR}/sweep_rows.csv)
file(REMOVE ${csv})
execute_process(COMMAND ${EXE} -b cpu --set none --prefill none --sweeps fp16,quant,lowrank
                        --sweep-rows "fp16|kivi2|lowrank_balanced_p70" --contexts 64 --batches 1 --reps 1 --warmup 0
                        --copy-mib 1 --csv ${csv}
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench_ops failed (${rc}): ${err}")
endif()
file(STRINGS ${csv} lines)
list(SUBLIST lines 1 -1 lines)  # the header names the columns
set(ops "")
foreach(line IN LISTS lines)
  # op is the 8th column; the quoted driver and shape fields hold no comma before it
  if(line MATCHES "^[^,]*,[^,]*,[^,]*,(\"[^\"]*\"|[^,]*),[^,]*,[^,]*,[^,]*,([a-z0-9_]+),")
    list(APPEND ops ${CMAKE_MATCH_2})
  endif()
endforeach()
list(REMOVE_DUPLICATES ops)
list(SORT ops)
set(want copy_bw decode_fp16 decode_kivi2 decode_lowrank_balanced_p70)
if(NOT ops STREQUAL want)
  message(FATAL_ERROR "rows ${ops}, expected ${want}")
endif()
execute_process(COMMAND ${EXE} -b cpu --sweeps fp16,gear RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(rc EQUAL 0 OR NOT err MATCHES "unknown sweep 'gear'")
  message(FATAL_ERROR "an unknown sweep was not refused (${rc}): ${err}")
endif()
message(STATUS "sweep rows selected by name: ${ops}")
