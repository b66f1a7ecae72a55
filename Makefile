# sluice — build. `make`, `make test`, `make asan`, `make bench`, `make run`, `make install PREFIX=...`
CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  ?=
CPPFLAGS += -Iinclude -Isrc -D_GNU_SOURCE
WARN    := -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -MMD -MP
BASE_CFLAGS := $(WARN) $(OPT) -g -pthread -fno-math-errno $(CFLAGS)
LDLIBS  += -lcjson -lxxhash -luring -lpcre2-8 -lutf8proc -ledit -lm -pthread
PREFIX  ?= /usr/local

LIB_SRC := $(sort $(wildcard src/*/*.c))
LIB_SRC := $(filter-out src/cli/% $(SKIP),$(LIB_SRC))
CLI_SRC := $(filter-out $(SKIP),$(sort $(wildcard src/cli/*.c)))
TEST_SRC := $(sort $(wildcard tests/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

all: $(BUILD)/sluice $(BUILD)/libsluice.a

# Per-file instruction-set flags: the SIMD kernel files only (selected at run time, kernels.h).
ARCH := $(shell $(CC) -dumpmachine 2>/dev/null)
ifneq ($(filter x86_64%,$(ARCH)),)
$(BUILD)/src/kernels/kernels_avx2.o: CFLAGS_EXTRA := -mavx2 -mfma -mf16c
$(BUILD)/src/kernels/kernels_avx512.o: CFLAGS_EXTRA := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c
endif

$(BUILD)/%.o: %.c
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

test: $(BUILD)/sluice $(BUILD)/test_sluice
	@tools/run_tests.sh $(BUILD) $(FILTER)

asan:
	$(MAKE) BUILD=build/asan OPT="-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    LDFLAGS="-fsanitize=address,undefined" test

bench: $(BUILD)/sluice $(BUILD)/bench_tokenize $(BUILD)/bench_kernels
	tools/bench.sh $(BUILD)/sluice
	$(BUILD)/bench_kernels

$(BUILD)/bench_kernels: $(BUILD)/bench/bench_kernels.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

# Accuracy of the quantized types on every fixture (docs/QUANT.md).
quant-eval: $(BUILD)/quant_eval
	$(BUILD)/quant_eval

$(BUILD)/quant_eval: $(BUILD)/tools/quant_eval.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/bench_tokenize: $(BUILD)/bench/bench_tokenize.o $(BUILD)/libsluice.a
	$(CC) $(BASE_CFLAGS) $< $(BUILD)/libsluice.a $(LDFLAGS) $(LDLIBS) -o $@

# The demo: pack the tiny Qwen3-Next fixture and generate greedily from token ids.
run: $(BUILD)/sluice
	$(BUILD)/sluice pack tests/data/qwen3_next -o $(BUILD)/demo.sluice
	$(BUILD)/sluice info $(BUILD)/demo.sluice
	$(BUILD)/sluice run -m $(BUILD)/demo.sluice --tokens 1,2,3,4,5,6,7,8 -n 16 --temp 0 --ids --stats

install: all
	install -d $(PREFIX)/bin $(PREFIX)/lib $(PREFIX)/include
	install -m 755 $(BUILD)/sluice $(PREFIX)/bin/
	install -m 644 $(BUILD)/libsluice.a $(PREFIX)/lib/
	install -m 644 include/sluice.h $(PREFIX)/include/

clean:
	rm -rf build

.PHONY: all test asan bench quant-eval run install clean
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
