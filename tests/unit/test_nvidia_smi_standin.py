"""The nvidia-smi stand-in, run as a subprocess, parsed with vllm_deploy.nvidia_smi, compared with the
hand-written .meta.yaml of the capture each dataset replays."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, STANDIN_DIR, MissingFixture, calibration_dir
from vllm_deploy.nvidia_smi import gpu_facts, parse_compute_apps, parse_query_gpu, parse_table, query_argv

STANDIN = STANDIN_DIR / "nvidia-smi"
DATA = STANDIN_DIR / "data"
TABLE_DATASETS = sorted(p.stem for p in DATA.glob("*-table.json"))
if not TABLE_DATASETS:
    raise MissingFixture(f"no stand-in dataset matches {DATA}/*-table.json")


def run_standin(tmp_path, dataset, *args):
    fixture = tmp_path / "fixture"
    fixture.write_text(f"# selected by the test\n{dataset}\n")
    env = {"NVIDIA_SMI_STANDIN_FIXTURE": str(fixture), "NVIDIA_SMI_STANDIN_DATA": str(DATA), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(STANDIN), *args], env=env, capture_output=True, text=True,
                          timeout=30)


def meta_for(dataset):
    return yaml.safe_load((calibration_dir("nvidia-smi") / f"{dataset}.meta.yaml").read_text())


def test_every_dataset_names_its_source():
    sources = (STANDIN_DIR / "SOURCES.md").read_text()
    for path in DATA.glob("*.json"):
        record = json.loads(path.read_text())
        assert record["source_url"].startswith("https://")
        assert (REPO / record["source_file"]).is_file(), record["source_file"]
        assert path.stem in sources


@pytest.mark.parametrize("dataset", TABLE_DATASETS)
def test_role_query_replays_capture(tmp_path, dataset):
    meta = meta_for(dataset)
    proc = run_standin(tmp_path, dataset, *query_argv("gpus")[1:])   # exactly what the roles run
    assert proc.returncode == 0, proc.stderr
    gpus = parse_query_gpu(proc.stdout)
    assert len(gpus) == meta["gpu_count"]
    for got, want in zip(gpus, meta["gpus"]):
        assert got["index"] == want["index"]
        assert got["name"] == want["name"]
        assert got["memory_total_mib"] == want["memory_total_mib"]
        assert got["memory_used_mib"] == want["memory_used_mib"]
        assert got["memory_free_mib"] == want["memory_total_mib"] - want["memory_used_mib"]
        assert got["driver_version"] == meta["driver_version"]
        assert got["uuid"]
        # The meta names the MIG mode of the MIG captures only; every other replayed GPU is not in MIG mode.
        assert (got["mig_mode"] == "Enabled") == (want.get("mig_mode") == "Enabled")
    facts = gpu_facts(proc.stdout, proc.stderr, proc.returncode, present=True)
    assert facts["profile"] == "gpu" and facts["gpu_count"] == meta["gpu_count"]
    assert facts["mig_gpus"] == [g["index"] for g in meta["gpus"] if g.get("mig_mode") == "Enabled"]


@pytest.mark.parametrize("dataset", TABLE_DATASETS)
def test_header_and_units_like_nvidia_smi(tmp_path, dataset):
    meta = meta_for(dataset)
    proc = run_standin(tmp_path, dataset, "--query-gpu=memory.total,name,index", "--format=csv")
    lines = proc.stdout.splitlines()
    assert lines[0] == "memory.total [MiB], name, index"
    assert lines[1] == f"{meta['gpus'][0]['memory_total_mib']} MiB, {meta['gpus'][0]['name']}, 0"
    assert parse_query_gpu(proc.stdout)[0]["memory_total_mib"] == meta["gpus"][0]["memory_total_mib"]
    nounits = run_standin(tmp_path, dataset, "--query-gpu=memory.total", "--format=csv,nounits").stdout
    assert nounits.splitlines() == ["memory.total [MiB]"] + [str(g["memory_total_mib"]) for g in meta["gpus"]]


@pytest.mark.parametrize("dataset", TABLE_DATASETS)
def test_table_is_replayed_verbatim(tmp_path, dataset):
    meta = meta_for(dataset)
    proc = run_standin(tmp_path, dataset)
    assert proc.returncode == 0
    capture = (calibration_dir("nvidia-smi") / f"{dataset}.txt").read_text()

    def table_lines(text):  # from the first box line to the last one: no prompts around a paste
        lines = text.splitlines()
        edges = [i for i, line in enumerate(lines) if line.startswith("+")]
        return lines[edges[0]:edges[-1] + 1]

    assert table_lines(proc.stdout) == table_lines(capture)
    assert parse_table(proc.stdout)["driver_version"] == meta["driver_version"]


def test_compute_apps_replay_processes(tmp_path):
    meta = meta_for("06-rtx4090-x4-table")
    proc = run_standin(tmp_path, "06-rtx4090-x4-table", *query_argv("compute-apps")[1:])
    apps = parse_compute_apps(proc.stdout)
    assert [(a["pid"], a["process_name"], a["used_memory_mib"], a["gpu_uuid"]) for a in apps] == [
        (p["pid"], p["name"], p["memory_mib"], f"GPU-standin-{p['gpu']}") for p in meta["processes"]]


def test_list_gpus(tmp_path):
    proc = run_standin(tmp_path, "03-l4-x2-table", "-L")
    assert proc.stdout.splitlines() == ["GPU 0: NVIDIA L4 (UUID: GPU-standin-0)",
                                        "GPU 1: NVIDIA L4 (UUID: GPU-standin-1)"]


def test_l40s_uses_the_real_uuid_of_its_same_state_csv(tmp_path):
    proc = run_standin(tmp_path, "19-l40s-x1-table", "-i", "0", "--query-gpu=uuid,compute_cap",
                       "--format=csv,noheader")
    assert proc.stdout.strip() == "GPU-00000000-0000-0000-0000-000000000000, 8.9"


@pytest.mark.parametrize("dataset,rc,category", [
    ("27-rtx3090-nodriver-error", 9, "no_driver_communication"),
    ("28-unknown-gpu-nvml-mismatch-570-error", 18, "driver_library_version_mismatch"),
])
def test_failure_datasets(tmp_path, dataset, rc, category):
    proc = run_standin(tmp_path, dataset, *query_argv("gpus")[1:])
    assert proc.returncode == rc
    assert category == meta_for(dataset)["error_class"]
    facts = gpu_facts(proc.stdout, proc.stderr, proc.returncode, present=True)
    assert facts["gpu_count"] == 0 and facts["profile"] == "cpu"
    assert facts["error"]["category"] == category


def test_unknown_field_is_refused_like_nvidia_smi(tmp_path):
    proc = run_standin(tmp_path, "06-rtx4090-x4-table", "--query-gpu=index,bogus", "--format=csv")
    assert proc.returncode == 2 and 'Field "bogus" is not a valid field to query.' in proc.stdout


def test_default_dataset_when_no_fixture_file(tmp_path):
    env = {"NVIDIA_SMI_STANDIN_FIXTURE": str(tmp_path / "absent"), "NVIDIA_SMI_STANDIN_DATA": str(DATA)}
    proc = subprocess.run([sys.executable, str(STANDIN), "-L"], env=env, capture_output=True, text=True)
    assert proc.stdout.count("NVIDIA GeForce RTX 4090") == 4
