#!/usr/bin/env bash
# Builds fmha_splitk (Release, the default preset) and runs the CLI on the
# default backend: the GPU when a plugin finds one, else the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

cmake --preset default
cmake --build --preset default
build/bin/fmha-splitk info
build/bin/fmha-splitk run --preset llama3-8b-decode
