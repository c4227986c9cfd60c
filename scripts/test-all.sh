#!/usr/bin/env bash
# `make test`: every part CI runs, one after another, then each part's wall time (also when a part
# failed). A failing check stops the run; the molecule scenarios all run, and the run fails if any did.
# SCENARIOS (from the Makefile) lists the scenarios.
set -uo pipefail
cd "$(dirname "$0")/.."

rows=()
start=$(date +%s)
part() {  # part NAME COMMAND...: run it, record its time and outcome
  local name=$1 t rc
  shift
  t=$(date +%s)
  echo "== test: $name"
  "$@"
  rc=$?
  rows+=("$(printf '%-26s %6d s  %s' "$name" $(($(date +%s) - t)) "$([[ $rc == 0 ]] && echo ok || echo "FAILED (exit $rc)")")")
  return $rc
}
summary() {
  echo "== time per part"
  printf '  %s\n' "${rows[@]}"
  printf '  %-26s %6d s\n' "total" $(($(date +%s) - start))
}
trap summary EXIT

for target in setup node-image wheelhouse test-unit test-rules lint syntax collection-check check-vllm-args; do
  part "$target" make --no-print-directory "$target" || exit 1
done
failed=()
for s in ${SCENARIOS:?}; do
  part "molecule $s" molecule test -s "$s" || failed+=("$s")
done
if ((${#failed[@]})); then
  echo "molecule: failed scenarios: ${failed[*]}"
  exit 1
fi
echo "molecule: all scenarios passed: ${SCENARIOS}"
