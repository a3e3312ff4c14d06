# SQ (SeedQueue) build, test and code generation.
#
#   make run       build and start one node with the defaults (data in ./data)
#   make test      the whole test suite (what CI runs)
#   make fuzz      every fuzz target briefly, FUZZTIME each (CI runs it too)
#   make sim       the replication simulator, SEED (default random, printed) for STEPS
#   make check     gofmt + go vet
#   make build     build bin/sq-server and bin/sq
#   make package   build the .deb and .rpm of sq-server and sq into dist/
#                  (nfpm; docs/operations.md)
#   make generate  regenerate the Cap'n Proto and protobuf code (needs Debian's
#                  capnproto and protobuf-compiler)
#   make jepsen    the Jepsen-style cluster test, JEPSEN_ROUNDS rounds on 3 and
#                  on 5 nodes (needs root, ip and nft)
#   make lint      golangci-lint (installed into bin/tools on first use) on
#                  the whole tree, with .golangci.yml
#   make develop   build and run one node with debug logging (data in ./data)
#   make ci        what CI runs (.ci/run)
#   make local-up / local-down
#                  the container stack of templates/docker-compose.yaml (3
#                  nodes, MinIO, Jaeger, Prometheus, Grafana; README
#                  "Container stack"); needs Docker with compose
#   make image     the sq-server container image (templates/sq-server.Dockerfile)
#   make dashboard-png
#                  run the stack test and plot every panel of the Grafana
#                  dashboard into docs/dashboard/ (needs root, ip, nft and
#                  Debian's prometheus)

GO        ?= go
BIN       := bin
TEST_TIMEOUT ?= 12m
# VERSION is what `sq --version` and `sq-server --version` print
# (internal/buildinfo); the commit comes from the go command's VCS stamp.
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo 0.1.0-dev)
CAPNP_GO_VERSION := v3.1.0-alpha.2
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2

.PHONY: package all build run develop test fuzz check fmt vet lint generate tools clean bench bench-partitions bench-peers bench-cluster sim jepsen tier-test ci local-up local-down image dashboard-png

all: check build

build:
	$(GO) build -ldflags "-X github.com/seedqueue/sq/internal/buildinfo.Version=$(VERSION)" -o $(BIN)/ ./cmd/sq-server ./cmd/sq

# `make package` builds the .deb and .rpm of the package seedqueue (nfpm NFPM_VERSION, run with go
# run so that SQ's go.mod does not carry it) for ARCH into DIST, the
# binaries staged in $(BIN)/package:
# sq-server and sq statically linked, the systemd unit, /etc/sq/sq-server.toml,
# the sq user and /var/lib/sq (packaging/). PKG_VERSION is the latest vX.Y.Z
# tag (commits since it as +N.gHASH), else 0.1.0~git<hash>: package
# versions start with a digit.
NFPM_VERSION := v2.45.2
DIST      ?= dist
ARCH      ?= $(shell $(GO) env GOARCH)
PKG_VERSION ?= $(shell v=$$(git describe --tags --match 'v[0-9]*' 2>/dev/null) && echo "$${v\#v}" | sed 's/-/+/; s/-/./g' || echo "0.1.0~git$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)")

package:
	rm -rf $(BIN)/package && mkdir -p $(DIST) $(BIN)/package
	rm -f $(DIST)/seedqueue_*.deb $(DIST)/seedqueue-*.rpm
	CGO_ENABLED=0 GOOS=linux GOARCH=$(ARCH) $(GO) build -trimpath \
		-ldflags "-s -w -X github.com/seedqueue/sq/internal/buildinfo.Version=$(PKG_VERSION)" -o $(BIN)/package/ ./cmd/sq-server ./cmd/sq
	for p in deb rpm; do \
		VERSION='$(PKG_VERSION)' ARCH='$(ARCH)' \
			$(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION) package \
			--config packaging/nfpm.yaml --packager $$p --target $(DIST)/ || exit 1; \
	done
	@ls -l $(DIST)/*.deb $(DIST)/*.rpm

run: build
	./$(BIN)/sq-server serve $(ARGS)

# One node on the default ports with debug logging, data in ./data (the
# seed's `develop` task); ARGS adds flags.
develop: build
	./$(BIN)/sq-server serve --log-level debug $(ARGS)

# golangci-lint at a fixed version, built with go install into bin/tools
# the first time (a minute or two); .golangci.yml names the linters.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(BIN)/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)

$(GOLANGCI_LINT):
	mkdir -p $(BIN)/tools
	GOBIN=$(abspath $(BIN)/tools) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN)/tools/golangci-lint $@

lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...
	cd $(PEERS_DIR) && $(abspath $(GOLANGCI_LINT)) run --config $(abspath .golangci.yml) ./...

ci:
	./.ci/run

# The container stack. VERSION goes into the image's binaries (the
# compose file passes SQ_VERSION as the build argument VERSION).
COMPOSE ?= docker compose
COMPOSE_FILE := templates/docker-compose.yaml

local-up:
	SQ_VERSION=$(VERSION) $(COMPOSE) -f $(COMPOSE_FILE) up -d --build

local-down:
	$(COMPOSE) -f $(COMPOSE_FILE) down

image:
	docker build -f templates/sq-server.Dockerfile --build-arg VERSION=$(VERSION) -t sq-server:$(VERSION) .

# TestStack (templates/stack_test.go) with a run of DASHBOARD_SECONDS of
# traffic, then each Prometheus panel of templates/grafana/dashboards/sq.json
# plotted from that run into docs/dashboard/panel-ID.png (docs/dashboard.md
# shows them). As root, with ip, nft and Debian's prometheus.
DASHBOARD_SECONDS ?= 180

dashboard-png:
	CI=true SQ_DASHBOARD_PNG=$(abspath docs/dashboard) SQ_DASHBOARD_SECONDS=$(DASHBOARD_SECONDS) \
		$(GO) test -count=1 -timeout 15m -v -run '^TestStack$$' ./templates/

# benchmarks/peers is a module of its own (the peers' clients and servers
# stay out of SQ's go.mod): `go ... ./...` at the root skips it, so check
# and test go into it too.
PEERS_DIR := benchmarks/peers

test: check
	$(GO) test -timeout $(TEST_TIMEOUT) -count=1 ./...
	cd $(PEERS_DIR) && $(GO) test -count=1 ./...

# FUZZTIME bounds each fuzz target of `make fuzz`. The targets are those
# `go test -list '^Fuzz' ./...` finds, run one at a time (go test -fuzz
# takes one target of one package); a failing input is written to the
# package's testdata/fuzz/<target>/ and fails the run: commit it with the
# fix, so that `make test` replays it from then on.
FUZZTIME ?= 15s

fuzz:
	@list=$$($(GO) test -list '^Fuzz' ./...) || { echo "$$list"; exit 1; }; \
	printf '%s\n' "$$list" | \
		awk '/^Fuzz/ { names = names " " $$1; next } /^ok/ { if (names != "") print $$2 names; names = "" }' | { \
		n=0; \
		while read -r pkg names; do \
			for name in $$names; do \
				n=$$((n+1)); \
				echo "fuzz: $$pkg $$name for $(FUZZTIME)"; \
				out=$$($(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg" 2>&1); rc=$$?; echo "$$out"; \
				if [ $$rc -ne 0 ] && echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
					echo "fuzz: $$name: the fuzzing engine stopped at its deadline without a failing input (a known go test -fuzz race): once more"; \
					$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg" || exit 1; \
				elif [ $$rc -ne 0 ]; then exit 1; fi; \
			done; \
		done; \
		[ $$n -gt 0 ] || { echo "fuzz: no fuzz targets found"; exit 1; }; \
		echo "fuzz: $$n passed, 0 failed"; }

# `make sim SEED=1 STEPS=1000000 NODES=5` runs cmd/sq-sim, the deterministic
# replication simulator (engine/replica/sim), for one seed; without SEED it
# draws one and prints it. A failure prints the seed and step and exits 1:
# the same command replays it exactly (add ARGS=-v to print every step).
SEED  ?=
STEPS ?= 1000000
NODES ?= 3

sim:
	$(GO) build -o $(BIN)/ ./cmd/sq-sim
	./$(BIN)/sq-sim $(if $(SEED),-seed $(SEED)) -steps $(STEPS) -nodes $(NODES) $(ARGS)

check: fmt vet

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	cd $(PEERS_DIR) && $(GO) vet ./...

tools:
	@command -v capnp >/dev/null || { echo "capnp missing: apt-get install capnproto"; exit 1; }
	$(GO) install capnproto.org/go/capnp/v3/capnpc-go@$(CAPNP_GO_VERSION)
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler"; exit 1; }
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

generate: tools
	cd api && PATH="$$($(GO) env GOPATH)/bin:$$PATH" capnp compile \
		-I"$$($(GO) list -m -f '{{.Dir}}' capnproto.org/go/capnp/v3)/std" -ogo sq.capnp
	mkdir -p api/sqv1
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc -Iapi \
		--go_out=api/sqv1 --go_opt=paths=source_relative \
		--go-grpc_out=api/sqv1 --go-grpc_opt=paths=source_relative sq.proto

clean:
	rm -rf $(BIN) $(DIST)

# BENCHTIME bounds each benchmark of `make bench`; raise it for figures
# worth quoting (docs/performance.md says which were used).
# BenchmarkConsumeCatchUp runs apart with a fixed count, CATCHUP_BENCHTIME
# records (it writes the log first, untimed): a 100 ms read of a few
# thousand records would measure connection warm-up, not catch-up.
BENCHTIME ?= 100ms
CATCHUP_BENCHTIME ?= 1000000x
BENCH ?= .

bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -skip '^(BenchmarkConsumeCatchUp|BenchmarkManyPartitions)$$' -benchmem -benchtime $(BENCHTIME) ./benchmarks
	if echo BenchmarkConsumeCatchUp | grep -Eq '$(BENCH)'; then \
		$(GO) test -run '^$$' -bench '^BenchmarkConsumeCatchUp$$' -benchmem -benchtime $(CATCHUP_BENCHTIME) ./benchmarks; fi

# `make bench-partitions` runs BenchmarkManyPartitions (P8, minutes per
# run at 10,000 partitions) once per case; PARTS_BENCH picks the cases,
# for example PARTS_BENCH='ManyPartitions/partitions=1000$$/'.
PARTS_BENCH ?= ^BenchmarkManyPartitions$$
bench-partitions:
	$(GO) test -run '^$$' -bench '$(PARTS_BENCH)' -benchtime 1x -timeout 60m ./benchmarks

# PEERS_DURATION is how long each configuration of `make bench-peers` (system,
# mode, sync setting: docs/performance.md lists them) is measured.
PEERS_DURATION ?= 10s

bench-peers: build
	cd benchmarks/peers && $(GO) run . -sq-bin ../../$(BIN) -duration $(PEERS_DURATION)

# The tiered storage test at full size (docs/tiering.md): 512 MiB of
# numbered README lines through sq-server with --s3-bucket against an
# in-process S3 (gofakes3 over HTTP), 4 MiB segments, 16 MiB of local
# retention, read back from offset 0 byte for byte. `make test` runs it
# with 12 MiB.
TIER_TEST_BYTES ?= 536870912

tier-test:
	SQ_TIER_TEST_BYTES=$(TIER_TEST_BYTES) $(GO) test -timeout 30m -count=1 -v -run '^TestTieredStorageServer$$' ./cmd/sq-server/

# The Jepsen-style test (internal/clusternet/jepsen_test.go,
# docs/architecture.md §9.1): JEPSEN_ROUNDS rounds of faults on 3 nodes,
# then on 5 (`make test` runs 20 rounds on 3). JEPSEN_SEED=N replays a
# failing run's schedule of faults (the seed is printed); JEPSEN_CONTINUE=1
# goes on after a failed round to report every round's violations.
JEPSEN_ROUNDS ?= 200
JEPSEN_TIMEOUT ?= 150m

jepsen:
	for nodes in 3 5; do \
		JEPSEN_NODES=$$nodes JEPSEN_ROUNDS=$(JEPSEN_ROUNDS) JEPSEN_SEED=$(JEPSEN_SEED) JEPSEN_CONTINUE=$(JEPSEN_CONTINUE) \
			$(GO) test -timeout $(JEPSEN_TIMEOUT) -count=1 -v -run '^TestJepsen$$' ./internal/clusternet/ || exit 1; \
	done

# `make bench-cluster` (as root: it makes network namespaces, and needs ip
# and nft) runs `sq bench produce` against one node (RF 1, acks leader) and
# against three (RF 3, acks all), each node a real sq-server in its own
# namespace (internal/clusternet, TestBenchCluster), the two alternating
# for CLUSTER_RUNS rounds of CLUSTER_DURATION (batches of
# CLUSTER_BATCH_BYTES), and prints every run and the median per
# configuration. CLUSTER_PROFILE=DIR adds one unmeasured run of
# each with CPU profiles of every server and of sq bench, written to DIR.
CLUSTER_RUNS     ?= 5
CLUSTER_DURATION ?= 8s
CLUSTER_PROFILE  ?=
CLUSTER_BATCH_BYTES ?= 1048576

bench-cluster:
	SQ_BENCH_CLUSTER=1 SQ_BENCH_RUNS=$(CLUSTER_RUNS) SQ_BENCH_DURATION=$(CLUSTER_DURATION) \
		SQ_BENCH_BATCH_BYTES=$(CLUSTER_BATCH_BYTES) \
		SQ_BENCH_PROFILE=$(if $(CLUSTER_PROFILE),$(abspath $(CLUSTER_PROFILE))) \
		$(GO) test -count=1 -timeout 30m -v -run '^TestBenchCluster$$' ./internal/clusternet/
