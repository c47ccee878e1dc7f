# mpitron build. `make` -> build/mpitron; `make test`; `make demo`; `make deps`.
# CUDA=auto (default: build the CUDA backend when nvcc is found) | 0 (CPU only) | 1 (required).
# BUILD=dir puts every output under another folder (several builds side by side).
SHELL := /bin/bash
# SAN=address,undefined: a sanitizer build (any -fsanitize= list) in its own folder, CPU only
# (nvcc's host objects and the CUDA runtime do not go with ASan; the GPU emulation test skips).
SAN ?=
BUILD ?= $(if $(SAN),build-san,build)
CUDA ?= $(if $(SAN),0,auto)
CUDA_HOME ?= /usr/local/cuda
NVCC := $(CUDA_HOME)/bin/nvcc
ARCH ?= -march=native

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

CPPFLAGS := -Iinclude $(MPI_CFLAGS) $(HDF5_CFLAGS) -DMPITRON_CUDA=$(CUDA_ON)
# -Wno-stringop-overflow: g++ 12 false positive inside fmt 9's fill_t (fmt issue #2708-style), not our code.
CXXFLAGS := -std=c++20 -O3 $(ARCH) -fopenmp -g1 -Wall -Wextra -Wno-stringop-overflow -MMD -MP
LDLIBS := -ldnnl -lfmt -lpthread -lpcre2-8 -lz -lzstd -lsentencepiece $(HDF5_LIBS) $(MPI_LIBS)
LDFLAGS := -fopenmp
SAN_OBJ :=
ifneq ($(SAN),)
  CXXFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
  LDFLAGS += -fsanitize=$(SAN)
  # Fixes for leak reports of OpenMPI components and for UBSan report files (san_hooks.cpp).
  SAN_OBJ := $(BUILD)/obj/tests/sanitizers/san_hooks.o
  LDFLAGS += -Wl,--export-dynamic-symbol=dlclose
endif

ifeq ($(CUDA_ON),1)
  CPPFLAGS += -I$(CUDA_HOME)/include
  NVCCFLAGS := -std=c++20 -O3 -Iinclude -I$(CUDA_HOME)/include -DMPITRON_CUDA=1 \
    -gencode=arch=compute_90,code=sm_90 -Xcompiler -fopenmp,-Wall -MMD -MP
  LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcublasLt -lcublas -lnccl -lcudart
endif

# Sources: everything under src/; files in a cuda/ folder (and .cu files) only with CUDA on.
ALL_CPP := $(shell find src -name '*.cpp' | sort)
CUDA_CPP := $(shell find src -path '*/cuda/*' -name '*.cpp' | sort)
LIB_CPP := $(filter-out src/main.cpp $(CUDA_CPP),$(ALL_CPP))
CU_SRC :=
ifeq ($(CUDA_ON),1)
  LIB_CPP += $(CUDA_CPP)
  CU_SRC := $(shell find src -name '*.cu' | sort)
endif
LIB_OBJ := $(LIB_CPP:%.cpp=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
LIB := $(BUILD)/libmpitron.a

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

.PHONY: all deps deps-check deps-slurm test test-unit test-mpi test-e2e test-stress test-slurm demo data bench bench-data clean docs
all: $(BUILD)/mpitron

$(BUILD)/mpitron: $(BUILD)/obj/src/main.o $(LIB) $(SAN_OBJ)
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(TEST_CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(UNIT_BIN): $(UNIT_SRC:%.cpp=$(BUILD)/obj/%.o) $(LIB) $(SAN_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) -o $@ $^ $(TEST_LIBS) $(LDLIBS)

$(BUILD)/tests/mpi/%: $(BUILD)/obj/tests/mpi/%.o $(MPI_MAIN_OBJ) $(LIB) $(SAN_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) -o $@ $^ $(TEST_LIBS) $(LDLIBS)

deps:
	@bash tools/deps.sh install

deps-check:
	@bash tools/deps.sh check

tests: $(UNIT_BIN) $(MPI_TEST_BIN) $(BUILD)/mpitron

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

# A private 2-node Slurm cluster on this host (tests/e2e/slurm/cluster.sh) running the real
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
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)
bench-data: $(BUILD)/bench/bench_data $(BUILD)/mpitron
	$(BUILD)/bench/bench_data bench/results/data.md
	BUILD=$(BUILD) bash bench/data/gpt2.sh bench/results/data.md
bench: bench-data

# Comm layer overhead: `bench-comm --op all_reduce` next to a plain MPI_Allreduce loop at np=2
# -> bench/results/comm_allreduce_np2.md.
.PHONY: bench-comm
$(BUILD)/bench/comm_plain_allreduce: $(BUILD)/obj/bench/comm/plain_allreduce.o
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) -o $@ $^ $(MPI_LIBS)
bench-comm: $(BUILD)/mpitron $(BUILD)/bench/comm_plain_allreduce
	@BUILD=$(BUILD) bash bench/comm/run_allreduce_np2.sh
bench: bench-comm

# GPU device check (bench/gpu_check.sh builds it with CUDA=1 and runs it): every CUDA kernel against
# the CPU backend, kernel timings, cuBLASLt GEMM rate, GptCuda training against the CPU GPT ->
# bench/results/gpu_check*.md. Links only the ops, core, config and model objects (+ the CPU AdamW, the
# reference, and tests/cuda/self_check): quick to build on the GPU machine, independent of the
# rest of the tree.
# Without a GPU, bench/gpu/emulate/run.sh runs the training comparison on a CPU emulation of CudaOps.
.PHONY: gpu-check
GPU_CHECK_OBJ := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(wildcard bench/gpu/*.cpp) tests/cuda/self_check.cpp) \
  $(BUILD)/obj/src/parallel/adamw.o \
  $(filter $(BUILD)/obj/src/ops/% $(BUILD)/obj/src/core/% $(BUILD)/obj/src/config/% $(BUILD)/obj/src/model/%,$(LIB_OBJ))
$(BUILD)/bench/gpu_check: $(GPU_CHECK_OBJ)
	@test "$(CUDA_ON)" = 1 || { echo "gpu_check needs a CUDA build (CUDA=1)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)
gpu-check:
	@bash bench/gpu_check.sh

clean:
	rm -rf $(BUILD)

# make test-fuzz / fuzz-<target> / fuzz-seeds / test-stress (clang + libFuzzer, own build folder).
include tests/fuzz/fuzz.mk

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
