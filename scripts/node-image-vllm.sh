#!/usr/bin/env bash
# The node image with the pinned CPU vLLM stack already in place, put there by role python_stack
# itself (molecule/shared/bake-vllm.yml) on a node of the bare image, then committed. The scenarios
# that test something other than a bare node's install boot from it (their molecule.yml names
# NODE_IMAGE_VLLM): their converge runs the same role, finds the pinned versions in the venv and
# skips the install, which saves each node about a minute of pip and apt on CI's two cores.
# compose (it builds its own vLLM image) and staging keep the bare image; the bake itself is the install on a bare node.
# Cached: rebuilt when the bare image, the pins, role python_stack or vllm_common change (a label
# holds their digest). FORCE=1 rebuilds.
set -euo pipefail
cd "$(dirname "$0")/.."

base="${NODE_IMAGE:-vllm-deploy/node:bookworm}"
image="${NODE_IMAGE_VLLM:-vllm-deploy/node:bookworm-vllm}"
wheelhouse="${WHEELHOUSE:-$PWD/.cache/wheelhouse}"
key=$({
  docker image inspect -f '{{.Id}}' "$base"
  cat vllm_deploy/data/versions.yaml molecule/shared/bake-vllm.yml
  find roles/python_stack roles/vllm_common -type f | sort | xargs cat
} | sha256sum | cut -c1-16)
if [[ "${FORCE:-0}" != 1 && "$(docker image inspect -f '{{index .Config.Labels "vllm-deploy.bake"}}' "$image" 2>/dev/null)" == "$key" ]]; then
  echo "node image with vLLM: $image is current"
  exit 0
fi

name="vllm-deploy-bake-$$"
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
echo "node image with vLLM: role python_stack on a node of $base (about two minutes)"
# The flags of molecule/shared/create.yml: systemd as PID 1 without --privileged.
docker run -d --name "$name" --hostname bake --cap-add SYS_ADMIN --cgroupns=host \
  -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /run --tmpfs /run/lock \
  -v "$wheelhouse:/srv/wheelhouse:ro" "$base" /lib/systemd/systemd >/dev/null
# systemd-tmpfiles empties /tmp while it boots: Ansible puts its modules there only after the boot.
for _ in $(seq 60); do
  state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
  [[ $state == running || $state == degraded ]] && break
  sleep 1
done
ansible-playbook -i "$name," -c community.docker.docker molecule/shared/bake-vllm.yml
# As the bare image: no package lists (stale, so a node's first apt task updates), no machine id.
docker exec "$name" bash -c 'apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/journal/* /tmp/* \
  && touch -d 2000-01-01 /var/lib/apt/lists && : >/etc/machine-id'
docker commit -c 'CMD ["/lib/systemd/systemd"]' -c 'ENV container=docker' -c "LABEL vllm-deploy.bake=$key" \
  "$name" "$image" >/dev/null
echo "node image with vLLM: built $image ($(docker image inspect -f '{{.Size}}' "$image" | numfmt --to=iec))"
