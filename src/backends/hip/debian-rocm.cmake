# Makes enable_language(HIP) work with the ROCm that Debian 12 packages
# (ROCm 5.2: hipcc, libamdhip64-dev, rocm-device-libs, rocm-cmake, built
# with clang 15), included by CMakeLists.txt before enable_language(HIP).
#
# CMake 3.25 expects a ROCm tree (/opt/rocm): <root>/lib/cmake/hip-lang and
# a clang that finds the device bitcode by itself. Debian spreads ROCm over
# the system prefix instead: the CMake configs live in the multiarch folder
# (/usr/lib/<multiarch>/cmake), the bitcode in /usr/lib/<multiarch>/amdgcn/
# bitcode, and the HIP compiler is the system's clang++-15. This file spells
# that layout out:
#   - CMAKE_HIP_COMPILER = clang++-15;
#   - --rocm-path=/usr and --rocm-device-lib-path=<bitcode folder> in the
#     HIP flags;
#   - a ROCm root in the build tree whose lib/cmake is a link to the
#     multiarch cmake folder (CMAKE_HIP_COMPILER_ROCM_ROOT), so that CMake
#     finds hip-lang;
#   - amd_comgr_DIR, which hip-lang needs, handed to CMake's own compiler
#     checks too (CMAKE_TRY_COMPILE_PLATFORM_VARIABLES).
#
# It does nothing when the user chose a HIP compiler (CMAKE_HIP_COMPILER or
# the HIPCXX environment variable), when /opt/rocm exists (a ROCm install
# from AMD works with CMake as it is), or when Debian's layout is absent. The
# same settings on the command line (see docs/amd.md) do the same job.

set(_fmha_multiarch_lib "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
if(DEFINED CMAKE_HIP_COMPILER OR DEFINED ENV{HIPCXX} OR EXISTS /opt/rocm
   OR NOT CMAKE_LIBRARY_ARCHITECTURE
   OR NOT EXISTS "${_fmha_multiarch_lib}/cmake/hip-lang/hip-lang-config.cmake")
  return()
endif()

find_program(FMHA_SPLITK_DEBIAN_HIP_CLANG NAMES clang++-15
  DOC "clang++ of the LLVM that Debian's ROCm packages are built with")
if(NOT FMHA_SPLITK_DEBIAN_HIP_CLANG)
  message(FATAL_ERROR "FMHA_SPLITK_ENABLE_HIP: Debian's ROCm packages are installed but clang++-15 is not: "
                      "apt-get install clang-15 (or run scripts/install-deps.sh hip)")
endif()
set(_fmha_bitcode "${_fmha_multiarch_lib}/amdgcn/bitcode")
if(NOT EXISTS "${_fmha_bitcode}/ocml.bc")
  message(FATAL_ERROR "FMHA_SPLITK_ENABLE_HIP: no ROCm device libraries in ${_fmha_bitcode}: "
                      "apt-get install rocm-device-libs (or run scripts/install-deps.sh hip)")
endif()

# clang 15 knows no CDNA3 target past gfx940, nor CDNA4: say so before
# CMake's compiler check fails on them.
set(_fmha_unknown_archs "${FMHA_SPLITK_HIP_ARCHS}")
list(FILTER _fmha_unknown_archs INCLUDE REGEX "^gfx(94[1-9]|95)")
if(_fmha_unknown_archs)
  message(FATAL_ERROR "FMHA_SPLITK_HIP_ARCHS has ${_fmha_unknown_archs}, which Debian's ROCm 5.2 (clang 15) "
                      "cannot build: configure with -DFMHA_SPLITK_HIP_ARCHS=\"gfx90a;gfx940\" "
                      "(or use a current ROCm, docs/amd.md)")
endif()

set(CMAKE_HIP_COMPILER "${FMHA_SPLITK_DEBIAN_HIP_CLANG}" CACHE FILEPATH "HIP compiler (Debian's ROCm: clang++-15)")
if(NOT CMAKE_HIP_FLAGS MATCHES "--rocm-device-lib-path")
  set(CMAKE_HIP_FLAGS "${CMAKE_HIP_FLAGS} --rocm-path=/usr --rocm-device-lib-path=${_fmha_bitcode}"
      CACHE STRING "Flags used by the HIP compiler during all build types." FORCE)
endif()

set(_fmha_rocm_root "${PROJECT_BINARY_DIR}/debian-rocm-root")
if(NOT EXISTS "${_fmha_rocm_root}/lib/cmake")
  file(MAKE_DIRECTORY "${_fmha_rocm_root}/lib")
  file(CREATE_LINK "${_fmha_multiarch_lib}/cmake" "${_fmha_rocm_root}/lib/cmake" SYMBOLIC)
endif()
set(CMAKE_HIP_COMPILER_ROCM_ROOT "${_fmha_rocm_root}")

set(amd_comgr_DIR "${_fmha_multiarch_lib}/cmake/amd_comgr" CACHE PATH "amd_comgr's CMake config (Debian's layout)")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES amd_comgr_DIR)
message(STATUS "HIP: Debian's ROCm layout (${FMHA_SPLITK_DEBIAN_HIP_CLANG}, bitcode in ${_fmha_bitcode})")
