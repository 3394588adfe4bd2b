#!/bin/sh
# One-time setup of everything microtrain needs on a fresh Debian machine
# (run as root by `make setup`; a second run is a fast no-op through the
# Makefile's stamp file). Installs only from the package registries.
set -eu
cd "$(dirname "$0")/.."

need_apt=""
command -v arm-none-eabi-gcc >/dev/null 2>&1 || need_apt="$need_apt gcc-arm-none-eabi libnewlib-arm-none-eabi"
command -v gcc >/dev/null 2>&1 || need_apt="$need_apt gcc"
command -v make >/dev/null 2>&1 || need_apt="$need_apt make"
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt="$need_apt python3-venv"
if [ -n "$need_apt" ]; then
    echo "setup: apt-get install$need_apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq $need_apt >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    python3 -m venv .venv
fi
echo "setup: pip install -r tools/requirements.txt (pinned)"
.venv/bin/pip install -q --disable-pip-version-check -r tools/requirements.txt 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
.venv/bin/pip install -q --disable-pip-version-check --no-deps -e . 2>&1 | grep -v "is ignored" || true
.venv/bin/python -c "import numpy, torch, elftools, pytest, hypothesis" 

# MicroPython 1.23 py/ core + tools/mpy_ld.py for natmod builds, from the
# mpy-cross-v6-3 sdist (the only registry package that ships them).
MPY_SDIST=mpy_cross_v6_3-1.1.1
if [ ! -f "build/$MPY_SDIST/micropython/py/dynruntime.mk" ]; then
    echo "setup: unpacking MicroPython core from the $MPY_SDIST sdist"
    mkdir -p build/sdist
    .venv/bin/pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
        mpy-cross-v6-3==1.1.1 -d build/sdist 2>&1 | grep -v "is ignored" || true
    tar -xzf "build/sdist/$MPY_SDIST.tar.gz" -C build
fi
test -x .venv/bin/micropython
echo "setup: ok"
