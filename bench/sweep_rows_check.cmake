# bench_ops options checked on the CPU reference: --sweeps / --sweep-rows pick decode sweep rows by name
# (exactly the matching rows reach the CSV, and an unknown sweep is refused with its name); --page-sizes and
# --page-order add rows named _pgN / _seq, and an unknown order is refused; --task-costs rows _tkT (balanced
# sweeps only); --quant-dims
# adds the quant rows of other head widths (decode_<layout>_d<W>) and refuses a width that is no multiple
# of 16; --cold [MIB] gives every row a commit ending in "+cold", with or without the size (an option that
# follows is not taken for it). EXE is bench_ops, DIR scratch.
# Runs bench_ops with a small base and the given options; sets `out` to its CSV's data lines.
function(bench_csv_lines out)
  set(csv ${DIR}/options_check.csv)
  file(REMOVE ${csv})
  execute_process(COMMAND ${EXE} -b cpu --set none --prefill none --contexts 64 --batches 1 --reps 1 --warmup 0
                          --copy-mib 1 --csv ${csv} ${ARGN}
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "bench_ops ${ARGN} failed (${rc}): ${err}")
  endif()
  file(STRINGS ${csv} lines)
  list(SUBLIST lines 1 -1 lines)  # the header names the columns
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()
# Checks the set of op names in the CSV of bench_ops with the given options against `want`.
function(expect_rows want)
  bench_csv_lines(lines ${ARGN})
  set(ops "")
  foreach(line IN LISTS lines)
    # op is the 8th column; the quoted driver and shape fields hold no comma before it
    if(line MATCHES "^[^,]*,[^,]*,[^,]*,(\"[^\"]*\"|[^,]*),[^,]*,[^,]*,[^,]*,([a-z0-9_]+),")
      list(APPEND ops ${CMAKE_MATCH_2})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES ops)
  list(SORT ops)
  if(NOT ops STREQUAL want)
    message(FATAL_ERROR "bench_ops ${ARGN}: rows ${ops}, expected ${want}")
  endif()
endfunction()
expect_rows("copy_bw;decode_fp16;decode_kivi2;decode_lowrank_balanced_p70" --sweeps fp16,quant,lowrank
            --sweep-rows "fp16|kivi2|lowrank_balanced_p70")
expect_rows("copy_bw;decode_kivi2_d48;decode_zipcache;decode_zipcache_d48" --sweeps quant --quant-dims 48,128
            --sweep-rows "zipcache|kivi2_d48")
# --page-sizes / --page-order: rows of another page size or of contiguous pages carry it in their name.
expect_rows("copy_bw;decode_fp16;decode_fp16_pg32_seq;decode_fp16_seq;decode_lowrank_balanced_pg32_seq_p70"
            --sweeps fp16,lowrank --page-sizes 16,32 --page-order sequential,shuffled
            --sweep-rows "fp16$|fp16_seq|fp16_pg32_seq|lowrank_balanced_pg32_seq_p70")
# --task-costs: rows of a given per-task cost end in _tkT, and only the balanced sweeps get them.
expect_rows("copy_bw;decode_lowrank_balanced_tk0_p70;decode_lowrank_balanced_tk4096_p70;decode_lowrank_q4_balanced_tk0_p70;decode_lowrank_q4_balanced_tk4096_p70"
            --sweeps lowrank --task-costs 0,4K --sweep-rows "_p70$|plain|palu")
execute_process(COMMAND ${EXE} -b cpu --page-order random RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(rc EQUAL 0 OR NOT err MATCHES "--page-order takes shuffled and/or sequential, got 'random'")
  message(FATAL_ERROR "an unknown page order was not refused (${rc}): ${err}")
endif()
execute_process(COMMAND ${EXE} -b cpu --sweeps fp16,gear RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(rc EQUAL 0 OR NOT err MATCHES "unknown sweep 'gear'")
  message(FATAL_ERROR "an unknown sweep was not refused (${rc}): ${err}")
endif()
execute_process(COMMAND ${EXE} -b cpu --quant-dims 64,20 RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(rc EQUAL 0 OR NOT err MATCHES "--quant-dims: 20 is not a positive multiple of 16")
  message(FATAL_ERROR "a quant width that is no multiple of 16 was not refused (${rc}): ${err}")
endif()
foreach(size IN ITEMS "1" "")
  bench_csv_lines(lines --sweeps fp16 --cold ${size} --commit abc)
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
message(STATUS "sweep rows selected by name, width, page size and order, task cost, bad sweeps, widths and orders refused, --cold rows marked")
