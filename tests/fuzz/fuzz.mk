# tests/fuzz/fuzz.mk - `make fuzz`: libFuzzer targets (clang, ASan + UBSan), each
# run for FUZZ_SECONDS (60) on its corpus. Included by the Makefile.
#
#   make fuzz                      all targets, 60 s each
#   make fuzz FUZZ_SECONDS=600 FUZZ_TARGETS=csv
#
# The library is rebuilt with clang and coverage in build-fuzz/; the seed
# corpora are tests/fuzz/corpus/<target>/ (read only); what the fuzzer
# finds goes to build-fuzz/corpus/<target>/, crashes to build-fuzz/crashes/.

ifndef DL_FUZZ_MK # read once, even when both included and given with -f
DL_FUZZ_MK := 1

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= runlog idx csv override control
FUZZ_BUILD   := build-fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_BIN     := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)

.PHONY: fuzz fuzz-build
fuzz: fuzz-build
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# one sub-make with the fuzzing compiler and flags, reading the Makefile and
# this file whether this file is included or given with -f
fuzz-build:
	@$(MAKE) --no-print-directory $(addprefix -f ,$(sort $(filter Makefile tests/fuzz/fuzz.mk,$(MAKEFILE_LIST)))) \
	    BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT="-O1 -g" \
	    EXTRA_CFLAGS="-fsanitize=fuzzer-no-link $(FUZZ_SAN)" $(FUZZ_BIN)

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h $(FUZZ_BUILD)/libdlbench.a
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -O1 -g -I. $(PKG_CFLAGS) -fsanitize=fuzzer $(FUZZ_SAN) \
	    -o $@ $< -Wl,--whole-archive $(FUZZ_BUILD)/libdlbench.a -Wl,--no-whole-archive $(LDLIBS)

endif
