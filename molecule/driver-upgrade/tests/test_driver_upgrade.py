"""What an operator checks around a driver upgrade: pinned and held before, refused when impossible,
nothing changed by --check, upgraded and held again by rebuild-node.yml, vLLM serving again.

Runs in file order: the node's state before the upgrade first, then rebuild-node.yml (driven here
with ansible-playbook, as an operator would), then the state after it. Every test takes testinfra's
`host` fixture: pytest keeps file order only among tests parametrized alike.
"""

import json

import pytest
import helpers

OLD = "535.261.03-1"             # bookworm non-free
NEW = "535.309.01-0+deb12u1"     # bookworm-security non-free
DRIVER_PACKAGES = ["nvidia-smi", "libcuda1", "libnvidia-ml1", "nvidia-alternative"]
API_KEY = "molecule-api-key-drv-3c9e"
UNIT = "vllm-tiny"


def playbook(name, *extra, timeout=900):
    run = helpers.ansible_playbook(*extra, playbook=name, timeout=timeout)
    return run, run.output


def pin(debian_version, **more):
    return json.dumps({"vllm_versions_override": {"nvidia_driver": {"source": "debian", "debian_version": debian_version},
                                                  **more}})


def installed(host, package):
    return host.check_output("dpkg-query -W -f='${Version}' %s", package)


def held(host):
    return set(host.check_output("apt-mark showhold").split())


def node_state(host):
    return {
        "versions": {p: installed(host, p) for p in DRIVER_PACKAGES},
        "held": held(host),
        "apt_pin": host.file("/etc/apt/preferences.d/vllm-deploy-nvidia-driver").sha256sum,
        "unit_pid": host.check_output(f"systemctl show -p MainPID --value {UNIT}"),
    }


def completion(host):
    return helpers.completion(host, 8000, key=API_KEY, prompt="The quick brown fox", max_tokens=4, temperature=0)


def converge_log():
    return helpers.converge_log(joined=True)


# --- after converge: 535.261.03 pinned and held, vLLM serving ------------------------------------

def test_converge_installed_the_pinned_driver(host):
    for package in DRIVER_PACKAGES:
        assert installed(host, package) == OLD, package


def test_driver_packages_are_held(host):
    assert set(DRIVER_PACKAGES) <= held(host)


def test_apt_would_not_move_the_driver(host):
    # bookworm-security offers 535.309.01: a plain upgrade (what unattended-upgrades runs) must leave it.
    assert NEW in host.check_output("apt-cache policy nvidia-smi")
    simulated = host.check_output("apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    moved = [line for line in simulated.splitlines() if line.startswith("Inst ") and "nvidia" in line]
    assert moved == []


def test_nouveau_is_blacklisted(host):
    conf = host.file("/etc/modprobe.d/vllm-deploy-blacklist-nouveau.conf")
    assert conf.mode == 0o644
    assert "blacklist nouveau" in conf.content_string


def test_kernel_steps_were_skipped_with_the_reason(host):
    log = converge_log()
    assert "SKIPPED in a docker container: DKMS build and kernel headers" in log
    assert "TASK [nvidia_driver : Reboot into" not in log


def test_nvidia_smi_fails_as_in_any_container(host):
    # The user-space driver is real, the kernel module is the host's: NVML cannot initialise.
    smi = host.run("nvidia-smi")
    assert smi.rc != 0
    assert "NVML" in smi.stdout + smi.stderr or "NVIDIA driver" in smi.stdout + smi.stderr


def test_users_docker_settings_are_kept_and_the_runtime_added(host):
    config = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert config["log-opts"] == {"max-size": "10m", "max-file": "3"}
    assert config["registry-mirrors"] == ["https://mirror.example.internal"]
    assert config["runtimes"]["crun"] == {"path": "/usr/bin/crun"}
    assert config["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime", "args": []}
    assert "SKIPPED CDI spec generation: /usr/bin/nvidia-ctk is not installed" in converge_log()


def test_vllm_serves_before_the_upgrade(host):
    assert host.service(UNIT).is_running
    assert completion(host)["usage"]["completion_tokens"] == 4


# --- impossible pins are refused before anything changes ---------------------------------------

@pytest.mark.parametrize("play, extra, rule", [
    # Debian's 535 with NVIDIA's CUDA 13.0 toolkit: the driver is too old for the pinned CUDA.
    ("rebuild-node.yml",
     ["-e", pin(NEW, cuda_toolkit={"source": "nvidia_repo", "version": "13.0"}), "-e", "cuda_toolkit_install=true"],
     "cuda_toolkit_vs_driver"),
    # The GPU build's torch carries CUDA 13.0: Debian's 535 cannot run it.
    ("deploy.yml", ["-e", pin(OLD), "-e", "vllm_engine=gpu"], "pinned_driver_vs_torch_cuda"),
], ids=["toolkit-13-on-535", "cuda13-torch-on-535"])
def test_impossible_pin_is_refused_before_any_change(host, play, extra, rule):
    before = node_state(host)
    run, output = playbook(play, *extra)
    assert run.returncode != 0
    assert f"[{rule}] {rule}:" in output              # names the broken rule
    assert "Fix:" in output                            # and the way out
    assert "nvidia_driver :" not in output and "Stop the node's vLLM instances" not in output
    assert node_state(host) == before


def test_check_diff_shows_the_upgrade_and_changes_nothing(host):
    before = node_state(host)
    run, output = playbook("rebuild-node.yml", "--check", "--diff", "-e", pin(NEW))
    assert run.returncode == 0, output[-4000:]
    assert f"+Pin: version {NEW}" in output and f"-Pin: version {OLD}" in output
    assert "Install NVIDIA driver " + NEW in output
    assert node_state(host) == before


# --- rebuild-node.yml with the new pin --------------------------------------------------------

@pytest.fixture(scope="module")
def rebuild():
    run, output = playbook("rebuild-node.yml", "-e", pin(NEW))
    return run, output


def test_rebuild_succeeds_and_reports(host, rebuild):
    run, output = rebuild
    assert run.returncode == 0, output[-6000:]
    assert "drv-upgrade-node1 before the rebuild: units vllm-tiny.service" in output
    assert f"driver {OLD} → {NEW}" in output


def test_rebuild_installed_the_new_driver_and_held_it(host, rebuild):
    for package in DRIVER_PACKAGES:
        assert installed(host, package) == NEW, package
    assert set(DRIVER_PACKAGES) <= held(host)
    assert f"Pin: version {NEW}" in host.file("/etc/apt/preferences.d/vllm-deploy-nvidia-driver").content_string


def test_rebuild_skipped_the_kernel_steps_with_the_reason(host, rebuild):
    _, output = rebuild
    assert "SKIPPED in a docker container: DKMS build and kernel headers" in output
    assert "Reboot into NVIDIA driver" not in output


def test_rebuild_stopped_vllm_and_passed_the_warm_up_gate(host, rebuild):
    _, output = rebuild
    assert "Stop the node's vLLM instances" in output
    assert "warm-up completion returned" in output
    assert host.service(UNIT).is_running
    assert completion(host)["usage"]["completion_tokens"] == 4


def test_rebuild_left_the_python_stack_alone(host, rebuild):
    # The CUDA/torch pin did not change: the venv is not reinstalled.
    _, output = rebuild
    assert "TASK [python_stack : Install vLLM and torch, pinned together" in output
    section = output.split("TASK [python_stack : Install vLLM and torch, pinned together", 1)[1].split("TASK [", 1)[0]
    assert "skipping" in section and "changed:" not in section


def test_deploy_after_the_rebuild_changes_nothing(host, rebuild):
    run, output = playbook("deploy.yml", "-e", pin(NEW))
    assert run.returncode == 0, output[-4000:]
    recap = output.rsplit("PLAY RECAP", 1)[1]
    changed = [chunk.split("]")[0] for chunk in output.split("TASK [")[1:] if "changed:" in chunk]
    assert "changed=0" in recap and "failed=0" in recap, (recap, changed)


# --- a failing rebuild restores the node and names the step -------------------------------------

def test_failed_rebuild_restores_the_node_and_names_the_step(host, rebuild):
    before = node_state(host)
    run, output = playbook("rebuild-node.yml", "-e", pin("535.999.99-1"))   # no such package version
    assert run.returncode != 0
    assert 'rebuild-node: drv-upgrade-node1 FAILED at step "driver upgrade and verification"' in output
    assert "The rollout stops here" in output
    assert f"Restored: driver {NEW}, started vllm-tiny.service" in output
    after = node_state(host)
    assert after["versions"] == before["versions"]            # still 535.309.01
    assert after["held"] >= set(DRIVER_PACKAGES)              # held again
    assert after["apt_pin"] == before["apt_pin"]              # pin file back to 535.309.01
    assert host.service(UNIT).is_running                      # the recorded instance was started again
