# microtrain: on-device int8 training for MicroPython.
# Newcomers need two commands: `make demo` and `make test` (both set up
# everything first; see README.md). Other targets are for developers.
SHELL := /bin/bash
ROOT := $(CURDIR)
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python
MICROPYTHON := $(VENV)/bin/micropython
MPY_DIR := $(ROOT)/build/mpy_cross_v6_3-1.1.1/micropython
ARCH ?= x64
NATMOD_ARCHS := x64 armv6m armv7m armv7emsp armv7emdp
SETUP_STAMP := build/.setup-stamp
NATMOD_SRC := $(wildcard usermod/microtrain/*.c usermod/microtrain/*.h) usermod/microtrain/Makefile

export PATH := $(VENV)/bin:$(PATH)
export PYTHONPATH := $(ROOT)/tools:$(ROOT)

.PHONY: setup test test-twin demo natmod natmod-all check-kernels lint clean dist train-eval adapt-eval parity coverage models models-update fleet-eval \
	fuzz reliability

## setup: install the toolchain, venv (pinned) and MicroPython core once.
setup: $(SETUP_STAMP)
$(SETUP_STAMP): tools/setup.sh tools/requirements.txt tools/requirements-data.txt pyproject.toml
	@tools/setup.sh
	@mkdir -p build && touch $@

## natmod ARCH=x64|armv6m|armv7m|armv7emsp|armv7emdp: build/natmod/<arch>/_microtrain.mpy
## OPS=core (or op families, e.g. OPS=conv2d,linear,maxpool; kernelspec.py's ops and profiles):
## only their kernels, in build/natmod/<arch>-<ops>/ (README of usermod/microtrain).
OPS ?= all
ifneq ($(filter-out all,$(OPS)),)
NATMOD_TAG := $(shell PYTHONPATH=$(ROOT)/tools $(PY) -m microtrain_tools.kernelgen --ops-tag '$(OPS)')
ifeq ($(NATMOD_TAG),)
$(error OPS=$(OPS): not a set of op families (the message above))
endif
endif
natmod: build/natmod/$(ARCH)$(if $(NATMOD_TAG),-$(NATMOD_TAG))/_microtrain.mpy
## Any arch the core's natmod tools do not know stops here, saying so (xtensawin and rv32imc: below).
## The folder's name is the arch, then -<ops> for a natmod of some op families only.
build/natmod/%/_microtrain.mpy: $(SETUP_STAMP) $(NATMOD_SRC) tools/microtrain_tools/kernelspec.py
	@a=$(firstword $(subst -, ,$*)); \
	if ! grep -q "\"$$a\"" $(MPY_DIR)/tools/mpy_ld.py || ! grep -q "ARCH),$$a)" $(MPY_DIR)/py/dynruntime.mk; then \
	    echo "natmod: ARCH=$$a is not supported by the MicroPython core in $(MPY_DIR)" \
	         "(the mpy_ld.py and py/dynruntime.mk there do not know it): give a core that does with" \
	         "MPY_DIR=<micropython folder>," \
	         "or build microtrain into the firmware as a user C module (docs/firmware.md)" >&2; exit 2; fi
	@mkdir -p build/natmod/$*
	@$(MAKE) --no-print-directory -C usermod/microtrain MPY_DIR=$(MPY_DIR) ARCH=$(firstword $(subst -, ,$*)) \
	    OPS=$(or $(word 2,$(subst -, ,$*)),all) \
	    BUILD=../../build/natmod/$*/obj PYTHON=$(PY) MPY_LD="$(PY) -m microtrain_tools.natmod_ld $(MPY_DIR)/tools/mpy_ld.py" \
	    MPY_TOOL="$(PY) $(MPY_DIR)/tools/mpy-tool.py" Q=@ ECHO=@true OUT=$(abspath $@)
	@echo "natmod: built $@ ($$(stat -c %s $@) bytes)"

## natmod ARCH=xtensawin (ESP32, ESP32-S2/S3) needs ESP-IDF's xtensa-esp32-elf-gcc on PATH;
## ARCH=rv32imc (ESP32-C3/C6, RP2350 RISC-V) a MicroPython core whose natmod tools know rv32imc
## (MPY_DIR=<its folder>). Each is checked first and says what is missing; where it is present,
## natmod-all builds that arch too.
NATMOD_OPT_ARCHS :=
ifneq ($(shell command -v xtensa-esp32-elf-gcc 2>/dev/null),)
NATMOD_OPT_ARCHS += xtensawin
endif
ifneq ($(shell grep -ls rv32imc $(MPY_DIR)/py/dynruntime.mk),)
NATMOD_OPT_ARCHS += rv32imc
endif
.PHONY: natmod-needs-xtensawin natmod-needs-rv32imc
build/natmod/xtensawin/_microtrain.mpy: | natmod-needs-xtensawin
build/natmod/rv32imc/_microtrain.mpy: | natmod-needs-rv32imc
natmod-needs-xtensawin:
	@command -v xtensa-esp32-elf-gcc >/dev/null 2>&1 || { \
	    echo "natmod ARCH=xtensawin: xtensa-esp32-elf-gcc is not on PATH. It comes with ESP-IDF" \
	        "(. \$$IDF_PATH/export.sh); no package registry here has it, and clang's Xtensa" \
	        "backend cannot build the windowed ABI xtensawin uses (docs/firmware.md, ESP32)." >&2; exit 1; }
natmod-needs-rv32imc:
	@grep -qs rv32imc $(MPY_DIR)/py/dynruntime.mk || { \
	    echo "natmod ARCH=rv32imc: the MicroPython core in $(MPY_DIR) has no rv32imc natmod support" \
	        "(py/dynruntime.mk and mpy_ld.py there: the 1.23 core make setup unpacks predates it)." \
	        "Point MPY_DIR at a core that has it, or build microtrain into the firmware as a" \
	        "user C module (docs/firmware.md)." >&2; exit 1; }

## natmod-all: every supported arch, whole and OPS=core, with a size table.
natmod-all: $(foreach a,$(NATMOD_ARCHS) $(NATMOD_OPT_ARCHS),build/natmod/$(a)/_microtrain.mpy build/natmod/$(a)-core/_microtrain.mpy)
	@printf '%-10s %10s %10s\n' arch bytes core
	@for a in $(NATMOD_ARCHS) $(NATMOD_OPT_ARCHS); do printf '%-10s %10s %10s\n' $$a $$(stat -c %s build/natmod/$$a/_microtrain.mpy build/natmod/$$a-core/_microtrain.mpy); done
	@echo "natmod-all: ok archs=$$(echo $(NATMOD_ARCHS) $(NATMOD_OPT_ARCHS) | tr ' ' ',')"

## dist: dist/<arch>_6.3/ for every arch: _microtrain.mpy + compiled microtrain package + mip package.json.
dist: $(foreach a,$(NATMOD_ARCHS),build/natmod/$(a)/_microtrain.mpy)
	@$(PY) -m microtrain_tools.dist --no-build --archs $(NATMOD_ARCHS)

## check-kernels: every kernel case bit-exact vs the oracle in micropython, plus ASan/UBSan host run.
check-kernels: natmod
	@PYTHONPATH=$(ROOT)/tests:$(PYTHONPATH) $(PY) -m support.check_kernels

## test: set up, then the whole test suite.
test: $(SETUP_STAMP) natmod-all
	@if command -v emcc >/dev/null 2>&1; then $(MAKE) --no-print-directory wasm; fi  # tests/firmware/test_wasm.py
	@PYTHONPATH=$(ROOT)/tests:$(PYTHONPATH) $(PY) -m support.check_kernels
	@$(PY) -m pytest -q tests

## test-twin: the same suite against another MicroPython binary: the host port (ports/host)
## built with double floats (as the unix port) and _microtrain built in. Tests that cannot
## apply to a built-in module skip, saying so. Any binary: MICROTRAIN_MICROPYTHON=<path> make test.
TWIN_DOUBLE := $(ROOT)/build/host/double/micropython-fw
test-twin: $(SETUP_STAMP) natmod-all
	@$(MAKE) --no-print-directory -C ports/host FLOAT=double >/dev/null
	@echo "test-twin: MICROTRAIN_MICROPYTHON=$(TWIN_DOUBLE)"
	@MICROTRAIN_MICROPYTHON=$(TWIN_DOUBLE) PYTHONPATH=$(ROOT)/tests:$(PYTHONPATH) $(PY) -m support.check_kernels
	@MICROTRAIN_MICROPYTHON=$(TWIN_DOUBLE) $(PY) -m pytest -q -rs tests

## demo: set up, then fine-tune a Fashion-MNIST CNN on MNIST inside micropython, next to PyTorch.
demo: $(SETUP_STAMP) build/natmod/x64/_microtrain.mpy
	@$(PY) examples/transfer_fmnist_mnist/run.py --demo

## train-eval: on-device training results on real data vs PyTorch float32 (transfer, scratch,
## personalisation, sparse, 256 KB heap).
train-eval: $(SETUP_STAMP) build/natmod/x64/_microtrain.mpy
	@$(PY) -m evals.accuracy.train_eval

## adapt-eval: LoRA adapters, prototype head, replay, zeroth-order training on real data vs the
## host references and PyTorch float32 (docs/adapt.md; evals/accuracy/adapt_eval.py).
## ADAPT_EVAL_ARGS=--no-hybrid skips the hybrid (SPSA body, backprop head).
adapt-eval: $(SETUP_STAMP) build/natmod/x64/_microtrain.mpy
	@$(PY) -m evals.accuracy.adapt_eval $(ADAPT_EVAL_ARGS)

## fleet-eval: ten boards (two QEMU M7 over their serial REPL) learning together on Flower's
## deployment engine (docs/fleet.md; evals/accuracy/fleet_eval.py): FedAvg with a board killed,
## FedProx, a robust strategy with a poisoned board, vs centralised training; 3 seeds.
## FLEET_ARGS=--write-doc rewrites the measured part of docs/fleet.md and its figures.
fleet-eval: $(SETUP_STAMP) build/natmod/x64/_microtrain.mpy build/natmod/armv7emdp/_microtrain.mpy
	@$(PY) -m evals.accuracy.fleet_eval $(FLEET_ARGS)

## parity: int8 models inside micropython == numpy oracle bit for bit, and agree with PyTorch (real data).
parity: $(SETUP_STAMP) build/natmod/x64/_microtrain.mpy
	@$(PY) -m evals.accuracy.parity

## coverage: bring-your-own-model suite: the four MLPerf Tiny models, MobileNetV2-w0.35 (sparse
## fine-tune beside PyTorch float32) and one small model per docs/ops.md idiom, trained briefly,
## converted, bit-exact in micropython vs the oracle, top-1 agreement with PyTorch, fine-tuned on
## the device (unix port, large heap). Prints wall and CPU time.
## Quicker: .venv/bin/python -m evals.accuracy.coverage --mode quick
coverage: $(SETUP_STAMP) build/natmod/x64/_microtrain.mpy
	@$(PY) -m evals.accuracy.coverage

## models: retrain the shipped float base models (evals/models) from their recipes and compare.
models: $(SETUP_STAMP)
	@$(PY) -m evals.lib.base_models

## models-update: retrain them and replace the shipped files (after a recipe change).
models-update: $(SETUP_STAMP)
	@$(PY) -m evals.lib.base_models --update

## fuzz: libFuzzer + ASan/UBSan on the .mtm loader and the kernels of accepted files
## (tests/c/mtm_libfuzzer.c), FUZZ_EXECS executions (default 1,000,000).
FUZZ_EXECS ?= 1000000
fuzz: $(SETUP_STAMP)
	@PYTHONPATH=$(ROOT)/tests:$(PYTHONPATH) $(PY) -c "import sys; from support.reliability import fuzz; \
	    r = fuzz.run($(FUZZ_EXECS)); print(*r.log, sep='\n'); \
	    print(f'fuzz: execs={r.execs} crashes={r.crashes}'); sys.exit(1 if r.crashes else 0)"

## reliability: the long reliability campaigns (fuzzing, abusive calls, kill -9 during saves,
## small heaps, bad inputs, soak, from-scratch case); ends with one `reliability: ...` summary line.
reliability: $(SETUP_STAMP) build/natmod/x64/_microtrain.mpy
	@PYTHONPATH=$(ROOT)/tests:$(PYTHONPATH) $(PY) -m support.reliability

## lint: ruff over every Python folder; clang-format over the C of usermod/ and tests/c/
## (.clang-format); the files generated from the kernel spec are current; every repository
## path the docs and comments name exists (tests/support/doc_paths.py); no issue numbers in
## comments (tests/support/comment_rules.py); no hand-written source under usermod/, python_lib/
## or tools/ over 1,000 lines (tests/support/file_sizes.py).
lint: $(SETUP_STAMP)
	@$(VENV)/bin/ruff check tools tests examples python_lib stubs evals ports/qemu ports/webassembly
	@clang-format --dry-run --Werror $$(find usermod tests/c -name '*.[ch]' | sort)
	@echo "clang-format: $$(find usermod tests/c -name '*.[ch]' | wc -l) C files formatted"
	@$(PY) -m microtrain_tools.kernelgen --check
	@PYTHONPATH=$(ROOT)/tests:$(PYTHONPATH) $(PY) -m support.doc_paths
	@PYTHONPATH=$(ROOT)/tests:$(PYTHONPATH) $(PY) -m support.comment_rules
	@PYTHONPATH=$(ROOT)/tests:$(PYTHONPATH) $(PY) -m support.file_sizes

clean:
	rm -rf build/natmod build/test usermod/microtrain/_microtrain.mpy

## firmware-mcu: the project's QEMU Cortex-M0/M3/M4F/M7 firmware and the RV32IMC one
## (ports/qemu/README.md, ports/qemu/rv32/README.md) -> build/qemu/<m0|m3|m4|m7|rv32>-single/firmware.elf,
## and the M0 with microtrain built in (m0fw) -> build/qemu/m0-single-builtin/firmware.elf
firmware-mcu: $(SETUP_STAMP)
	@for b in m0 m3 m4 m7; do $(MAKE) --no-print-directory -C ports/qemu BOARD=$$b FLOAT=single >/dev/null || exit 1; \
	    echo "firmware-mcu: build/qemu/$$b-single/firmware.elf"; done
	@$(MAKE) --no-print-directory -C ports/qemu BOARD=m0 FLOAT=single BUILTIN=1 >/dev/null
	@echo "firmware-mcu: build/qemu/m0-single-builtin/firmware.elf (m0fw)"
	@$(MAKE) --no-print-directory -C ports/qemu/rv32 FLOAT=single >/dev/null
	@echo "firmware-mcu: build/qemu/rv32-single/firmware.elf"

## twin: the float32 host twin (ports/host) -> build/host/single/micropython-fw
twin: $(SETUP_STAMP)
	@$(MAKE) --no-print-directory -C ports/host FLOAT=single >/dev/null
	@echo "twin: build/host/single/micropython-fw"

## test-mcu: kernel cases, .mtm mutations and training runs on the QEMU boards, rv32 included (== the twin)
test-mcu: $(SETUP_STAMP) firmware-mcu twin $(foreach a,armv6m armv7m armv7emsp armv7emdp,build/natmod/$(a)/_microtrain.mpy \
    build/natmod/$(a)-core/_microtrain.mpy)
	@PYTHONPATH=$(ROOT)/tests:$(PYTHONPATH) $(PY) -m support.check_mcu

.PHONY: firmware-mcu twin test-mcu

## board-test: the QEMU boards driven as their owners drive boards: board-mode firmware (serial
## REPL on a pseudo-terminal, littlefs flash image), `microtrain deploy --port`, `mpremote run` /
## `fs cp`, training on the board's flash == the float32 twin, and power cuts (SIGKILL) during
## save() (tests/support/board_test.py; BOARD_TEST_ARGS="--powercut 60" for more cuts)
.PHONY: board-test
board-test: $(SETUP_STAMP) dist
	@PYTHONPATH=$(ROOT)/tests:$(PYTHONPATH) $(PY) -m support.board_test $(BOARD_TEST_ARGS)

## mem-mcu: peak heap of the MLPerf-Tiny-class cases (ResNet-8 inference, DS-CNN-S last:2, MobileNetV1
## last:3 sparse, transfer CNN all) on the M7 firmware built with HEAPPEAK=1 (the firmware tracks
## the heap's high-water mark), next to `microtrain info`'s prediction (evals/benchmarks/mem_mcu.py).
.PHONY: mem-mcu
mem-mcu: $(SETUP_STAMP) build/natmod/armv7emdp/_microtrain.mpy
	@$(PY) -m evals.benchmarks.mem_mcu

## bench-mcu: instruction counts per kernel MAC (per output: pooling, add) and per training sample
## on the QEMU Cortex-M firmware (M0 natmod and built in, M3, M4, M7) and the RV32IMC one with the
## project's TCG plugin, and the MLPerf Tiny models' training sample beside inference (M7);
## writes docs/performance.md.
.PHONY: bench-mcu
bench-mcu: $(SETUP_STAMP) firmware-mcu $(foreach a,armv6m armv7m armv7emsp armv7emdp,build/natmod/$(a)/_microtrain.mpy)
	@$(MAKE) --no-print-directory -s -C evals/benchmarks/qemu_plugin all check PY=$(PY)
	@$(PY) -m evals.benchmarks.bench_mcu

## firmware-doc: the measured tables of docs/firmware.md (natmod size per arch, microtrain's flash
## in each firmware with it built in, the heap of each example), written by evals/benchmarks/firmware_doc.py
## (--check: are they current?). Builds listed there that are not built show as "not built".
.PHONY: firmware-doc
firmware-doc: $(SETUP_STAMP) natmod-all firmware-mcu
	@for b in m0 m7; do $(MAKE) --no-print-directory -C ports/qemu BOARD=$$b BUILTIN=1 >/dev/null || exit 1; done
	@$(PY) -m evals.benchmarks.firmware_doc

## bench: host time of microtrain (unix micropython, x64 natmod) vs PyTorch eager (one thread),
## batch 1: inference and training steps; writes docs/performance-host.md (with the sections of
## earlier `-m evals.benchmarks.bench_host --profile-only` / `--mcu-only` runs, if any). Quick check:
## .venv/bin/python -m evals.benchmarks.bench_host --quick
.PHONY: bench
bench: $(SETUP_STAMP) build/natmod/x64/_microtrain.mpy
	@$(PY) -m evals.benchmarks.bench_host --saved

## lab-setup: what the browser lab's test needs, once: Debian's chromium and chromium-driver
## (apt) and MicroPython's WebAssembly port (npm, pinned in tools/microtrain_tools/lab.py).
LAB_STAMP := build/lab/.setup-stamp
.PHONY: lab lab-setup lab-test
lab-setup: $(LAB_STAMP)
$(LAB_STAMP): $(SETUP_STAMP) tools/microtrain_tools/lab.py
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || { \
	    echo "lab-setup: apt-get install chromium chromium-driver"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }
	@command -v npm >/dev/null 2>&1 || { echo "lab-setup: apt-get install npm"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	@$(PY) -c "from microtrain_tools import lab; print('lab-setup:', lab.ensure_wasm())"
	@mkdir -p build/lab && touch $@

## wasm: the lab's own MicroPython WebAssembly build with the C kernels built in
## (ports/webassembly/Makefile, Debian's emscripten) -> build/wasm/; a minute or two (make test builds it
## when emcc is there, for tests/firmware/test_wasm.py).
## lab and lab-test build it when emcc is there, else the page runs the npm package (pure Python).
.PHONY: wasm
wasm: $(SETUP_STAMP)
	@$(MAKE) --no-print-directory -C ports/webassembly -j2 >build/wasm.log 2>&1 || { tail -30 build/wasm.log; exit 1; }
	@echo "wasm: build/wasm/micropython.wasm"
LAB_WASM := $(if $(shell command -v emcc 2>/dev/null),wasm)

## lab: serve the browser lab on http://127.0.0.1:8016 (docs/lab.md; `microtrain lab --help`).
lab: $(LAB_STAMP) $(LAB_WASM)
	@$(PY) -m microtrain_tools.cli lab

## lab-test: headless chromium trains LAB_STEPS steps on the lab page and runs its five lessons
## (digits drawn through pointer events, every check answered); the losses must equal the host
## run of the same code bit for bit; screenshots in build/lab/ (lab.png, lesson1..5.png).
LAB_STEPS ?= 60
lab-test: $(LAB_STAMP) build/natmod/x64/_microtrain.mpy $(LAB_WASM)
	@$(PY) -m microtrain_tools.cli lab --test $(LAB_STEPS) --screenshot $(ROOT)/build/lab/lab.png
