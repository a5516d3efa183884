# mpicr — the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all build deps demo test bench gen clean

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

bench: deps build
	scripts/bench.sh

demo: deps build
	scripts/demo.sh

clean:
	$(CARGO) clean
