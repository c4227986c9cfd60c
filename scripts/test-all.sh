#!/usr/bin/env bash
# `make test`: every part CI runs, then each part's wall time (also when a part failed).
#
# Order: setup, node image and wheelhouse first (everything needs them). Then, beside the lanes, the
# node image with the vLLM stack baked in (scripts/node-image-vllm.sh), which the scenarios that do
# not test a bare node's install boot from (they wait for it). Then two lanes at once,
# each with its own share of the machine's cores (on CI's 2 cores: one each): lane 1 and lane 2 hold
# the checks and the scenarios whose nodes are content with one core (LANE1, LANE2 from the
# Makefile); each of their nodes is pinned to its lane's cores (MOLECULE_NODE_CPUS, read by
# molecule/shared/create.yml), so a busy engine in one lane never takes the other lane's core. A
# scenario spends about half its time on one core (Python imports, one engine start after another,
# pip, waits): measured on resilience's verify, the machine's two cores were 45 % idle. Last, one at
# a time on every core, the scenarios that need more than one (SERIAL: the gateway's rollout under
# load puts one node on each core, multinode's two pipeline ranks talk across two nodes).
#
# A failing check stops its lane; every scenario runs, and the run fails if any part failed.
# SCENARIOS limits the scenarios run (the lanes keep only those it names). LANES=0 runs all in one lane.
set -uo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'summary; rm -rf "$work"' EXIT
start=$(date +%s)

part() {  # part NAME COMMAND...: run it, record its time and outcome
  local name=$1 t rc
  shift
  t=$(date +%s)
  echo "== test: $name"
  "$@"
  rc=$?
  printf '%-36s %6d s  %s\n' "$name${LANE:+ ($LANE)}" $(($(date +%s) - t)) "$([[ $rc == 0 ]] && echo ok || echo "FAILED (exit $rc)")" >>"$work/rows"
  ((rc == 0)) || echo "$name" >>"$work/failed"
  return $rc
}
summary() {
  echo "== time per part"
  [[ -f $work/rows ]] && sed 's/^/  /' "$work/rows"
  printf '  %-36s %6d s\n' "total" $(($(date +%s) - start))
}
checks() {  # the checks, in order; the first failure stops them
  local target
  for target in test-unit test-rules lint syntax collection-check check-vllm-args; do
    part "$target" make --no-print-directory "$target" || return 1
  done
}
bake() {  # the node image with the vLLM stack in place (scripts/node-image-vllm.sh); its outcome in $work/baked
  part "node-image-vllm" make --no-print-directory node-image-vllm
  echo $? >"$work/baked"
}
scenarios() {  # scenarios NAME...: each one, whatever the others did; one that boots the baked image waits for it
  local s
  for s in "$@"; do
    if grep -q NODE_IMAGE_VLLM "molecule/$s/molecule.yml"; then
      until [[ -s $work/baked ]]; do sleep 2; done
      if [[ $(cat "$work/baked") != 0 ]]; then
        echo "== test: molecule $s: not run, its node image (node-image-vllm) failed"
        echo "molecule $s" >>"$work/failed"
        continue
      fi
    fi
    part "molecule $s" molecule test -s "$s"
  done
}
wanted() {  # the names of "$@" that SCENARIOS lists
  local s
  for s in "$@"; do [[ " ${SCENARIOS:?} " == *" $s "* ]] && echo "$s"; done
}

for target in setup node-image wheelhouse; do
  part "$target" make --no-print-directory "$target" || exit 1
done

mapfile -t lane1 < <(wanted ${LANE1:-})
mapfile -t lane2 < <(wanted ${LANE2:-})
mapfile -t serial < <(for s in $SCENARIOS; do [[ " ${LANE1:-} ${LANE2:-} " == *" $s "* ]] || echo "$s"; done)
cpus=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)

if [[ ${LANES:-2} == 0 ]] || (($(nproc) < 2)); then
  bake
  checks
  scenarios "${lane1[@]}" "${lane2[@]}" "${serial[@]}"
else
  # Each lane's share of the cores, as staging splits them between its nodes (vllm_deploy/cpus.py).
  share() { python -c "from vllm_deploy.cpus import node_share; print(node_share('$cpus', 2, $1))"; }
  cpus1=$(share 0) cpus2=$(share 1)
  echo "== test: two lanes at once: lane 1 on cores $cpus1 (${lane1[*]}), lane 2 on cores $cpus2 (checks ${lane2[*]})"
  # Each line carries its lane; a lane's own output stays in order. The baked node image is built
  # beside them (its pip install on whichever core is free); the scenarios that boot it wait for it.
  (bake 2>&1 | sed -u 's/^/[bake] /') &
  (LANE="lane 1" MOLECULE_NODE_CPUS=$cpus1 scenarios "${lane1[@]}" 2>&1 | sed -u 's/^/[lane 1] /') &
  pid1=$!
  ( (export LANE="lane 2"; checks && MOLECULE_NODE_CPUS=$cpus2 scenarios "${lane2[@]}") 2>&1 | sed -u 's/^/[lane 2] /') &
  pid2=$!
  wait "$pid1" "$pid2"
  echo "== test: lanes done; now on every core: ${serial[*]}"
  scenarios "${serial[@]}"
fi

if [[ -s $work/failed ]]; then
  echo "make test: failed: $(paste -sd' ' "$work/failed")"
  exit 1
fi
echo "molecule: all scenarios passed: ${SCENARIOS}"
