"""What a user checks after a Compose-mode deploy: two containers serve, pinned, locked down, kept.

Runs inside the node through testinfra; the node drives the host's Docker engine (sibling containers).
"""

import json
import re
from functools import partial

import pytest
from helpers import ansible_playbook, assert_secrets_file, converge_log, engine_http

API_KEY = "molecule-api-key-c0mp0se"
HF_TOKEN = "hf_moleculeComposeTokenMustNotLeak"
IMAGE_REPO = "vllm-deploy/img-compose"
UID = 10001

# What the scenario's inventory asks for.
INSTANCES = {
    "img-a": {"port": 18431, "gpus": ["0"]},
    "img-b": {"port": 18432, "gpus": ["1"]},
}


def container(host, name):
    """`docker inspect` of the instance's container (found by its Compose labels)."""
    project = f"vllm-{name}"
    ids = host.check_output(
        f"docker ps -q --filter label=com.docker.compose.project={project} "
        f"--filter label=com.docker.compose.service={project}"
    ).split()
    assert len(ids) == 1, f"expected one running container for {project}, found {ids}"
    return json.loads(host.check_output(f"docker inspect {ids[0]}"))[0]


# engine_http with this scenario's key; key=None sends none.
http = partial(engine_http, key=API_KEY)


@pytest.mark.parametrize("name", INSTANCES)
def test_both_instances_answer_a_real_completion(host, name):
    status, payload = http(host, "/v1/completions", INSTANCES[name]["port"],
                           {"model": "tiny-llama", "prompt": "The quick brown fox", "max_tokens": 5, "temperature": 0})
    assert status == 200, payload
    answer = json.loads(payload)
    assert answer["model"] == "tiny-llama"
    assert answer["usage"]["completion_tokens"] == 5


@pytest.mark.parametrize("name", INSTANCES)
def test_api_key_is_enforced(host, name):
    status, _ = http(host, "/v1/models", INSTANCES[name]["port"], key=None)
    assert status == 401


GATEWAY_PORT = 18480
GATEWAY_KEY = "molecule-gw-key-compose-41a9"
GATEWAY_CTL = "/usr/local/libexec/vllm-deploy/vllm-gateway-ctl"


def gateway_servers(host):
    """HAProxy's view of the two containers: {'backend/server': {status, inflight, total}}."""
    return json.loads(host.check_output(f"{GATEWAY_CTL} status"))["servers"]


def test_the_gateway_balances_over_both_compose_containers(host):
    """The fleet's one endpoint in Compose mode (issue 11): both containers in rotation, a completion
    through the gateway with a gateway key (never the engine's), and both containers take requests."""
    before = gateway_servers(host)
    assert sorted(before) == ["model_tiny-llama/mol-compose-node__img-a", "model_tiny-llama/mol-compose-node__img-b"], before
    assert all(s["status"] == "UP" for s in before.values()), before
    for _ in range(8):
        status, payload = engine_http(host, "/v1/completions", GATEWAY_PORT,
                                      {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 2}, key=GATEWAY_KEY)
        assert status == 200, payload
        assert json.loads(payload)["usage"]["completion_tokens"] == 2
    after = gateway_servers(host)
    assert all(after[name]["total"] > before[name]["total"] for name in before), (before, after)
    status, _ = engine_http(host, "/v1/completions", GATEWAY_PORT, {"model": "tiny-llama", "prompt": "Hi"}, key=API_KEY)
    assert status == 401  # the engines' own key is not a gateway key


@pytest.mark.parametrize("name", INSTANCES)
def test_owning_unit_is_active_and_enabled(host, name):
    unit = host.service(f"vllm-{name}")
    assert unit.is_running  # oneshot + RemainAfterExit: active (exited)
    assert unit.is_enabled


@pytest.mark.parametrize("name", INSTANCES)
def test_container_runs_the_built_image_as_non_root(host, name):
    info = container(host, name)
    assert info["State"]["Status"] == "running"
    assert info["Config"]["Image"].startswith(IMAGE_REPO + ":")
    assert info["Config"]["User"] == f"{UID}:{UID}"
    # PID 1 of the container is the engine (exec-form ENTRYPOINT): its real and effective UIDs.
    cmdline = host.check_output(f"docker exec {info['Id']} cat /proc/1/cmdline").replace("\0", " ")
    assert "vllm.entrypoints.openai.api_server" in cmdline
    status = host.check_output(f"docker exec {info['Id']} cat /proc/1/status")
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    assert uids == [str(UID)] * 4, status


@pytest.mark.parametrize("name", INSTANCES)
def test_container_is_healthy_and_bound_where_configured(host, name):
    info = container(host, name)
    assert info["State"]["Health"]["Status"] in ("healthy", "starting")  # start_period is long; /health is probed
    port = INSTANCES[name]["port"]
    assert info["HostConfig"]["PortBindings"] == {f"{port}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}
    assert info["HostConfig"]["ShmSize"] == 2 * 1024**3
    assert info["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert not any(e.startswith("CUDA_VISIBLE_DEVICES=") for e in info["Config"]["Env"])  # the device request pins


@pytest.mark.parametrize("name", INSTANCES)
def test_secrets_only_in_the_0600_env_file(host, name):
    assert_secrets_file(host, name, key=API_KEY)
    compose = host.file(f"/etc/vllm/compose/{name}/compose.yml").content_string
    assert API_KEY not in compose and HF_TOKEN not in compose
    assert f"/etc/vllm/{name}.env" in compose


def test_secrets_never_reach_the_ansible_output():
    text = converge_log()
    assert "Write each instance's secrets file" in text
    assert API_KEY not in text and HF_TOKEN not in text


@pytest.mark.parametrize("name", INSTANCES)
def test_compose_validates_exactly_the_pinned_gpus(host, name):
    """The GPU rendering of the same record: Compose's own parse lists exactly the instance's GPUs."""
    config = host.check_output(f"docker-compose -f /etc/vllm/gpu-check/{name}.yml config")
    import yaml  # noqa: PLC0415 - only this test needs it

    service = yaml.safe_load(config)["services"][f"vllm-{name}"]
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "device_ids": INSTANCES[name]["gpus"], "capabilities": ["gpu"]}]
    assert "CUDA_VISIBLE_DEVICES" not in service["environment"]


def test_image_is_multi_stage_slim(host):
    image = container(host, "img-a")["Config"]["Image"]
    labels = json.loads(host.check_output(f"docker image inspect -f '{{{{json .Config.Labels}}}}' {image}"))
    assert labels["io.vllm-deploy.vllm.version"] == "0.32.0"
    assert labels["io.vllm-deploy.torch.version"] == "2.13.0+cpu"
    # Text-only (the scenario asks for it): opencv is gone, Pillow stays, and both instances serve
    # completions from this image (test_both_instances_answer_a_real_completion).
    assert labels["io.vllm-deploy.text-only"] == "true"
    probe = host.run(f"docker run --rm --entrypoint python {image} -c 'import PIL, importlib.util as u; "
                     "print(u.find_spec(\"cv2\") is None)'")
    assert probe.rc == 0 and probe.stdout.strip() == "True", probe.stdout + probe.stderr
    # No pip cache and no wheelhouse made it into the runtime image.
    cmd = host.run(f"docker run --rm --entrypoint sh {image} -c "
                   "'test ! -e /tmp/wheelhouse && test ! -e /root/.cache/pip && test ! -e /home/vllm/.cache/pip'")
    assert cmd.rc == 0, cmd.stderr


def test_unchanged_inputs_do_not_rebuild_and_a_version_change_does(host):
    before = container(host, "img-a")["Config"]["Image"]
    image_id = host.check_output(f"docker image inspect -f '{{{{.Id}}}}' {before}")
    run = ansible_playbook("--tags", "image")
    assert run.returncode == 0, run.stdout[-3000:]
    assert "Build vllm-deploy/img-compose" in run.stdout and "changed=0" in run.stdout, run.stdout[-3000:]
    assert host.check_output(f"docker image inspect -f '{{{{.Id}}}}' {before}") == image_id
    # A different input gives a different tag (check mode: nothing is built).
    run = ansible_playbook("--tags", "image", "--check", "-e", '{"vllm_image_extra_packages": ["curl"]}')
    assert run.returncode == 0, run.stdout[-3000:]
    tags = set(re.findall(r"vllm-deploy/img-compose:[\w.+-]+", run.stdout))
    assert any(t != before and t.startswith("vllm-deploy/img-compose:0.32.0-cpu-") for t in tags), run.stdout[-3000:]
    # A vLLM version without its torch pair is refused by the compatibility gate before anything is built.
    run = ansible_playbook("--tags", "image", "--check", "-e", '{"vllm_versions_override": {"vllm": {"cpu": {"version": "0.32.1"}}}}')
    assert run.returncode != 0 and "vllm_torch_pair" in run.stdout + run.stderr, run.stdout[-3000:]


def _instances(**img_a_flags):
    """The scenario's instances, with img-a's flags changed."""
    return [
        {"name": name, "model": "tiny-llama", "gpus": [int(g) for g in spec["gpus"]], "port": spec["port"],
         "bind": "127.0.0.1", "flags": {"max_model_len": 256, "dtype": "float32", "optimization_level": 0, **(img_a_flags if name == "img-a" else {})}}
        for name, spec in INSTANCES.items()
    ]


def test_check_mode_names_the_restart_and_changes_nothing(host):
    compose_file = "/etc/vllm/compose/img-a/compose.yml"
    before, running = host.file(compose_file).sha256sum, container(host, "img-a")["Id"]
    run = ansible_playbook("--check", "--diff", "-e", json.dumps({"vllm_instances": _instances(max_model_len=128)}))
    out = " ".join(run.stdout.split())
    assert run.returncode == 0, out[-3000:]
    assert "vllm-img-a would be restarted with the new version and gated" in out, out[-3000:]
    assert "vllm-img-b would be restarted" not in out
    # --diff shows the Compose file's new command line
    assert any(line.lstrip().startswith("+") and '"--max-model-len", "128"' in line for line in run.stdout.splitlines()), out[-3000:]
    assert host.file(compose_file).sha256sum == before
    assert container(host, "img-a")["Id"] == running


def test_a_version_that_cannot_start_is_rolled_back_and_the_previous_serves(host):
    """Same gate and rollout as systemd mode: img-a's new version exits at start (max-model-len over the
    model's 2048 positions; the planner's refusal is switched off to let vLLM itself fail), Docker's
    restart policy turns that into a crash loop, the gate catches it, the container log is diagnosed,
    and the previous Compose file is restored and recreated: img-a serves as before, img-b untouched."""
    compose_file = "/etc/vllm/compose/img-a/compose.yml"
    before = host.file(compose_file).sha256sum
    other = container(host, "img-b")["Id"]
    run = ansible_playbook("-e", json.dumps({"vllm_plan_enforce": False, "vllm_instances": _instances(max_model_len=4096)}))
    out = " ".join((run.stdout + run.stderr).split())  # Ansible's output wraps long lines
    assert run.returncode != 0, out[-3000:]
    assert "img-a failed its gate at health" in out, out[-3000:]
    assert "max_len_over_model_limit" in out                       # diagnosed from the container's log
    assert "Rolled back: vllm-img-a serves the previous version again (gate passed)." in out, out[-3000:]
    assert "mol-compose-node__img-a drained:" in out, out[-3000:]      # out of rotation before the restart
    assert API_KEY not in out and HF_TOKEN not in out and GATEWAY_KEY not in out
    assert host.file(compose_file).sha256sum == before
    command = container(host, "img-a")["Config"]["Cmd"]
    assert command[command.index("--max-model-len") + 1] == "256"
    status, payload = http(host, "/v1/completions", INSTANCES["img-a"]["port"],
                           {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 2})
    assert status == 200 and json.loads(payload)["usage"]["completion_tokens"] == 2
    assert container(host, "img-b")["Id"] == other
    assert all(s["status"] == "UP" for s in gateway_servers(host).values())  # the previous version back in rotation


def test_rebuild_node_stops_a_compose_node_and_serves_it_again_through_the_same_chain(host):
    """rebuild-node.yml runs the deploy's own serve chain: on a Compose node that is the image (not
    rebuilt: its inputs did not change), models, plan, serve and the gate, never the venv."""
    image = container(host, "img-a")["Config"]["Image"]
    before = {name: container(host, name)["Id"] for name in INSTANCES}
    run = ansible_playbook(playbook="rebuild-node.yml")
    out = " ".join((run.stdout + run.stderr).split())
    assert run.returncode == 0, out[-4000:]
    assert "before the rebuild: units vllm-img-a.service, vllm-img-b.service" in out, out[-4000:]
    # Compose mode serves from the image: the Python stack's tasks are all skipped, no venv appears.
    stack = [chunk for chunk in out.split("TASK [python_stack : ")[1:]]
    assert stack and all(" ok: " not in chunk.split("TASK [", 1)[0] and " changed: " not in chunk.split("TASK [", 1)[0]
                         for chunk in stack), out[-4000:]
    assert not host.file("/opt/vllm/venv").exists
    assert "TASK [vllm_image : Build " in out and "changed: [mol-compose-node] => (item=" not in out.split("TASK [vllm_image : Build ", 1)[1].split("TASK [", 1)[0]
    assert out.count("warm-up completion returned") == 2, out[-4000:]
    assert "vLLM units serving again: vllm-img-a, vllm-img-b" in out
    for name, spec in INSTANCES.items():
        after = container(host, name)
        assert after["Id"] != before[name]                       # it was really stopped and started again
        assert after["Config"]["Image"] == image
        status, payload = http(host, "/v1/completions", spec["port"], {"model": "tiny-llama", "prompt": "Hi", "max_tokens": 2})
        assert status == 200 and json.loads(payload)["usage"]["completion_tokens"] == 2


def test_an_instance_that_left_the_inventory_is_taken_down_and_its_files_removed(host):
    """Same as systemd mode: img-b leaves the inventory; its container, owning unit, Compose project
    and secrets go, while img-a keeps serving. On this CPU node img-a computed on its share of the
    node's cores (vllm_deploy/cpus.py); alone it gets them all back (vLLM's own binding), so its
    container is replaced through the rollout, gated, and serves."""
    before = container(host, "img-a")
    share = [e for e in before["Config"]["Env"] if e.startswith("VLLM_CPU_OMP_THREADS_BIND=")]
    # the first share of the node's allowed cores beside img-b (on CI's lanes the node has one core)
    first_core = host.check_output("awk '/^Cpus_allowed_list/ {print $2}' /proc/1/status").replace("-", ",").split(",")[0]
    assert share and share[0].split("=", 1)[1].split(",")[0].split("-")[0] == first_core, (first_core, before["Config"]["Env"])
    only_a = [i for i in _instances() if i["name"] == "img-a"]
    run = ansible_playbook("-e", json.dumps({"vllm_instances": only_a}))
    assert run.returncode == 0, run.stdout[-3000:]
    ids = host.check_output("docker ps -aq --filter label=com.docker.compose.project=vllm-img-b").split()
    assert ids == []
    for gone in ("/etc/systemd/system/vllm-img-b.service", "/etc/vllm/compose/img-b", "/etc/vllm/img-b.env"):
        assert not host.file(gone).exists, gone
    assert host.run("systemctl is-enabled vllm-img-b.service").rc != 0
    after = container(host, "img-a")
    assert not [e for e in after["Config"]["Env"] if e.startswith("VLLM_CPU_OMP_THREADS_BIND=")], after["Config"]["Env"]
    assert after["Id"] != before["Id"]
    assert "img-a drained:" in " ".join(run.stdout.split())  # out of the gateway's rotation before its restart
    status, _ = http(host, "/v1/completions", INSTANCES["img-a"]["port"], {"model": "tiny-llama", "prompt": "Hi", "max_tokens": 1})
    assert status == 200
