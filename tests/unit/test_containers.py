"""The instance record as Compose renders it: command, environment, device requests.

Records come from vllm_deploy.instances.build_instance (the same function the roles call), and the
Compose file from the real roles/vllm_serve/templates/compose.yml.j2; `docker-compose config` checks it
where present.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from vllm_deploy import containers, instances

REPO = Path(__file__).resolve().parents[2]

DEFAULTS = {"engine": "gpu", "bind": "127.0.0.1", "hf_home": "/var/lib/vllm/hf", "cache_root": "/var/lib/vllm/cache"}
MODEL = {"path": "/srv/models/qwen", "served_name": "qwen2.5-7b"}


def record(**inst):
    base = {"name": "qwen-0", "model": "qwen", "port": 8000, "gpus": [1, 3], "flags": {"max_model_len": 8192}}
    base.update(inst)
    return instances.build_instance(base, MODEL, "qwen", gpu_facts={}, plan=None, defaults=DEFAULTS)


@pytest.mark.parametrize(
    "inst, expected_tail",
    [
        pytest.param({}, ["--host", "0.0.0.0", "--port", "8000"], id="local-bind-becomes-container-wide"),
        pytest.param({"bind": "0.0.0.0", "port": 9000}, ["--host", "0.0.0.0", "--port", "9000"], id="all-interfaces"),
    ],
)
def test_container_args_drop_the_module_and_listen_container_wide(inst, expected_tail):
    rec = record(**inst)
    args = containers.container_args(rec)
    assert rec["argv"][:2] == ["-m", containers.ENTRYPOINT_MODULE]
    assert args[:2] == ["--model", "/srv/models/qwen"]
    assert "-m" not in args and containers.ENTRYPOINT_MODULE not in args
    i = args.index("--host")
    assert args[i:i + 4] == expected_tail
    assert args[args.index("--max-model-len") + 1] == "8192"


def test_container_args_refuse_another_module():
    rec = record()
    rec["argv"] = ["-m", "some.other.server", "--port", "8000"]
    with pytest.raises(ValueError, match="some.other.server"):
        containers.container_args(rec)


def test_container_env_drops_host_gpu_indexes_and_adds_the_health_port():
    rec = record()
    assert rec["env"]["CUDA_VISIBLE_DEVICES"] == "1,3"  # the systemd unit pins by host index
    env = containers.container_env(rec)
    assert "CUDA_VISIBLE_DEVICES" not in env  # inside the container the requested GPUs are 0..n-1
    assert env[containers.HEALTH_PORT_VAR] == "8000"
    assert env["HF_HOME"] == "/var/lib/vllm/hf"
    # Triton's kernel cache survives a recreate: it lives in the mounted VLLM_CACHE_ROOT, not $HOME.
    assert env["TRITON_CACHE_DIR"] == rec["env"]["VLLM_CACHE_ROOT"].rstrip("/") + "/triton"


@pytest.mark.parametrize("gpus, ids", [([1, 3], ["1", "3"]), (["GPU-8f1e"], ["GPU-8f1e"]), ([], [])])
def test_device_ids_are_strings(gpus, ids):
    assert containers.device_ids(record(gpus=gpus)) == ids


def render(rec, **compose):
    """roles/vllm_serve/templates/compose.yml.j2 with the same filters the role registers."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(REPO / "roles/vllm_serve/templates")), trim_blocks=True)
    env.filters.update({
        "to_json": json.dumps, "comment": lambda s: f"#\n# {s}\n#",
        "vllm_deploy.fleet.vllm_container_args": containers.container_args, "vllm_deploy.fleet.vllm_container_env": containers.container_env,
        "vllm_deploy.fleet.vllm_device_ids": containers.device_ids, "vllm_deploy.fleet.vllm_compose_escape": containers.compose_escape,
    })
    settings = {"image": "vllm-deploy/vllm:0.33.0-gpu-0123456789ab", "uid": 10001, "gid": 10001,
                "gpu_reservations": True, "shm_size": "2g", "ipc_host": False, "restart": "unless-stopped",
                "ulimits": {"memlock": -1, "nofile": 65536}, "env_file": "/etc/vllm/qwen-0.env"}
    settings.update(compose)
    return env.get_template("compose.yml.j2").render(instance=rec, compose=settings, ansible_managed="test")


def test_compose_file_requests_exactly_the_instance_gpus():
    doc = yaml.safe_load(render(record()))
    (name, service), = doc["services"].items()
    assert name == "vllm-qwen-0" and name != "vllm"
    assert service["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "device_ids": ["1", "3"], "capabilities": ["gpu"]}]
    assert service["ports"] == ["127.0.0.1:8000:8000"]
    assert service["user"] == "10001:10001"
    assert "/srv/models/qwen:/srv/models/qwen:ro" in service["volumes"]
    assert service["env_file"] == ["/etc/vllm/qwen-0.env"]
    assert service["shm_size"] == "2g"


def test_compose_file_without_reservations_or_gpus_has_no_device_request():
    assert "deploy" not in yaml.safe_load(render(record(), gpu_reservations=False))["services"]["vllm-qwen-0"]
    assert "deploy" not in yaml.safe_load(render(record(gpus=[])))["services"]["vllm-qwen-0"]


def test_compose_file_ipc_host_replaces_shm_size():
    service = yaml.safe_load(render(record(), ipc_host=True))["services"]["vllm-qwen-0"]
    assert service["ipc"] == "host" and "shm_size" not in service


@pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose is not installed")
def test_docker_compose_accepts_the_file_and_keeps_the_device_ids(tmp_path):
    (tmp_path / "qwen-0.env").write_text("VLLM_API_KEY=x\n")
    path = tmp_path / "compose.yml"
    path.write_text(render(record(), env_file=str(tmp_path / "qwen-0.env")))
    out = subprocess.run(["docker-compose", "-f", str(path), "config"], capture_output=True, text=True, check=True).stdout
    service = yaml.safe_load(out)["services"]["vllm-qwen-0"]
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["1", "3"]
