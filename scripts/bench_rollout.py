#!/usr/bin/env python3
"""A fleet-wide change rolled out on the staging fleet under load, and the plan for a big fleet (make bench-rollout).

On staging (make staging first), as README tells a user: one flag changed for the whole group
(max_num_seqs of every instance, passed as the group's vllm_instances with -e), then
`ansible-playbook deploy.yml -l gpu-nodes:vllm_gateway` while scripts/loadgen.py sends a steady,
bounded load through the gateway. The gateway's table is read every half second meanwhile. Then the
same deploy without the change puts the fleet back, also under load. Prints, for each rollout:
each instance's time out of rotation, the most replicas of a model out at once, the rollout's wall
time and the load's counts; then the plan of a simulated fleet of 100 hosts x 4 instances (README's
layout: the same four models on every host) at the default budget, waves and total time, at the
out-of-rotation time measured here. Figures only: there is no timed assertion.

    python3 scripts/bench_rollout.py [inventory/staging] [--seqs 6]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "scripts"))

from bench_gateway import load_staging  # noqa: E402
from vllm_deploy import waves  # noqa: E402

CTL = "/usr/local/libexec/vllm-deploy/vllm-gateway-ctl"


def staging(inv: Path) -> dict:
    """What the staging inventory says: the gateway (bench_gateway's reading of it), the group's
    instances and served names, the gateway's node."""
    fleet = load_staging(inv, "bench-rollout")
    gateway = fleet["gateway"][0]
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())["all"]["children"]
    group = yaml.safe_load((inv / "group_vars/gpu-nodes/vllm.yml").read_text())
    return {"instances": group["vllm_instances"], "models": sorted(m.get("served_name", n) for n, m in group["vllm_models"].items()),
            "gateway_host": next(iter(hosts["vllm_gateway"]["hosts"])), "key": gateway[2],
            "url": f"{'https' if fleet['cacert'] else 'http'}://{gateway[0]}:{gateway[1]}", "cacert": fleet["cacert"]}


class Watch(threading.Thread):
    """The gateway's table every half second: when each server was out of rotation, and the most
    servers of one backend out at once."""

    def __init__(self, gateway_host: str):
        super().__init__(daemon=True)
        self.gateway_host, self.stop, self.out_since, self.out_seconds, self.most_out = gateway_host, threading.Event(), {}, {}, {}

    def run(self) -> None:
        while not self.stop.is_set():
            run = subprocess.run(["docker", "exec", self.gateway_host, CTL, "status"], capture_output=True, text=True, timeout=30)
            now = time.monotonic()
            if run.returncode == 0:
                table = json.loads(run.stdout)["servers"]
                per_backend: dict[str, int] = {}
                for ref, server in table.items():
                    out = not server["status"].startswith("UP")
                    per_backend[ref.split("/")[0]] = per_backend.get(ref.split("/")[0], 0) + out
                    if out and ref not in self.out_since:
                        self.out_since[ref] = now
                    elif not out and ref in self.out_since:
                        self.out_seconds[ref] = self.out_seconds.get(ref, 0.0) + now - self.out_since.pop(ref)
                for backend, count in per_backend.items():
                    self.most_out[backend] = max(self.most_out.get(backend, 0), count)
            self.stop.wait(0.5)


def rollout(env: dict, inv: Path, fleet: dict, instances: list | None, label: str) -> dict:
    """One deploy under load; its figures."""
    with tempfile.TemporaryDirectory() as work:
        stop_file = Path(work) / "stop"
        load = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "loadgen.py"), "--url", fleet["url"], "--key", fleet["key"],
                                 *(["--cacert", fleet["cacert"]] if fleet["cacert"] else []),
                                 "--models", ",".join(fleet["models"]), "--requests", "20000", "--concurrency", "4",
                                 "--max-tokens", "16", "--pause", "0.2", "--stop-file", str(stop_file), "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        extra = []
        if instances is not None:
            path = Path(work) / "instances.json"
            path.write_text(json.dumps({"vllm_instances": instances}))
            extra = ["-e", f"@{path}"]
        time.sleep(5)  # the load is flowing before anything restarts
        watch = Watch(fleet["gateway_host"])
        watch.start()
        start = time.monotonic()
        run = subprocess.run(["ansible-playbook", "-i", str(inv / "hosts.yml"), str(ROOT / "deploy.yml"), "-l", "gpu-nodes:vllm_gateway",
                              *extra], capture_output=True, text=True, env=env, cwd=ROOT)
        seconds = time.monotonic() - start
        watch.stop.set()
        watch.join(timeout=60)
        stop_file.touch()
        out, err = load.communicate(timeout=600)
    plan = [line.strip().strip('"') for line in run.stdout.splitlines() if "Rollout plan:" in line or line.strip().strip('"').startswith("wave ")]
    result = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"error": err[-500:]}
    print(f"\n{label}: deploy rc={run.returncode}, {seconds:.0f} s")
    if run.returncode != 0:
        print(run.stdout[-3000:])
    for line in dict.fromkeys(plan):
        print(f"  {line}")
    for ref in sorted(set(watch.out_seconds) | set(watch.out_since)):
        print(f"  {ref}: {watch.out_seconds.get(ref, 0.0):.1f} s out of rotation" + (" (still out at the end)" if ref in watch.out_since else ""))
    print(f"  most servers of one model out of rotation at once: {watch.most_out}")
    print(f"  load through the gateway: {result.get('sent')} sent, {result.get('complete')} complete, {result.get('failed')} failed "
          f"({result.get('stream')} streamed, {result.get('non_stream')} not)")
    return {"rc": run.returncode, "seconds": seconds, "out_seconds": watch.out_seconds, "load": result}


def simulated(per_restart: float) -> None:
    """README's layout on 100 hosts x 4 models, the default budget (1) and canary."""
    view = {f"gpu{i:03d}": {"records": [{"name": m, "model": {"name": m, "served_name": m}} for m in ("a", "b", "c", "d")],
                            "changed": ["a", "b", "c", "d"]} for i in range(1, 101)}
    plan = waves.plan_waves(waves.fleet_replicas(view))
    total = waves.estimate_seconds(plan, per_restart)
    print("\nsimulated fleet, 100 hosts x 4 instances, default budget (1 replica of each model per wave), canary first:")
    print(f"  {len(plan['waves'])} waves, {sum(len(w) for w in plan['waves'])} restarts; at {per_restart:.0f} s out of rotation "
          f"per restart (measured above): {total:.0f} s ({total / 3600:.1f} h) plus one canary window per rollout")
    print(f"  (one host after another, as serial: 1 would: {100 * 4 * per_restart:.0f} s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inventory", nargs="?", default="inventory/staging")
    ap.add_argument("--seqs", type=int, default=6, help="the max_num_seqs the change sets on every instance")
    args = ap.parse_args(argv)
    inv = (ROOT / args.inventory).resolve()
    fleet = staging(inv)
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    changed = [{**inst, "flags": {**(inst.get("flags") or {}), "max_num_seqs": args.seqs}} for inst in fleet["instances"]]
    first = rollout(env, inv, fleet, changed, f"fleet-wide change (max_num_seqs={args.seqs} on every instance)")
    back = rollout(env, inv, fleet, None, "and back (the inventory as it is)")
    measured = [s for r in (first, back) for s in r["out_seconds"].values()]
    simulated(sum(measured) / len(measured) if measured else 60.0)
    return 0 if first["rc"] == 0 and back["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
