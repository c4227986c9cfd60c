#!/usr/bin/env python3
"""make bench-weights: the deploy's weight delivery (issue 22) measured on two container nodes, in one run.

Usage: python scripts/bench_weights.py [--size-mib 1024] [--image vllm-deploy/node:bookworm] [--keep]

A generated model (--size-mib of random bytes in four model-0000N-of-00004.safetensors shards, plus a
config.json and a tokenizer.json) is published with `vllm-deploy weights publish` into a store that
nginx serves on 127.0.0.1 (its access log counts the bytes it sends). Two nodes are started from the
node image (systemd as PID 1, each on a core of its own when there are two). A small playbook runs
what the serve chain runs for a `source: url` model, role vllm_model (its main: the planning fetch,
what each node holds) then its weights.yml (the fleet cache's fetch, rsync to each node, the check),
with Ansible's JSON callback giving each task's time. Printed, with the goal beside each ratio:

1. bytes the store served for the model's files over the whole run / the model's size (goal 1.0);
2. the first deploy's distribution (the tasks that create the node's directory, copy with rsync and
   check every copied file, both nodes at once) / a plain `rsync -a` of the same files from the fleet
   cache to fresh directories on the same two nodes, in parallel, over `docker exec -i` as
   synchronize does (goal at most 1.2);
3. a no-op re-run (nothing changed; the manifest beside each copy) / the same re-run with
   `-e vllm_model_verify=full` (every file re-hashed, on the cache and on each node).

A benchmark, not a test: one run, ratios, no timed assertion (these machines are noisy). The nodes,
nginx and the scratch directory are removed at the end, whatever happens (--keep keeps the directory).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = "bench"
NODE_PATH = "/srv/models/bench"
PLAIN_PATH = "/srv/bench-plain"
SHARDS = 4
# What the goals are, beside each ratio.
GOAL_FETCHED = 1.0
GOAL_DISTRIBUTION = 1.2
# weights.yml's tasks that move the files to the nodes and check them there (the distribution).
DISTRIBUTION_TASKS = ("Copy what each node lacks", "Check every copied file against the source's digests")
# The tasks that hash: the fleet cache's fetch (it checks what it holds) and each node's check.
HASH_TASKS = ("Fetch the models' weights into the fleet cache", "Check what this node holds")
FETCH_TASK = "Fetch the models' weights into the fleet cache"
APT_TASK = "Install rsync on the node"

PLAYBOOK = """\
# Written by scripts/bench_weights.py: the weight delivery of the serve chain for a url model, alone.
- name: Deliver one model's weights (make bench-weights)
  hosts: nodes
  gather_facts: false
  tasks:
    - name: Plan the model (fleet cache's planning files, what each node holds)
      ansible.builtin.import_role:
        name: vllm_model
    - name: Deliver the weights from the fleet cache
      ansible.builtin.import_role:
        name: vllm_model
        tasks_from: weights
"""


class BenchError(Exception):
    """Something the benchmark needs is missing or failed: one line for the user."""


# --- pure parts (tests/unit/test_bench_weights.py) -----------------------------------------------

NGINX_LOG_FORMAT = "'$request_uri $status $body_bytes_sent'"


def parse_nginx_log(text: str) -> list[tuple[str, int, int]]:
    """(request URI, status, body bytes sent) per line of an access log in NGINX_LOG_FORMAT."""
    entries = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        uri, status, sent = parts
        try:
            entries.append((uri, int(status), int(sent)))
        except ValueError:
            continue
    return entries


def served_bytes(entries: list[tuple[str, int, int]], prefix: str) -> int:
    """Body bytes sent for the model's files under prefix (its manifest.json apart: it is read per run)."""
    prefix = prefix.rstrip("/") + "/"
    return sum(sent for uri, _status, sent in entries
               if uri.split("?", 1)[0].startswith(prefix) and not uri.split("?", 1)[0].endswith("/manifest.json"))


def _when(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.rstrip("Z")).replace(tzinfo=datetime.timezone.utc).timestamp()


def task_times(report: dict) -> list[tuple[str, float]]:
    """(task name, seconds from its start to its last host's result) of every task of the JSON
    callback's report (ansible.posix.json), in order. A task that reported no host counts 0."""
    times = []
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            duration = task["task"].get("duration", {})
            seconds = _when(duration["end"]) - _when(duration["start"]) if "end" in duration else 0.0
            times.append((task["task"]["name"], max(seconds, 0.0)))
    return times


def play_seconds(report: dict) -> float:
    """The plays' time: first start to last result (ansible-playbook's own start-up apart)."""
    total = 0.0
    for play in report.get("plays", []):
        duration = play["play"].get("duration", {})
        if "end" in duration:
            total += _when(duration["end"]) - _when(duration["start"])
    return total


def seconds_of(times: list[tuple[str, float]], names: tuple[str, ...] | str) -> float:
    """Sum of the times of the tasks whose name contains one of names (a role's prefix is allowed)."""
    names = (names,) if isinstance(names, str) else names
    return sum(seconds for task, seconds in times if any(name in task for name in names))


def failures(report: dict) -> list[str]:
    """'host: task: message' for every failed or unreachable host result of the JSON report."""
    lines = []
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            for host, result in task.get("hosts", {}).items():
                if result.get("failed") or result.get("unreachable"):
                    msg = result.get("msg") or result.get("stderr") or json.dumps(result)[:500]
                    lines.append(f"{host}: {task['task']['name']}: {str(msg).strip()}")
    return lines


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, None when the denominator is not positive."""
    return numerator / denominator if denominator > 0 else None


def fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def verdict(value: float | None, goal: float, at_most: bool) -> str:
    """'met' / 'missed' against the goal (at_most: value <= goal; else value == goal, to 2 digits)."""
    if value is None:
        return "n/a"
    ok = value <= goal + 1e-9 if at_most else round(value, 2) == round(goal, 2)
    return "met" if ok else "missed"


def report_text(fig: dict) -> str:
    """The table and one line per ratio, goal beside it, from the run's figures (bytes and seconds)."""
    fetched = ratio(fig["served_bytes"], fig["model_bytes"])
    dist = ratio(fig["distribution_s"], fig["plain_rsync_s"])
    noop = ratio(fig["noop_s"], fig["noop_full_s"])
    noop_hash = ratio(fig["noop_hash_s"], fig["noop_full_hash_s"])
    mib = 1 << 20
    rows = [
        ("model (4 shards + config.json + tokenizer.json)", f"{fig['model_bytes'] / mib:10.1f} MiB"),
        ("bytes the store served for it, whole run", f"{fig['served_bytes'] / mib:10.1f} MiB"),
        ("  of which in the first deploy", f"{fig['served_first_bytes'] / mib:10.1f} MiB"),
        ("first deploy: fleet cache's fetch from the store", f"{fig['fetch_s']:10.1f} s"),
        ("first deploy: rsync installed on the nodes (apt)", f"{fig['apt_s']:10.1f} s"),
        ("first deploy: distribution to 2 nodes (copy + check)", f"{fig['distribution_s']:10.1f} s"),
        ("  of which the copy (synchronize, rsync)", f"{fig['copy_s']:10.1f} s"),
        ("  of which the check of every copied file (sha256)", f"{fig['check_s']:10.1f} s"),
        ("plain rsync -a of the same files to 2 nodes", f"{fig['plain_rsync_s']:10.1f} s"),
        ("first deploy: the play", f"{fig['first_play_s']:10.1f} s"),
        ("no-op re-run: the play (manifest)", f"{fig['noop_s']:10.1f} s"),
        ("  its hashing tasks (cache + nodes)", f"{fig['noop_hash_s']:10.1f} s"),
        ("no-op re-run, -e vllm_model_verify=full: the play", f"{fig['noop_full_s']:10.1f} s"),
        ("  its hashing tasks (cache + nodes)", f"{fig['noop_full_hash_s']:10.1f} s"),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"  {label:<{width}}  {value}" for label, value in rows]
    lines += [
        "",
        f"  bytes fetched from the source / model size       {fmt_ratio(fetched):>6}   (goal 1.0: {verdict(fetched, GOAL_FETCHED, False)})",
        f"  fleet distribution / plain rsync                 {fmt_ratio(dist):>6}   "
        f"(goal at most {GOAL_DISTRIBUTION}: {verdict(dist, GOAL_DISTRIBUTION, True)})",
        f"  no-op re-run with the manifest / full re-hash    {fmt_ratio(noop):>6}   (the lower the better; "
        f"hashing tasks alone: {fmt_ratio(noop_hash)})",
    ]
    return "\n".join(lines)


# --- the run -------------------------------------------------------------------------------------

def sh(argv: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    run = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and run.returncode != 0:
        raise BenchError(f"{' '.join(argv[:6])}... failed: {(run.stderr or run.stdout).strip()[-800:]}")
    return run


def preflight(image: str) -> None:
    """One line and exit when docker, the node image, nginx, rsync or ansible-playbook is missing."""
    if not shutil.which("docker"):
        raise BenchError("docker is not installed (make prereqs)")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        raise BenchError("the Docker daemon does not answer (make prereqs starts it)")
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
        raise BenchError(f"no node image {image} (make node-image builds it)")
    for tool, hint in (("nginx", "scripts/prereqs.sh installs nginx-light"), ("rsync", "apt-get install rsync"),
                       ("ansible-playbook", "make setup")):
        if not (shutil.which(tool) or (tool == "nginx" and os.access("/usr/sbin/nginx", os.X_OK))):
            raise BenchError(f"{tool} is not installed ({hint})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_model(directory: Path, size_mib: int) -> None:
    """SHARDS safetensors-named files of random bytes (size_mib in all) and a small config and tokenizer."""
    directory.mkdir(parents=True)
    shard = (size_mib << 20) // SHARDS
    chunk = 16 << 20
    for i in range(1, SHARDS + 1):
        with open(directory / f"model-{i:05d}-of-{SHARDS:05d}.safetensors", "wb") as out:
            left = shard
            while left > 0:
                out.write(os.urandom(min(chunk, left)))
                left -= chunk
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
        "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
        "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}, indent=2) + "\n")
    (directory / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(2000)}, "merges": []}}) + "\n")


class Nginx:
    """nginx on 127.0.0.1 serving root, its access log counting bytes per request."""

    def __init__(self, root: Path, run_dir: Path):
        self.root, self.run_dir, self.port = root, run_dir, free_port()
        run_dir.mkdir(parents=True)
        conf = run_dir / "nginx.conf"
        # user root: the scratch directory may be root-only (mkdtemp makes it 0700).
        conf.write_text(f"""daemon off; user root; pid {run_dir}/nginx.pid; error_log {run_dir}/error.log;
events {{}}
http {{ log_format bytes {NGINX_LOG_FORMAT}; access_log {run_dir}/access.log bytes;
  client_body_temp_path {run_dir}; proxy_temp_path {run_dir}; fastcgi_temp_path {run_dir};
  uwsgi_temp_path {run_dir}; scgi_temp_path {run_dir};
  server {{ listen 127.0.0.1:{self.port}; root {root}; }} }}
""")
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.proc = subprocess.Popen([nginx, "-c", str(conf)], stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise BenchError(f"nginx did not start (see {run_dir}/error.log)") from None
                time.sleep(0.1)

    def log(self) -> list[tuple[str, int, int]]:
        path = self.run_dir / "access.log"
        return parse_nginx_log(path.read_text()) if path.exists() else []

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def start_nodes(names: list[str], image: str) -> None:
    """Each node with systemd as PID 1 (the flags of molecule/shared/create.yml), a core of its own if
    there are as many as nodes."""
    cores = sorted(os.sched_getaffinity(0))
    for i, name in enumerate(names):
        cpuset = ["--cpuset-cpus", str(cores[i])] if len(cores) >= len(names) else []
        sh(["docker", "run", "-d", "--name", name, "--hostname", name, "--label", "owner=bench-weights",
            "--cap-add", "SYS_ADMIN", "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
            "--tmpfs", "/run", "--tmpfs", "/run/lock", *cpuset, image, "/lib/systemd/systemd"])
    # Let systemd finish booting so its start-up jobs do not run during the timed copy.
    for name in names:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            state = sh(["docker", "exec", name, "systemctl", "is-system-running"], check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(1)


def remove_nodes(names: list[str]) -> None:
    for name in names:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def playbook(workdir: Path, label: str, *extra: str) -> tuple[dict, float]:
    """Run the delivery playbook with the JSON callback; (its report, wall seconds). The report is kept
    in the scratch directory as LABEL.json (--keep)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_DEPRECATION_WARNINGS="false",
               PYTHONPATH=str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))
    start = time.monotonic()
    run = subprocess.run(["ansible-playbook", "-i", str(workdir / "inventory.yml"), str(workdir / "playbook.yml"), *extra],
                         capture_output=True, text=True, cwd=REPO, env=env)
    wall = time.monotonic() - start
    (workdir / f"{label}.json").write_text(run.stdout)
    try:
        report = json.loads(run.stdout[run.stdout.index("{"):])
    except ValueError:
        raise BenchError(f"ansible-playbook {' '.join(extra)} printed no report: {run.stderr.strip()[-1500:]}") from None
    if run.returncode != 0:
        raise BenchError(f"ansible-playbook {' '.join(extra)} failed: " + " | ".join(failures(report) or [run.stderr.strip()[-1500:]]))
    return report, wall


def plain_rsync(src: Path, names: list[str]) -> float:
    """Wall seconds of `rsync -a` of src to PLAIN_PATH on every node at once, over docker exec -i."""
    for name in names:
        sh(["docker", "exec", name, "rm", "-rf", PLAIN_PATH])
    start = time.monotonic()
    procs = [subprocess.Popen(["rsync", "-a", "--rsh=docker exec -i", "--exclude=/.vllm-deploy-manifest.json",
                               f"{src}/", f"{name}:{PLAIN_PATH}/"], stderr=subprocess.PIPE, text=True) for name in names]
    errors = [p.communicate()[1] for p in procs]
    wall = time.monotonic() - start
    for p, err in zip(procs, errors):
        if p.returncode != 0:
            raise BenchError(f"the plain rsync failed: {err.strip()[-800:]}")
    return wall


def bench(args, workdir: Path, names: list[str]) -> dict:
    store = workdir / "store"
    rev_dir = store / MODEL / "r1"
    print(f"bench-weights: generating a {args.size_mib} MiB model in {rev_dir}", flush=True)
    write_model(rev_dir, args.size_mib)
    sh([sys.executable, "-m", "vllm_deploy.cli", "weights", "publish", str(rev_dir)],
       env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    manifest = json.loads((rev_dir / "manifest.json").read_text())
    model_bytes = sum(f["size"] for f in manifest["files"])

    nginx = Nginx(store, workdir / "nginx")
    try:
        url = f"http://127.0.0.1:{nginx.port}/{MODEL}/r1"
        (workdir / "playbook.yml").write_text(PLAYBOOK)
        inventory = {"all": {"children": {"nodes": {
            "hosts": {name: {} for name in names},
            "vars": {"ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3",
                     "vllm_models": {MODEL: {"path": NODE_PATH, "source": "url", "url": url}},
                     "vllm_instances": [{"name": MODEL, "model": MODEL, "gpus": [], "port": 8000}],
                     "vllm_model_cache_dir": str(workdir / "fleet-cache")}}}}}
        (workdir / "inventory.yml").write_text(json.dumps(inventory, indent=2) + "\n")

        print(f"bench-weights: starting {', '.join(names)} from {args.image}", flush=True)
        start_nodes(names, args.image)

        print("bench-weights: first deploy (fetch once, rsync to both nodes, check)", flush=True)
        first, first_wall = playbook(workdir, "first")
        served_first = served_bytes(nginx.log(), f"/{MODEL}/r1")
        times = task_times(first)
        cache = next((workdir / "fleet-cache" / MODEL).iterdir())

        print("bench-weights: plain rsync -a of the same files to both nodes", flush=True)
        plain_s = plain_rsync(cache, names)

        print("bench-weights: no-op re-run (manifest), then the same with -e vllm_model_verify=full", flush=True)
        noop, _ = playbook(workdir, "noop")
        full, _ = playbook(workdir, "noop-full", "-e", "vllm_model_verify=full")
        noop_times, full_times = task_times(noop), task_times(full)
        return {
            "model_bytes": model_bytes, "served_bytes": served_bytes(nginx.log(), f"/{MODEL}/r1"),
            "served_first_bytes": served_first, "fetch_s": seconds_of(times, FETCH_TASK),
            "apt_s": seconds_of(times, APT_TASK), "distribution_s": seconds_of(times, DISTRIBUTION_TASKS),
            "copy_s": seconds_of(times, DISTRIBUTION_TASKS[0]), "check_s": seconds_of(times, DISTRIBUTION_TASKS[1]),
            "plain_rsync_s": plain_s, "first_play_s": play_seconds(first), "first_wall_s": first_wall,
            "noop_s": play_seconds(noop), "noop_hash_s": seconds_of(noop_times, HASH_TASKS),
            "noop_full_s": play_seconds(full), "noop_full_hash_s": seconds_of(full_times, HASH_TASKS),
        }
    finally:
        nginx.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="the generated model's size in MiB (default 1024)")
    ap.add_argument("--image", default=os.environ.get("NODE_IMAGE") or "vllm-deploy/node:bookworm",
                    help="the node image (default $NODE_IMAGE or vllm-deploy/node:bookworm)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (store, fleet cache, playbook)")
    args = ap.parse_args(argv)
    if args.size_mib < SHARDS:
        print(f"bench-weights: --size-mib must be at least {SHARDS}", file=sys.stderr)
        return 2
    try:
        preflight(args.image)
    except BenchError as exc:
        print(f"bench-weights: {exc}", file=sys.stderr)
        return 1

    # SIGTERM ends the run through the finally below (the nodes and nginx removed), like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="bench-weights-"))
    names = [f"bench-weights-{os.getpid()}-node{i}" for i in (1, 2)]
    try:
        figures = bench(args, workdir, names)
    except BenchError as exc:
        print(f"bench-weights: {exc}", file=sys.stderr)
        return 1
    finally:
        remove_nodes(names)
        if args.keep:
            print(f"bench-weights: kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nbench-weights: {args.size_mib} MiB model, 2 nodes ({os.cpu_count()} cores, containers on one host)")
    print(report_text(figures))
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
