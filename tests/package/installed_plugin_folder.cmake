# Installs the runtime component into PREFIX, puts PLUGIN into the
# installed plugin folder, and runs CHECK on the installed core library.
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" --component Runtime
                RESULT_VARIABLE status OUTPUT_QUIET)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${PREFIX} failed: ${status}")
endif()
set(plugin_folder "${PREFIX}/${LIBDIR}/fmha_splitk")
file(MAKE_DIRECTORY "${plugin_folder}")
file(COPY_FILE "${PLUGIN}" "${plugin_folder}/libfmha_splitk_fake.so")
# Only the folder beside the installed core may supply the plugin.
set(ENV{FMHA_SPLITK_PLUGIN_PATH} "")
set(ENV{FMHA_SPLITK_BACKEND} "")
execute_process(COMMAND "${CHECK}" "${PREFIX}/${LIBDIR}/${SONAME}" "${plugin_folder}/libfmha_splitk_fake.so"
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${CHECK} failed: ${status}")
endif()
