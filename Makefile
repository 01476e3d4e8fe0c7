# dlbench - one flat Makefile: objects in $(BUILD)/, dependencies via -MMD,
# flags from pkg-config. The CUDA module builds when nvcc is found.

BUILD    ?= build
PREFIX   ?= /usr/local
CC       ?= cc
PKGS     := lua5.4 hdf5 openblas libcjson ncursesw libpng
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter
OPT      ?= -O2 -march=x86-64-v3 -g
CFLAGS   := -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) -pthread -I. $(PKG_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS   := $(PKG_LIBS) -ljpeg -lz -ldl -lm -pthread
ifeq ($(WERROR),1)
CFLAGS   += -Werror
endif
ifeq ($(SAN),1)
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
endif
ifeq ($(SAN),thread)
CFLAGS   += -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=thread
endif

# oneDNN (libdnnl) is optional: used for bf16 products on the CPU when present.
HAVE_DNNL := $(shell test -f /usr/include/oneapi/dnnl/dnnl.h && echo 1)
ifeq ($(HAVE_DNNL),1)
CFLAGS   += -DDL_HAVE_DNNL
LDLIBS   += -ldnnl
endif

LIB_SRC  := $(wildcard engine/*/*.c scripting/*.c views/*.c tui/cmd/*.c) \
            $(filter-out tui/main.c,$(wildcard tui/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

# CUDA: nvcc on PATH or in /usr/local/cuda/bin. The module's RUNPATH names
# the toolkit it was built with; engine/core/backend.c searches further
# ($CUDNN_HOME, pip wheels) for a library the loader does not find there.
NVCC     ?= $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_SRC := $(wildcard engine/cuda/*.cu)
CUDA_MOD := $(if $(NVCC),$(if $(CUDA_SRC),$(BUILD)/dlbench-cuda.so))
NVFLAGS  := -O2 -std=c++17 -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -I. -gencode arch=compute_90,code=sm_90 \
            -gencode arch=compute_90,code=compute_90 --expt-relaxed-constexpr
ifeq ($(WERROR),1)
NVFLAGS  += -Werror all-warnings
endif

# the man page and the bash completion: written by the binary from its command table
DOCS     := $(BUILD)/dlbench.1 $(BUILD)/dlbench.bash-completion

.PHONY: all test asan tsan bench run install clean cuda-note check-layers format format-check
all: $(BUILD)/dlbench $(DOCS) $(CUDA_MOD) cuda-note

cuda-note:
ifeq ($(NVCC),)
	@echo "dlbench: nvcc not found: built without the CUDA backend module"
else
	@echo "dlbench: CUDA backend module $(CUDA_MOD) (nvcc: $(NVCC))"
endif

# made afresh each time: a renamed or removed source leaves no stale member
$(BUILD)/libdlbench.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

# whole archive: subcommands are reached through weak references only
$(BUILD)/dlbench: $(BUILD)/tui/main.o $(BUILD)/libdlbench.a
	$(CC) $(LDFLAGS) -rdynamic -o $@ $(BUILD)/tui/main.o -Wl,--whole-archive \
	    $(BUILD)/libdlbench.a -Wl,--no-whole-archive $(LDLIBS)

$(BUILD)/dlbench.1: $(BUILD)/dlbench
	$(BUILD)/dlbench --man >$@.tmp && mv $@.tmp $@

$(BUILD)/dlbench.bash-completion: $(BUILD)/dlbench
	$(BUILD)/dlbench --bash-completion >$@.tmp && mv $@.tmp $@

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(BUILD)/libdlbench.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -MMD -MP -o $@ $< $(BUILD)/libdlbench.a $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libdlbench.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -MMD -MP -o $@ $< $(BUILD)/libdlbench.a $(LDLIBS)

$(BUILD)/dlbench-cuda.so: $(CUDA_SRC) $(wildcard engine/cuda/*.h) engine/core/backend.h engine/core/tensor.h \
                          engine/base/rng.h engine/base/error.h engine/base/half.h
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -shared -o $@ $(CUDA_SRC) -L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 \
	    -lcublasLt -lcublas -lcudnn -lcudart

# The dependency rules of the design, from every #include and every symbol
# the library's objects leave undefined (scripts/check-layers.py says which).
check-layers: $(LIB_OBJ)
	@python3 scripts/check-layers.py $(BUILD)

# clang-format with the checked-in .clang-format: format rewrites the
# sources, format-check fails naming each file that differs.
FORMAT_SRC = $(shell git ls-files '*.c' '*.h' '*.cu' 2>/dev/null)
format:
	@clang-format -i $(FORMAT_SRC)
format-check:
	@clang-format --dry-run --Werror $(FORMAT_SRC) && echo "format-check: $(words $(FORMAT_SRC)) files follow .clang-format"

test: all $(TEST_BIN)
	@BUILD=$(BUILD) bash tests/run.sh

# The same tests under AddressSanitizer and UndefinedBehaviorSanitizer.
asan:
	@$(MAKE) --no-print-directory BUILD=build-asan SAN=1 OPT="-O1 -g" test

# The C test programs under ThreadSanitizer (the shell tests' timeouts are
# too tight for its slowdown): a data race fails the run.
tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan SAN=thread OPT="-O1 -g" \
	    $(TEST_BIN:$(BUILD)/%=build-tsan/%)
	@TSAN_OPTIONS="halt_on_error=1 exitcode=66" BUILD=build-tsan TESTS=binaries bash tests/run.sh

bench: all $(BENCH_BIN)
	@BUILD=$(BUILD) bash bench/run.sh

run: all
	@bash scripts/prepare-data.sh
	$(BUILD)/dlbench scripts/fmnist_mlp.lua

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/dlbench $(DESTDIR)$(PREFIX)/share/dlbench/scripts
	install -m 755 $(BUILD)/dlbench $(DESTDIR)$(PREFIX)/bin/dlbench
	$(if $(CUDA_MOD),install -m 755 $(CUDA_MOD) $(DESTDIR)$(PREFIX)/lib/dlbench/)
	install -m 644 scripts/*.lua $(DESTDIR)$(PREFIX)/share/dlbench/scripts/
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 644 $(BUILD)/dlbench.1 $(DESTDIR)$(PREFIX)/share/man/man1/dlbench.1
	install -m 644 $(BUILD)/dlbench.bash-completion \
	    $(DESTDIR)$(PREFIX)/share/bash-completion/completions/dlbench

clean:
	rm -rf build build-asan build-fuzz

# make fuzz: libFuzzer targets over the parsers (clang)
include tests/fuzz/fuzz.mk

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
