# sluice — build. `make`, `make test`, `make asan`, `make bench`, `make run`, `make install PREFIX=...`
CC      ?= cc
BUILD   ?= $(if $(filter 1,$(CUDA)),build/cuda,build)
OPT     ?= -O2
CFLAGS  ?=
CPPFLAGS += -Iinclude -Isrc -D_GNU_SOURCE
WARN    := -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -MMD -MP
# -ffp-contract=off: no compiler-made fused multiply-adds. The kernels fix one float order (docs/QUANT.md) and
# write each FMA they mean; gcc in ISO C mode already contracts nothing, clang would fuse a*b+c by default.
BASE_CFLAGS := $(WARN) $(OPT) -g -pthread -fno-math-errno -ffp-contract=off $(CFLAGS)
LDLIBS  += -lcjson -lxxhash -luring -lpcre2-8 -lutf8proc -ledit -lmicrohttpd -lcurl -lnettle -lm -pthread
PREFIX  ?= /usr/local
.DEFAULT_GOAL := all # `make CUDA=1` builds everything, not only the first rule of the CUDA block
VENV    ?= build/venv
PYTHON  ?= $(VENV)/bin/python
DEMO    := models/demo.sluice

# The family list (src/family/arch/families.h) follows the files of src/family/arch/ (rewritten only when
# the set changes): adding a family is adding its file.
_families := $(shell tools/gen_families.sh)

LIB_SRC := $(sort $(wildcard src/*/*.c src/*/*/*.c))
LIB_SRC := $(filter-out src/cli/% $(SKIP),$(LIB_SRC))
CLI_SRC := $(filter-out $(SKIP),$(sort $(wildcard src/cli/*.c)))
TEST_SRC := $(sort $(wildcard tests/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

# The CUDA tier (issue 13, docs/CUDA.md): `make CUDA=1` (into build/cuda) adds src/backend/cuda/*.cu, built
# by nvcc for CUDA_ARCH, to libsluice and links the CUDA runtime; without CUDA=1 nothing changes.
ifeq ($(CUDA),1)
NVCC      ?= nvcc
CUDA_HOME ?= /usr/local/cuda
CUDA_ARCH ?= sm_90
CU_SRC    := $(sort $(wildcard src/backend/cuda/*.cu))
LIB_OBJ   += $(CU_SRC:%.cu=$(BUILD)/%.o)
CPPFLAGS  += -DSL_CUDA=1
LDLIBS    += -L$(CUDA_HOME)/lib64 -lcudart -lstdc++
$(BUILD)/%.o: %.cu | setup-build
	@mkdir -p $(dir $@)
	@echo "  NVCC    $<"
	@$(NVCC) -std=c++17 -arch=$(CUDA_ARCH) -O3 -Iinclude -Isrc -D_GNU_SOURCE -Xcompiler -Wall,-Wextra -MMD -MP -c $< -o $@
$(BUILD)/test_cuda: tests/cuda/test_cuda.c $(BUILD)/libsluice.a
	$(CC) $(CPPFLAGS) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@
# The kernels against the CPU oracle (and, with ARGS=--bench, their bandwidth): needs a GPU; exit 77 = none.
test-cuda: $(BUILD)/test_cuda
	@$(BUILD)/test_cuda $(ARGS); rc=$$?; if [ $$rc = 77 ]; then echo "test-cuda: no usable CUDA device here (skipped)"; else exit $$rc; fi
# Whole fixture models on --gpu against transformers and the CPU backend (tools/cuda_model_test.sh)
$(BUILD)/test_cuda_model: tests/cuda/test_model.c $(BUILD)/libsluice.a
	$(CC) $(CPPFLAGS) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) -Wl,--as-needed $(LDLIBS) -o $@
all: $(BUILD)/test_cuda $(BUILD)/test_cuda_model
endif

all: $(BUILD)/sluice $(BUILD)/libsluice.a

# Open MPI (issue 31, docs/SCALE.md: mpirun -np N sluice ... puts the experts on ranks 1..N-1): found with
# pkg-config (Debian's libopenmpi-dev, which tools/setup.sh test and ci install), used when found; MPI=0 builds
# without it, MPI=1 fails when it is missing. Only src/dist/mpi.c includes mpi.h; without MPI it answers "built
# without MPI". A stamp per choice rebuilds mpi.o when the choice changes in one build folder.
ifneq ($(MPI),0)
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null)
endif
ifeq ($(MPI)$(MPI_LIBS),1)
$(error MPI=1 but Open MPI was not found by pkg-config ompi-c (apt-get install libopenmpi-dev openmpi-bin))
endif
MPI_STAMP := $(BUILD)/.mpi-$(if $(MPI_LIBS),on,off)
$(MPI_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/.mpi-* && touch $@
$(BUILD)/src/dist/mpi.o: $(MPI_STAMP)
ifneq ($(MPI_LIBS),)
$(BUILD)/src/dist/mpi.o: CFLAGS_EXTRA := $(MPI_CFLAGS) -DSL_MPI=1
LDLIBS += $(MPI_LIBS)
endif

# What the build and the tests need is installed by tools/setup.sh (the one package list; a no-op in well
# under a second when everything is there). Every object waits for it.
setup-build:
	@tools/setup.sh build
setup-test: setup-build
	@tools/setup.sh test

# Per-file instruction-set flags: the SIMD kernel files only (selected at run time, kernels.h).
ARCH := $(shell $(CC) -dumpmachine 2>/dev/null)
ifneq ($(filter x86_64%,$(ARCH)),)
$(BUILD)/src/kernels/kernels_avx2.o: CFLAGS_EXTRA := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c
$(BUILD)/src/kernels/kernels_avx512.o: CFLAGS_EXTRA := $(AVX512_FLAGS)
$(BUILD)/src/kernels/kernels_avx512_i8p.o: CFLAGS_EXTRA := $(AVX512_FLAGS)
# AMX tiles for the q4 prefill (kernels_amx.c: used only where CPUID and the OS allow them); its emulated build for
# the tests (tests/kernels_amx_emu.c) with the AVX-512 flags alone
$(BUILD)/src/kernels/kernels_amx.o: CFLAGS_EXTRA := $(AVX512_FLAGS) -mamx-tile -mamx-int8
$(BUILD)/tests/kernels_amx_emu.o: CFLAGS_EXTRA := $(AVX512_FLAGS)
$(BUILD)/src/kernels/kquant_avx2.o: CFLAGS_EXTRA := -mavx2 -mfma -mf16c
$(BUILD)/src/kernels/kquant_avx512.o: CFLAGS_EXTRA := $(AVX512_FLAGS)
$(BUILD)/src/kernels/mxfp4_avx2.o: CFLAGS_EXTRA := -mavx2
$(BUILD)/src/kernels/mxfp4_avx512.o: CFLAGS_EXTRA := -mavx512f
endif
ifneq ($(filter aarch64%,$(ARCH)),)
$(BUILD)/src/kernels/kernels_neon_dot.o: CFLAGS_EXTRA := -march=armv8.2-a+dotprod
endif

$(BUILD)/%.o: %.c | setup-build
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CPPFLAGS) $(BASE_CFLAGS) $(CFLAGS_EXTRA) -c $< -o $@

$(BUILD)/libsluice.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/sluice: $(CLI_OBJ) $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $(CLI_OBJ) $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/test_sluice: $(TEST_OBJ) $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $(TEST_OBJ) $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

test: setup-test $(BUILD)/sluice $(BUILD)/test_sluice
	@PYTHON=$(PYTHON) tools/run_tests.sh $(BUILD) $(FILTER)

asan:
	$(MAKE) BUILD=build/asan OPT="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    LDFLAGS="-fsanitize=address,undefined" test

# The AMX kernel against the VNNI path on an AMX host (tools/amx_check.c): one static binary (libc, libm, libpthread),
# carried to the host and run there as `./amx_check` (or `./amx_check quick`)
amx-check: $(BUILD)/amx_check
$(BUILD)/amx_check: tools/amx_check.c $(BUILD)/libsluice.a
	$(CC) $(CPPFLAGS) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a -static -lm -pthread -o $@

bench: $(BUILD)/sluice $(BUILD)/bench_tokenize $(BUILD)/bench_kernels $(BUILD)/bench_decode
	tools/bench.sh $(BUILD)/sluice
	$(BUILD)/bench_kernels

# prefill and decode tok/s of one container, int8 activations against exact (docs/PERFORMANCE.md)
$(BUILD)/bench_decode: $(BUILD)/bench/bench_decode.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

# what the expert checksums cost a streamed decode, paired steps on two opens (docs/STREAMING.md)
$(BUILD)/bench_verify: $(BUILD)/bench/bench_verify.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/bench_kernels: $(BUILD)/bench/bench_kernels.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

# the hybrid step's host expert rate: kern_ffn_dev against the CPU backend's ffn and a read loop (docs/CUDA.md)
$(BUILD)/bench_hybrid: $(BUILD)/bench/bench_hybrid.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

# one token's CPU MLA attention, the split against attend_part (docs/PERFORMANCE.md)
$(BUILD)/bench_mla: $(BUILD)/bench/bench_mla.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

# Accuracy of the quantized types on every fixture (docs/QUANT.md).
quant-eval: $(BUILD)/quant_eval
	$(BUILD)/quant_eval

$(BUILD)/quant_eval: $(BUILD)/tools/quant_eval.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

# Measurements on the demo model (docs/PERFORMANCE.md, docs/QUANT.md): quantization quality against the
# BF16 master (build/demo/out/hf, made by tools/train_demo.py), and routing locality in the expert cache.
demo-eval: $(BUILD)/demo_eval
	$(BUILD)/demo_eval
locality: $(BUILD)/locality
	$(BUILD)/locality

# Continuous batching on a streamed model: aggregate tok/s for 1..16 streams, follow-up TTFT.
bench-serve: $(BUILD)/bench_serve
	@[ -f $(BUILD)/q30.sluice ] || $(BUILD)/sluice synth --shape qwen3-30b-a3b --layers 8 --quant q4 -o $(BUILD)/q30.sluice
	$(BUILD)/bench_serve $(BUILD)/q30.sluice --cache 256 --tokens 32

# At scale (docs/PERFORMANCE.md, "At scale"): the big shapes against the cache budget, the fio bound, streamed
# prefill, llama.cpp on one GGUF file (built from the llama-cpp-python sdist into /work/llama.cpp), memory.
# SECTIONS=decode,ssd,prefill,llama,memory picks sections; QUICK=1 is a few-minute run (results in
# build/scale/quick, not in the document); BENCH_SCALE_ARGS passes more (--force, --keep, --layers N).
bench-scale: $(BUILD)/sluice
	@tools/setup.sh bench
	$(PYTHON) tools/bench_scale.py --sluice $(BUILD)/sluice $(if $(SECTIONS),--sections $(SECTIONS)) \
	    $(if $(QUICK),--quick) $(BENCH_SCALE_ARGS)

$(BUILD)/bench_serve: $(BUILD)/tools/bench_serve.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/demo_eval: $(BUILD)/tools/demo_eval.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/imatrix_ratio: $(BUILD)/tools/imatrix_ratio.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/locality: $(BUILD)/tools/locality.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/bench_tokenize: $(BUILD)/bench/bench_tokenize.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

# The demo: the shipped model (models/demo/README.md) writes a few lines, its experts streamed through a
# cache of a quarter of the expert section (10.5 MiB), so the stats line shows streaming at work.
DEMO_PROMPT := And it came to pass
run: $(BUILD)/sluice
	@$(BUILD)/sluice info $(DEMO) | head -7
	@echo '$$ sluice run -m $(DEMO) -p "$(DEMO_PROMPT)" -n 64 --temp 0.7 --seed 1 --cache 2.6M --stats'
	@printf '%s' '$(DEMO_PROMPT)'
	@$(BUILD)/sluice run -m $(DEMO) -p "$(DEMO_PROMPT)" -n 64 --temp 0.7 --seed 1 --cache 2.6M --stats

# The man page is generated from the --help texts (help2man).
$(BUILD)/sluice.1: $(BUILD)/sluice tools/gen_man.sh
	@tools/setup.sh man
	tools/gen_man.sh $@ $(BUILD)/sluice

# make install installs sluice, never packages: tools/setup.sh only checks there (SLUICE_NO_SETUP) and names
# what is missing; without help2man the man page is left out, saying so.
ifneq ($(filter install,$(MAKECMDGOALS)),)
export SLUICE_NO_SETUP := 1
endif
install: all
	install -d $(PREFIX)/bin $(PREFIX)/lib $(PREFIX)/include $(PREFIX)/share/sluice $(PREFIX)/share/doc/sluice
	install -m 755 $(BUILD)/sluice $(PREFIX)/bin/
	install -m 644 $(BUILD)/libsluice.a $(PREFIX)/lib/
	install -m 644 include/sluice.h $(PREFIX)/include/
	install -m 644 $(DEMO) $(PREFIX)/share/sluice/demo.sluice
	install -m 644 docs/*.md $(PREFIX)/share/doc/sluice/
	install -d $(PREFIX)/share/bash-completion/completions
	$(BUILD)/sluice completion bash > $(PREFIX)/share/bash-completion/completions/sluice
	@if command -v help2man >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory $(BUILD)/sluice.1 && install -d $(PREFIX)/share/man/man1 && \
		install -m 644 $(BUILD)/sluice.1 $(PREFIX)/share/man/man1/sluice.1; \
	else echo "make install: help2man is not installed, so the man page is not (apt-get install help2man, then make install again)" >&2; fi

clean:
	rm -rf build


.PHONY: test-cuda
.PHONY: all setup-build setup-test test asan amx-check bench bench-serve bench-scale quant-eval demo-eval locality run install clean fuzz fuzz-build
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# Coverage-guided fuzzing (docs/FUZZING.md): libFuzzer harnesses fuzz/fuzz_*.c, built with clang and
# ASan+UBSan into build/fuzz, each run for FUZZ_SECONDS (FUZZ=name,... picks some) from the committed
# seeds (fuzz/corpus/NAME) after replaying the committed findings (fuzz/regress/NAME). FUZZ_SEED=N fixes
# libFuzzer's seed (0: a new one each run).
FUZZ_SECONDS ?= 30
FUZZ_SEED    ?= 0
FUZZ         ?=
FUZZ_BUILD   := build/fuzz
FUZZ_SRC     := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_BIN     := $(FUZZ_SRC:fuzz/%.c=$(FUZZ_BUILD)/%)
FUZZ_OPT     := -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
fuzz: fuzz-build
	@FUZZ_SEED=$(FUZZ_SEED) tools/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ)
fuzz-build: setup-build
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang OPT="$(FUZZ_OPT)" LDFLAGS="-fsanitize=address,undefined" \
	    $(FUZZ_BUILD)/sluice $(FUZZ_BIN)

$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz.h $(FUZZ_BUILD)/libsluice.a
	@echo "  FUZZ    $<"
	@$(CC) $(CPPFLAGS) $(BASE_CFLAGS) -DFUZZ_ROOT='"$(CURDIR)"' -fsanitize=fuzzer $< $(FUZZ_BUILD)/libsluice.a \
	    $(LDFLAGS) $(LDLIBS) -o $@
