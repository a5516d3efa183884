# mpicr — the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all build deps demo test bench soak gen clean

all: build

deps:
	scripts/deps.sh

build:
	$(CARGO) build --release --workspace

# Regenerates the checked-in signature table and the code made from it (see tools/gen_api.py).
gen:
	python3 tools/gen_api.py

test: deps build
	scripts/test.sh

# Long torture runs, not part of `make test`: one job checkpointed 100 times, restarted, and
# checkpointed 50 more times, on both MPICH builds (MPICR_TEST_RENEWALS=BEFORE,AFTER to change).
soak: deps build
	MPICR_TEST_MODES=renewals MPICR_TEST_RENEWALS=$${MPICR_TEST_RENEWALS:-100,50} scripts/test-ckpt.sh

bench: deps build
	scripts/bench.sh

demo: deps build
	scripts/demo.sh

clean:
	$(CARGO) clean
