"""The fleet model cache (`vllm-deploy weights fetch|publish`) against a real store, and a node's copy
checked the way roles/vllm_model does it (weights.py verify / prune, run as a script).

The store is nginx from Debian on 127.0.0.1 serving a directory that `vllm-deploy weights publish`
wrote the manifest of; its access log gives the bytes it sent per file.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_deploy import models, weights

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
WEIGHTS_PY = Path(weights.__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def store(tmp_path):
    """(root dir, base URL, read_log()) of an nginx serving root on loopback."""
    if not os.access(NGINX, os.X_OK):
        pytest.skip("nginx is not installed (scripts/prereqs.sh installs nginx-light)")
    root, run = tmp_path / "store", tmp_path / "nginx"
    root.mkdir()
    run.mkdir()
    port = free_port()
    conf = run / "nginx.conf"
    conf.write_text(f"""daemon off; user root; pid {run}/nginx.pid; error_log {run}/error.log;
events {{}}
http {{ log_format bytes '$request_uri $status $body_bytes_sent'; access_log {run}/access.log bytes;
  client_body_temp_path {run}; proxy_temp_path {run}; fastcgi_temp_path {run}; uwsgi_temp_path {run}; scgi_temp_path {run};
  server {{ listen 127.0.0.1:{port}; root {root}; }} }}
""")
    proc = subprocess.Popen([NGINX, "-c", str(conf)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)

    def read_log() -> list[tuple[str, int, int]]:
        lines = (run / "access.log").read_text().split("\n") if (run / "access.log").exists() else []
        return [(u, int(s), int(b)) for u, s, b in (line.split() for line in lines if line)]

    yield root, f"http://127.0.0.1:{port}", read_log
    proc.terminate()
    proc.wait(10)


def publish(root: Path, rel: str, files: dict[str, bytes]) -> Path:
    d = root / rel
    d.mkdir(parents=True)
    for name, data in files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
    subprocess.run([sys.executable, "-m", "vllm_deploy.cli", "weights", "publish", str(d)], check=True, capture_output=True)
    return d


def cli_fetch(name, url, cache, *extra):
    run = subprocess.run([sys.executable, "-m", "vllm_deploy.cli", "weights", "fetch", name,
                          "--source", json.dumps({"source": "url", "url": url}), "--cache", str(cache), *extra],
                         capture_output=True, text=True, timeout=120)
    return run.returncode, (json.loads(run.stdout) if run.returncode == 0 else None), run.stderr


def served(log, prefix):
    """Body bytes the store sent for files under prefix, manifests apart."""
    return sum(b for u, s, b in log() if u.startswith(prefix) and not u.endswith("/manifest.json"))


def model_files(seed: int) -> dict[str, bytes]:
    weights_blob = bytes((i * 7 + seed) % 251 for i in range(600_000))
    return {"config.json": b'{"model_type": "llama", "hidden_size": 64}', "tokenizer.json": b'{"model": {}}',
            "tokenizer_config.json": b"{}", "model.safetensors": weights_blob,
            "extra/notes.txt": b"not a planning file"}


def test_the_cache_fetches_planning_files_first_then_each_file_once(store, tmp_path):
    root, base, log = store
    publish(root, "m/v1", model_files(1))
    cache = tmp_path / "cache"

    rc, plan, err = cli_fetch("m", f"{base}/m/v1", cache, "--planning")
    assert rc == 0, err
    assert sorted(plan["fetched"]) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    assert served(log, "/m/v1/model.safetensors") == 0, "the planning fetch moved the weights"
    assert plan["total_bytes"] == sum(len(b) for b in model_files(1).values())

    rc, full, err = cli_fetch("m", f"{base}/m/v1", cache, "--log", str(tmp_path / "fetch.log"))
    assert rc == 0, err
    assert full["revision"] == plan["revision"] and sorted(full["fetched"]) == ["extra/notes.txt", "model.safetensors"]
    assert served(log, "/m/v1/") == full["total_bytes"], "every byte of the model once, no more"
    assert "MB" in (tmp_path / "fetch.log").read_text()
    for rel, data in model_files(1).items():
        assert (cache / "m" / full["dir"] / rel).read_bytes() == data

    before = served(log, "/m/v1/")
    rc, again, err = cli_fetch("m", f"{base}/m/v1", cache)
    assert rc == 0, err
    assert again["fetched"] == [] and again["hashed"] == [] and served(log, "/m/v1/") == before


def test_a_new_revision_fetches_only_the_files_that_changed(store, tmp_path):
    root, base, log = store
    publish(root, "m/v1", model_files(1))
    v2_files = {**model_files(1), "model.safetensors": model_files(2)["model.safetensors"]}
    publish(root, "m/v2", v2_files)
    cache = tmp_path / "cache"
    assert cli_fetch("m", f"{base}/m/v1", cache)[0] == 0
    rc, plan, err = cli_fetch("m", f"{base}/m/v2", cache, "--planning")
    assert rc == 0, err
    assert plan["fetched"] == [] and sorted(plan["seeded"]) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    rc, v2, err = cli_fetch("m", f"{base}/m/v2", cache)
    assert rc == 0, err
    assert v2["fetched"] == ["model.safetensors"]
    assert served(log, "/m/v2/") == len(v2_files["model.safetensors"])
    v1_dir = cache / "m" / weights.url_revision(weights.manifest_specs(json.loads((root / "m/v1/manifest.json").read_text()), base))
    assert (cache / "m" / v2["dir"] / "config.json").stat().st_ino == (v1_dir / "config.json").stat().st_ino
    assert v2["dir"] != v1_dir.name


def test_a_store_that_lacks_the_model_is_refused_in_one_line(store, tmp_path):
    _, base, _ = store
    rc, _, err = cli_fetch("qwen", f"{base}/nothing/here", tmp_path / "cache", "--planning")
    assert rc == 1
    assert err.count("\n") == 1 and "model qwen" in err and "HTTP 404" in err and "manifest.json" in err, err
    assert not (tmp_path / "cache" / "qwen").exists()


def test_the_revision_follows_the_files_not_the_manifest_s_formatting():
    a = [weights.FileSpec("b", 2, sha256="1" * 64), weights.FileSpec("a", 1, sha256="0" * 64)]
    assert weights.url_revision(a) == weights.url_revision(list(reversed(a)))
    assert weights.url_revision(a) != weights.url_revision([a[0], weights.FileSpec("a", 1, sha256="2" * 64)])
    assert len(weights.revision_dir("f" * 40)) == 12


def node_verify(dest, listing, *args):
    out = subprocess.run([sys.executable, str(WEIGHTS_PY), "verify", str(dest), str(listing), *args],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.fixture
def node_copy(tmp_path):
    """A revision copied to a 'node' directory with its listing, as roles/vllm_model leaves it."""
    files = model_files(3)
    dest = tmp_path / "node" / "m" / "abc"
    dest.mkdir(parents=True)
    specs = []
    for rel, data in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
        specs.append(weights.FileSpec(rel, len(data), sha256=__import__("hashlib").sha256(data).hexdigest()))
    listing = tmp_path / "listing.json"
    listing.write_text(json.dumps(weights.specs_to_json(specs)))
    return dest, listing, files


def flip_byte(path: Path, keep_mtime: bool = False) -> None:
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        b = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_node_copy_is_hashed_once_then_trusted_until_it_changes(node_copy):
    dest, listing, files = node_copy
    first = node_verify(dest, listing, "changed")
    assert first["missing"] == first["wrong"] == [] and first["needed"] == 0
    assert sorted(first["hashed"]) == sorted(files)
    second = node_verify(dest, listing, "changed")
    assert second["hashed"] == [] and second["needed"] == 0


def test_a_flipped_byte_is_found_and_the_file_removed_for_a_whole_copy(node_copy):
    dest, listing, files = node_copy
    node_verify(dest, listing, "changed")
    flip_byte(dest / "model.safetensors")
    dry = node_verify(dest, listing, "changed", "check")
    assert dry["wrong"] == ["model.safetensors"] and (dest / "model.safetensors").exists(), "--check removed a file"
    found = node_verify(dest, listing, "changed")
    assert found["wrong"] == ["model.safetensors"] and found["needed"] == len(files["model.safetensors"])
    assert not (dest / "model.safetensors").exists()


def test_a_flip_that_kept_the_mtime_needs_a_full_check(node_copy):
    dest, listing, _ = node_copy
    node_verify(dest, listing, "changed")
    flip_byte(dest / "tokenizer.json", keep_mtime=True)
    assert node_verify(dest, listing, "changed", "check")["wrong"] == []
    assert node_verify(dest, listing, "full")["wrong"] == ["tokenizer.json"]


def test_a_missing_revision_needs_all_of_it_and_says_the_free_space(node_copy, tmp_path):
    held, listing, files = node_copy
    node_verify(held, listing, "changed")
    before = shutil.disk_usage(tmp_path).free
    answer = node_verify(tmp_path / "node" / "m" / "def", listing, "changed")
    after = shutil.disk_usage(tmp_path).free
    assert sorted(answer["missing"]) == sorted(files) and answer["needed"] == sum(len(b) for b in files.values())
    # the disk's free space as the node reads it: other work on the disk (CI's other lane) moves it while this runs,
    # so the figure must lie between the readings taken just before and just after (16 MiB of slack either side)
    assert min(before, after) - (1 << 24) <= answer["free"] <= max(before, after) + (1 << 24)
    assert answer["siblings"] == ["abc"]


def test_prune_keeps_the_served_revision_and_the_newest_before_it(tmp_path):
    base = tmp_path / "m"
    for i, rev in enumerate(["r1", "r2", "r3", "r4"]):
        (base / rev).mkdir(parents=True)
        (base / rev / weights.RECORD_NAME).write_text("{}")
        os.utime(base / rev / weights.RECORD_NAME, ns=(i * 10**9, i * 10**9))
    out = subprocess.run([sys.executable, str(WEIGHTS_PY), "prune", str(base), "r2", "2"], capture_output=True, text=True, check=True)
    assert sorted(json.loads(out.stdout)) == ["r1", "r3"]
    assert sorted(p.name for p in base.iterdir()) == ["r2", "r4"]


def test_the_node_path_of_a_fetched_model_is_its_revision_directory():
    used = [{"name": "q", "source": "url", "url": "https://s/q", "path": "/srv/q/", "served_name": "q"},
            {"name": "t", "source": "generate", "path": "/srv/t"}]
    fetch = models.fetch_sources(used)
    assert fetch == [{"name": "q", "source": {"source": "url", "url": "https://s/q"}}]
    answer = {"revision": "a" * 12, "dir": "a" * 12, "path": "/cache/q/" + "a" * 12,
              "files": [{"path": "model.safetensors", "size": 10, "sha256": "0" * 64}], "total_bytes": 10}
    results = [{"item": fetch[0], "rc": 0, "stdout": json.dumps(answer)}]
    revs = models.revisions(results, fetch, {"q": used[0], "t": used[1]})
    assert revs["q"]["path"] == "/srv/q/" + "a" * 12 and revs["q"]["from"] == "https://s/q"
    resolved = models.resolved({"q": used[0], "t": used[1]}, revs)
    assert resolved["q"]["path"] == "/srv/q/" + "a" * 12 and resolved["t"]["path"] == "/srv/t"


def test_a_controller_directory_is_listed_once_and_linked_into_the_cache(tmp_path):
    """source: controller: the directory's files are hashed once (the cache keeps their digests), linked into
    the cache (same filesystem: no copy), planning files first; a changed file is a new revision."""
    src = tmp_path / "export" / "m"
    src.mkdir(parents=True)
    for rel, data in model_files(4).items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    (src / ".cache").mkdir()
    (src / ".cache" / "lock").write_text("not part of the model")
    cache = tmp_path / "cache"

    def fetch(*extra):
        run = subprocess.run([sys.executable, "-m", "vllm_deploy.cli", "weights", "fetch", "m", "--source",
                              json.dumps({"source": "controller", "dir": str(src)}), "--cache", str(cache), *extra],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    plan = fetch("--planning")
    assert sorted(plan["fetched"]) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    assert sorted(f["path"] for f in plan["files"]) == sorted(model_files(4))
    full = fetch()
    assert sorted(full["fetched"]) == ["extra/notes.txt", "model.safetensors"] and full["dir"] == plan["dir"]
    cached = cache / "m" / full["dir"] / "model.safetensors"
    assert cached.stat().st_ino == (src / "model.safetensors").stat().st_ino
    again = fetch()
    assert again["fetched"] == [] and again["hashed"] == []
    (src / "model.safetensors").write_bytes(model_files(5)["model.safetensors"])
    changed = fetch()
    assert changed["dir"] != full["dir"] and changed["fetched"] == ["model.safetensors"]
    assert sorted(changed["seeded"]) == ["config.json", "extra/notes.txt", "tokenizer.json", "tokenizer_config.json"]


def test_a_controller_source_that_is_not_a_directory_is_refused_in_one_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "vllm_deploy.cli", "weights", "fetch", "m", "--source",
                          json.dumps({"source": "controller", "dir": str(tmp_path / "nowhere")}), "--cache", str(tmp_path / "c")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1 and "is not a directory on the controller; fix vllm_models.m.dir" in run.stderr
