#!/usr/bin/env python3
"""Slim multi-stage image vs a naive single-stage image: size, overhead over the venv, cold start.

    make bench-image            # CPU build of vLLM (wheelhouse, local base), tiny generated model
    GPU=1 make bench-image      # also the CUDA build (wheels from PyPI; sizes only: no GPU to start it)
    ENGINES=gpu make bench-image   # only the CUDA build
    COMPRESSED=1 ...               # also the gzip-compressed sizes (what a registry transfers; slow)

Each engine gets three images: slim (the role's default), slim text-only (vllm_image_text_only: the
pin's multimodal_only packages removed; its builder reuses the slim build's cached install layer) and
naive.

Both images install the same pinned versions (vllm_deploy/data/versions.yaml) on the same local
base. The slim one is built by the vllm_image role itself (the real code path); the naive one is
one FROM with the build tools, pip and its cache left in place, as a Dockerfile written by hand
typically is. Cold start = `docker run` until the first completion answers 200 (tiny model, CPU).
Prints figures; removes what it built unless KEEP=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BASE = os.environ.get("BASE", os.environ.get("NODE_IMAGE", "vllm-deploy/node:bookworm"))
# The builder stage only needs the same Python at the same path (BASE=vllm-deploy/python-base:bookworm,
# scripts/python-base.sh, with this builder reuses the cached builder layers).
BUILDER_BASE = os.environ.get("BUILDER_BASE", BASE)
WHEELHOUSE = Path(os.environ.get("WHEELHOUSE", REPO / ".cache" / "wheelhouse")).resolve()
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
PREFIX = "vllm-deploy/img-bench"
WORK = Path(os.environ.get("BENCH_WORK", "/var/tmp/vllm-img-bench"))
KEEP = os.environ.get("KEEP") == "1"
RUNS = int(os.environ.get("BENCH_RUNS", "2"))

NAIVE = """\
FROM {base}
RUN apt-get update && apt-get install -y python3-venv python3-pip python3-dev build-essential g++ libnuma1 curl
{source}
RUN python3 -m venv /opt/vllm/venv && /opt/vllm/venv/bin/pip install {pip_args} {package}=={version} torch=={torch}
{remove}
ENV PATH=/opt/vllm/venv/bin:$PATH
ENTRYPOINT ["python", "-m", "vllm.entrypoints.openai.api_server"]
"""


def sh(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, text=True, **kw)


def out(*argv: str) -> str:
    return sh(*argv, capture_output=True).stdout.strip()


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def build_slim(engine: str, text_only: bool = False) -> tuple[str, float]:
    """Build with the vllm_image role on this machine's engine; returns (image ref, seconds)."""
    variant = f"{engine}-text" if text_only else engine
    playbook = WORK / f"slim-{variant}.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Build the slim image", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "roles": [{"role": "vllm_image"}],
        "post_tasks": [{"name": "Save the ref", "ansible.builtin.copy": {
            "content": "{{ vllm_image_ref }}", "dest": str(WORK / f"slim-{variant}.ref"), "mode": "0644"}}],
    }]))
    extra = {
        "vllm_image_engine": engine, "vllm_image_base": BASE, "vllm_image_builder_base": BUILDER_BASE,
        "vllm_image_repository": PREFIX,
        "vllm_image_build_dir": str(WORK / f"ctx-{variant}"), "ansible_python_interpreter": sys.executable,
        "vllm_image_text_only": text_only,
    }
    if engine == "cpu":
        extra["vllm_image_wheelhouse"] = str(WHEELHOUSE)
    else:
        extra["vllm_image_ca_bundle"] = CA_BUNDLE
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    t0 = time.monotonic()
    run = subprocess.run(["ansible-playbook", "-i", "localhost,", str(playbook), "-e", json.dumps(extra)], cwd=REPO,
                         env=env, capture_output=True, text=True, check=False)
    if run.returncode:
        raise RuntimeError(f"the vllm_image role failed ({variant}):\n{run.stdout[-4000:]}{run.stderr[-2000:]}")
    return (WORK / f"slim-{variant}.ref").read_text().strip(), time.monotonic() - t0


def build_naive(engine: str) -> tuple[str, float]:
    pin = yaml.safe_load((REPO / "vllm_deploy/data/versions.yaml").read_text())["vllm"][engine]
    ctx = WORK / f"naive-{engine}"
    ctx.mkdir(parents=True, exist_ok=True)
    if engine == "cpu":
        if not (ctx / "wheelhouse").exists():
            sh("cp", "-r", str(WHEELHOUSE) + "/.", str(ctx / "wheelhouse"))
        source, pip_args = "COPY wheelhouse/ /wheelhouse/", "--no-index --find-links /wheelhouse"
    else:
        sh("cp", CA_BUNDLE, str(ctx / "ca.crt"))
        source, pip_args = "COPY ca.crt /ca.crt\nENV PIP_CERT=/ca.crt", ""
    remove = f"RUN /opt/vllm/venv/bin/pip uninstall -y {' '.join(pin['remove'])}" if pin.get("remove") else ""
    (ctx / "Dockerfile").write_text(NAIVE.format(base=BASE, source=source, pip_args=pip_args, remove=remove,
                                                 package=pin["package"], version=pin["version"], torch=pin["torch"]))
    ref = f"{PREFIX}:naive-{engine}"
    t0 = time.monotonic()
    sh("docker", "build", "-q", "-t", ref, str(ctx), stdout=subprocess.DEVNULL)
    return ref, time.monotonic() - t0


def size(ref: str) -> int:
    return int(out("docker", "image", "inspect", "-f", "{{.Size}}", ref))


def venv_size(ref: str) -> int:
    """Bytes of the venv's files, counted as the image's layers count them (du -sb adds ~4 KB per directory)."""
    sizes = out("docker", "run", "--rm", "--entrypoint", "find", ref, "/opt/vllm/venv", "(", "-type", "f", "-o",
                "-type", "l", ")", "-printf", "%s\\n")
    return sum(int(n) for n in sizes.split())


def layers(ref: str) -> list[tuple[int, str]]:
    """(bytes, instruction) of the image's non-empty layers, oldest first."""
    rows = out("docker", "history", "--no-trunc", "--human=false", "--format", "{{.Size}}\t{{.CreatedBy}}", ref)
    result = []
    for row in reversed(rows.splitlines()):
        size, _, created = row.partition("\t")
        if int(size) > 0:
            what = created.replace("/bin/sh -c ", "").replace("#(nop) ", "").strip()[:60]
            result.append((int(size), what or f"base image ({BASE})"))
    return result


def compressed_size(ref: str) -> int:
    """Bytes of `docker save | gzip -6`: about what a registry would transfer (COMPRESSED=1; minutes)."""
    save = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE)
    gz = subprocess.Popen(["gzip", "-6"], stdin=save.stdout, stdout=subprocess.PIPE)
    save.stdout.close()
    total = 0
    while chunk := gz.stdout.read(1 << 20):
        total += len(chunk)
    gz.wait()
    save.wait()
    return total


def largest_packages(ref: str, n: int = 12) -> list[tuple[int, str]]:
    """The biggest entries of the venv's site-packages, in MB (what the venv floor is made of)."""
    listing = out("docker", "run", "--rm", "--entrypoint", "sh", ref, "-c",
                  "du -sm /opt/vllm/venv/lib/python3*/site-packages/* | sort -rn | head -%d" % n)
    return [(int(mb), path.rsplit("/", 1)[-1]) for mb, path in (line.split(None, 1) for line in listing.splitlines())]


def make_model(ref: str) -> Path:
    models = WORK / "models"
    models.mkdir(parents=True, exist_ok=True)
    path = models / "tiny-llama"
    if not (path / "config.json").exists():
        script = (REPO / "roles" / "vllm_model" / "files" / "tiny_model.py").read_text()
        sh("docker", "run", "--rm", "-i", "--network", "none", "--user", "0:0", "-v", f"{models}:{models}",
           "--entrypoint", "python", ref, "-", "--out", str(path), "--layers", "2", "--hidden", "128",
           "--heads", "2", "--kv-heads", "1", input=script, stdout=subprocess.DEVNULL)
        sh("chmod", "-R", "a+rX", str(models))
    return path


def cold_start(ref: str, model: Path, port: int, timeout: float = 600) -> float:
    """Seconds from `docker run` to the first completion answering 200."""
    name = f"img-bench-{port}"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    t0 = time.monotonic()
    sh("docker", "run", "-d", "--name", name, "--shm-size", "2g", "-p", f"127.0.0.1:{port}:{port}",
       "-e", "HF_HUB_OFFLINE=1", "-e", "VLLM_CPU_KVCACHE_SPACE=1", "-v", f"{model}:{model}:ro", ref,
       "--model", str(model), "--served-model-name", "tiny", "--host", "0.0.0.0", "--port", str(port),
       "--max-model-len", "256", "--dtype", "bfloat16", stdout=subprocess.DEVNULL)
    body = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 1}).encode()
    try:
        while time.monotonic() - t0 < timeout:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30) as resp:
                    if resp.status == 200:
                        return time.monotonic() - t0
            except (OSError, urllib.error.HTTPError):
                pass
            if out("docker", "inspect", "-f", "{{.State.Running}}", name) != "true":
                logs = subprocess.run(["docker", "logs", "--tail", "30", name], capture_output=True, text=True)
                raise RuntimeError(f"{ref} exited before answering:\n{logs.stdout}{logs.stderr}")
            time.sleep(1)
        raise RuntimeError(f"{ref}: no completion within {timeout:.0f}s")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def main() -> int:
    WORK.mkdir(parents=True, exist_ok=True)
    engines = os.environ.get("ENGINES", "cpu gpu" if os.environ.get("GPU") == "1" else "cpu").split()
    built: list[str] = []
    try:
        for engine in engines:
            slim, slim_s = build_slim(engine)
            built.append(slim)
            text, text_s = build_slim(engine, text_only=True)
            built.append(text)
            naive, naive_s = build_naive(engine)
            built.append(naive)
            s_size, n_size, v_size = size(slim), size(naive), venv_size(slim)
            t_size, tv_size = size(text), venv_size(text)
            print(f"\n== {engine.upper()} build of vLLM (base {BASE}) ==")
            print(f"slim  {slim}: {gb(s_size)}  (built in {slim_s:.0f}s)")
            print(f"text-only {text}: {gb(t_size)}  (built in {text_s:.0f}s; saves {gb(s_size - t_size)},"
                  f" {100 * (s_size - t_size) / s_size:.1f}% of slim; its venv {gb(tv_size)})")
            print(f"naive {naive}: {gb(n_size)}  (built in {naive_s:.0f}s)")
            print(f"venv inside the slim image: {gb(v_size)}; slim overhead over it: {gb(s_size - v_size)}"
                  f" ({100 * (s_size - v_size) / s_size:.0f}% of the image); naive is {gb(n_size - s_size)} larger;"
                  f" slim/naive = {s_size / n_size:.2f}")
            print("slim image layers: " + "; ".join(f"{gb(n)} {what}" for n, what in layers(slim)))
            if os.environ.get("COMPRESSED") == "1":
                print(f"compressed (docker save | gzip -6): slim {gb(compressed_size(slim))},"
                      f" text-only {gb(compressed_size(text))}")
            print("largest packages in the slim venv (MB): " + ", ".join(
                f"{name} {mb}" for mb, name in largest_packages(slim)))
            if engine == "cpu":
                model = make_model(slim)
                # Alternate the two images (page cache, other load on the machine): RUNS samples each.
                samples: dict[str, list[float]] = {"slim": [], "text-only": [], "naive": []}
                order = [("slim", slim, 18531), ("text-only", text, 18533), ("naive", naive, 18532)]
                for i in range(RUNS):
                    for label, ref, port in (order if i % 2 == 0 else order[::-1]):
                        samples[label].append(cold_start(ref, model, port))
                for label, values in samples.items():
                    print(f"cold start to first completion, {label}: "
                          f"min {min(values):.0f}s, samples {', '.join(f'{v:.0f}' for v in values)}s")
                print(f"(load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
            else:
                print("cold start: n/a (no GPU on this machine; the CUDA build cannot start here)")
    finally:
        if not KEEP:
            for ref in built:
                subprocess.run(["docker", "rmi", "-f", ref], capture_output=True, check=False)
            subprocess.run(["rm", "-rf", str(WORK)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
