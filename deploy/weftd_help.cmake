# cmake -DWEFTD=<path to weftd> -DOUT=<file> -P weftd_help.cmake
# Writes `weftd --help` as the installed reference text (share/doc/weft/weftd.txt), with the
# program named "weftd" rather than the build tree's path.
execute_process(COMMAND ${WEFTD} --help OUTPUT_VARIABLE _text RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${WEFTD} --help failed (${_rc})")
endif()
string(REGEX REPLACE "^Usage: [^ ]*weftd" "Usage: weftd" _text "${_text}")
file(WRITE ${OUT} "weftd(8) - weft serving daemon\n\n${_text}\nSee README.md in this directory for routes, semantics and the service setup.\n")
