# mpitron build. `make` -> build/mpitron; `make test`; `make demo`; `make deps`.
# CUDA=auto (default: build the CUDA backend when nvcc is found) | 0 (CPU only) | 1 (required).
# BUILD=dir puts every output under another folder (several builds side by side).
# `make help` lists the targets and these knobs.
SHELL := /bin/bash
# SAN=address,undefined: a sanitizer build (any -fsanitize= list) in its own folder, CPU only
# (nvcc's host objects and the CUDA runtime do not go with ASan; the GPU emulation test skips).
SAN ?=
BUILD ?= $(if $(SAN),build-san,build)
CUDA ?= $(if $(SAN),0,auto)
CUDA_HOME ?= /usr/local/cuda
NVCC := $(CUDA_HOME)/bin/nvcc
# ARCH: the CPU the binary may run on. Default x86-64-v3 (Haswell 2013 / Zen 1 and newer: AVX2,
# FMA, BMI2), not v2: every x86 node a trainer meets in practice has AVX2, oneDNN and the kernels
# are much slower without it, and v3 is the baseline of current distributions (RHEL 10). The
# AVX-512 kernels are compiled as well and chosen at run time (src/ops/cpu/isa.hpp), and oneDNN
# dispatches its own GEMMs, so a portable binary loses nothing measurable on AVX-512 nodes
# (bench/results/portable_isa.md). ARCH=native: tuned for the build machine only (may die with
# SIGILL elsewhere). Any other value is passed as is (ARCH=-march=x86-64-v4).
ARCH ?= x86-64-v3
ifeq ($(ARCH),native)
  ARCH_FLAGS := -march=native
else ifeq ($(filter -%,$(ARCH)),)
  ARCH_FLAGS := -march=$(ARCH) -mtune=generic
else
  ARCH_FLAGS := $(ARCH)
endif
# CUDA_ARCH: the GPU generations to emit code for (A100, H100, B200), plus PTX for the newest so
# that later GPUs JIT-compile it. Semicolon-separated compute capabilities without the dot.
CUDA_ARCH ?= 80;90;100
CUDA_ARCH_LIST := $(subst ;, ,$(CUDA_ARCH))
CUDA_PTX := $(shell printf '%s\n' $(CUDA_ARCH_LIST) | sort -n | tail -1)
CUDA_GENCODE := $(foreach a,$(CUDA_ARCH_LIST),-gencode=arch=compute_$(a),code=sm_$(a)) \
  -gencode=arch=compute_$(CUDA_PTX),code=compute_$(CUDA_PTX)
PREFIX ?= /usr/local
DESTDIR ?=

ifeq ($(CUDA),auto)
  CUDA_ON := $(if $(wildcard $(NVCC)),1,0)
else ifeq ($(CUDA),1)
  CUDA_ON := 1
  ifeq ($(wildcard $(NVCC)),)
    $(error CUDA=1 but $(NVCC) not found; set CUDA_HOME or use CUDA=0)
  endif
else
  CUDA_ON := 0
endif

CXX := g++
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null) -DOMPI_SKIP_MPICXX=1
MPI_LIBS := $(shell mpicc --showme:link 2>/dev/null)
HDF5_CFLAGS := $(shell pkg-config --cflags hdf5-openmpi 2>/dev/null)
HDF5_LIBS := $(shell pkg-config --libs hdf5-openmpi 2>/dev/null)

# The build's own flags live in MT_*; a user's CPPFLAGS / CXXFLAGS / LDFLAGS / LDLIBS / NVCCFLAGS
# (command line or environment) come after them, so `make CXXFLAGS=-O1` changes the optimisation
# level without dropping -std=c++20 or the dependency files.
MT_CPPFLAGS := -Iinclude $(MPI_CFLAGS) $(HDF5_CFLAGS) -DMPITRON_CUDA=$(CUDA_ON)
# -Wno-stringop-overflow: g++ 12 false positive inside fmt 9's fill_t (fmt issue #2708-style), not our code.
# MT_OPT: -O3, except in a sanitizer build (below). The test programs' own files (tests/: Boost.Test
# cases, references, checks) at -O1, -O0 under the sanitizers: their code is not what runs long (the
# library's is), and g++ takes 1.4x (3x with ASan + UBSan: test_plan.cpp 18.5 s -> 8.2 s) as long
# for each at the higher level (AMD EPYC, 2026-12-05).
MT_OPT := -O3
$(BUILD)/obj/tests/%.o: MT_OPT := $(if $(SAN),-O0,-O1)
MT_CXXFLAGS = -std=c++20 $(MT_OPT) $(ARCH_FLAGS) -fopenmp -g1 -Wall -Wextra -Wno-stringop-overflow -MMD -MP
MT_LDLIBS := -ldnnl -lfmt -lpthread -lpcre2-8 -lutf8proc -lz -lzstd -lsentencepiece $(HDF5_LIBS) $(MPI_LIBS)
MT_LDFLAGS := -fopenmp
SAN_OBJ :=
ifneq ($(SAN),)
  # -O1, ASan's recommended level, except the CPU kernels: g++ takes 2-3x as long per file at -O3
  # with ASan + UBSan. On the 2-core machine (AMD EPYC, 2026-12-04) the sanitizer build took 25 min
  # at -O3 and 11 min like this; the sanitized tests ran 0-20% longer (unit 27 -> 31 s,
  # e2e/test_3d 27 -> 32 s). The kernels are quick to compile and are the tests' hot loops.
  MT_OPT := -O1
  $(BUILD)/obj/src/ops/cpu/%.o: MT_OPT := -O3
  MT_CXXFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
  MT_LDFLAGS += -fsanitize=$(SAN)
  # Fixes for leak reports of OpenMPI components and for UBSan report files (san_hooks.cpp).
  SAN_OBJ := $(BUILD)/obj/tests/sanitizers/san_hooks.o
  MT_LDFLAGS += -Wl,--export-dynamic-symbol=dlclose
endif

# The CUDA backend is a library of its own, libmpitron-cuda.so next to the binary, loaded by the
# first process that uses a GPU (include/mpitron/core/cuda_plugin.hpp): the CUDA libraries cost a
# process 0.3 s and 220 MB to map, which CPU ranks and commands need not pay. Its objects are
# position-independent; CUDA_LDLIBS are its libraries, not the binary's.
ifeq ($(CUDA_ON),1)
  MT_CPPFLAGS += -I$(CUDA_HOME)/include
  MT_NVCCFLAGS := -std=c++20 -O3 -Iinclude -I$(CUDA_HOME)/include -DMPITRON_CUDA=1 \
    $(CUDA_GENCODE) -Xcompiler -fopenmp,-Wall,-fPIC -MMD -MP
  CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcublasLt -lcublas -lnccl -lcudart
endif
ALL_CPPFLAGS = $(MT_CPPFLAGS) $(CPPFLAGS)
ALL_CXXFLAGS = $(MT_CXXFLAGS) $(CXXFLAGS)
ALL_LDFLAGS = $(MT_LDFLAGS) $(LDFLAGS)
ALL_LDLIBS = $(MT_LDLIBS) $(LDLIBS)

# Every object depends on the flags it was compiled with (this file holds them): a build with
# another ARCH, CUDA or CXXFLAGS in the same folder recompiles everything instead of linking
# objects of two configurations (a -march=native object in a portable binary dies with SIGILL).
FLAGS_STAMP := $(BUILD)/.flags
FLAGS_NOW := $(CXX) $(ALL_CPPFLAGS) $(ALL_CXXFLAGS) | $(if $(filter 1,$(CUDA_ON)),$(NVCC) $(MT_NVCCFLAGS) $(NVCCFLAGS))
# Not in a dry run (make -n, compile_commands.json): it would leave the stamp saying flags no
# object was built with, and the next real make would recompile everything.
DRY_RUN := $(findstring n,$(firstword -$(MAKEFLAGS)))
ifeq ($(DRY_RUN),)
  ifneq ($(FLAGS_NOW),$(file <$(FLAGS_STAMP)))
    $(shell mkdir -p $(BUILD))
    $(file >$(FLAGS_STAMP),$(FLAGS_NOW))
  endif
endif
# (A dry run in a new folder has no stamp yet: "made" by this empty rule, everything is to build.)
$(FLAGS_STAMP): ;

# Sources: everything under src/; files in a cuda/ folder (and .cu files) only with CUDA on.
ALL_CPP := $(shell find src -name '*.cpp' | sort)
CUDA_CPP := $(shell find src -path '*/cuda/*' -name '*.cpp' | sort)
LIB_CPP := $(filter-out src/main.cpp $(CUDA_CPP),$(ALL_CPP))
CUDA_OBJ :=
ifeq ($(CUDA_ON),1)
  CUDA_OBJ := $(CUDA_CPP:%.cpp=$(BUILD)/obj/%.o) $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(shell find src -name '*.cu' | sort))
endif
# The CPU kernel files are compiled a second time as their AVX-512 variant (src/ops/cpu/isa.hpp).
ISA_CPP := $(filter-out src/ops/cpu/cpu_ops.cpp src/ops/cpu/cpu_isa.cpp src/ops/cpu/gemm.cpp,$(wildcard src/ops/cpu/*.cpp))
LIB_OBJ := $(LIB_CPP:%.cpp=$(BUILD)/obj/%.o) $(ISA_CPP:%.cpp=$(BUILD)/obj/%.avx512.o)
LIB := $(BUILD)/libmpitron.a
# The CUDA backend: the shared library mpitron loads, and the same objects as an archive for the
# programs that link it in (unit tests, gpu_check, the CPU emulation). Those link CUDA_LINKED_IN:
# the archive with its entry points kept and exported, so that the loader finds them in the program.
CUDA_PLUGIN := $(if $(CUDA_OBJ),$(BUILD)/libmpitron-cuda.so)
CUDA_LIB := $(if $(CUDA_OBJ),$(BUILD)/libmpitron-cuda.a)
CUDA_ENTRIES := mpitron_cuda_probe_devices mpitron_cuda_bind_device mpitron_cuda_alloc mpitron_cuda_free \
  mpitron_cuda_copy mpitron_cuda_make_nccl_comm mpitron_cuda_make_gpu_backend
CUDA_KEEP := $(CUDA_ENTRIES:%=-Wl,-u,%) $(CUDA_ENTRIES:%=-Wl,--export-dynamic-symbol=%) $(CUDA_LIB)
CUDA_LINKED_IN := $(if $(CUDA_OBJ),$(CUDA_KEEP))
# mpitron itself: every library object (the CUDA backend calls into any of them) and their symbols
# exported to the library it loads.
# The CPU emulation of the CUDA backend (bench/gpu/emulate/, rules below), which the tests run.
EMULATED := $(if $(CUDA_OBJ),$(addprefix $(BUILD)/bench/emulated_,check train tp_grads self_check))
WHOLE_LIB := -rdynamic -Wl,--whole-archive $(LIB) -Wl,--no-whole-archive
EXE_LIB := $(if $(CUDA_OBJ),$(WHOLE_LIB),$(LIB))

UNIT_SRC := $(sort $(wildcard tests/unit/*.cpp))
# Test-only CUDA code (every CudaOps kernel against the CPU Ops; also linked into gpu_check):
# in the unit tests of a CUDA build, never in the library.
TEST_CUDA_SRC := $(if $(filter 1,$(CUDA_ON)),$(sort $(wildcard tests/cuda/*.cpp)))
UNIT_SRC += $(TEST_CUDA_SRC)
UNIT_BIN := $(BUILD)/tests/unit_tests
MPI_TEST_SRC := $(sort $(wildcard tests/mpi/test_*.cpp))
MPI_TEST_BIN := $(MPI_TEST_SRC:tests/mpi/%.cpp=$(BUILD)/tests/mpi/%)
MPI_MAIN_OBJ := $(BUILD)/obj/tests/mpi/mpi_main.o
TEST_CPPFLAGS := -DBOOST_TEST_DYN_LINK
TEST_LIBS := -lboost_unit_test_framework

.PHONY: all help install compile_commands.json deps deps-check deps-slurm test test-unit test-mpi test-e2e test-stress test-slurm demo data bench bench-data clean docs
all: $(BUILD)/mpitron $(CUDA_PLUGIN)

$(BUILD)/mpitron: $(BUILD)/obj/src/main.o $(LIB) $(SAN_OBJ) | $(CUDA_PLUGIN)
	$(CXX) $(ALL_LDFLAGS) -o $@ $(BUILD)/obj/src/main.o $(EXE_LIB) $(SAN_OBJ) $(ALL_LDLIBS)

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(CUDA_OBJ): MT_CXXFLAGS += -fPIC
$(CUDA_LIB): $(CUDA_OBJ)
	rm -f $@ && ar rcs $@ $^
# Undefined references are mpitron's own functions, resolved against the binary when it loads this.
$(CUDA_PLUGIN): $(CUDA_OBJ)
	$(CXX) -shared $(ALL_LDFLAGS) -Wl,-soname,libmpitron-cuda.so -o $@ $^ $(CUDA_LDLIBS) $(ALL_LDLIBS)

$(BUILD)/obj/%.o: %.cpp $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_CPPFLAGS) $(ALL_CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%.avx512.o: %.cpp $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_CPPFLAGS) -DMPITRON_CPU_ISA_AVX512 $(ALL_CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(MT_NVCCFLAGS) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.cpp $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_CPPFLAGS) $(TEST_CPPFLAGS) $(ALL_CXXFLAGS) -c $< -o $@

$(UNIT_BIN): $(UNIT_SRC:%.cpp=$(BUILD)/obj/%.o) $(LIB) $(SAN_OBJ) $(CUDA_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_LDFLAGS) -o $@ $(filter-out $(LIB) $(CUDA_LIB),$^) $(CUDA_LINKED_IN) $(LIB) $(TEST_LIBS) $(CUDA_LDLIBS) $(ALL_LDLIBS)

$(BUILD)/tests/mpi/%: $(BUILD)/obj/tests/mpi/%.o $(MPI_MAIN_OBJ) $(LIB) $(SAN_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_LDFLAGS) -o $@ $^ $(TEST_LIBS) $(ALL_LDLIBS)
# Kept: make deletes the objects a pattern rule made on the way (intermediate files) when it ends,
# and the next make, which reads their .d files, compiled all nine again one at a time (`make test`
# after `make -j2 tests`: 40 s of CI, more under the sanitizers).
.SECONDARY: $(MPI_TEST_SRC:tests/mpi/%.cpp=$(BUILD)/obj/tests/mpi/%.o) $(MPI_MAIN_OBJ)

deps:
	@bash tools/deps.sh install

deps-check:
	@bash tools/deps.sh check

# gpu_check too where CUDA is on: it links on its own object list, which nothing else would check.
tests: $(UNIT_BIN) $(MPI_TEST_BIN) $(BUILD)/mpitron $(EMULATED) $(if $(CUDA_OBJ),$(BUILD)/bench/gpu_check)

# The README's test command. Runs unit tests, every MPI test at the rank counts its file asks for
# (a `// np: 1 2 4` line), then tests/e2e/test_*.sh; prints "N passed, N failed" at the end.
test: deps-check
	@$(MAKE) --no-print-directory tests
	@BUILD=$(BUILD) SAN=$(SAN) bash tests/run_tests.sh all

test-unit: $(UNIT_BIN)
	@BUILD=$(BUILD) SAN=$(SAN) bash tests/run_tests.sh unit
test-mpi: $(MPI_TEST_BIN) $(BUILD)/mpitron
	@BUILD=$(BUILD) SAN=$(SAN) bash tests/run_tests.sh mpi
test-e2e: $(BUILD)/mpitron
	@BUILD=$(BUILD) SAN=$(SAN) bash tests/run_tests.sh e2e

# Reliability stress (minutes; .ci/run runs it, `make test` does not): preemption signals at random
# moments and exact phases in 42 runs over np 1/2/4 and dp/tp/pp layouts, each resumed and compared
# bit for bit with an uninterrupted run (tests/stress/). Log: $(BUILD)/test-logs/stress_*.log.
test-stress: deps-check $(BUILD)/mpitron
	@BUILD=$(BUILD) SAN=$(SAN) bash tests/run_tests.sh stress

# Mutation testing (tests/mutants/README.md), on demand and never in CI: each tests/mutants/*.patch
# applied to a scratch copy of the tree (build-mutants/), CPU build, `make test` stopping at the
# first failure; fails when a mutant survives. MUTANT=03 runs one.
.PHONY: test-mutants
test-mutants:
	@MUTANT=$(MUTANT) bash tests/mutants/run.sh

# A private 3-node Slurm cluster on this host (tests/e2e/slurm/cluster.sh) running the real
# slurm/train.sbatch; installs slurmctld/slurmd/munge first (deps-slurm; not part of `make deps`).
deps-slurm:
	@bash tools/deps.sh slurm
test-slurm: deps-slurm $(BUILD)/mpitron
	@BUILD=$(BUILD) bash tests/e2e/slurm/run.sh

# The newcomer's first command: deps, build, the demo corpus, then a short data-parallel run on
# 2 ranks (one OpenMP thread each). Prints the first and last validation loss.
MPIRUN_LOCAL := mpirun -np 2 --bind-to core -x OMP_NUM_THREADS=1 $(if $(filter 0,$(shell id -u)),--allow-run-as-root)
demo: deps-check
	@$(MAKE) --no-print-directory all data
	$(MPIRUN_LOCAL) $(BUILD)/mpitron train jobs/demo.toml --train.resume=never
	@/usr/bin/python3 tools/plot_metrics.py runs/demo/metrics.jsonl >/dev/null && echo "loss curve: runs/demo/loss.png"
	@echo "a sample from the trained model:"
	@$(BUILD)/mpitron generate runs/demo --prompt "The " --max-tokens 120 --seed 1 2>/dev/null

# The demo corpus: the Debian `fortunes` text files (no download), one document per fortune,
# byte-level tokens -> data/demo/train_*.h5 + val_*.h5 (ignored by git; ~0.1 s).
FORTUNES := $(sort $(filter-out %.dat %.u8,$(wildcard /usr/share/games/fortunes/*)))
data: deps-check $(BUILD)/mpitron
	@test -n "$(FORTUNES)" || { echo "no fortune files under /usr/share/games/fortunes (make deps installs them)" >&2; exit 1; }
	$(BUILD)/mpitron prep --input $(FORTUNES) --out data/demo --doc-separator % --val-fraction 0.02

# Data pipeline benchmark: prep MB/s, BPE training time, loader tokens/s -> bench/results/data.md.
$(BUILD)/bench/bench_data: $(BUILD)/obj/bench/data/bench_data.o $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_LDFLAGS) -o $@ $^ $(ALL_LDLIBS)
bench-data: $(BUILD)/bench/bench_data $(BUILD)/mpitron
	$(BUILD)/bench/bench_data bench/results/data.md
	BUILD=$(BUILD) bash bench/data/gpt2.sh bench/results/data.md
bench: bench-data

# A model step on one rank and each kernel's share of it (bench/model/run.sh runs it) ->
# bench/results/model_cpu.md.
$(BUILD)/bench/bench_model: $(BUILD)/obj/bench/model/bench_model.o $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_LDFLAGS) -o $@ $^ $(ALL_LDLIBS)

# The MoE router's host cost against its block's expert GEMMs (bench/moe/route_host.cpp) ->
# bench/results/moe_route_host.md.
$(BUILD)/bench/moe_route_host: $(BUILD)/obj/bench/moe/route_host.o $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_LDFLAGS) -o $@ $^ $(ALL_LDLIBS)
bench-moe-route: $(BUILD)/bench/moe_route_host
	$(BUILD)/bench/moe_route_host bench/results/moe_route_host.md
bench: bench-moe-route

# Comm layer overhead: `bench-comm --op all_reduce` next to a plain MPI_Allreduce loop at np=2
# -> bench/results/comm_allreduce_np2.md.
.PHONY: bench-comm
$(BUILD)/bench/comm_plain_allreduce: $(BUILD)/obj/bench/comm/plain_allreduce.o
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_LDFLAGS) -o $@ $^ $(MPI_LIBS)
bench-comm: $(BUILD)/mpitron $(BUILD)/bench/comm_plain_allreduce
	@BUILD=$(BUILD) bash bench/comm/run_allreduce_np2.sh
bench: bench-comm

# GPU device check (bench/gpu_check.sh builds it with CUDA=1 and runs it): every CUDA kernel against
# the CPU backend, kernel timings, cuBLASLt GEMM rate, TransformerModelCuda training against the CPU
# TransformerModel -> bench/results/gpu_check*.md. Links only the ops, core, config and model
# objects (+ the CPU AdamW, the reference, and tests/cuda/self_check): quick to build on the GPU
# machine, independent of the rest of the tree.
# Without a GPU, bench/gpu/emulate/run.sh runs the training comparison on a CPU emulation of CudaOps.
.PHONY: gpu-check
GPU_CHECK_OBJ := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(wildcard bench/gpu/*.cpp) tests/cuda/self_check.cpp) \
  $(BUILD)/obj/src/parallel/adamw.o \
  $(filter $(BUILD)/obj/src/ops/% $(BUILD)/obj/src/core/% $(BUILD)/obj/src/config/% $(BUILD)/obj/src/model/% \
    $(BUILD)/obj/src/distributed/%,$(LIB_OBJ) $(CUDA_OBJ))
$(BUILD)/bench/gpu_check: $(GPU_CHECK_OBJ)
	@test "$(CUDA_ON)" = 1 || { echo "gpu_check needs a CUDA build (CUDA=1)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_LDFLAGS) -o $@ $^ $(CUDA_LDLIBS) $(ALL_LDLIBS)
gpu-check:
	@bash bench/gpu_check.sh

# The CUDA backend on a CPU emulation of CudaOps and of the CUDA runtime (bench/gpu/emulate/):
# fake_cuda.o first on each link line, so that its make_cuda_ops and runtime calls are the ones
# linked and the archive's CUDA versions of those are never pulled in. Part of `make tests` in a
# CUDA build (tests/e2e/test_gpu_emulated.sh and test_moe_gpu_emulated.sh run them).
EMU_OBJ := $(BUILD)/obj/bench/gpu/emulate
$(BUILD)/bench/emulated_check: $(EMU_OBJ)/emulated_check.o $(EMU_OBJ)/fake_cuda.o $(BUILD)/obj/bench/gpu/training_check.o
$(BUILD)/bench/emulated_train: $(EMU_OBJ)/emulated_train.o $(EMU_OBJ)/fake_cuda.o
$(BUILD)/bench/emulated_tp_grads: $(EMU_OBJ)/emulated_tp_grads.o $(EMU_OBJ)/fake_cuda.o
$(BUILD)/bench/emulated_self_check: $(EMU_OBJ)/emulated_self_check.o $(EMU_OBJ)/fake_cuda.o $(BUILD)/obj/tests/cuda/self_check.o
$(EMULATED): $(LIB) $(CUDA_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(ALL_LDFLAGS) -o $@ $(filter-out $(LIB) $(CUDA_LIB),$^) $(CUDA_LINKED_IN) $(LIB) $(CUDA_LDLIBS) $(ALL_LDLIBS)

clean:
	rm -rf $(BUILD)

# make install [PREFIX=/usr/local] [DESTDIR=staging root]: the binary, the library and the public
# headers (for programs linking libmpitron.a with the same LDLIBS).
install: $(BUILD)/mpitron $(LIB) $(CUDA_PLUGIN)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BUILD)/mpitron $(DESTDIR)$(PREFIX)/bin/mpitron
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/libmpitron.a
	$(if $(CUDA_PLUGIN),install -D -m 755 $(CUDA_PLUGIN) $(DESTDIR)$(PREFIX)/lib/mpitron/libmpitron-cuda.so)
	cp -R include/mpitron $(DESTDIR)$(PREFIX)/include/
	chmod -R u=rwX,go=rX $(DESTDIR)$(PREFIX)/include/mpitron

# compile_commands.json for clangd and clang-tidy: the compile lines of a dry run of a full
# rebuild (make -n -B), so it holds exactly this build's flags (ARCH, CUDA, SAN).
compile_commands.json:
	@$(MAKE) --no-print-directory -n -B $(BUILD)/mpitron $(UNIT_BIN) $(MPI_TEST_BIN) | /usr/bin/python3 tools/compile_commands.py >$@
	@echo "compile_commands.json: $$(grep -c '"file"' $@) files"

help:
	@echo "Targets:"
	@echo "  all (default)        $(BUILD)/mpitron (+ $(BUILD)/libmpitron-cuda.so, the CUDA backend it loads)"
	@echo "  tests                unit + MPI test binaries"
	@echo "  test                 deps-check, then every test (unit, mpi, e2e)"
	@echo "  test-unit test-mpi test-e2e test-stress test-slurm test-mutants test-fuzz"
	@echo "  install              bin/mpitron, lib/libmpitron.a, lib/mpitron/libmpitron-cuda.so (CUDA builds),"
	@echo "                       include/mpitron under DESTDIR+PREFIX"
	@echo "  compile_commands.json  this build's compile lines, for clangd / clang-tidy"
	@echo "  deps deps-check      install / check the Debian packages (tools/deps.sh)"
	@echo "  demo data            the demo corpus and a short 2-rank training run"
	@echo "  bench bench-data bench-comm gpu-check"
	@echo "  clean                rm -rf \$$BUILD"
	@echo "Knobs (current value):"
	@echo "  ARCH=$(ARCH)       CPU baseline: x86-64-v3 (portable, AVX-512 chosen at run time), native, or raw flags"
	@echo "  CUDA=$(CUDA)           auto | 0 | 1  (CUDA backend; auto: when $(NVCC) exists)"
	@echo "  CUDA_ARCH=$(CUDA_ARCH)  GPU compute capabilities, ;-separated; PTX for the newest"
	@echo "  SAN=$(SAN)              sanitizers, e.g. address,undefined (own folder, CPU only)"
	@echo "  BUILD=$(BUILD)         output folder"
	@echo "  PREFIX=$(PREFIX) DESTDIR=$(DESTDIR)  for make install"
	@echo "  CPPFLAGS CXXFLAGS LDFLAGS LDLIBS NVCCFLAGS  appended to the build's own flags"

# make test-fuzz / fuzz-<target> / fuzz-seeds / test-stress (clang + libFuzzer, own build folder).
include tests/fuzz/fuzz.mk

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
