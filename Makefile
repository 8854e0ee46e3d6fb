# gpurec: GPU recommendation and marketplace analytics for PostgreSQL.
#
#   make && make install       builds with nvcc when it is found (or CUDA_HOME
#                              is given), otherwise a CPU-only extension
#   make installcheck          pg_regress tests against a running server
#   make unittest              GoogleTest unit tests of the engine
#   make NVCC=                 forces the CPU-only build

# gpurec_shards: gpurec over several servers (PL/pgSQL on PL/Proxy, no C of its own).
EXTENSION = gpurec gpurec_shards
EXTVERSION = 0.1
MODULE_big = gpurec
DATA = gpurec--$(EXTVERSION).sql gpurec_shards--$(EXTVERSION).sql
PGFILEDESC = "gpurec - GPU recommendation and marketplace analytics"

# Three layers (ARCHITECTURE.md): src/pg_*.cpp and the read layer,
# src/read/*.cpp, talk to PostgreSQL; the rest of src/ is the engine;
# kernels/ are the GPU kernels behind kernels/api/.
PG_SRCS = $(wildcard src/pg_*.cpp src/read/*.cpp)
ENGINE_SRCS = $(filter-out $(PG_SRCS),$(wildcard src/*.cpp))
OBJS = $(PG_SRCS:.cpp=.o) $(ENGINE_SRCS:.cpp=.o)

# pg_regress (the contrib layout): sql/<name>.sql against expected/<name>.out; output
# in results/.  SKIP_REGRESS=cron_refresh where pg_cron is not preloaded.
REGRESS = $(filter-out $(SKIP_REGRESS),access carts cron_refresh geo marketplace roc_fitness)
REGRESS_OPTS = --load-extension=gpurec

# CUDA: nvcc from PATH, else from CUDA_HOME. The runtime is linked statically
# (gpurec.so then loads where CUDA is not installed), so a GPU build needs
# libcudart_static.a as well as nvcc; a toolkit without it (as some
# pip-packaged ones) gives the CPU-only build, with a warning. CUDART_STATIC=
# names the archive when it lives elsewhere.
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc))
ifneq ($(NVCC),)
CUDA_HOME := $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))
CUDART_STATIC ?= $(firstword $(wildcard $(addsuffix /libcudart_static.a, \
	$(CUDA_HOME)/lib64 $(CUDA_HOME)/lib $(CUDA_HOME)/targets/*/lib \
	/usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu)))
ifeq ($(CUDART_STATIC),)
$(warning gpurec: $(NVCC) found but no libcudart_static.a; building CPU-only)
NVCC :=
endif
endif
# Without nvcc the kernels' API is no_cuda.cpp: there is no GPU.
ifneq ($(NVCC),)
KERNEL_OBJS = $(patsubst %.cu,%.o,$(wildcard kernels/*.cu))
CUDA_LIBS = $(CUDART_STATIC) -ldl -lrt -lpthread
else
KERNEL_OBJS = kernels/no_cuda.o
endif
OBJS += $(KERNEL_OBJS)

PG_CXXFLAGS = -std=c++17 -Wno-register -Wno-missing-field-initializers
# src/read/ includes src/'s headers by their names, as src/ does
PG_CPPFLAGS = -Isrc
SHLIB_LINK = $(CUDA_LIBS) -lstdc++

NVCCFLAGS = -O3 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden \
	-gencode arch=compute_80,code=sm_80 \
	-gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90

# Read by PGXS's clean rule when it is parsed, so set before the include.
EXTRA_CLEAN = test/unit/gpurec_unit_tests test/unit/gpurec_unit_tests_sanitized test/bench/*_compute_bench kernels/*.o test/layers/probe

# No LLVM bitcode: the JIT never inlines into this extension's C++.
override with_llvm = no

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

kernels/%.o: kernels/%.cu $(wildcard kernels/*.cuh kernels/api/*.hpp)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

$(OBJS): $(wildcard src/*.hpp src/read/*.hpp kernels/api/*.hpp)

# The engine and the kernels compile without PostgreSQL's include path, so
# that an engine or kernel file that includes postgres.h, directly or not,
# fails to build (src/no_postgres.hpp says so first, where it is included).
# PostgreSQL's other preprocessor flags (_FORTIFY_SOURCE and the like) stay.
ENGINE_CPPFLAGS := -I. $(filter-out -I%,$(CPPFLAGS))
$(ENGINE_SRCS:.cpp=.o) kernels/no_cuda.o: override CPPFLAGS := $(ENGINE_CPPFLAGS)

# ---- unit tests of the engine (no PostgreSQL needed) -----------------------
UNIT_TEST = test/unit/gpurec_unit_tests
UNIT_SRCS = $(wildcard test/unit/*.cpp)

$(UNIT_TEST): $(UNIT_SRCS) $(wildcard test/unit/*.hpp) $(ENGINE_SRCS:.cpp=.o) $(KERNEL_OBJS)
	$(CXX) -std=c++17 -O2 -g -Isrc -Ikernels -o $@ $(UNIT_SRCS) \
		$(ENGINE_SRCS:.cpp=.o) $(KERNEL_OBJS) -l:libgtest_main.a -l:libgtest.a -lpthread $(CUDA_LIBS)

# The same tests on a CPU-only engine built with AddressSanitizer (leaks
# included) and UndefinedBehaviorSanitizer, any finding fatal.
SANITIZED_UNIT_TEST = test/unit/gpurec_unit_tests_sanitized
SANITIZE = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
$(SANITIZED_UNIT_TEST): $(UNIT_SRCS) $(wildcard test/unit/*.hpp) $(ENGINE_SRCS) kernels/no_cuda.cpp \
		$(wildcard src/*.hpp kernels/api/*.hpp)
	$(CXX) -std=c++17 -O1 -g $(SANITIZE) -I. -Isrc -Ikernels -o $@ $(UNIT_SRCS) $(ENGINE_SRCS) kernels/no_cuda.cpp \
		-l:libgtest_main.a -l:libgtest.a -lpthread

unittest-sanitized: $(SANITIZED_UNIT_TEST)
	$(SANITIZED_UNIT_TEST)

unittest-build: $(UNIT_TEST)

unittest: $(UNIT_TEST)
	$(UNIT_TEST)

.PHONY: unittest unittest-build unittest-sanitized

# ---- the compute phases alone, without PostgreSQL (test/bench) -------------
# test/bench/<name>_compute_bench.cpp: GPU and CPU compute of one family.
COMPUTE_BENCHES = $(patsubst %.cpp,%,$(wildcard test/bench/*_compute_bench.cpp))
test/bench/%_compute_bench: test/bench/%_compute_bench.cpp test/bench/bench_offers.hpp $(ENGINE_SRCS:.cpp=.o) $(KERNEL_OBJS)
	$(CXX) -std=c++17 -O2 -Isrc -Ikernels -o $@ $< $(ENGINE_SRCS:.cpp=.o) $(KERNEL_OBJS) -lpthread $(CUDA_LIBS)
compute-benches: $(COMPUTE_BENCHES)
.PHONY: compute-benches
