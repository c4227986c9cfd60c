#!/usr/bin/env bash
# Check (and where we can, install) what vllm-deploy needs on the controller: Python 3.10+ with venv,
# the Docker engine (running), debootstrap, Compose, promtool, HAProxy, lua-cjson, rsync and nginx (staging/tests
# only). As root on Debian/Ubuntu it installs and starts what is missing and says so; otherwise it
# prints the command.
set -euo pipefail

need_pkgs=()
problems=()

python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
  || problems+=("Python 3.10 or newer is needed (python3 --version: $(python3 --version 2>&1))")
python3 -c 'import venv, ensurepip' 2>/dev/null || need_pkgs+=(python3-venv)
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_pkgs+=(debootstrap)
# promtool (make test-rules) ships in Debian's prometheus package.
command -v promtool >/dev/null 2>&1 || need_pkgs+=(prometheus)
# The gateway's unit test runs the real HAProxy with the role's Lua body reader (lua-cjson).
command -v haproxy >/dev/null 2>&1 || [[ -x /usr/sbin/haproxy ]] || need_pkgs+=(haproxy)
if command -v dpkg >/dev/null 2>&1 && ! dpkg -s lua-cjson >/dev/null 2>&1; then need_pkgs+=(lua-cjson); fi
# Weights reach the nodes from the controller's fleet cache with rsync (ansible.posix.synchronize);
# the gateway scenario's store is nginx on loopback.
command -v rsync >/dev/null 2>&1 || need_pkgs+=(rsync)
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need_pkgs+=(nginx-light)
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  need_pkgs+=(docker-compose)
fi

can_install=false
if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then can_install=true; fi

if ((${#need_pkgs[@]})); then
  if $can_install; then
    echo "prereqs: installing ${need_pkgs[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
    # Only its promtool is wanted here: the package's own server is not left running on the controller.
    if [[ " ${need_pkgs[*]} " == *" prometheus "* && -d /run/systemd/system ]]; then
      echo "prereqs: disabling the prometheus service the package started (only promtool is used here)"
      systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
    if [[ " ${need_pkgs[*]} " == *" nginx-light "* && -d /run/systemd/system ]]; then
      echo "prereqs: disabling the nginx service the package started (the tests run their own)"
      systemctl disable --now nginx >/dev/null 2>&1 || true
    fi
    if [[ " ${need_pkgs[*]} " == *" haproxy "* && -d /run/systemd/system ]]; then
      echo "prereqs: disabling the haproxy service the package started (the tests run their own)"
      systemctl disable --now haproxy >/dev/null 2>&1 || true
    fi
  else
    problems+=("missing packages: run  sudo apt-get install -y ${need_pkgs[*]}")
  fi
fi

if command -v docker >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
  if $can_install; then
    if [[ -d /run/systemd/system ]]; then
      echo "prereqs: starting the Docker engine (systemctl start docker)"
      systemctl start docker
    else
      echo "prereqs: starting the Docker engine (dockerd, log in /var/log/dockerd.log)"
      nohup dockerd >/var/log/dockerd.log 2>&1 &
    fi
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || problems+=("the Docker engine did not start: see /var/log/dockerd.log")
  else
    problems+=("the Docker engine is not running or not reachable: run  sudo systemctl start docker  (and add yourself to the docker group)")
  fi
fi

if ((${#problems[@]})); then
  printf 'prereqs: %s\n' "${problems[@]}" >&2
  exit 1
fi
echo "prereqs: ok (python $(python3 -c 'import platform; print(platform.python_version())'), docker $(docker version -f '{{.Server.Version}}' 2>/dev/null))"
