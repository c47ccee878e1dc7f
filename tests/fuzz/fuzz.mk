# Fuzzing (included by the Makefile; README "Fuzzing").
#
#   make test-fuzz                 every target: its seed corpus + FUZZ_RUNS mutated inputs (fixed seed;
#                                  default 10000, 3000 for prep and checkpoint: tests/fuzz/run_fuzz.sh),
#                                  FUZZ_JOBS (2) targets at a time
#   make fuzz-<target>             one target (job_config tokenizer shard checkpoint prep safetensors profile
#                                  hf_config)
#   make fuzz-<target> FUZZ_RUNS=1000000 FUZZ_SEED=7     a longer run
#   make fuzz-seeds                rewrite the writer-made seeds (after a shard/checkpoint format change)
#
# libFuzzer needs the code under test built by clang with coverage instrumentation, and clang's
# ASan runtime does not mix with g++'s: the parsers and what they call are compiled again with
# clang++-14 (CPU only) into $(FUZZ_BUILD), separate from every g++ build.
FUZZ_BUILD ?= build-fuzz
FUZZ_CXX ?= clang++-14
FUZZ_RUNS ?=
FUZZ_SEED ?= 1
FUZZ_JOBS ?= 2
FUZZ_TARGETS := prep checkpoint shard job_config tokenizer safetensors profile hf_config  # longest first (FUZZ_JOBS run side by side)

# The library sources the targets reach (the linker takes only the objects it needs from the archive).
FUZZ_LIB_SRC := $(sort $(wildcard src/config/*.cpp)) src/cli/job_args.cpp src/cli/cmd_prep.cpp $(sort $(wildcard src/data/*.cpp)) \
  $(sort $(wildcard src/data/*/*.cpp)) \
  $(sort $(wildcard src/core/*.cpp)) src/model/arch.cpp src/model/config.cpp src/model/gpt_params.cpp src/model/llama_params.cpp \
  src/model/rope_scaling.cpp \
  $(sort $(wildcard src/checkpoint/*.cpp)) \
  src/distributed/fault_inject.cpp src/distributed/step_activity.cpp src/distributed/launch.cpp src/parallel/partition.cpp \
  src/parallel/schedule.cpp src/plan/profile.cpp src/plan/datasheet_profiles.cpp
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.cpp=$(FUZZ_BUILD)/obj/%.o)
FUZZ_LIB := $(FUZZ_BUILD)/libmpitron-fuzz.a
FUZZ_BIN := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)

# -O1: fast enough, still readable stack traces. -fno-sanitize-recover: UB aborts (a crash) instead of
# printing and going on.
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CXXFLAGS := -std=c++20 -O1 -g -Wall -Wextra $(FUZZ_SAN) -MMD -MP
FUZZ_CPPFLAGS := -Iinclude $(MPI_CFLAGS) $(HDF5_CFLAGS) -DMPITRON_CUDA=0

$(FUZZ_BUILD)/obj/src/%.o: src/%.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CPPFLAGS) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/obj/tests/fuzz/%.o: tests/fuzz/%.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CPPFLAGS) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_LIB): $(FUZZ_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

.SECONDARY: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o)
$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o $(FUZZ_LIB)
	$(FUZZ_CXX) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ -lfmt -lpcre2-8 -lutf8proc -lz -lzstd -lsentencepiece $(HDF5_LIBS) $(MPI_LIBS)

.PHONY: deps-stress test-stress test-fuzz fuzz-build fuzz-seeds $(FUZZ_TARGETS:%=fuzz-%)
# clang-14 + libclang-rt-14-dev (libFuzzer, clang's ASan/UBSan): not part of the lean `make deps`.
deps-stress:
	@bash tools/deps.sh stress

fuzz-build: deps-stress
	@$(MAKE) --no-print-directory $(FUZZ_BIN)

test-fuzz: fuzz-build
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_RUNS=$(FUZZ_RUNS) FUZZ_SEED=$(FUZZ_SEED) FUZZ_JOBS=$(FUZZ_JOBS) \
	  bash tests/fuzz/run_fuzz.sh $(FUZZ_TARGETS)

$(FUZZ_TARGETS:%=fuzz-%): fuzz-%: fuzz-build
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_RUNS=$(FUZZ_RUNS) FUZZ_SEED=$(FUZZ_SEED) bash tests/fuzz/run_fuzz.sh $*

fuzz-seeds: fuzz-build
	@bash tests/fuzz/make_seeds.sh $(FUZZ_BUILD)

# The stress suite (the reliability issue); the fuzzers are its part here.
test-stress: test-fuzz

-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
