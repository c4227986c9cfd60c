"""make bench-deploy: what orchestration costs, measured on fresh staging nodes in one run.

Prints: first-deploy wall time and each node's first start → first completion (from the deploy's gate);
then, on one node with the same warm compile cache and back to back, the engine started by hand
(`python -m vllm.entrypoints.openai.api_server`, the unit's flags, environment and user) → first
completion vs the systemd unit restarted and gated → first completion, and their ratio (goal <= 1.3x);
the second (idempotent) run's wall time and its ratio to the first (goal <= 0.25x).
A benchmark, not a test: it prints figures.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INV = ["-i", str(REPO / "inventory/staging/hosts.yml")]
NODE = "staging-node1"


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, **kw)


def playbook(*args: str) -> tuple[float, str]:
    t0 = time.monotonic()
    run = sh(["ansible-playbook", *INV, *args])
    if run.returncode != 0:
        sys.exit(f"bench-deploy: ansible-playbook {' '.join(args)} failed:\n{run.stdout[-3000:]}{run.stderr[-2000:]}")
    return time.monotonic() - t0, run.stdout


def node(*cmd: str, check: bool = True) -> str:
    return sh(["docker", "exec", NODE, *cmd], check=check).stdout.strip()


def main() -> int:
    print("bench-deploy: fresh staging nodes")
    sh(["ansible-playbook", *INV, "playbooks/staging-down.yml"])
    playbook("playbooks/staging-up.yml")

    first, out = playbook("deploy.yml", "-l", "gpu-nodes")
    print(f"  first deploy: {first:.1f} s")
    gate = [float(s) for s in re.findall(r"first completion ([\d.]+)s after the \(re\)start", out)]
    second, out2 = playbook("deploy.yml", "-l", "gpu-nodes")
    print(f"  second run: {second:.1f} s")
    changed = sum(int(n) for n in re.findall(r"changed=(\d+)", out2))

    # The same engine by hand: stop the unit, run its ExecStart as the vllm user with the unit's environment.
    unit = "vllm-tiny"
    exec_start = node("systemctl", "show", "-p", "ExecStart", "--value", unit)
    argv = re.search(r"argv\[\]=(.*?) ;", exec_start).group(1).split()
    env = node("systemctl", "show", "-p", "Environment", "--value", unit).split()
    key = node("sed", "-n", "s/^VLLM_API_KEY=//p", f"/etc/vllm/{unit.removeprefix('vllm-')}.env")
    node("systemctl", "stop", unit)
    probe = (
        "import json,sys,time,urllib.request\n"
        "t0=time.monotonic()\n"
        "while time.monotonic()-t0<900:\n"
        " try:\n"
        "  r=urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:8000/v1/completions',"
        "data=json.dumps({'model':'tiny-llama','prompt':'Hello','max_tokens':1}).encode(),"
        "headers={'Content-Type':'application/json','Authorization':'Bearer '+sys.argv[1]}),timeout=60)\n"
        "  if r.status==200: print(time.monotonic()-t0); break\n"
        " except Exception: time.sleep(0.5)\n"
    )
    server = subprocess.Popen(
        ["docker", "exec", NODE, "env", *env, f"VLLM_API_KEY={key}", "HOME=/var/lib/vllm",
         "setpriv", "--reuid=vllm", "--regid=vllm", "--init-groups", *argv],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        bare = float(node("python3", "-c", probe, key))
    finally:
        server.terminate()
        # [v]: the pattern must not match this pkill's own command line.
        node("pkill", "-f", "[v]llm.entrypoints.openai.api_server", check=False)
        time.sleep(3)
    # Like for like: the same node and the same warm compile cache, the unit restarted by systemd and
    # gated by the deploy's own gate (health, /v1/models, one-token completion).
    node("systemctl", "restart", unit)
    gate_out = node("/usr/local/libexec/vllm-deploy/vllm-gate", "--unit", unit, "--url", "http://127.0.0.1:8000",
                    "--model", "tiny-llama", "--timeout", "900", "--env-file", f"/etc/vllm/{unit.removeprefix('vllm-')}.env")
    unit_warm = json.loads(gate_out)["seconds"]

    gate_mean = sum(gate) / len(gate) if gate else float("nan")
    print(json.dumps({"first_deploy_s": round(first, 1), "first_start_to_first_completion_s": gate,
                      "bare_start_to_first_completion_s": round(bare, 1), "unit_restart_to_first_completion_s": unit_warm,
                      "second_run_s": round(second, 1), "second_run_changed": changed}, indent=2))
    print(f"""
first deploy (2 nodes, bare containers -> serving)        {first:7.1f} s
  first start -> first completion (both nodes at once,
  cold compile cache; deploy gate, mean)                  {gate_mean:7.1f} s
one node, warm cache, back to back:
  bare api_server by hand -> first completion             {bare:7.1f} s
  systemd unit restart -> first completion (deploy gate)  {unit_warm:7.1f} s
  orchestration overhead ratio                            {unit_warm / bare:7.2f} x   (goal <= 1.3)
second run (idempotent, changed={changed})                     {second:7.1f} s
  second / first                                          {second / first:7.2f} x   (goal <= 0.25)
""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
