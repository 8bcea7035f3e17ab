# capsule-host — build and test.
#
#   make test      installs what the tests need when it is missing, then runs
#                  every check CI runs (this is what .ci/run calls)
#   make capsules  rebuilds the bundled capsules' .wasm reproducibly
#   make bench     runs the benchmarks, writes docs/bench.md (make bench-smoke: the quick mode make test runs)

SHELL := /bin/bash
GO    ?= go
# Debian packages the tests drive for real: the OCI runtime, bubblewrap, the
# busybox the OCI tests build their rootfs from, wat2wasm for WAT fixtures,
# gcc with a static libc for the OCI container init (sandbox/oci/init),
# etcd for the cluster tests, tmux (the anchor the terminal and cost tests
# compare with), python3 (a REPL the terminal tests drive) and clang, lld,
# wasi-libc and wasm32 compiler-rt builtins for the C component capsule
# (host/component/testdata/ccap; wasm-ld links libclang_rt.builtins-wasm32.a).
APT_PACKAGES := runc bubblewrap busybox-static wabt gcc libc6-dev etcd-server tmux python3 clang lld wasi-libc libclang-rt-14-dev-wasm32
APT_COMMANDS := runc bwrap busybox wat2wasm gcc etcd tmux python3 clang wasm-ld
# The e2e suite first: its race run is the longest (≈ 155 s with its
# guests compiled ahead, race-cache), and go test starts packages in the
# order named, -p at a time; last, it ran alone for its final minutes
# while the other slots idled.
RACE_PKGS    := ./capsules/internal/e2e/... ./host/... ./registry/... ./sandbox/...
TEST_TIMEOUT ?= 30m
# RACE_ENV is the environment of every -race run. A race-built program
# sleeps atexit_sleep_ms (1 s by default) before it exits, so that other
# threads can still report; the tests re-exec their own binary as keepers,
# journal checkers and helpers, hundreds of times, and that sleep was two
# thirds of the race leg (sandbox/keeper: 159 s, 52 s without). A race is
# still reported when it is detected.
RACE_ENV     := GORACE=atexit_sleep_ms=0

.PHONY: all build demo test deps go-deps npm-deps mcp-client vet hygiene funclen unit unit-rest unit-norace race-cache e2e-component abi-tests wasmtime-leg purego capsules verify-capsules bench bench-smoke fuzz e2e clean

all: build

build:
	$(GO) build ./...

demo:
	$(GO) run ./cmd/capsule-host demo

# deps installs the Debian packages the tests need when any is missing.
deps:
	@missing=0; for c in $(APT_COMMANDS); do command -v $$c >/dev/null 2>&1 || missing=1; done; \
	if [ $$missing = 1 ]; then \
	  echo ">> installing $(APT_PACKAGES)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	fi
	@for c in $(APT_COMMANDS); do command -v $$c >/dev/null || { echo "missing $$c after install" >&2; exit 1; }; done
	@test -f /usr/lib/x86_64-linux-gnu/libc.a -o -f /usr/lib/aarch64-linux-gnu/libc.a || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libc6-dev >/dev/null; }
	@test -f /usr/lib/wasm32-wasi/libc.a -a -f "$$(clang --target=wasm32-wasi -print-libgcc-file-name)" || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq wasi-libc libclang-rt-14-dev-wasm32 >/dev/null; }

# npm-deps installs node (Debian's nodejs, npm) when missing, then the npm
# packages exactly as pinned in each lockfile: jco and componentize-js for
# the component tests of host/component, the TypeScript MCP SDK and
# inspector-cli for the MCP tests of cmd/capsule-host. The tests that need
# them skip, saying so, without them. A lockfile newer than what npm last
# installed (node_modules/.package-lock.json) installs again.
NPM_DIRS = host/component/testdata/build cmd/capsule-host/testdata/mcp-client
npm-deps:
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm >/dev/null; fi
	@for d in $(NPM_DIRS); do [ $$d/node_modules/.package-lock.json -nt $$d/package-lock.json ] || npm ci --no-audit --no-fund --loglevel=error --prefix $$d || exit 1; done

# mcp-client is npm-deps (the name the MCP tests' skip message gives).
mcp-client: npm-deps

go-deps:
	$(GO) mod download
	cd abi-tests && $(GO) mod download
	cd internal/benchdoc && $(GO) mod download

# The lean client build (-tags leanclient) is vetted too: its test files
# are tagged !leanclient (they drive the full build), so the vet of the
# lean build checks its own code.
vet:
	$(GO) vet ./...
	$(GO) vet -tags leanclient ./cmd/capsule-host ./client/...
	cd abi-tests && $(GO) vet ./...
	cd internal/benchdoc && $(GO) vet ./...

# hygiene fails if a build output (an ELF binary, a .tmp, a test binary) is
# tracked by git.
hygiene:
	./internal/hygiene.sh

# funclen keeps the rule of ARCHITECTURE.md: no production function over 80
# lines without a "funclen:" line in its doc comment saying why.
funclen:
	$(GO) run ./internal/funclen -max 80 host registry sandbox cmd capsules internal client

capsules:
	./capsules/build.sh

verify-capsules:
	./capsules/verify.sh

# NORACE_RUN names the tests of RACE_PKGS that skip under -race
# (testutil.Race: their cost there is a cold compile of a large guest by
# wazero's instrumented compiler, not anything the detector checks);
# unit runs them once more without it.
NORACE_RUN := ^TestJS

# unit runs the race leg, three packages at a time (with their guests
# compiled ahead, two left a quarter of the CPU idle: the sandbox and
# etcd packages wait on processes more than they compute), then three
# lanes at once (make -j3 -O: each
# lane's output is printed whole when it ends): the command and the
# remaining packages, the TestJS rerun, and the component-form end-to-end
# suite. The command's package waits on daemons, sockets and fsync more
# than on the CPU (about 60% of two cores alone), so the lanes fill what
# it leaves idle.
unit: race-cache
	CAPSULE_HOST_CACHE_DIR=$(RACE_CACHE) $(RACE_ENV) $(GO) test -race -p 3 -timeout $(TEST_TIMEOUT) $(RACE_PKGS)
	$(MAKE) -j3 --output-sync=target unit-rest unit-norace e2e-component

unit-rest:
	$(GO) test -timeout $(TEST_TIMEOUT) $$($(GO) list ./capsules/... ./cmd/... ./internal/... | grep -v /capsules/internal/e2e)
	cd internal/benchdoc && $(GO) test -timeout $(TEST_TIMEOUT) ./...

unit-norace:
	$(GO) test -timeout $(TEST_TIMEOUT) -run '$(NORACE_RUN)' ./host/

# race-cache compiles every bundled capsule once, without the race
# detector, into RACE_CACHE, the compile cache the race leg's hosts share
# (capsules/internal/e2e and host take $$CAPSULE_HOST_CACHE_DIR): wazero's
# compiler built with -race takes about 40 s per Go guest (a 1.3 s test
# took 55 s), and what the race leg watches is the host, not the
# compiler. wazero keys an entry by module, wazero version and CPU, not
# build flags; a test binary names its cache directory wazero-dev (no
# module versions in its build info), so a test warms it, not the command.
RACE_CACHE := $(CURDIR)/.build/race-module-cache
race-cache:
	@rm -rf $(RACE_CACHE) && mkdir -p $(RACE_CACHE)
	CAPSULE_HOST_CACHE_DIR=$(RACE_CACHE) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '^TestBundledCapsulesLoad$$' ./capsules/internal/e2e/

# e2e-component runs the end-to-end suite again with every bundled Go
# capsule made a component (internal/goadapt, then jco; built once into
# host/component/testdata/build/.cache, about a minute on 2 cores); see
# capsules/internal/e2e/form_test.go. E2E_COMPONENT_RUN narrows it.
E2E_COMPONENT_RUN ?= .
e2e-component:
	CAPSULE_E2E_FORM=component $(GO) test -timeout $(TEST_TIMEOUT) -run '$(E2E_COMPONENT_RUN)' ./capsules/internal/e2e/

abi-tests:
	cd abi-tests && $(GO) test -timeout $(TEST_TIMEOUT) ./...

# The pure-Go build must work and must not link wasmtime.
purego:
	CGO_ENABLED=0 $(GO) build ./...
	@! CGO_ENABLED=0 $(GO) list -deps ./cmd/capsule-host | grep -q wasmtime || { echo "pure-Go build links wasmtime" >&2; exit 1; }

# The second engine (cgo, build tag wasmtime) passes the same suites.
# registry/ and sandbox/ do not depend on the engine, so they are not rerun.
# Of the command's tests only those that name an engine run again
# (WASMTIME_CMD_RUN: the demo on each engine compiled in, version): the
# others start daemons on the default engine, wazero, in either build, and
# ran twice for nothing (two and a half minutes of make test).
WASMTIME_CMD_RUN := Wasmtime|TestDemoTellsTheStory
wasmtime-leg:
	$(GO) build -tags wasmtime ./...
	$(GO) vet -tags wasmtime ./host/... ./capsules/... ./cmd/...
	cd abi-tests && $(GO) vet -tags wasmtime ./...
	$(RACE_ENV) $(GO) test -tags wasmtime -race -timeout $(TEST_TIMEOUT) ./host/...
	$(GO) test -tags wasmtime -timeout $(TEST_TIMEOUT) ./capsules/...
	$(GO) test -tags wasmtime -timeout $(TEST_TIMEOUT) -run '$(WASMTIME_CMD_RUN)' ./cmd/capsule-host
	cd abi-tests && $(GO) test -tags wasmtime -timeout $(TEST_TIMEOUT) ./...

# After unit, the ABI suite, the wasmtime leg and bench-smoke run at once:
# each left a quarter of the two cores idle alone, and bench-smoke asserts
# no timing, so sharing the machine changes no outcome.
test: hygiene funclen deps go-deps npm-deps build purego verify-capsules vet unit
	$(MAKE) -j3 --output-sync=target abi-tests wasmtime-leg bench-smoke
	@echo ">> all checks passed"

# fuzz runs every fuzz target of the module (each `func FuzzX` in a
# _test.go file, found by grep, so a new target joins without an edit
# here) for FUZZTIME each, one after another: go test -fuzz takes one
# target per run. It stops at the first failure, whose input go test
# saves under the package's testdata/fuzz/ (commit it: it then runs as a
# regression case in every `go test`). FUZZTIME=10m for a long campaign.
FUZZTIME ?= 10s

fuzz:
	@set -eo pipefail; n=0; total=0; mkdir -p .build; \
	for hit in $$(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . | grep -v '^./abi-tests/' | sort); do \
	  dir=$$(dirname $$hit); \
	  for f in $$(grep -oE '^func Fuzz[A-Za-z0-9_]*' $$hit | cut -d' ' -f2); do \
	    echo ">> fuzz $$dir $$f ($(FUZZTIME))"; \
	    (cd $$dir && $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) .) 2>&1 | tee .build/fuzz.last; n=$$((n+1)); \
	    e=$$(grep -oE 'execs: [0-9]+' .build/fuzz.last | tail -1 | cut -d' ' -f2); total=$$((total+$${e:-0})); \
	    echo ">> $$f: $${e:-0} executions"; \
	  done; \
	done; echo ">> $$n fuzz targets passed, $$total executions in all"

# bench runs the benchmarks and writes docs/bench.md from their output
# (internal/benchdoc: header with date, go version, CPU, load average
# before and after; the anchor table of issue 16, one row per goal with
# each side's median and IQR, the ratio, the goal and met/not met; the
# scale curves; one table per package). The raw output goes to
# docs/bench.raw.txt, which is not tracked. Sub-benchmarks named side-N
# (Scale/capsule-host-1000 against tmux-1000) are also drawn as scale
# curves, docs/bench-*.png (gonum/plot; benchdoc is its own module).
# BENCH selects benchmarks by name (go test -bench); the default,
# BENCH_ANCHORS, is every benchmark the anchor table and the curves read,
# with issue 17's cluster figures (BENCH_CLUSTER: etcd reservation,
# lookups, cross-node reads; not in bench-smoke). BENCH=. runs them all,
# for an hour or more. BENCH_ENV passes sizes:
# PERF_N (listing and shutdown, default 500), READOPT_N (re-adoption,
# default 1000), SCALE_N (the curves,
# default 10,100,1000,5000), EMU_MIB (MiB through the VT emulator per
# size, default 100: issue 15's 100 MB). BENCH_WASMTIME_PKGS= skips the cgo leg.
# A figure is only as good as the machine was quiet: the header says the load.
BENCH_ANCHORS       := ExecHelper|ClientVsTmux|KeystrokeCLIVsTmux|InterruptLatency|Snapshot|EmulatorThroughput|SpawnPath|SpawnWait|ListProcesses|Shutdown|Readopt|WarmColdRatio|ImportPair|KeyOf|StartToExitRatio|Capture1GiB|WarmCallPair|Scale|MCPToolCall|MCPNotifyLatency
BENCHTIME           ?= 2s
BENCH_CLUSTER       := ClusterRead|SpawnEtcdVsLocal|Lookup|ReserveRelease
BENCH               ?= $(BENCH_ANCHORS)|$(BENCH_CLUSTER)
BENCH_ENV           ?=
# The packages that hold the anchor benchmarks (and, for the full run, the
# cluster's): naming them, not ./sandbox/... and the like, spares
# bench-smoke the build of 17 test binaries with no benchmark to run (a
# part of make test's time). A benchmark moved out of them leaves its
# anchor row empty, which bench-smoke's -require-anchors refuses.
BENCH_ANCHOR_PKGS   := ./sandbox/local/ ./sandbox/oci/ ./sandbox/terminal/ ./registry/ ./host/ ./host/process/ ./capsules/internal/e2e/ ./cmd/capsule-host/
BENCH_PKGS          ?= $(BENCH_ANCHOR_PKGS) ./registry/etcddir/
BENCH_WASMTIME_PKGS ?= ./host/engine/wasmtime/
BENCH_DOC           ?= docs/bench.md
BENCH_RAW           ?= docs/bench.raw.txt
BENCHDOC_FLAGS      ?=

bench:
	@mkdir -p .build $(dir $(BENCH_DOC))
	cd internal/benchdoc && $(GO) build -o ../../.build/benchdoc .
	set -o pipefail; { \
	  env $(BENCH_ENV) $(GO) test -timeout 90m -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) $(BENCH_PKGS) && \
	  if [ -n "$(strip $(BENCH_WASMTIME_PKGS))" ]; then \
	    env $(BENCH_ENV) $(GO) test -tags wasmtime -timeout 30m -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) $(BENCH_WASMTIME_PKGS); fi; \
	} 2>&1 | tee $(BENCH_RAW) | .build/benchdoc -benchtime '$(BENCHTIME)' $(BENCHDOC_FLAGS) \
	  -cmd "make bench BENCHTIME=$(BENCHTIME) BENCH='$(BENCH)' BENCH_ENV='$(BENCH_ENV)' BENCH_PKGS='$(BENCH_PKGS)' BENCH_WASMTIME_PKGS='$(BENCH_WASMTIME_PKGS)'" -o $(BENCH_DOC)

# bench-smoke is make bench in its quick mode, for make test: one
# iteration of every anchor benchmark at small sizes, into .build/ (never
# docs/), failing only when an anchor row has no figures (a benchmark that
# stopped running or renamed a metric), never on a timing.
bench-smoke:
	$(MAKE) bench BENCHTIME=1x BENCH='$(BENCH_ANCHORS)' BENCH_PKGS='$(BENCH_ANCHOR_PKGS)' BENCH_ENV='PERF_N=20 SCALE_N=10,20 READOPT_N=20 EMU_MIB=2' BENCH_DOC=.build/bench-smoke/bench.md \
	  BENCH_RAW=.build/bench-smoke/bench.raw.txt BENCHDOC_FLAGS=-require-anchors

# client builds the lean client (-tags leanclient: the client commands
# only, start-up under tmux's; static, CGO_ENABLED=0) as bin/capsule-host,
# with the full binary it hands every other command to beside it as
# bin/capsule-hostd (cgo where there is a C compiler: the exec helper's C
# fast path, sandbox/local/helper_cgo.go).
.PHONY: client
client:
	$(GO) build -o bin/capsule-hostd ./cmd/capsule-host
	CGO_ENABLED=0 $(GO) build -tags leanclient -o bin/capsule-host ./cmd/capsule-host

clean:
	rm -rf bin abi-tests/.build
