"""nvidia-smi parsing against real captures (tests/fixtures/calibration/nvidia-smi, values from the .meta.yaml
files, which were written by hand from the captures) and against hand-written variants."""

from __future__ import annotations

import pytest
import yaml

from conftest import calibration_dir, calibration_files
from vllm_deploy.nvidia_smi import (
    NvidiaSmiParseError,
    diagnose_failure,
    gpu_facts,
    mig_devices,
    parse_compute_apps,
    parse_list,
    parse_query_gpu,
    parse_table,
    query_argv,
)

TABLES = calibration_files("nvidia-smi", "*-table.txt")
CSVS = calibration_files("nvidia-smi", "*-csv.txt")
ERRORS = calibration_files("nvidia-smi", "*-error.txt")
LISTS = calibration_files("nvidia-smi", "*-list.txt")


def _load(name):
    d = calibration_dir("nvidia-smi")
    return (d / name).read_text(), yaml.safe_load((d / name.replace(".txt", ".meta.yaml")).read_text())


@pytest.mark.parametrize("name", TABLES)
def test_table_matches_meta(name):
    text, meta = _load(name)
    table = parse_table(text)
    assert table["driver_version"] == meta["driver_version"]
    assert table["cuda_version"] == meta["cuda_version"]
    assert len(table["gpus"]) == meta["gpu_count"]
    for got, want in zip(table["gpus"], meta["gpus"]):
        assert got["index"] == want["index"]
        assert got["name"] == want["name"]
        assert got["memory_total_mib"] == want["memory_total_mib"]
        assert got["memory_used_mib"] == want["memory_used_mib"]
        if "mig_mode" in want:
            assert got["mig_mode"] == want["mig_mode"]
    assert table["mig_devices"] == meta.get("mig_table", [])
    expected_procs = meta.get("processes")
    if isinstance(expected_procs, list):
        assert table["processes"] == [
            {"gpu": p["gpu"], "pid": p["pid"], "type": p["type"], "name": p["name"], "memory_mib": p["memory_mib"]}
            for p in expected_procs]
    elif "processes_from_query_compute_apps_same_state" in meta:
        want = meta["processes_from_query_compute_apps_same_state"]
        assert [(p["pid"], p["name"], f"{p['memory_mib']} MiB") for p in table["processes"]] == [
            (p["pid"], p["name"], p["used_gpu_memory"]) for p in want]
    else:
        assert table["processes"] == []


@pytest.mark.parametrize("name", CSVS)
def test_csv_with_header_and_units_matches_meta(name):
    text, meta = _load(name)
    gpus = parse_query_gpu(text)
    assert len(gpus) == meta["gpu_count"]
    for got, want in zip(gpus, meta["gpus"]):
        assert got["index"] == want["index"]
        assert got["name"] == want["name"]
        assert got["memory_total_mib"] == want["memory_total_mib"]
        assert got["driver_version"] == meta["driver_version"]
        if "memory_used_mib" in want:
            assert got["memory_used_mib"] == want["memory_used_mib"]
            assert got["memory_free_mib"] == want["memory_free_mib"]


@pytest.mark.parametrize("name", ERRORS)
def test_failure_texts_match_meta(name):
    text, meta = _load(name)
    failure = diagnose_failure(text, "", 9)
    assert failure["category"] == meta["error_class"]
    facts = gpu_facts(text, "", 9, present=True)
    assert facts["gpu_count"] == 0 and facts["profile"] == "cpu"
    assert facts["error"]["category"] == meta["error_class"]


# The exact output of the role's query (noheader,nounits); written by hand in nvidia-smi's format.
ROLE_OUTPUT = """\
0, GPU-5a7e6b1c-0d2f-4e3a-9b8c-1234567890ab, NVIDIA H100 80GB HBM3, 81559, 1, 81080, 550.90.07, Disabled
1, GPU-6b8f7c2d-1e3a-4f4b-8c9d-234567890abc, NVIDIA H100 80GB HBM3, 81559, 1, 81080, 550.90.07, Disabled

"""


def test_role_query_noheader_nounits():
    gpus = parse_query_gpu(ROLE_OUTPUT)
    assert gpus == [
        {"index": 0, "uuid": "GPU-5a7e6b1c-0d2f-4e3a-9b8c-1234567890ab", "name": "NVIDIA H100 80GB HBM3",
         "memory_total_mib": 81559, "memory_used_mib": 1, "memory_free_mib": 81080,
         "driver_version": "550.90.07", "mig_mode": "Disabled"},
        {"index": 1, "uuid": "GPU-6b8f7c2d-1e3a-4f4b-8c9d-234567890abc", "name": "NVIDIA H100 80GB HBM3",
         "memory_total_mib": 81559, "memory_used_mib": 1, "memory_free_mib": 81080,
         "driver_version": "550.90.07", "mig_mode": "Disabled"},
    ]


def test_header_maps_any_order_and_na_fields():
    text = ("driver_version, memory.free [MiB], name, index, memory.total [MiB], uuid, memory.used [MiB]\n"
            "  535.183.01 ,  [N/A] , NVIDIA A100-SXM4-40GB MIG 3g.20gb ,  0 , 20096 MiB , N/A , [N/A]  \n")
    (gpu,) = parse_query_gpu(text)
    assert gpu["index"] == 0 and gpu["name"] == "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    assert gpu["memory_total_mib"] == 20096
    assert gpu["memory_free_mib"] is None and gpu["memory_used_mib"] is None and gpu["uuid"] is None
    assert gpu["driver_version"] == "535.183.01"


def test_output_saved_from_the_query_before_mig_mode_still_parses():
    (gpu,) = parse_query_gpu("3, GPU-abc, NVIDIA L4, 23034, 10, 23024, 550.54.15\n")
    assert (gpu["index"], gpu["memory_free_mib"], gpu["driver_version"], gpu["mig_mode"]) == (3, 23024, "550.54.15", None)
    with pytest.raises(NvidiaSmiParseError, match="expected 8"):
        parse_query_gpu("3, GPU-abc, NVIDIA L4, 23034, 10, 23024, 550.54.15, [N/A]\n4, GPU-b, NVIDIA L4, 23034, 10, 23024, 550.54.15\n")


def test_wrong_field_count_is_an_error_not_a_silent_drop():
    with pytest.raises(NvidiaSmiParseError):
        parse_query_gpu("0, GPU-x, NVIDIA L4, 23034\n")


def test_compute_apps():
    text = "1378307, python, 1132, GPU-standin-0\n1381232, /usr/bin/python3, [N/A], GPU-standin-1\n"
    assert parse_compute_apps(text) == [
        {"pid": 1378307, "process_name": "python", "used_memory_mib": 1132, "gpu_uuid": "GPU-standin-0"},
        {"pid": 1381232, "process_name": "/usr/bin/python3", "used_memory_mib": None, "gpu_uuid": "GPU-standin-1"},
    ]
    with_header = "pid, process_name, used_gpu_memory [MiB], gpu_uuid\n20037, ffmpeg, 538 MiB, GPU-0\n"
    assert parse_compute_apps(with_header)[0]["used_memory_mib"] == 538
    assert parse_compute_apps("") == []


@pytest.mark.parametrize("stdout,stderr,rc,category", [
    ("", "/bin/sh: 1: nvidia-smi: not found", 127, "not_installed"),
    ("", "", 127, "not_installed"),
    ("No devices were found\n", "", 6, "no_devices_found"),
    ("Failed to initialize NVML: Driver/library version mismatch\n", "", 18, "driver_library_version_mismatch"),
    ("Failed to initialize NVML: Unknown Error\n", "", 255, "nvml_unknown_error"),
    ("Segmentation fault\n", "", 139, "unknown"),
])
def test_diagnose_failure_families(stdout, stderr, rc, category):
    failure = diagnose_failure(stdout, stderr, rc)
    assert failure["category"] == category
    assert failure["fix"]
    if category == "unknown":
        assert "Segmentation fault" in failure["message"]


def test_success_is_not_a_failure():
    assert diagnose_failure(ROLE_OUTPUT, "", 0) is None


def test_gpu_facts_cpu_node_without_nvidia_smi():
    assert gpu_facts("", "", 127, present=False) == {
        "gpu_count": 0, "gpus": [], "driver_version": None, "profile": "cpu", "error": None,
        "mig_devices": [], "mig_gpus": []}


def test_gpu_facts_gpu_node():
    facts = gpu_facts(ROLE_OUTPUT, "", 0, present=True)
    assert facts["gpu_count"] == 2 and facts["profile"] == "gpu" and facts["error"] is None
    assert facts["driver_version"] == "550.90.07"
    assert [g["uuid"] for g in facts["gpus"]] == [
        "GPU-5a7e6b1c-0d2f-4e3a-9b8c-1234567890ab", "GPU-6b8f7c2d-1e3a-4f4b-8c9d-234567890abc"]


def test_gpu_facts_garbage_output_is_an_error():
    facts = gpu_facts("hello world\n", "", 0, present=True)
    assert facts["profile"] == "cpu" and facts["error"]["category"] == "unparseable_output"


@pytest.mark.parametrize("name", TABLES)
def test_gpu_facts_from_table(name):
    text, meta = _load(name)
    facts = gpu_facts(text, "", 0, present=True)
    assert facts["gpu_count"] == meta["gpu_count"]
    assert facts["driver_version"] == meta["driver_version"]
    for got, want in zip(facts["gpus"], meta["gpus"]):
        assert got["memory_free_mib"] == want["memory_total_mib"] - want["memory_used_mib"]


# Spelled out by hand (nvidia-smi --help-query-gpu / --help-query-compute-apps), not built from the code.
@pytest.mark.parametrize("query, argv", [
    ("gpus", ["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,memory.used,memory.free,driver_version,"
              "mig.mode.current", "--format=csv,noheader,nounits"]),
    ("compute-apps", ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
                      "--format=csv,noheader,nounits"]),
])
def test_query_argv(query, argv):
    assert query_argv(query) == argv
    assert query_argv(query, "/usr/local/bin/nvidia-smi") == ["/usr/local/bin/nvidia-smi", *argv[1:]]


def test_unknown_query_is_refused_by_name():
    with pytest.raises(ValueError, match=r"'processes'.*gpus, compute-apps"):
        query_argv("processes")


def test_parsers_read_the_columns_in_the_queried_order():
    """A headerless row in the order query_argv asks for lands in the right keys."""
    gpu = parse_query_gpu("3, GPU-abc, NVIDIA L4, 23034, 10, 23024, 550.54.15, [N/A]\n")
    assert gpu == [{"index": 3, "uuid": "GPU-abc", "name": "NVIDIA L4", "memory_total_mib": 23034,
                    "memory_used_mib": 10, "memory_free_mib": 23024, "driver_version": "550.54.15", "mig_mode": None}]
    app = parse_compute_apps("4242, python3, 1500, GPU-abc\n")
    assert app == [{"pid": 4242, "process_name": "python3", "used_memory_mib": 1500, "gpu_uuid": "GPU-abc"}]


# --- nvidia-smi -L and MIG (captures 42- to 45-; values in the .meta.yaml read by hand from the captures) ---

@pytest.mark.parametrize("name", LISTS)
def test_list_and_mig_devices_match_meta(name):
    text, meta = _load(name)
    listed = parse_list(text)
    assert [(g["index"], g["name"], g["uuid"]) for g in listed] == [
        (g["index"], g["name"], g["uuid"]) for g in meta["gpus"]]
    for got, want in zip(listed, meta["gpus"]):
        assert got["mig_devices"] == [{k: d[k] for k in ("device", "profile", "uuid")} for d in want["mig_devices"]]
    table = (calibration_dir("nvidia-smi") / meta["same_state_table"]).read_text()
    want = [(g, d) for g in meta["gpus"] for d in g["mig_devices"]]
    got = mig_devices(text, table)
    assert len(got) == len(want)
    for dev, (gpu, d) in zip(got, want):
        assert dev["uuid"] == d["uuid"] and dev["gpu_index"] == gpu["index"] and dev["gpu_uuid"] == gpu["uuid"]
        assert dev["memory_total_mib"] == d["memory_total_mib"]
        assert (dev["gpu_instance"], dev["compute_instance"]) == (d["gpu_instance"], d["compute_instance"])
        assert dev["name"] == f"{gpu['name']} MIG {d['profile']}"


def test_gpu_facts_on_a_mig_node():
    """The role's three reads of one H100 in MIG mode: --query-gpu, -L and the table (43- and 42-)."""
    csv, _ = _load("43-h100-x1-mig4-csv.txt")
    listing, meta = _load("42-h100-x1-mig4-list.txt")
    table, _ = _load("42-h100-x1-mig4-table.txt")
    facts = gpu_facts(csv, "", 0, True, listing, table)
    assert facts["error"] is None and facts["gpu_count"] == 1 and facts["mig_gpus"] == [0]
    assert [(d["uuid"], d["memory_total_mib"]) for d in facts["mig_devices"]] == [
        (d["uuid"], d["memory_total_mib"]) for d in meta["gpus"][0]["mig_devices"]]
    # Without MIG devices -L adds nothing and a non-MIG table sets no MIG GPU.
    plain, _ = _load("01-a100-sxm4-80gb-x4-table.txt")
    facts = gpu_facts(ROLE_OUTPUT, "", 0, True, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a7e6b1c-0d2f)\n", plain)
    assert facts["error"] is None and facts["mig_devices"] == [] and facts["mig_gpus"] == []


def test_mig_mode_without_mig_devices_is_a_mig_gpu():
    """MIG on but no instance created: -L shows the GPU alone, the table says Enabled; CUDA would see nothing."""
    table, _ = _load("45-h200-x1-mig1-610-table.txt")
    listing = "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
    no_instances = table.replace("|  0    2   0   0  |              44MiB / 71424MiB    |", "|  No MIG devices found  |")
    facts = gpu_facts("0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA H200, 143771, 44, 143103, 610.43.02, Enabled\n",
                      "", 0, True, listing, no_instances)
    assert facts["error"] is None and facts["mig_gpus"] == [0] and facts["mig_devices"] == []


def test_the_query_alone_says_which_gpus_are_in_mig_mode():
    """mig.mode.current in the role's query: on a MIG node the role then adds -L and the table; on any
    other node (mig_gpus empty) it runs nothing more. Real captures: 43- (H100 in MIG mode), 20- (L40S,
    no MIG: [N/A]), 13- (a header without the field)."""
    for name, want in [("43-h100-x1-mig4-csv.txt", [0]), ("20-l40s-x1-csv.txt", []), ("13-h100-sxm-x1-csv.txt", [])]:
        text, _ = _load(name)
        facts = gpu_facts(text, "", 0, present=True)
        assert facts["error"] is None and facts["mig_gpus"] == want, name
        assert facts["mig_devices"] == []


def test_a_driver_that_does_not_know_a_queried_field_is_named_with_its_fix():
    out = 'Field "mig.mode.current" is not a valid field to query.\n\n'
    facts = gpu_facts(out, "", 2, present=True)
    assert facts["profile"] == "cpu" and facts["error"]["category"] == "query_field_unknown"
    assert "--query-gpu=index,uuid,name,memory.total,memory.used,memory.free,driver_version,mig.mode.current" in (
        facts["error"]["message"])
    assert "nvidia_driver_install: true" in facts["error"]["fix"]


def test_610_banner_read_in_gpu_facts_from_a_table():
    text, meta = _load("45-h200-x1-mig1-610-table.txt")
    facts = gpu_facts(text, "", 0, present=True)
    assert facts["driver_version"] == meta["driver_version"] == "610.43.02"
    assert parse_table(text)["cuda_version"] == "13.3"


def test_old_and_new_banner_spellings():
    old = "| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0     |\n"
    new = "| NVIDIA-SMI 610.43.02   KMD Version: 610.43.02     CUDA UMD Version: 13.3     |\n"
    assert (parse_table(old)["driver_version"], parse_table(old)["cuda_version"]) == ("580.95.05", "13.0")
    assert (parse_table(new)["driver_version"], parse_table(new)["cuda_version"]) == ("610.43.02", "13.3")
    with pytest.raises(NvidiaSmiParseError, match="KMD Version"):
        parse_table("| NVIDIA-SMI 999.1   Something: 999.1 |\n")


# --- captures that contradict themselves are errors, not facts --------------------------------

def _a100():
    return _load("01-a100-sxm4-80gb-x4-table.txt")[0]


@pytest.mark.parametrize("label,stdout,needle", [
    ("csv, index twice", ROLE_OUTPUT.replace("1, GPU-6b8f", "0, GPU-6b8f"), "GPU index 0 twice"),
    ("csv, uuid twice", ROLE_OUTPUT.replace("GPU-6b8f7c2d-1e3a-4f4b-8c9d-234567890abc", "GPU-5a7e6b1c-0d2f-4e3a-9b8c-1234567890ab"),
     "GPU UUID GPU-5a7e6b1c-0d2f-4e3a-9b8c-1234567890ab twice"),
    ("csv, negative total", ROLE_OUTPUT.replace("81559, 1, 81080", "-81559, 1, 81080", 1), "negative memory"),
    ("csv, negative free", ROLE_OUTPUT.replace("81559, 1, 81080", "81559, 1, -5", 1), "memory.free -5 MiB"),
    ("table, index twice", _a100().replace("|   1  NVIDIA A100-SXM4-80GB", "|   0  NVIDIA A100-SXM4-80GB"),
     "GPU index 0 twice"),
    ("table, negative used", _a100().replace("   3616MiB / 81920MiB", "  -3616MiB / 81920MiB"), "memory.used -3616 MiB"),
])
def test_self_contradicting_capture_is_an_error_naming_it(label, stdout, needle):
    facts = gpu_facts(stdout, "", 0, present=True)
    assert facts["gpus"] == [] and facts["profile"] == "cpu"
    assert facts["error"]["category"] == "unparseable_output"
    assert needle in facts["error"]["message"] and "\n" not in facts["error"]["message"]


def test_mig_captures_that_contradict_themselves():
    listing, _ = _load("42-h100-x1-mig4-list.txt")
    table, _ = _load("42-h100-x1-mig4-table.txt")
    csv, _ = _load("43-h100-x1-mig4-csv.txt")
    cases = [
        (listing.replace("MIG-00000001-0000-0000-0000-000000000001", "MIG-00000000-0000-0000-0000-000000000000"), table,
         "MIG device MIG-00000000-0000-0000-0000-000000000000 twice"),
        (listing, table.replace("|  0    3   0   1  |              17MiB / 20096MiB", "|  0    3   0   1  |              17MiB / -20096MiB"),
         "memory.total -20096 MiB"),
        (listing, table.replace("|  0   10   0   3  |", "|  0   10   0   7  |"), "MIG device 3 of GPU 0"),
        (listing, None, "no nvidia-smi table"),
        ("  MIG 1g.10gb     Device  0: (UUID: MIG-00000000-0000-0000-0000-000000000000)\n", table, "before any GPU"),
    ]
    for list_text, table_text, needle in cases:
        facts = gpu_facts(csv, "", 0, True, list_text, table_text)
        assert facts["error"] and needle in facts["error"]["message"], (needle, facts["error"])
        assert facts["mig_devices"] == [] and facts["gpus"] == []


def test_gpus_cli_lists_mig_devices(capsys):
    from vllm_deploy.cli import main

    d = calibration_dir("nvidia-smi")
    rc = main(["gpus", str(d / "43-h100-x1-mig4-csv.txt"), "--list", str(d / "42-h100-x1-mig4-list.txt"),
               "--table", str(d / "42-h100-x1-mig4-table.txt"), "--json"])
    facts = __import__("json").loads(capsys.readouterr().out)
    assert rc == 0 and [m["memory_total_mib"] for m in facts["mig_devices"]] == [40448, 20096, 9984, 9984]
    rc = main(["gpus", str(d / "45-h200-x1-mig1-610-table.txt")])
    out = capsys.readouterr().out
    assert rc == 0 and "driver: 610.43.02" in out and "MIG mode" in out
