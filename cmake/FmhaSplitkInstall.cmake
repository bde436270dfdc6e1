# `cmake --install` layout, the CMake package (fmha_splitk::fmha_splitk for
# find_package(fmha_splitk CONFIG)), the pkg-config file, and the .deb /
# .tar.gz packages (CPack). Included from the top-level CMakeLists.txt once
# every target exists.
#
#   <prefix>/lib/libfmha_splitk.so.MAJOR.MINOR.PATCH, .so.MAJOR, .so
#   <prefix>/lib/fmha_splitk/libfmha_splitk_<backend>.so   GPU plugins: out of
#       the linker's path; the core finds them beside itself (plugin_loader.h)
#   <prefix>/lib/cmake/fmha_splitk/   fmha_splitkConfig*.cmake, targets
#   <prefix>/lib/pkgconfig/fmha_splitk.pc
#   <prefix>/include/fmha_splitk/fmha_splitk.h
#   <prefix>/bin/fmha-splitk           (installed by bench/CMakeLists.txt)
#   <prefix>/share/doc/fmha_splitk/    README, LICENSE, guides, API reference
include(CMakePackageConfigHelpers)

set(FMHA_SPLITK_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/fmha_splitk")
set(FMHA_SPLITK_INSTALL_PLUGINDIR "${CMAKE_INSTALL_LIBDIR}/fmha_splitk")

install(TARGETS fmha_splitk
  EXPORT fmha_splitkTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT Runtime NAMELINK_COMPONENT Development)
install(FILES "${PROJECT_SOURCE_DIR}/include/fmha_splitk/fmha_splitk.h"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/fmha_splitk" COMPONENT Development)

# The HIP plugin loads its device half (fmha_splitk_hip_device.so) from
# beside itself, so both go to the plugin folder.
foreach(plugin fmha_splitk_cuda fmha_splitk_hip fmha_splitk_hip_device)
  if(TARGET ${plugin})
    install(TARGETS ${plugin} LIBRARY DESTINATION "${FMHA_SPLITK_INSTALL_PLUGINDIR}" COMPONENT Runtime)
  endif()
endforeach()

install(EXPORT fmha_splitkTargets
  NAMESPACE fmha_splitk::
  DESTINATION "${FMHA_SPLITK_INSTALL_CMAKEDIR}"
  COMPONENT Development)
configure_package_config_file(
  "${CMAKE_CURRENT_LIST_DIR}/fmha_splitkConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/cmake/fmha_splitkConfig.cmake"
  INSTALL_DESTINATION "${FMHA_SPLITK_INSTALL_CMAKEDIR}"
  PATH_VARS FMHA_SPLITK_INSTALL_PLUGINDIR)
# The SONAME carries the major version: any release of the same major is a
# drop-in replacement for an older one.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/cmake/fmha_splitkConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMajorVersion)
install(FILES
    "${PROJECT_BINARY_DIR}/cmake/fmha_splitkConfig.cmake"
    "${PROJECT_BINARY_DIR}/cmake/fmha_splitkConfigVersion.cmake"
  DESTINATION "${FMHA_SPLITK_INSTALL_CMAKEDIR}"
  COMPONENT Development)

file(RELATIVE_PATH FMHA_SPLITK_PC_PREFIX_FROM_PCFILEDIR
  "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" FMHA_SPLITK_PC_PREFIX_FROM_PCFILEDIR "${FMHA_SPLITK_PC_PREFIX_FROM_PCFILEDIR}")
configure_file("${CMAKE_CURRENT_LIST_DIR}/fmha_splitk.pc.in" "${PROJECT_BINARY_DIR}/cmake/fmha_splitk.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/cmake/fmha_splitk.pc"
  DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig"
  COMPONENT Development)

install(FILES "${PROJECT_SOURCE_DIR}/README.md" "${PROJECT_SOURCE_DIR}/LICENSE"
  DESTINATION "${CMAKE_INSTALL_DOCDIR}" COMPONENT Documentation)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/docs/"
  DESTINATION "${CMAKE_INSTALL_DOCDIR}"
  COMPONENT Documentation
  FILES_MATCHING PATTERN "*.md" PATTERN "*.png" PATTERN "*.json")
# The Doxygen reference, when `cmake --build . --target docs` made it.
install(DIRECTORY "${PROJECT_BINARY_DIR}/docs/html"
  DESTINATION "${CMAKE_INSTALL_DOCDIR}/api"
  COMPONENT Documentation
  OPTIONAL)

# CPack: one package with everything (library, plugins, header, CMake and
# pkg-config files, the CLI and the docs), as a .deb and a .tar.gz.
set(CPACK_GENERATOR "DEB;TGZ")
set(CPACK_PACKAGE_NAME "fmha-splitk")
set(CPACK_PACKAGE_VENDOR "fmha_splitk")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Split-K (flash decoding) attention and log-sum-exp merge, as a C library")
set(CPACK_PACKAGE_DESCRIPTION
    "libfmha_splitk.so computes split-K multi-head attention forward passes and the log-sum-exp merge of partial attention results behind a stable C ABI (DLPack tensors), on the CPU and, through plugins loaded at run time, on NVIDIA and AMD GPUs.")
set(CPACK_PACKAGE_CONTACT "fmha_splitk maintainers")
set(CPACK_RESOURCE_FILE_LICENSE "${PROJECT_SOURCE_DIR}/LICENSE")
set(CPACK_PACKAGE_FILE_NAME "${CPACK_PACKAGE_NAME}-${PROJECT_VERSION}-${CMAKE_SYSTEM_NAME}-${CMAKE_SYSTEM_PROCESSOR}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Packages carry stripped binaries, whatever the build type.
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SECTION "libs")
set(CPACK_DEBIAN_PACKAGE_LICENSE "BSD-3-Clause")
# The header includes <dlpack/dlpack.h>; the library, the C and C++
# runtimes (found by dpkg-shlibdeps when dpkg-dev is installed).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libdlpack-dev")
find_program(FMHA_SPLITK_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(FMHA_SPLITK_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  message(STATUS "dpkg-shlibdeps not found (Debian's dpkg-dev): the .deb will not list the C/C++ runtime packages")
endif()
include(CPack)
