"""Role vllm_model on a real node container (the locally built node image, no vLLM needed): a model
marked `private: true` ends up owned by the service user and readable by it only; another model's
files are left as they were; a second run changes nothing."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from conftest import run_playbook

pytestmark = pytest.mark.playbook  # every test here runs ansible-playbook

NODE_IMAGE = os.environ.get("NODE_IMAGE", "vllm-deploy/node:bookworm")
PLAYBOOK = """\
- name: Models only
  hosts: all
  gather_facts: false
  vars:
    vllm_models:
      secret: {path: /srv/models/secret, private: true}
      open: {path: /srv/models/open}
    vllm_instances:
      - {name: s, model: secret, port: 8000}
      - {name: o, model: open, port: 8001}
  roles: [vllm_model]
"""


@pytest.fixture()
def node():
    name = f"vllm-unit-private-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "run", "-d", "--rm", "--name", name, "--entrypoint", "sleep", NODE_IMAGE, "600"],
                   check=True, capture_output=True, timeout=120)
    try:
        for model in ("secret", "open"):
            subprocess.run(["docker", "exec", name, "sh", "-c",
                            f"mkdir -p /srv/models/{model}/sub && echo '{{}}' > /srv/models/{model}/config.json"
                            f" && echo w > /srv/models/{model}/sub/model.safetensors && chmod -R u=rwX,go=rX /srv/models/{model}"],
                           check=True, timeout=60)
        yield name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=120)


def _play(tmp_path, node):
    return run_playbook(PLAYBOOK, "-e", "ansible_python_interpreter=/usr/bin/python3", tmp_path=tmp_path,
                        inventory=f"{node},", connection="community.docker.docker")


def _stat(node, path):
    return subprocess.run(["docker", "exec", node, "stat", "-c", "%U:%G %a", path], check=True, capture_output=True,
                          text=True, timeout=60).stdout.strip()


def test_private_weights_are_readable_by_the_service_user_only(tmp_path, node):
    rc, out = _play(tmp_path, node)
    assert rc == 0, out[-3000:]
    assert _stat(node, "/srv/models/secret") == "vllm:vllm 700"
    assert _stat(node, "/srv/models/secret/sub") == "vllm:vllm 700"
    assert _stat(node, "/srv/models/secret/sub/model.safetensors") == "vllm:vllm 600"
    assert _stat(node, "/srv/models/secret/config.json") == "vllm:vllm 600"
    assert _stat(node, "/srv/models/open/sub/model.safetensors") == "root:root 644"
    assert _stat(node, "/srv/models/open") == "root:root 755"
    rc, out = _play(tmp_path, node)
    assert rc == 0 and "changed=0" in out, out[-3000:]
