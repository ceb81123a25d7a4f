# flashcache: `make demo` shows it working, `make test` proves it. `make help` lists the rest.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Build caches live outside the checkout, keyed by version, so a fresh clone reuses them.
export FLASHCACHE_CACHE ?= $(HOME)/.cache/flashcache
export GOWORK := off
# One set of compile flags for vet, the tests and the binaries: cgo off (static binaries, which
# the image, the guests and the Ansible role take as they are) and no -trimpath (testenv finds the
# checkout from its source path). Each flag changes every package's cache key, so with two sets a
# fresh machine compiled the operator's dependencies twice: the binaries' second compile took
# 174 CPU seconds cold. The image's own build keeps -trimpath (Dockerfile).
export CGO_ENABLED := 0

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION_PKG := github.com/flashcache/flashcache/operator/internal/version
# -s -w: no symbol table or DWARF (panics still print file and line): 55 MB instead of 78, which
# the Ansible role copies and checksums on every run and the guests of the tests read over 9p.
LDFLAGS := -s -w -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT)

# Debian's client by default: a newer one earlier in PATH may route `docker build` through a
# buildx plugin the host lacks.
DOCKER ?= /usr/bin/docker
IMAGE_NAME ?= flashcache
IMAGE_TAG := $(subst +,-,$(VERSION))
# The builder's go mod download trusts what the host trusts: where egress goes through a
# TLS-intercepting proxy, only the host has its CA.
HOST_CA ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
comma := ,
space := $(subst ,, )
# The test files' build tags. No package has files of two of them, so lint vets once with all
# of them instead of once per tag.
BUILD_TAGS := envtest vm e2e helm image ansible bench
IMAGE_SECRETS := $(if $(HOST_CA),--secret id=host-ca$(comma)src=$(HOST_CA))

BIN := $(CURDIR)/bin
FLASHCACHE := $(BIN)/flashcache
KUBECTL_FLASHCACHE := $(BIN)/kubectl-flashcache

CONTROLLER_GEN_VERSION := $(shell cd hack/tools && go list -mod=readonly -m -f '{{.Version}}' sigs.k8s.io/controller-tools)
CONTROLLER_GEN := $(FLASHCACHE_CACHE)/tools/controller-gen-$(CONTROLLER_GEN_VERSION)
CRD_REF_DOCS_VERSION := $(shell cd hack/tools && go list -mod=readonly -m -f '{{.Version}}' github.com/elastic/crd-ref-docs)
CRD_REF_DOCS := $(FLASHCACHE_CACHE)/tools/crd-ref-docs-$(CRD_REF_DOCS_VERSION)
# promtool tests the chart's alert rules. It is built in hack/control-plane, beside the control
# plane whose libraries (client-go, gRPC, OpenTelemetry) it shares, so that they compile once (cold:
# 192 CPU s more than the control plane, against 436 in a module of its own); that also keeps
# Prometheus' many dependencies out of hack/tools and of the operator's go.mod. Built with
# Prometheus' remove_all_sd tag: checking and unit-testing rules needs no service discovery, and
# the cloud SDKs it drops were most of the build (cold, in a Go cache of its own: 187 CPU s
# against 476 with them).
PROMTOOL_VERSION := $(shell cd hack/control-plane && go list -mod=readonly -m -f '{{.Version}}' github.com/prometheus/prometheus)
PROMTOOL := $(FLASHCACHE_CACHE)/tools/promtool-$(PROMTOOL_VERSION)-without-sd

# Paths that `make generate` owns; `make verify-generated` fails when they are stale.
CHART := charts/flashcache
GENERATED := crds operator/config/crd/bases operator/api/v1alpha1/zz_generated.deepcopy.go operator/internal/applyconfiguration operator/config/rbac \
	$(CHART)/crds $(CHART)/files/rbac $(CHART)/files/webhook deploy docs/reference/api.md

.PHONY: help
help: ## List the targets.
	@awk -F ':.*## ' '/^[a-zA-Z0-9_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Build

.PHONY: build
build: ## Build bin/flashcache.
	cd operator && go build -ldflags '$(LDFLAGS)' -o $(FLASHCACHE) ./cmd

.PHONY: kubectl-plugin
kubectl-plugin: ## Build bin/kubectl-flashcache, the kubectl plugin (kubectl flashcache status|flush|drain-status).
	cd operator && go build -ldflags '$(LDFLAGS)' -o $(KUBECTL_FLASHCACHE) ./cmd/kubectl-flashcache

$(CONTROLLER_GEN):
	mkdir -p $(dir $@)
	cd hack/tools && go build -mod=readonly -o $@.tmp sigs.k8s.io/controller-tools/cmd/controller-gen && mv $@.tmp $@

$(CRD_REF_DOCS):
	mkdir -p $(dir $@)
	cd hack/tools && go build -mod=readonly -o $@.tmp github.com/elastic/crd-ref-docs && mv $@.tmp $@

# Under a lock: make test's preparation builds it while a queued test-helm may ask for it too.
$(PROMTOOL):
	mkdir -p $(dir $@)
	flock $@.lock sh -c 'test -x $@ || { cd hack/control-plane && CGO_ENABLED=0 go build -mod=readonly -trimpath -tags remove_all_sd -ldflags "-s -w" -o $@.tmp github.com/prometheus/prometheus/cmd/promtool && mv $@.tmp $@; }'

.PHONY: generate
generate: $(CONTROLLER_GEN) $(CRD_REF_DOCS) ## Regenerate deepcopy, apply configurations, CRDs and RBAC from the Go types; copy them into the chart; render deploy/ and the API reference.
	cd operator && $(CONTROLLER_GEN) object paths=./api/...
	cd operator && $(CONTROLLER_GEN) applyconfiguration paths=./api/...
	cd operator && $(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	cp operator/config/crd/bases/*.yaml crds/
	cd operator && $(CONTROLLER_GEN) rbac:roleName=flashcache-operator paths="./internal/controller/...;./internal/webhook/...;./internal/cli/...;./internal/csi/..." output:rbac:artifacts:config=config/rbac/operator
	cd operator && $(CONTROLLER_GEN) rbac:roleName=flashcache-agent paths=./internal/agent/... output:rbac:artifacts:config=config/rbac/agent
	cp crds/*.yaml $(CHART)/crds/
	cp operator/config/rbac/operator/role.yaml $(CHART)/files/rbac/operator.yaml
	cp operator/config/rbac/agent/role.yaml $(CHART)/files/rbac/agent.yaml
	cp operator/config/webhook/eviction.yaml $(CHART)/files/webhook/eviction.yaml
	hack/render-manifests.sh > deploy/flashcache.yaml
	$(CRD_REF_DOCS) --config hack/crd-ref-docs.yaml --source-path operator/api/v1alpha1 --renderer markdown \
		--output-path docs/reference/api.md --log-level ERROR

.PHONY: envtest-assets
envtest-assets: ## Build etcd, kube-apiserver and kubectl if missing; print their folder (KUBEBUILDER_ASSETS).
	@hack/build-control-plane.sh

.PHONY: image
image: ## Build the image (flashcache:VERSION and flashcache:dev), with docker and the base images made if missing; print its tag.
	@hack/install-docker.sh
	@hack/build-base-images.sh >/dev/null
	@DOCKER_BUILDKIT=1 $(DOCKER) build $(IMAGE_SECRETS) \
		--build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) \
		-t $(IMAGE_NAME):$(IMAGE_TAG) -t $(IMAGE_NAME):dev . >&2
	@echo $(IMAGE_NAME):$(IMAGE_TAG)

##@ Test

# make test's tiers: the first ones one after another while test-prepare builds in the background,
# then the queued ones three at a time, each started when one before it ends (hack/test.sh; logs
# in test-logs/). Three, not two: with two the CPUs idled a fifth of the run (the guests wait on
# throttled disks, flush periods and boots): 2227-2322 s warm against 2110-2121 s with three
# (docs/testing.md). The queue is longest first, by the tiers' warm times, so the short ones fill
# the end: test-e2e starts at once (on a fresh machine it waits for the control plane, a wait that
# costs no CPU while the guests of the others run). A queue, not fixed lanes: on a fresh machine
# test-e2e waits ~25 minutes for its cold control plane, and the tiers that followed it in its
# lane now run beside it instead (3541 s fresh, against past 4000 s had they waited; warm one
# run of 2191 s against 2110-2128 with lanes, docs/testing.md). Three side by side once lost
# NVMe commands in test-ansible's one-vCPU guest: a TCG barrier matter, fixed in vmharness's
# qemuArgs. test-demo waits behind test-bench-smoke although it is longer: its node's guest and
# control plane keep a core busy for as long as it runs, so beside three guests it took 880 s and
# 808 CPU seconds warm against 512-554 s and 506-564 beside fewer: 2164 s warm at ea8b0e3. With
# test-ansible before test-durability (d370835) the demo started beside two guests and took 895 s:
# 2352 s warm, so durability stays first.
# TEST_LAST runs alone after the queue, for a tier that cannot share the machine (none today).
TEST_FIRST := lint test-unit verify-generated
TEST_QUEUE := test-e2e test-vm-engine test-durability test-ansible test-vm-faults \
	test-bench-smoke test-demo test-envtest test-helm test-krew policy-scan
TEST_SIDE_BY_SIDE := 3
TEST_LAST :=

.PHONY: test
test: ## Every tier below, as CI runs it: some one after another, then three at a time (logs and times in test-logs/).
	hack/test.sh "$(TEST_FIRST)" "$(TEST_LAST)" $(TEST_SIDE_BY_SIDE) "$(TEST_QUEUE)"

# test-prepare's two streams run side by side: on a fresh machine the downloads wait on the network
# and dpkg, the builds on the CPU. Each is in the order the tiers need it: helm for
# verify-generated, the VM image for the kernel lane, the control plane for envtest and e2e.
.PHONY: test-prepare
test-prepare: ## Install and build what the tiers use (packages, control plane, VM image, Ansible, binary, images); make test starts it in the background.
	hack/install-deps.sh
	$(MAKE) --no-print-directory -j2 prepare-downloads prepare-builds

.PHONY: prepare-downloads
prepare-downloads: ## test-prepare's installs: QEMU and the VM image, docker and the base images, the virtualenvs.
	hack/install-vm-deps.sh
	hack/build-vm-image.sh >/dev/null
	hack/install-venv.sh checkov >/dev/null
	hack/install-docker.sh
	hack/build-base-images.sh >/dev/null
	hack/install-ansible.sh >/dev/null

# promtool last: only test-helm, near the queue's end, needs it, and its cold build (436 CPU s in a
# module of its own before remove_all_sd, 1305 s niced beside the guests) held up the image and the
# demo's node images, which the demo waited 711 s for on a fresh machine.
.PHONY: prepare-builds
prepare-builds: ## test-prepare's builds: the control plane, kubelet, bin/flashcache, the CSI sidecars, the image, the node images and promtool.
	hack/build-control-plane.sh helm etcd kube-apiserver kubectl >/dev/null
	$(MAKE) --no-print-directory build
	hack/build-control-plane.sh $(E2E_COMPONENTS) kubelet kube-proxy >/dev/null
	hack/build-csi-sidecars.sh >/dev/null
	image=$$($(MAKE) -s --no-print-directory image) && hack/build-node-images.sh "$$image" >/dev/null
	$(MAKE) --no-print-directory $(PROMTOOL)

.PHONY: policy-scan
policy-scan: ## Scan the rendered manifests (deploy/flashcache.yaml) with checkov; fails on a finding the chart does not accept with its reason.
	@bin=$$(hack/install-venv.sh checkov) && "$$bin/checkov" --file deploy/flashcache.yaml --framework kubernetes --compact --quiet

.PHONY: lint
lint: ## gofmt and go vet (with the envtest, vm, e2e, helm, image, ansible and bench files).
	@unformatted=$$(cd operator && gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	cd operator && go vet ./... && go vet -tags $(subst $(space),$(comma),$(BUILD_TAGS)) ./...

.PHONY: verify-generated
verify-generated: $(CONTROLLER_GEN) $(CRD_REF_DOCS) ## Fail when generated files (crds/ among them) differ from the Go types.
	hack/verify-generated.sh $(GENERATED)

.PHONY: test-unit
test-unit: ## Unit tests: pure logic, no API server, no kernel.
	cd operator && go test -count=1 ./...

.PHONY: test-envtest
test-envtest: ## API validation and controller tests against a real etcd + kube-apiserver.
	assets=$$(hack/build-control-plane.sh); \
	cd operator && KUBEBUILDER_ASSETS=$$assets go test -count=1 -tags envtest ./...

.PHONY: test-image
test-image: image ## Build the image, then check its version stamp and that it has every tool the engine declares.
	cd operator && DOCKER=$(DOCKER) FLASHCACHE_IMAGE=$(IMAGE_NAME):$(IMAGE_TAG) FLASHCACHE_VERSION=$(VERSION) FLASHCACHE_COMMIT=$(COMMIT) \
		go test -count=1 -v -tags image ./test/image/

.PHONY: test-demo
test-demo: ## Run the demo non-interactively and check what it shows (rows intact, eviction after clean, claims, metrics).
	DEMO_ASSERT=1 DEMO_CLAIM_REPLICAS=1 DEMO_ROWS=20000 hack/demo.sh

##@ Kernel-level tests (QEMU VM)

# The guests of test-durability and test-ansible have one vCPU (on a machine that could have two,
# so that TCG keeps the guest's memory barriers: see vmharness's qemuArgs): beside the other tiers
# they used a third less CPU with one than with two (test-ansible 1449 CPU seconds against 1972),
# which is what a tier's time follows on a busy machine. test-vm's and test-e2e's keep two: with
# one, test-vm's reboots took twice as long and test-e2e took 2447 s against 2042
# (docs/testing.md).
GUEST_VCPUS := 1

.PHONY: vm-image
vm-image: ## Install QEMU and mmdebstrap if missing, build the test VM image if stale; print its folder.
	@hack/install-vm-deps.sh
	@hack/build-vm-image.sh

.PHONY: test-vm
test-vm: ## Boot the Debian test VM (emulated NVMe + HDD, real bcache) and run the engine's tests in it.
	rc=0; $(MAKE) --no-print-directory test-vm-engine || rc=1; $(MAKE) --no-print-directory test-vm-faults || rc=1; exit $$rc

# test-vm's two halves, each its own guests, so that each can run alone or beside the other tiers: the
# engine's walk through one volume's and one pool's life, and the harness's own tests with the
# failure tests (lost and failing disks, iSCSI). They take about the same time. Each half, and
# test-vm, runs every test even after one fails, as one go test of both packages did.
VM_TEST := go test -count=1 -p 1 -v -tags vm -timeout 60m
ENGINE_WALK := ^TestEngineOnARealKernel$$

.PHONY: test-vm-engine
test-vm-engine: ## test-vm's first half: the engine's walk through a volume's and a pool's life.
	hack/install-vm-deps.sh
	img=$$(hack/build-vm-image.sh); \
	$(MAKE) --no-print-directory build; \
	cd operator && FLASHCACHE_VM_IMAGE=$$img FLASHCACHE_BIN=$(FLASHCACHE) $(VM_TEST) -run '$(ENGINE_WALK)' ./test/enginevm/

.PHONY: test-vm-faults
test-vm-faults: ## test-vm's second half: the VM harness's own tests, then lost and failing disks and iSCSI.
	hack/install-vm-deps.sh
	img=$$(hack/build-vm-image.sh); \
	$(MAKE) --no-print-directory build; \
	cd operator && export FLASHCACHE_VM_IMAGE=$$img FLASHCACHE_BIN=$(FLASHCACHE); rc=0; \
	$(VM_TEST) ./test/vmharness/ || rc=1; \
	$(VM_TEST) -skip '$(ENGINE_WALK)' ./test/enginevm/ || rc=1; \
	exit $$rc

.PHONY: test-durability
test-durability: ## Power cuts under a committing workload, on honest and lying volatile disk caches.
	hack/install-vm-deps.sh
	img=$$(hack/build-vm-image.sh); \
	$(MAKE) --no-print-directory build; \
	cd operator && FLASHCACHE_VM_CPUS=$(GUEST_VCPUS) FLASHCACHE_VM_IMAGE=$$img FLASHCACHE_BIN=$(FLASHCACHE) go test -count=1 -v -tags vm -timeout 60m ./test/durability/

.PHONY: vm-shell
vm-shell: ## Boot the test VM with an NVMe and an HDD and open a root shell in it.
	@hack/install-vm-deps.sh
	@img=$$(hack/build-vm-image.sh); \
	cd operator && go run ./test/vmshell -image "$$img" $(VMSHELL_ARGS)

##@ Hosts without Kubernetes (Ansible)

.PHONY: test-ansible
test-ansible: ## ansible-lint, then the role and the playbooks over SSH against the test VM.
	hack/install-vm-deps.sh
	bin=$$(hack/install-ansible.sh); \
	PATH=$$bin:$$PATH "$$bin/ansible-lint" roles/ playbooks/; \
	img=$$(hack/build-vm-image.sh); \
	$(MAKE) --no-print-directory build; \
	cd operator && FLASHCACHE_VM_CPUS=$(GUEST_VCPUS) FLASHCACHE_ANSIBLE_BIN=$$bin FLASHCACHE_VM_IMAGE=$$img FLASHCACHE_BIN=$(FLASHCACHE) \
		go test -count=1 -v -tags ansible -timeout 65m ./test/ansible/

##@ End-to-end tests (control plane on the host, the QEMU VM as a node)

E2E_COMPONENTS := etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok helm

.PHONY: test-e2e
test-e2e: ## A real control plane on the host, the test VM as node "vm" (kwok plays its kubelet).
	hack/install-vm-deps.sh
	assets=$$(hack/build-control-plane.sh $(E2E_COMPONENTS)); \
	img=$$(hack/build-vm-image.sh); \
	sidecars=$$(hack/build-csi-sidecars.sh); \
	$(MAKE) --no-print-directory build kubectl-plugin; \
	cd operator && KUBEBUILDER_ASSETS=$$assets FLASHCACHE_VM_IMAGE=$$img FLASHCACHE_BIN=$(FLASHCACHE) FLASHCACHE_KUBECTL_PLUGIN=$(KUBECTL_FLASHCACHE) \
		FLASHCACHE_CSI_SIDECARS=$$sidecars go test -tags e2e -count=1 -p 1 -v -timeout 60m ./test/e2e/...

##@ Benchmarks (numbers, no speed targets)

# `make bench` saves its results in the repository (docs/benchmarks/results, JSON), each OLTP run
# as it ends: a benchmark interrupted goes on where it stopped when started again with the same
# sizes, and `make bench-report` renders docs/ again from them. BENCH_* variables in the
# environment change the sizes (see operator/test/bench/oltp) and are printed in the report as
# part of the command.
BENCH_RESULTS ?= $(CURDIR)/docs/benchmarks/results
BENCH_COMMAND = $(strip $(shell env | grep '^BENCH_' | grep -v '^BENCH_OUT=\|^BENCH_RESULTS=' | sort | tr '\n' ' ') make bench)
BENCH_VM := go test -count=1 -v -tags bench -timeout 12h ./test/bench/oltp/
BENCH_SCALE := go test -count=1 -v -tags bench -timeout 30m ./test/bench/scale/
BENCH_REPORT := go run ./test/bench/report

.PHONY: bench
bench: ## OLTP per storage configuration, flush efficiency and the operator at scale; writes docs/benchmarks.md and its charts.
	hack/install-vm-deps.sh
	img=$$(hack/build-vm-image.sh); \
	assets=$$(hack/build-control-plane.sh $(E2E_COMPONENTS)); \
	sidecars=$$(hack/build-csi-sidecars.sh); \
	$(MAKE) --no-print-directory build; \
	mkdir -p $(BENCH_RESULTS); \
	cd operator && export BENCH_OUT=$(BENCH_RESULTS) BENCH_COMMAND='$(BENCH_COMMAND)' BENCH_REVISION=$(VERSION) \
		BENCH_DATASET_DIR=$(FLASHCACHE_CACHE)/bench/datasets FLASHCACHE_VM_IMAGE=$$img FLASHCACHE_BIN=$(FLASHCACHE) KUBEBUILDER_ASSETS=$$assets \
		FLASHCACHE_CSI_SIDECARS=$$sidecars; \
	$(BENCH_VM) -run TestFlushEfficiency; \
	$(BENCH_VM) -run TestOLTP; \
	BENCH_DATA_SET=larger-than-cache $(BENCH_VM) -run TestOLTP; \
	$(BENCH_SCALE); \
	$(BENCH_REPORT) -results $(BENCH_RESULTS) -docs ../docs -notes ../docs/benchmarks/analysis.md
	@echo "results in $(BENCH_RESULTS); report in docs/benchmarks.md"

.PHONY: bench-report
bench-report: ## docs/benchmarks.md and its charts again from the results make bench saved (BENCH_RESULTS), without running anything.
	cd operator && $(BENCH_REPORT) -results $(BENCH_RESULTS) -docs ../docs -notes ../docs/benchmarks/analysis.md

.PHONY: bench-scale
bench-scale: ## The operator at scale alone: 1000 FlashCacheVolumes on 200 kwok nodes (simulated agent), eviction webhook latency, 20 claims to Bound; BENCH_OUT gets scale.json and claims.json.
	assets=$$(hack/build-control-plane.sh $(E2E_COMPONENTS)); \
	sidecars=$$(hack/build-csi-sidecars.sh); \
	$(MAKE) --no-print-directory build; \
	cd operator && KUBEBUILDER_ASSETS=$$assets FLASHCACHE_BIN=$(FLASHCACHE) FLASHCACHE_CSI_SIDECARS=$$sidecars $(BENCH_SCALE)

.PHONY: test-bench-smoke
# Its tiny data set is kept with make bench's (keyed by size and VM image): preparing it again took
# about 20 s of every warm run and proves nothing a fresh machine's run does not.
test-bench-smoke: ## make bench in miniature (three configurations, a tiny data set, 50 volumes): proves it runs, resumes and renders, measures nothing.
	hack/install-vm-deps.sh
	img=$$(hack/build-vm-image.sh); \
	assets=$$(hack/build-control-plane.sh $(E2E_COMPONENTS)); \
	sidecars=$$(hack/build-csi-sidecars.sh); \
	$(MAKE) --no-print-directory build; \
	out=$$(mktemp -d); trap 'rm -rf "$$out"' EXIT; \
	cd operator && export BENCH_OUT=$$out/results BENCH_DATASET_DIR=$(FLASHCACHE_CACHE)/bench/datasets BENCH_COMMAND='make test-bench-smoke' FLASHCACHE_VM_IMAGE=$$img FLASHCACHE_BIN=$(FLASHCACHE) KUBEBUILDER_ASSETS=$$assets \
		FLASHCACHE_CSI_SIDECARS=$$sidecars; \
	BENCH_FLUSH_SEQUENTIAL_MIB=64 BENCH_FLUSH_RANDOM_MIB=1 BENCH_FLUSH_BASELINE_SECONDS=5 $(BENCH_VM) -run TestFlushEfficiency; \
	export BENCH_DATA_MIB=48 BENCH_TABLES=2 BENCH_BUFFER_POOL_MIB=16 BENCH_WARMUP_SECONDS=5 BENCH_MEASURE_SECONDS=20 BENCH_FIO_SECONDS=5 BENCH_REPETITIONS=1; \
	BENCH_CONFIGS=flashcache-flush-30s $(BENCH_VM) -run TestOLTP; \
	BENCH_CONFIGS=flashcache-flush-30s,dm-writecache $(BENCH_VM) -run TestOLTP | tee $$out/resumed.log; \
	grep -q "runs to measure: 1; runs kept from $$out/results/oltp.json: 1" $$out/resumed.log; \
	BENCH_DATA_SET=larger-than-cache BENCH_CACHE_DISK_MIB=4096 BENCH_CONFIGS=flashcache-congestion-off $(BENCH_VM) -run TestOLTP; \
	BENCH_SCALE_VOLUMES=50 BENCH_SCALE_NODES=10 BENCH_SCALE_EVICTIONS=20 BENCH_CLAIMS=3 $(BENCH_SCALE); \
	$(BENCH_REPORT) -results $$out/results -docs $$out/docs; \
	grep -q 'flashcache-flush-30s' $$out/docs/benchmarks.md && test -s $$out/docs/benchmarks/tps-dm-writecache.png && \
		test -s $$out/docs/benchmarks/larger-tps-flashcache-congestion-off.png && grep -q '^| Claim to Bound | p50' $$out/docs/benchmarks.md

##@ Packaging

.PHONY: test-helm
test-helm: test-image $(PROMTOOL) ## The image test, then helm lint; render, dry-run, install, upgrade and uninstall the chart on a real control plane; the alert rules under promtool.
	assets=$$(hack/build-control-plane.sh $(E2E_COMPONENTS)); \
	cd operator && KUBEBUILDER_ASSETS=$$assets FLASHCACHE_PROMTOOL=$(PROMTOOL) go test -tags helm -count=1 -v -timeout 20m ./test/helm/

.PHONY: krew
krew: ## The kubectl plugin's krew release in dist/krew (VERSION=x.y.z): archives, manifest with their sha256, installed once by krew to prove them.
	hack/krew-release.sh $(or $(VERSION),$(shell git describe --tags --always 2>/dev/null | sed 's/^v//')) dist/krew

.PHONY: test-krew
test-krew: ## The kubectl plugin's krew manifest and archive, installed by krew itself and run.
	out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && hack/krew-release.sh 0.0.0-test "$$out" >/dev/null

##@ Use

.PHONY: demo
demo: ## helm install, a FlashCacheVolume and a pool, MariaDB on each (1 -> 3 by claim), kubectl drain, on a real kubelet in the test VM.
	hack/demo.sh

.PHONY: clean
clean: ## Remove bin/ (the caches under $(FLASHCACHE_CACHE) stay).
	rm -rf $(BIN)
