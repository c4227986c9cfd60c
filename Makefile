# vllm-deploy. Quick start on a fresh Debian/Ubuntu machine:  make staging   and   make test
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV      ?= .venv
PY        := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# The filters import vllm_deploy as an installed package: this checkout's copy wins over any other
# install (a venv shared between worktrees, an older `pip install`).
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
# Likewise the collection: this checkout's vllm_deploy.fleet (collections/ links back here) before an
# installed copy in ~/.ansible/collections, which would otherwise serve older filters to every run.
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/collections:$(HOME)/.ansible/collections:/usr/share/ansible/collections
NODE_IMAGE ?= vllm-deploy/node:bookworm
# Molecule scenarios mount $(CURDIR)/.cache/wheelhouse; staging honours WHEELHOUSE.
WHEELHOUSE ?= $(CURDIR)/.cache/wheelhouse
export NODE_IMAGE WHEELHOUSE
SCENARIOS ?= default resilience driver-upgrade compose gateway multinode
# `make test` runs two lanes at once, each on its own half of the cores (scripts/test-all.sh), each a
# list of checks (make targets) and scenarios run in order: lane 1 opens with the short checks (82 s, while the
# node image with vLLM is baked beside the lanes: default and every scenario after it boot that image), then
# default, resilience, driver-upgrade; lane 2 with compose (the bare image: it builds its own vLLM image), then
# multinode, then the unit tests (on every core: their slowest, the gateway failover, mostly waits on apt in its
# nodes). multinode's two ranks share lane 2's core (447 s alone on one core, 368 s on two: it waits on its ranks
# more than it computes). A fresh clone's run on a 2-core Xeon with AMX (3461 s, 2026-12-05) had the unit tests
# opening lane 1, which then ended 321 s after lane 2 (lane 1: 2358 s, lane 2: 2037 s); in this order (and with the
# helpers copied once per run) the next run's lanes ended after 1899 s and 1827 s, the baked image rebuilt beside
# them (212 s, default waited 131 s for it). The scenarios named in neither lane need every core and run alone
# after (gateway: one node per core under load).
LANE1 ?= test-rules lint syntax collection-check default resilience driver-upgrade check-vllm-args
LANE2 ?= compose multinode test-unit
# Throwaway venv (outside the repo) holding the pinned vLLM whose argument list is dumped.
VLLM_ARGS_VENV ?= /var/tmp/vllm-args-venv
STAGING   := -i inventory/staging/hosts.yml

.PHONY: help setup prereqs node-image node-image-vllm wheelhouse staging staging-down test test-unit test-rules lint syntax collection-check molecule \
        bench-deploy bench-rollout bench-planner bench-diagnose bench-diagnose-blind bench-diagnose-forward bench-diagnose-readers bench-inputs bench-image bench-gateway bench-routing bench-weights python-base vllm-args check-vllm-args

help:  ## List the targets
	@grep -hE '^[a-z%-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

prereqs:  ## Check (as root on Debian/Ubuntu: install and start) Docker, debootstrap, Compose, python3-venv, haproxy, lua-cjson
	@bash scripts/prereqs.sh

$(VENV)/.installed: requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -e .
	touch $@

setup: prereqs $(VENV)/.installed  ## Prerequisites + .venv with pinned ansible, molecule, linters and vllm_deploy
	@echo "setup: ready ($$($(VENV)/bin/ansible --version | sed -n 1p))"

node-image: setup  ## Build the local Debian 12 systemd node image (debootstrap; cached)
	@bash scripts/node-image.sh

# The scenarios that do not test a bare node's install (their molecule.yml names NODE_IMAGE_VLLM) boot
# from the node image with the pinned vLLM stack already installed by role python_stack.
NODE_IMAGE_VLLM ?= vllm-deploy/node:bookworm-vllm
export NODE_IMAGE_VLLM
node-image-vllm: node-image wheelhouse  ## The node image with the pinned CPU vLLM stack installed by role python_stack (cached)
	@bash scripts/node-image-vllm.sh

python-base: setup  ## Build a local stand-in for python:3.11-slim-bookworm (bench-image BASE=...; cached)
	@bash scripts/python-base.sh

wheelhouse: setup  ## Fill .cache/wheelhouse with the pinned CPU vLLM stack (offline node installs)
	@bash scripts/wheelhouse.sh "$(WHEELHOUSE)"

staging: node-image wheelhouse  ## Two local container nodes serving a real vLLM (CPU build, tiny model) behind one gateway
	ansible-playbook $(STAGING) playbooks/staging-up.yml
	ansible-playbook $(STAGING) deploy.yml -l gpu-nodes:vllm_gateway
	@$(PY) scripts/staging_endpoints.py inventory/staging

staging-down:  ## Remove the staging nodes
	ansible-playbook $(STAGING) playbooks/staging-down.yml

test:  ## Everything CI runs: unit tests, alert-rule tests, linters, syntax check, collection check, vLLM's argument list, molecule scenarios; then each part's time
	@SCENARIOS="$(SCENARIOS)" LANE1="$(LANE1)" LANE2="$(LANE2)" bash scripts/test-all.sh

# On every core (pytest-xdist); PYTEST_WORKERS=0 runs them in one process.
PYTEST_WORKERS ?= auto
test-unit: setup  ## pytest: planner, nvidia-smi parsing, diagnosis, compatibility, instance records (on every core)
	$(PY) -m pytest tests/unit -q -n $(PYTEST_WORKERS) --dist loadgroup

# The rules file is a template (thresholds from the inventory): rendered with the role's defaults,
# which tests/promtool/vllm-deploy.test.yml assumes. promtool comes with Debian's prometheus package.
RULES_OUT := tests/promtool/.rendered/vllm-deploy.rules.yml
test-rules: setup  ## promtool check + unit tests of every alert rule (tests/promtool)
	@mkdir -p $(dir $(RULES_OUT))
	ansible-playbook tests/promtool/render.yml -e rules_out=$(CURDIR)/$(RULES_OUT)
	promtool check rules $(RULES_OUT)
	promtool test rules tests/promtool/vllm-deploy.test.yml

lint: setup  ## yamllint + ansible-lint (production profile)
	yamllint -s .
	ansible-lint --profile production

syntax: setup  ## ansible-playbook --syntax-check on every playbook
	for p in deploy.yml playbooks/*.yml; do ansible-playbook $(STAGING) --syntax-check $$p || exit 1; done

collection-check: setup  ## Build + install the collection vllm_deploy.fleet, use it by FQCN from a scratch operator repo (offline)
	PY=$(PY) bash scripts/collection-check.sh

# Read in the node image with the vLLM stack baked in (no second install of it); VLLM_ARGS_IMAGE= (empty)
# reads it in a throwaway venv ($(VLLM_ARGS_VENV)) installed from the wheelhouse instead.
VLLM_ARGS_IMAGE ?= $(NODE_IMAGE_VLLM)
VLLM_ARGS_FROM = $(if $(VLLM_ARGS_IMAGE),--image $(VLLM_ARGS_IMAGE),--venv $(VLLM_ARGS_VENV) --wheelhouse $(WHEELHOUSE))
vllm-args: $(if $(VLLM_ARGS_IMAGE),node-image-vllm,wheelhouse)  ## Dump the pinned vLLM's server arguments into vllm_deploy/data/vllm-args (what validation checks flags against)
	$(PY) scripts/vllm_args.py $(VLLM_ARGS_FROM)

check-vllm-args: $(if $(VLLM_ARGS_IMAGE),node-image-vllm,wheelhouse)  ## Fail when vllm_deploy/data/vllm-args differs from the pinned vLLM's own argument list
	$(PY) scripts/vllm_args.py $(VLLM_ARGS_FROM) --check

molecule: node-image-vllm  ## Molecule scenarios on local Docker (SCENARIOS="default ...")
	@failed=""; for s in $(SCENARIOS); do start=$$(date +%s); molecule test -s $$s || failed="$$failed $$s"; \
	echo "scenario $$s: $$(( $$(date +%s) - start )) s"; done; \
	if [ -n "$$failed" ]; then echo "molecule: failed scenarios:$$failed"; exit 1; fi; echo "molecule: all scenarios passed: $(SCENARIOS)"

bench-deploy: node-image wheelhouse  ## Deploy timings on fresh staging nodes (prints figures)
	$(PY) scripts/bench_deploy.py

bench-image: node-image wheelhouse  ## Slim, text-only and naive vLLM images: sizes, layers, cold start (GPU=1: CUDA build too)
	$(PY) scripts/bench_image.py

bench-gateway: staging  ## Gateway vs straight to an engine on staging: median/p99 one-token latency, streaming tokens/s
	$(PY) scripts/bench_gateway.py inventory/staging

bench-routing: staging  ## least_conn vs session vs prefix routing on staging: prefix-cache hit rate, TTFT p50/p99, tokens/s, largest instance share, ratios
	$(PY) scripts/bench_routing.py inventory/staging $(if $(ROUTING_VARS),--fleet-vars $(ROUTING_VARS)) $(ROUTING_ARGS)

bench-rollout: staging  ## A fleet-wide change rolled out on staging under load: each instance's time out of rotation, the rollout's time; a 100x4 fleet's plan
	$(PY) scripts/bench_rollout.py inventory/staging

bench-planner: setup  ## Planner vs real vLLM startup logs (tests/fixtures/calibration)
	$(PY) scripts/bench_planner.py

bench-diagnose: setup  ## Diagnosis accuracy on the collected failure logs, and on the held-out third
	$(PY) scripts/bench_diagnose.py

bench-diagnose-blind: setup  ## Diagnosis on the blind hold-out: development figures and misses; blind third totals only
	$(PY) scripts/bench_diagnose_blind.py

bench-diagnose-forward: setup  ## Each round's measuring rules (from git history) on every later round: does tuning carry forward?
	$(PY) scripts/bench_diagnose_forward.py

bench-diagnose-readers: setup  ## Three readers of the blind thirds' logs alone, and a relabeler, against the labels and the rules
	$(PY) scripts/bench_diagnose_readers.py

# Rounds 2 to 20, each in its folder tests/fixtures/vllm-failures-blindN (make bench-diagnose-blind2 ... -blind20).
bench-diagnose-blind%: setup  ## The same on round N's blind hold-out, N = 2 ... 20 (tests/fixtures/vllm-failures-blindN)
	@test -d tests/fixtures/vllm-failures-blind$* || { echo "no blind round $* (tests/fixtures/vllm-failures-blind$*)"; exit 2; }
	$(PY) scripts/bench_diagnose_blind.py tests/fixtures/vllm-failures-blind$*

bench-inputs: setup  ## diagnose / gpus on generated 50 MiB inputs (many lines, one line; file and stdin): prints times
	$(PY) scripts/bench_inputs.py

# SIZE_MIB=64 for a quick look; the issue's figures are for the default 1 GiB.
SIZE_MIB ?= 1024
bench-weights: node-image  ## A 1 GiB url model to 2 nodes: bytes fetched / size, distribution / plain rsync, no-op re-run / full re-hash
	$(PY) scripts/bench_weights.py --size-mib $(SIZE_MIB)
