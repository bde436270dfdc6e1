#!/bin/sh
# Installs the package as a user would, offline (no index; Debian's
# setuptools and wheel, no build isolation), from a copy of python/ so that
# the build leaves nothing in the source tree, then imports the installed
# copy from elsewhere and calls the library (FMHA_SPLITK_LIBRARY).
# Usage: check_install.sh PYTHON WORK_DIR PACKAGE_DIR
set -eu
python=$1 work=$2 package=$3
rm -rf "$work"
mkdir -p "$work"
cp -r "$package" "$work/src"
"$python" -m pip install -q --no-build-isolation --no-index --no-deps --target "$work/site" "$work/src"
cd /
PYTHONPATH="$work/site" "$python" -c '
import sys, fmha_splitk
assert fmha_splitk.__file__.startswith(sys.argv[1]), fmha_splitk.__file__
print("installed", fmha_splitk.__version__, "at", fmha_splitk.__file__, "library", fmha_splitk.version())
' "$work/site"
