#!/usr/bin/env bash
# make collection-check: the repository as an operator gets it, the Ansible collection vllm_deploy.fleet.
# Build it, install it (offline), take its Python package from the installed copy, then, in an
# "operator repository" that knows nothing of this checkout, use it by FQCN names only: syntax-check
# its playbooks and run its validation role (--check, localhost) on a good and a bad inventory.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
BIN="$(cd "$(dirname "$PY")" && pwd)"   # absolute: the check runs in temp dirs
PY="$BIN/$(basename "$PY")"
WORK="$(mktemp -d /tmp/vllm-collection-check.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
# Nothing of the checkout may leak in: its ansible.cfg (collections_path links back here), its package.
unset ANSIBLE_CONFIG ANSIBLE_COLLECTIONS_PATH ANSIBLE_COLLECTIONS_PATHS PYTHONPATH
cd "$WORK"

step() { echo "== collection-check: $*"; }
fail() { echo "collection-check: FAILED: $*" >&2; exit 1; }

step "roles name the filters by FQCN"
"$PY" "$ROOT/scripts/fqcn-filters.py" --check \
  || fail "short filter names above: from the installed collection they are not found (run scripts/fqcn-filters.py)"

step "build"
"$BIN/ansible-galaxy" collection build "$ROOT" --output-path "$WORK/build" >/dev/null
tarball=("$WORK"/build/vllm_deploy-fleet-*.tar.gz)
tar -tzf "${tarball[0]}" > "$WORK/contents"
for must in MANIFEST.json meta/runtime.yml pyproject.toml vllm_deploy/data/versions.yaml \
            roles/vllm_validate/tasks/main.yml playbooks/deploy.yml plugins/filter/vllm_instances.py plugins/plugin_utils/_filters.py \
            roles/vllm_serve/templates/vllm.service.j2; do
  grep -qx "$must" "$WORK/contents" || fail "the tarball lacks $must"
done
if grep -E '^(\.venv|\.cache|\.git|collections|molecule|tests)/' "$WORK/contents" | head -3 | grep .; then
  fail "the tarball carries files that are not content (see galaxy.yml build_ignore)"
fi
# The root playbooks (a YAML list of plays, unlike galaxy.yml) are a checkout's shims over playbooks/;
# in the collection they would import playbooks/ relative to nothing. Found, not listed, so a new shim
# without its build_ignore line fails here.
mapfile -t shims < <("$PY" - "$ROOT" <<'EOF'
import pathlib, sys, yaml
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.yml")):
    if isinstance(yaml.safe_load(path.read_text()), list):
        print(path.name)
EOF
)
[[ ${#shims[@]} -gt 0 ]] || fail "no root playbook found in $ROOT (the shim check would check nothing)"
for shim in "${shims[@]}"; do
  if grep -qx "$shim" "$WORK/contents"; then
    fail "the tarball carries the root playbook shim $shim (add it to galaxy.yml build_ignore)"
  fi
done
echo "   $(basename "${tarball[0]}"): $(wc -l < "$WORK/contents") entries, $(du -k "${tarball[0]}" | cut -f1) KiB"

step "install (offline: community.docker/general come with the ansible package)"
# Only the target path counts: a copy already in ~/.ansible/collections would make galaxy say
# "nothing to do" and install nothing here.
ANSIBLE_COLLECTIONS_PATH="$WORK/collections" "$BIN/ansible-galaxy" collection install --offline "${tarball[0]}" -p "$WORK/collections" >/dev/null 2>&1 \
  || ANSIBLE_COLLECTIONS_PATH="$WORK/collections" "$BIN/ansible-galaxy" collection install --offline "${tarball[0]}" -p "$WORK/collections" \
  || fail "ansible-galaxy collection install"
installed="$WORK/collections/ansible_collections/vllm_deploy/fleet"
[[ -f "$installed/MANIFEST.json" ]] || fail "nothing installed at $installed"

# What `pip install <installed collection dir>` puts on Ansible's path is that directory's vllm_deploy/:
# import it from there. (pip itself needs a build backend from an index, so it is not run here.)
step "the installed collection's own Python package serves the filters"
export PYTHONPATH="$installed"
where="$("$PY" -c 'import vllm_deploy; print(vllm_deploy.__file__)')"
[[ "$where" == "$installed/"* ]] || fail "vllm_deploy imports from $where, not from the installed collection"
grep -q '^name = "vllm-deploy"' "$installed/pyproject.toml" || fail "the collection lacks the package's pyproject.toml (pip install)"

step "an operator repository: FQCN names only"
mkdir -p "$WORK/operator"
cd "$WORK/operator"
cat > ansible.cfg <<EOF
[defaults]
collections_path = $WORK/collections
inventory = ./inventory.yml
force_valid_group_names = ignore
interpreter_python = auto_silent
retry_files_enabled = false
EOF
cat > inventory.yml <<'EOF'
gpu-nodes:
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
    vllm_models:
      tiny: {path: /srv/models/tiny, served_name: tiny}
  hosts:
    good-node:
      vllm_instances:
        - {name: a, model: tiny, gpus: [], port: 8000}
    bad-node:
      vllm_instances:
        - {name: a, model: tiny, gpus: [], port: 8000}
        - {name: b, model: tiny, gpus: [], port: 8000}
EOF
# The rebuild is playbooks/rebuild_node.yml: a collection playbook's name must be an identifier (no dash).
cat > site.yml <<'EOF'
---
- name: Deploy vLLM
  ansible.builtin.import_playbook: vllm_deploy.fleet.deploy
- name: Rebuild nodes after a driver upgrade
  ansible.builtin.import_playbook: vllm_deploy.fleet.rebuild_node
EOF
cat > validate.yml <<'EOF'
---
- name: Validate the inventory with the collection's role
  hosts: gpu-nodes
  gather_facts: false
  roles:
    - role: vllm_deploy.fleet.vllm_validate

- name: Render an ExecStart= line with the collection's filter
  hosts: gpu-nodes
  gather_facts: false
  tasks:
    - name: Quote an argv for systemd
      ansible.builtin.assert:
        that: (['--served-model-name', 'my model'] | vllm_deploy.fleet.vllm_systemd_argv) == '--served-model-name "my model"'
        quiet: true
EOF

"$BIN/ansible-playbook" --syntax-check site.yml >/dev/null || fail "ansible-playbook --syntax-check site.yml (import_playbook vllm_deploy.fleet.*)"
"$BIN/ansible-playbook" --syntax-check validate.yml >/dev/null || fail "ansible-playbook --syntax-check validate.yml"

step "validation role passes a good inventory (--check, localhost)"
out="$("$BIN/ansible-playbook" --check -l good-node validate.yml 2>&1)" || { echo "$out" | tail -20; fail "good inventory refused"; }
grep -Eq 'good-node +: ok=[1-9][0-9]* +changed=0 +unreachable=0 +failed=0' <<<"$out" || { echo "$out" | tail -20; fail "good-node recap"; }

step "validation role refuses a bad inventory with its one-line message"
if out="$("$BIN/ansible-playbook" --check -l bad-node validate.yml 2>&1)"; then
  echo "$out" | tail -20; fail "a duplicate port passed the validation"
fi
expected="bad-node: vllm_instances[1].port: port 8000 is already used by instance a — give each instance on a host its own port"
grep -qF "$expected" <<<"$out" || { echo "$out" | tail -20; fail "expected the message: $expected"; }
echo "   refused: $expected"
step "the filters an operator may call are documented (ansible-doc, from the installed collection)"
out="$(ANSIBLE_NOCOLOR=1 "$BIN/ansible-doc" -t filter vllm_deploy.fleet.vllm_diagnose 2>&1)" || { echo "$out" | tail -20; fail "ansible-doc -t filter vllm_deploy.fleet.vllm_diagnose"; }
grep -qF "> FILTER vllm_deploy.fleet.vllm_diagnose ($installed/plugins/filter/vllm_diagnose.yml)" <<<"$out" \
  || { echo "$out" | head -5; fail "ansible-doc did not read the installed collection's vllm_diagnose.yml"; }
echo "collection-check: passed (vllm_deploy.fleet built, installed, used by FQCN from an operator repository)"
