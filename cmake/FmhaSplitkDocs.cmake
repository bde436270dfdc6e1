# `cmake --build <dir> --target docs`: the API reference from the public
# header with Doxygen (Debian's doxygen), warnings are errors, into
# <build>/docs/html (installed, when built, under share/doc/fmha_splitk/api).
find_package(Doxygen QUIET)
if(DOXYGEN_FOUND)
  set(FMHA_SPLITK_DOXYGEN_OUTPUT_DIR "${PROJECT_BINARY_DIR}/docs")
  configure_file("${PROJECT_SOURCE_DIR}/docs/Doxyfile.in" "${PROJECT_BINARY_DIR}/docs/Doxyfile" @ONLY)
  add_custom_target(docs
    COMMAND Doxygen::doxygen "${PROJECT_BINARY_DIR}/docs/Doxyfile"
    WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
    COMMENT "Doxygen: API reference in ${PROJECT_BINARY_DIR}/docs/html"
    VERBATIM)
else()
  # Say what is missing, rather than "no rule to make target docs".
  add_custom_target(docs
    COMMAND "${CMAKE_COMMAND}" -E echo "docs: doxygen not found; install Debian's doxygen and re-run cmake"
    COMMAND "${CMAKE_COMMAND}" -E false
    VERBATIM)
endif()
