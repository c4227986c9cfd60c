#!/usr/bin/env bash
# `make test`: every part CI runs, then each part's wall time (also when a part failed).
#
# Order: setup, node image and wheelhouse first (everything needs them). Then, beside the lanes, the
# node image with the vLLM stack baked in (scripts/node-image-vllm.sh: role python_stack on a bare
# node, so every run proves the install on a bare node), which the scenarios that do not test the
# install in a Compose image boot from (they wait for it), and which check-vllm-args reads vLLM's
# argument list in. Then two lanes at once, each with its own share of the machine's cores (on CI's 2
# cores: one each). LANE1 and LANE2 (Makefile) list what each runs in order, checks (make targets)
# and scenarios: lane 1 starts with the short checks while the image is baked, then default, which boots
# it, and ends with check-vllm-args (vLLM's argument list read in the baked image); lane 2 starts with
# compose, whose node boots the bare image and builds its own vLLM image, then multinode, then the unit tests.
# Each lane's nodes are pinned to its cores (MOLECULE_NODE_CPUS, read by molecule/shared/create.yml),
# so a busy engine in one lane never takes the other lane's core. A scenario spends about half its
# time on one core (Python imports, one engine start after another, waits): measured on resilience's
# verify, the machine's two cores were 45 % idle. Last, one at a time on every core, the scenarios
# that need more than one (those in neither lane: the gateway's rollout under load puts one node on
# each core).
#
# Every part runs whatever the others did; the run fails if any part failed.
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
  # Its output is kept too: a failed part's failing tests are named again at the very end (CI shows the tail).
  "$@" 2>&1 | tee "$work/log.${name// /-}"
  rc=${PIPESTATUS[0]}
  printf '%-36s %6d s  %s\n' "$name${LANE:+ ($LANE)}" $(($(date +%s) - t)) "$([[ $rc == 0 ]] && echo ok || echo "FAILED (exit $rc)")" >>"$work/rows"
  ((rc == 0)) || echo "$name" >>"$work/failed"
  return $rc
}
summary() {
  echo "== time per part"
  [[ -f $work/rows ]] && sed 's/^/  /' "$work/rows"
  printf '  %-36s %6d s\n' "total" $(($(date +%s) - start))
  local name log
  [[ -s $work/failed ]] && while read -r name; do  # what failed in each failed part: pytest's and Ansible's own
    log=$work/log.${name// /-}                      # lines naming it, else the part's last lines
    [[ -f $log ]] || continue
    echo "== failed in $name"
    { grep -E '^(FAILED|ERROR) |^fatal: |^failed: |^E  ' "$log" || tail -n 8 "$log"; } | tail -n 10 | cut -c1-300
  done <"$work/failed"
}
bake() {  # the node image with the vLLM stack in place (scripts/node-image-vllm.sh); its outcome in $work/baked
  part "node-image-vllm" make --no-print-directory node-image-vllm
  echo $? >"$work/baked"
}
baked() {  # wait for the baked node image; false (and a line) when it failed
  until [[ -s $work/baked ]]; do sleep 2; done
  [[ $(cat "$work/baked") == 0 ]] && return 0
  echo "== test: not run: the node image with vLLM (node-image-vllm) failed"
  return 1
}
run() {  # run ENTRY...: each one, whatever the others did. A name under molecule/ is a scenario, any other a
  # make target (a check). A scenario that boots the baked image, and check-vllm-args (vLLM's argument
  # list is read in it), wait for the image.
  local s
  for s in "$@"; do
    if [[ -d molecule/$s ]]; then
      if grep -q NODE_IMAGE_VLLM "molecule/$s/molecule.yml" && ! baked; then
        echo "molecule $s" >>"$work/failed"
        continue
      fi
      part "molecule $s" molecule test -s "$s"
    elif [[ $s == check-vllm-args ]] && ! baked; then
      echo "$s" >>"$work/failed"
    else
      part "$s" make --no-print-directory "$s"
    fi
  done
}
stamp() {  # stamp PREFIX: each line of stdin with the time it arrived and PREFIX (the log reads as a profile)
  # bash's read takes a line as soon as it is written (mawk reads its input in blocks: stamps came minutes late)
  local line
  while IFS= read -r line || [[ -n $line ]]; do printf '%(%H:%M:%S)T %s%s\n' -1 "$1" "$line"; done
}
wanted() {  # the entries of "$@" to run: every check, and the scenarios SCENARIOS lists
  local s
  for s in "$@"; do [[ ! -d molecule/$s || " ${SCENARIOS:-} " == *" $s "* ]] && echo "$s"; done
}

# The slowest tests of each pytest run (unit tests, each scenario's verify), after its results.
export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }--durations=12"
# Each line leaves its program when written, so its time stamp is when it happened (Python buffers a pipe).
export PYTHONUNBUFFERED=1

for target in setup node-image wheelhouse; do
  part "$target" make --no-print-directory "$target" || exit 1
done

mapfile -t lane1 < <(wanted ${LANE1:-})
mapfile -t lane2 < <(wanted ${LANE2:-})
mapfile -t serial < <(for s in $SCENARIOS; do [[ " ${LANE1:-} ${LANE2:-} " == *" $s "* ]] || echo "$s"; done)
cpus=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)

if [[ ${LANES:-2} == 0 ]] || (($(nproc) < 2)); then
  bake
  run "${lane1[@]}" "${lane2[@]}" "${serial[@]}"
else
  # Each lane's share of the cores, as staging splits them between its nodes (vllm_deploy/cpus.py).
  share() { python -c "from vllm_deploy.cpus import node_share; print(node_share('$cpus', 2, $1))"; }
  cpus1=$(share 0) cpus2=$(share 1)
  echo "== test: two lanes at once: lane 1 on cores $cpus1 (${lane1[*]}), lane 2 on cores $cpus2 (${lane2[*]})"
  # Each line carries its lane; a lane's own output stays in order. The baked node image is built
  # beside them (its pip install on whichever core is free); the scenarios that boot it wait for it.
  (bake 2>&1 | stamp '[bake] ') &
  (LANE="lane 1" MOLECULE_NODE_CPUS=$cpus1 run "${lane1[@]}" 2>&1 | stamp '[lane 1] ') &
  pid1=$!
  (LANE="lane 2" MOLECULE_NODE_CPUS=$cpus2 run "${lane2[@]}" 2>&1 | stamp '[lane 2] ') &
  pid2=$!
  wait "$pid1" "$pid2"
  echo "== test: lanes done; now on every core: ${serial[*]}"
  run "${serial[@]}" 2>&1 | stamp ''
fi

if [[ -s $work/failed ]]; then
  echo "make test: failed: $(paste -sd' ' "$work/failed")"
  exit 1
fi
echo "molecule: all scenarios passed: ${SCENARIOS}"
