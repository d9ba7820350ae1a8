# The two commands a user needs are `make demo` and `make test`; both set up everything.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The control-plane binaries live outside the repository, in a cache keyed by version.
ASSETS = $(shell hack/build-controlplane.sh 2>/dev/null | tail -n 1)
# The Jaeger all-in-one (the e2e tier's trace backend), cached by version the same way.
JAEGER = $(shell hack/build-jaeger.sh 2>/dev/null | tail -n 1)
# The real llama.cpp server (contract tests, real-server members), cached by version the same way.
LLAMA_SERVER = $(shell hack/build-llama-server.sh 2>/dev/null | tail -n 1)
# Helm (the chart's lint, template and install tests), cached by version the same way.
HELM = $(shell hack/build-helm.sh 2>/dev/null | tail -n 1)
# promtool (the alert rules' tests), cached by version the same way.
PROMTOOL = $(shell hack/build-prometheus.sh 2>/dev/null | tail -n 1)
# prometheus-operator's CRDs (the monitors' schema check in test-e2e), cached by version.
PROMETHEUS_OPERATOR_CRDS = $(shell hack/fetch-prometheus-operator-crds.sh 2>/dev/null | tail -n 1)

.PHONY: help test-quick venv bytecode controlplane-bins jaeger-bin helm-bin promtool-bin prometheus-operator-crds llama-server test test-unit test-e2e lint demo dev clean bench bench-proxy \
	bench-kv-swap bench-router-mode bench-kind-switch bench-fairness bench-no-cut manifests check-rbac test-kind test-fuzz fuzz image kind-up deploy undeploy kind-down \
	host-tools kind-tools kind-roots kind-node member-images network-policies monitoring-images \
	kind-prereqs local-prereqs \
	ci-prereqs ci-fresh

help:
	@echo "make demo               run the whole system locally and show it working"
	@echo "                          (MEMBERS=llama-server: members on the real llama.cpp server)"
	@echo "make dev                start the local control plane and keep it running"
	@echo "make test               unit + fuzz + e2e tests (builds the control plane on first use)"
	@echo "make test-quick         lint + unit + fuzz: the edit-test loop, a few minutes"
	@echo "make test-unit          unit tests only (no network; UNIT_WORKERS=2 workers, 0: one process)"
	@echo "make test-e2e           e2e tests against a real kube-apiserver + etcd"
	@echo "                          (E2E_WORKERS=4 workers, each with its own control plane; 0: serial)"
	@echo "make test-fuzz          the proxy's fuzzers, bounded and reproducible (part of make test)"
	@echo "make fuzz               the fuzzers' long run (FUZZ_EXAMPLES=5000 per fuzzer; docs/fuzzing.md)"
	@echo "make test-kind          the e2e suite's kind tier (a kind cluster built here, operator in it)"
	@echo "make lint               ruff, mypy --strict, import contracts, check-rbac"
	@echo "make manifests          regenerate manifests/crd and manifests/rbac from the code"
	@echo "make check-rbac         prove the RBAC manifests are enough for the code, and no more"
	@echo "make controlplane-bins  build kube-apiserver, kube-controller-manager, kubectl, etcd"
	@echo "make jaeger-bin         build the Jaeger all-in-one (traces for test-e2e, demo, dev)"
	@echo "make promtool-bin       build Prometheus's promtool (the alert rules' tests)"
	@echo "make prometheus-operator-crds  cache prometheus-operator's CRDs (the monitors' schema test)"
	@echo "make helm-bin           build Helm v4 (the chart's tests; install with charts/modelpool)"
	@echo "make llama-server       build llama.cpp's llama-server (contract tests, real members; ~8 min once)"
	@echo "make bench              controller benchmark: ours vs kopf vs controller-runtime"
	@echo "make bench-proxy        data path: proxy vs direct vs nginx, held requests, swaps"
	@echo "make bench-kv-swap      KV cache across a swap with real members: prompt tokens, save/restore"
	@echo "make bench-router-mode  switch time: llama.cpp's router mode vs our pool, real members"
	@echo "make bench-kind-switch  the same on kind, phase by phase (a cluster of its own; ~5 min)"
	@echo "make bench-fairness     who gets the slot when: our scheduler vs before it vs llama-swap"
	@echo "make bench-no-cut       10 min of load with swaps, reclaims, a proxy rollout: nothing cut"
	@echo "                          (BENCH_ARGS=\"--budget 2\": three members, two fit; vs exclusive, llama-swap)"
	@echo "make image              build the project image with no registry (starts Docker if needed)"
	@echo "make kind-prereqs       everything the kind tier needs: kind's programs, node, member, kube-router"
	@echo "                          and monitoring images"
	@echo "make monitoring-images  the kind tier's real Prometheus: Prometheus, prometheus-operator and its"
	@echo "                          config reloader from their Go modules, as images (no registry)"
	@echo "make ci-prereqs         every build CI needs, in parallel (make -j6 ci-prereqs)"
	@echo "make ci-fresh           .ci/run on a clean clone with every cache moved aside (a fresh machine)"
	@echo "make kind-up            a one-node kind cluster from a node image built here (cached)"
	@echo "make deploy             kind-up, image built and loaded, operator applied and ready"
	@echo "make undeploy           remove what deploy applied (CRDs and every pool with them)"
	@echo "make kind-down          delete the kind cluster"

$(BIN)/controlplane: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==25.3
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

venv: $(BIN)/controlplane

# The package's and the tests' bytecode, written once before a run. An environment that sets
# PYTHONDONTWRITEBYTECODE (this machine's does) otherwise has every process compile the package
# from source when it starts: the e2e tier starts about 500 (operators, router-proxies, node
# stand-ins, simulators), each spending 0.1 to 0.2 s of CPU more without it (an operator's start:
# 0.77 s, 0.57 s with it). Python checks each file's time stamp, so a stale file is never used;
# pip compiled the dependencies already. The collection pass writes pytest's rewritten test modules
# (its assertion rewriting, cached beside the bytecode and read even where writing is off): each
# xdist worker otherwise rewrites every test module it imports, 8.5 s of CPU per e2e worker instead
# of 2.2 s.
bytecode: venv
	@$(BIN)/python -m compileall -q controlplane tests >/dev/null
	@env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest --collect-only -q -p no:cacheprovider tests >/dev/null

# Each build step prints its progress and, through hack/timed.sh, its time; each is cached and
# takes a second when already built.
controlplane-bins:
	@hack/timed.sh controlplane-bins hack/build-controlplane.sh

jaeger-bin:
	@hack/timed.sh jaeger-bin hack/build-jaeger.sh

helm-bin:
	@hack/timed.sh helm-bin hack/build-helm.sh

promtool-bin:
	@hack/timed.sh promtool-bin hack/build-prometheus.sh

prometheus-operator-crds:
	@hack/timed.sh prometheus-operator-crds hack/fetch-prometheus-operator-crds.sh

# python3's pip fetches the source package (PYTHON= names another), so the compile starts at
# once instead of after the virtualenv's install; it is the longest build.
llama-server:
	@hack/timed.sh llama-server hack/build-llama-server.sh

test: test-unit test-fuzz test-e2e

# The edit-test loop: what needs no API server (lint, unit, fuzz), a few minutes.
test-quick: lint test-unit test-fuzz

# promtool runs the alert rules' tests (tests/unit/test_alert_rules.py). UNIT_WORKERS=2 pytest-xdist
# workers (0: one process): 58 s instead of 85 s on 2 cores.
UNIT_WORKERS ?= 2
test-unit: venv bytecode promtool-bin
	PROMTOOL_BINARY="$(PROMTOOL)" $(BIN)/pytest tests/unit $(if $(filter 0,$(UNIT_WORKERS)),,-n $(UNIT_WORKERS))

# The proxy's fuzzers (docs/fuzzing.md): a fixed, derandomized number of examples, well under a
# minute; `make fuzz` draws at random for as long as FUZZ_EXAMPLES asks, keeping what it finds in
# .hypothesis/fuzz.
test-fuzz: venv bytecode
	$(BIN)/pytest tests/fuzz

FUZZ_EXAMPLES ?= 5000
fuzz: venv
	FUZZ_PROFILE=long FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest tests/fuzz --timeout=0 \
		--hypothesis-show-statistics $(PYTEST_ARGS)

# The e2e tier runs on E2E_WORKERS pytest-xdist workers, each with a control plane of its own; a
# module (or a named xdist group) is one unit of work (tests/e2e/workers.py, docs/testing.md).
# E2E_WORKERS=0 runs it in this one process.
E2E_WORKERS ?= 4
E2E_PARALLEL = $(if $(filter 0,$(E2E_WORKERS)),,-n $(E2E_WORKERS) --dist loadgroup)
# Every e2e run's log ends with the durations of its tests' phases over a second, which
# hack/durations.py sums per file (where the tiers' time goes: docs/testing.md).
DURATIONS = --durations=0 --durations-min=1.0
test-e2e: venv bytecode controlplane-bins jaeger-bin llama-server helm-bin prometheus-operator-crds
	KUBEBUILDER_ASSETS="$(ASSETS)" JAEGER_BINARY="$(JAEGER)" LLAMA_SERVER_BINARY="$(LLAMA_SERVER)" \
		HELM_BINARY="$(HELM)" PROMETHEUS_OPERATOR_CRDS="$(PROMETHEUS_OPERATOR_CRDS)" \
		$(BIN)/pytest tests/e2e $(E2E_PARALLEL) $(DURATIONS) $(PYTEST_ARGS)

# The kind tier (docs/kind.md): the same suite with --cluster=kind. Everything it runs is built
# by its prerequisites before pytest starts; the suite only finds it (MODELPOOL_NO_BUILD).
test-kind: venv bytecode controlplane-bins helm-bin kind-prereqs
	HELM_BINARY="$(HELM)" $(BIN)/pytest tests/e2e --cluster=kind --cluster-name=modelpool-e2e \
		$(DURATIONS) $(PYTEST_ARGS)

manifests: venv
	hack/gen-manifests

check-rbac: venv
	$(BIN)/python -m controlplane.rbacmanifests check manifests

lint: venv check-rbac
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# demo and dev export their traces to Jaeger (built on first use; without it they run untraced).
# MEMBERS=llama-server runs the members on the real llama.cpp server (built on first use).
MEMBERS ?= simulator
MEMBER_BINS := $(if $(filter llama-server,$(MEMBERS)),llama-server)
MEMBER_ENV = $(if $(filter llama-server,$(MEMBERS)),LLAMA_SERVER_BINARY="$(LLAMA_SERVER)")

demo: venv controlplane-bins jaeger-bin $(MEMBER_BINS)
	KUBEBUILDER_ASSETS="$(ASSETS)" JAEGER_BINARY="$(JAEGER)" $(MEMBER_ENV) \
		$(BIN)/controlplane demo --members $(MEMBERS)

dev: venv controlplane-bins jaeger-bin $(MEMBER_BINS)
	KUBEBUILDER_ASSETS="$(ASSETS)" JAEGER_BINARY="$(JAEGER)" $(MEMBER_ENV) \
		$(BIN)/controlplane dev --members $(MEMBERS)

# The comparative controller benchmark (bench/README.md); BENCH_ARGS adds options.
bench: venv controlplane-bins
	$(BIN)/python -c 'import kopf' 2>/dev/null || $(BIN)/pip install --quiet -e '.[bench]'
	KUBEBUILDER_ASSETS="$(ASSETS)" $(BIN)/python -m bench.controller_bench --objects 5000 \
		--peers controller-runtime,controller-runtime-typed,kopf,ours $(BENCH_ARGS)

# The data-path benchmark (bench/README.md, "Data path"): needs nginx and wrk (apt-get install -y
# nginx wrk); BENCH_ARGS adds options.
bench-proxy: venv controlplane-bins
	KUBEBUILDER_ASSETS="$(ASSETS)" $(BIN)/python -m bench.proxy_bench $(BENCH_ARGS)

# The swap benchmarks with real llama-server members (bench/README.md); BENCH_ARGS adds options
# (--switches N).
bench-kv-swap: venv controlplane-bins llama-server
	KUBEBUILDER_ASSETS="$(ASSETS)" $(BIN)/python -m bench.kv_cache_swap --server "$(LLAMA_SERVER)" \
		$(BENCH_ARGS)

bench-router-mode: venv controlplane-bins llama-server
	KUBEBUILDER_ASSETS="$(ASSETS)" $(BIN)/python -m bench.router_mode_bench --server "$(LLAMA_SERVER)" \
		$(BENCH_ARGS)

# The switch on the kind tier, phase by phase, against router mode in a pod (bench/README.md);
# a kind cluster of its own, deleted at the end. BENCH_ARGS adds options (--switches N, --keep,
# --cluster NAME to use one that exists).
bench-kind-switch: venv controlplane-bins kind-prereqs
	$(BIN)/python -m bench.kind_switch_bench $(BENCH_ARGS)

# Fixed arrival traces against our pool, the pool before its scheduler and llama-swap (bench/README.md,
# "Fairness"); BENCH_ARGS adds options (--systems, --seconds).
bench-fairness: venv controlplane-bins
	KUBEBUILDER_ASSETS="$(ASSETS)" $(BIN)/python -m bench.fairness_bench $(BENCH_ARGS)

# Issue 46's load run (bench/README.md, "No request cut"): 8 clients looping, 1 alternating, with
# swaps, idle reclaims and proxy rollouts; exits non-zero if a request was cut. BENCH_ARGS adds
# options (--minutes 10 by default, --rollouts 2). Not part of `make test`.
bench-no-cut: venv controlplane-bins
	KUBEBUILDER_ASSETS="$(ASSETS)" $(BIN)/python -m bench.no_cut_bench $(BENCH_ARGS)

# The cluster tier (docs/kind.md): every image and the kind node are built here, no registry.
# The Docker engine and debootstrap are installed once, before the builds that use them run in
# parallel (two apt-get runs at once would fight over dpkg's lock).
host-tools:
	@hack/timed.sh host-tools hack/docker-engine.sh --with-debootstrap

image: venv host-tools
	@hack/timed.sh image hack/build-image.sh

kind-tools: controlplane-bins
	@hack/timed.sh kind-tools hack/build-kind-tools.sh

# The node image's Debian roots are network-bound debootstraps: they run while Go compiles.
kind-roots: host-tools
	@hack/timed.sh kind-roots hack/build-kind-node.sh --roots

kind-node: kind-tools kind-roots
	@hack/timed.sh kind-node hack/build-kind-node.sh

member-images: image llama-server
	@hack/timed.sh member-images hack/build-image.sh --all

# What enforces NetworkPolicies in the kind tier (docs/network.md): kube-router, built here.
network-policies: host-tools
	@hack/timed.sh network-policies hack/build-network-policies.sh

# The kind tier's real Prometheus (docs/alerts.md): the server, prometheus-operator and its config
# reloader built from their Go modules, as images; the operator's CRDs with them.
monitoring-images: host-tools
	@hack/timed.sh monitoring-images hack/build-monitoring-images.sh

kind-prereqs: kind-node member-images network-policies monitoring-images

# What the local tier (make test) needs, and every build CI needs; `make -j6` runs the
# independent ones at once.
local-prereqs: venv controlplane-bins jaeger-bin llama-server helm-bin promtool-bin \
	prometheus-operator-crds

ci-prereqs: local-prereqs kind-prereqs

# .ci/run on a clean clone of HEAD with the caches moved aside (hack/ci-fresh.sh says which).
ci-fresh:
	hack/ci-fresh.sh

kind-up: kind-node
	hack/kind-up.sh

deploy: kind-node image
	hack/deploy.sh

undeploy:
	hack/deploy.sh --delete

kind-down:
	@tools=$$(hack/build-kind-tools.sh 2>/dev/null | tail -n 1); \
	  if $$tools/kind get clusters 2>/dev/null | grep -qx "$${KIND_CLUSTER:-modelpool}"; then \
	    $$tools/kind delete cluster --name "$${KIND_CLUSTER:-modelpool}"; \
	  else echo "no kind cluster $${KIND_CLUSTER:-modelpool}"; fi

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
