# bench_ops --cold [MIB]: the timed runs behind an evicting copy produce rows whose commit column ends in
# "+cold", with or without the size (a following option is not taken for it). EXE is bench_ops, DIR scratch.
foreach(size IN ITEMS "1" "")
  set(csv ${DIR}/cold_${size}.csv)
  file(REMOVE ${csv})
  execute_process(COMMAND ${EXE} -b cpu --set none --prefill none --sweeps fp16 --contexts 64 --batches 1
                          --copy-mib 1 --commit abc --csv ${csv} --cold ${size} --reps 1 --warmup 0
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "bench_ops --cold ${size} failed (${rc}): ${err}")
  endif()
  file(STRINGS ${csv} lines)
  list(SUBLIST lines 1 -1 lines)  # the header names the columns
  list(LENGTH lines n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "bench_ops --cold ${size}: ${n} rows, expected copy_bw and decode_fp16")
  endif()
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^[^,]*,abc\\+cold,")
      message(FATAL_ERROR "bench_ops --cold ${size}: a row without the +cold commit: ${line}")
    endif()
  endforeach()
endforeach()
message(STATUS "--cold rows carry +cold, with and without a size")
