"""Parse nvidia-smi output (CSV queries and the plain table) into the facts the gpu_facts role sets.

Everything here is pure text processing (standard library only), so the same code runs on the
controller, inside an Ansible module on a target, and in tests against real captured outputs
(tests/unit/test_nvidia_smi.py, fixtures under tests/fixtures/calibration/nvidia-smi/).
"""

from __future__ import annotations

import re

# The CSV queries the roles run (gpu_facts, vllm_preflight, nvidia_driver's verify) through
# query_argv() / the vllm_nvidia_smi_argv filter. No header: the parsers below read the columns in
# exactly these orders, so the fields are spelled here and nowhere else. mig.mode.current ("Enabled",
# "Disabled", "[N/A]" on a GPU without MIG: captures 43- and 20-) lets gpu_facts skip -L and the table,
# which only a node with a GPU in MIG mode needs.
QUERY_GPU_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used", "memory.free", "driver_version",
                    "mig.mode.current")
QUERY_APPS_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
# The GPU collector's query (roles/vllm_monitoring/files/vllm-gpu-metrics): what the seeds log and
# the alert rules read. The collector is handed these fields with the argv (query_fields()).
QUERY_METRICS_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used", "utilization.gpu",
                        "temperature.gpu", "power.draw", "driver_version")
# The query's fields before mig.mode.current: output saved from it (`vllm-deploy gpus` reads saved
# output) still parses, without the MIG mode.
_QUERY_GPU_FIELDS_BEFORE_MIG = QUERY_GPU_FIELDS[:-1]
CSV_FORMAT = "--format=csv,noheader,nounits"
QUERIES = {"gpus": ("--query-gpu", QUERY_GPU_FIELDS), "compute-apps": ("--query-compute-apps", QUERY_APPS_FIELDS),
           "metrics": ("--query-gpu", QUERY_METRICS_FIELDS)}


# The plain outputs the MIG facts need: the GPU/MIG list (UUIDs) and the table (each MIG device's memory).
PLAIN_QUERIES = {"list": ["-L"], "table": []}


def query_argv(query: str, binary: str = "nvidia-smi") -> list[str]:
    """argv of one of the QUERIES ("gpus", "compute-apps" or "metrics"; parse_query_gpu / parse_compute_apps
    read the first two, the GPU collector the third), or of a PLAIN_QUERIES one ("list": nvidia-smi -L,
    "table": nvidia-smi)."""
    if query in PLAIN_QUERIES:
        return [str(binary), *PLAIN_QUERIES[query]]
    if query not in QUERIES:
        raise ValueError(f"unknown nvidia-smi query {query!r}: use one of {', '.join([*QUERIES, *PLAIN_QUERIES])}")
    flag, fields = QUERIES[query]
    return [str(binary), f"{flag}={','.join(fields)}", CSV_FORMAT]


def query_fields(query: str) -> list[str]:
    """The fields of one of the QUERIES, in the order its CSV columns come."""
    if query not in QUERIES:
        raise ValueError(f"unknown nvidia-smi query {query!r}: use one of {', '.join(QUERIES)}")
    return list(QUERIES[query][1])


QUERY_GPU_COMMAND = " ".join(query_argv("gpus"))

# nvidia-smi accepts several names for one field and prints its own name in the header
# (e.g. --query-compute-apps=used_memory prints "used_gpu_memory [MiB]").
_GPU_FIELD_ALIASES = {
    "index": "index",
    "uuid": "uuid", "gpu_uuid": "uuid",
    "name": "name", "gpu_name": "name",
    "memory.total": "memory_total_mib",
    "memory.used": "memory_used_mib",
    "memory.free": "memory_free_mib",
    "driver_version": "driver_version",
    "mig.mode.current": "mig_mode",
}
_APP_FIELD_ALIASES = {
    "pid": "pid",
    "process_name": "process_name", "name": "process_name",
    "used_memory": "used_memory_mib", "used_gpu_memory": "used_memory_mib",
    "gpu_uuid": "gpu_uuid", "uuid": "gpu_uuid",
    "gpu_name": "gpu_name",
    "gpu_bus_id": "gpu_bus_id",
}
_INT_KEYS = {"index", "pid", "memory_total_mib", "memory_used_mib", "memory_free_mib", "used_memory_mib"}

# Cells nvidia-smi prints when a value does not exist for this GPU (MIG, vGPU, old boards).
_NA_RE = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions|"
                    r"Requested functionality has been deprecated|GPU requires reset)\]?$", re.I)
_UNIT_SUFFIX_RE = re.compile(r"\s*\[[^\]]*\]\s*$")          # "memory.total [MiB]" -> "memory.total"
_NUMBER_WITH_UNIT_RE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(MiB|GiB|KiB|MB|GB|W|%|MHz|us)?$")


class NvidiaSmiParseError(ValueError):
    """The text is not the nvidia-smi output the caller said it was."""


def _cell(value: str) -> str | None:
    value = value.strip()
    if value == "" or _NA_RE.match(value):
        return None
    return value


def _to_int(value: str | None, key: str) -> int | None:
    if value is None:
        return None
    m = _NUMBER_WITH_UNIT_RE.match(value)
    if not m:
        raise NvidiaSmiParseError(f"{key}: expected a number, got {value!r}")
    number = float(m.group(1))
    unit = m.group(2)
    if unit == "GiB":
        number *= 1024
    elif unit == "KiB":
        number /= 1024
    return int(round(number))


def _content_lines(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def _looks_like_header(cells: list[str], aliases: dict) -> bool:
    names = [_UNIT_SUFFIX_RE.sub("", c).strip().lower() for c in cells]
    return any(n in aliases for n in names) and not any(re.match(r"^\d", c.strip()) for c in cells[:1])


def _parse_csv(text: str, default_fields: tuple[str, ...], aliases: dict) -> tuple[list[str], list[list[str]]]:
    """Return (canonical column names, data rows). Header optional; without it default_fields apply."""
    lines = _content_lines(text)
    if not lines:
        return [], []
    first = [c.strip() for c in lines[0].split(",")]
    if _looks_like_header(first, aliases):
        columns = [_UNIT_SUFFIX_RE.sub("", c).strip().lower() for c in first]
        lines = lines[1:]
    else:
        columns = list(default_fields)
    rows = []
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(columns):
            raise NvidiaSmiParseError(
                f"expected {len(columns)} comma-separated fields ({', '.join(columns)}), "
                f"got {len(cells)}: {line[:200]!r}")
        rows.append(cells)
    return columns, rows


def parse_query_gpu(text: str) -> list[dict]:
    """Parse `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` output.

    Without a header the fields are taken to be QUERY_GPU_FIELDS in that order (what the role runs), or
    those before mig.mode.current when every row has one field less; with a header the columns are
    mapped by name, so any field order and extra fields work. Returns one dict per GPU with keys index,
    uuid, name, memory_total_mib, memory_used_mib, memory_free_mib (int or None), driver_version and
    mig_mode ("Enabled", "Disabled"); absent or N/A values are None. When the output has no index
    column, GPUs are numbered in output order (nvidia-smi lists them by index).
    """
    fields = QUERY_GPU_FIELDS
    lines = _content_lines(text)
    if lines and all(len(line.split(",")) == len(_QUERY_GPU_FIELDS_BEFORE_MIG) for line in lines):
        fields = _QUERY_GPU_FIELDS_BEFORE_MIG
    columns, rows = _parse_csv(text, fields, _GPU_FIELD_ALIASES)
    gpus = []
    for position, cells in enumerate(rows):
        gpu: dict = {"index": None, "uuid": None, "name": None, "memory_total_mib": None,
                     "memory_used_mib": None, "memory_free_mib": None, "driver_version": None, "mig_mode": None}
        for column, raw in zip(columns, cells):
            key = _GPU_FIELD_ALIASES.get(column)
            if key is None:
                continue
            value = _cell(raw)
            gpu[key] = _to_int(value, column) if key in _INT_KEYS else value
        if gpu["index"] is None:
            gpu["index"] = position
        gpus.append(gpu)
    check_gpus(gpus, "the nvidia-smi --query-gpu output")
    return gpus


def parse_compute_apps(text: str) -> list[dict]:
    """Parse `nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,...`.

    Returns dicts with pid (int), process_name, used_memory_mib (int or None), gpu_uuid
    (plus gpu_name / gpu_bus_id when a header names them). "No running processes found" → [].
    """
    if re.search(r"No running (compute )?processes found", text or "", re.I):
        return []
    columns, rows = _parse_csv(text, QUERY_APPS_FIELDS, _APP_FIELD_ALIASES)
    apps = []
    for cells in rows:
        app: dict = {"pid": None, "process_name": None, "used_memory_mib": None, "gpu_uuid": None}
        for column, raw in zip(columns, cells):
            key = _APP_FIELD_ALIASES.get(column)
            if key is None:
                continue
            value = _cell(raw)
            app[key] = _to_int(value, column) if key in _INT_KEYS else value
        apps.append(app)
    return apps


# --- the plain table -------------------------------------------------------------------------
# The banner: "Driver Version: 580.95.05   CUDA Version: 13.0"; from the 610 series "KMD Version: 610.43.02
# CUDA UMD Version: 13.3" (NVIDIA deprecated the old names: the kernel-mode and user-mode driver versions).
_DRIVER_RE = re.compile(r"(?:Driver|KMD) Version:\s*([0-9][0-9.]*)")
_CUDA_RE = re.compile(r"CUDA (?:UMD )?Version:\s*([0-9][0-9.]*|N/A)")
# First row of a GPU box: "|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:01:00.0 Off |"
_GPU_ROW_RE = re.compile(
    r"^\|\s*(?P<index>\d+)\s+(?P<name>.*?)\s+(?P<persist>On|Off|WDDM|TCC|N/A)\s*\|"
    r"\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")
_MEMORY_RE = re.compile(r"(-?\d+)\s*MiB\s*/\s*(-?\d+)\s*MiB")
# Third row of a GPU box, the "MIG M." column: "|     ...     |     ...     |              Enabled |"
_MIG_MODE_RE = re.compile(r"^\|[^|]*\|[^|]*\|\s*(Enabled|Disabled)\s*\|$")
# A row of the "MIG devices:" box (R450 on): "|  0    2   0   0  |   26MiB / 40448MiB  | 60   0 | ..."
_MIG_ROW_RE = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|\s*(-?\d+)\s*MiB\s*/\s*(-?\d+)\s*MiB")
# Process rows, with the GI/CI columns (since ~R450) or without them (older drivers).
_PROCESS_ROW_RE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?:(?P<gi>\S+)\s+(?P<ci>\S+)\s+)?(?P<pid>\d+)\s+"
    r"(?P<type>C\+G|M\+C|C|G|M)\s+(?P<name>.+?)\s+(?P<mem>\d+\s*MiB|N/A)\s*\|$")


def parse_table(text: str) -> dict:
    """Parse the default `nvidia-smi` table.

    Returns {"driver_version", "cuda_version", "gpus": [{index, name, memory_used_mib, memory_total_mib,
    mig_mode}], "mig_devices": [{gpu, gpu_instance, compute_instance, device, memory_used_mib,
    memory_total_mib}], "processes": [{gpu, pid, type, name, memory_mib}]}. mig_mode is "Enabled",
    "Disabled" or None (a board or driver without the MIG column). Shell prompts and indentation around a
    pasted table are ignored. Raises NvidiaSmiParseError when no table is found, or when it contradicts
    itself (a GPU index twice, negative memory).
    """
    lines = [line.strip() for line in (text or "").splitlines()]
    driver = _DRIVER_RE.search(text or "")
    cuda = _CUDA_RE.search(text or "")
    if not driver:
        raise NvidiaSmiParseError("no 'Driver Version:' (or, from the 610 drivers, 'KMD Version:') header: "
                                  "not an nvidia-smi table")
    gpus: list[dict] = []
    mig_devices: list[dict] = []
    processes: list[dict] = []
    section = "gpus"
    current: dict | None = None
    for line in lines:
        if "Processes:" in line:
            section, current = "processes", None
        elif "MIG devices:" in line:
            section, current = "mig", None
        elif section == "processes":
            processes += _process_row(line)
        elif section == "mig":
            mig_devices += _mig_row(line)
        else:
            current = _gpu_box_line(line, current, gpus)
    check_gpus(gpus, "the nvidia-smi table")
    for d in mig_devices:
        _check_memory(d, f"MIG device {d['device']} of GPU {d['gpu']} in the nvidia-smi table")
    cuda_version = cuda.group(1) if cuda else None
    return {
        "driver_version": driver.group(1),
        "cuda_version": None if cuda_version == "N/A" else cuda_version,
        "gpus": gpus,
        "mig_devices": mig_devices,
        "processes": processes,
    }


def _process_row(line: str) -> list[dict]:
    """A row of the "Processes:" box as [{gpu, pid, type, name, memory_mib}], or [] for any other line."""
    m = _PROCESS_ROW_RE.match(line)
    if not m:
        return []
    mem = m.group("mem")
    return [{"gpu": int(m.group("gpu")), "pid": int(m.group("pid")), "type": m.group("type"),
             "name": m.group("name"), "memory_mib": None if mem == "N/A" else int(mem.replace("MiB", "").strip())}]


def _mig_row(line: str) -> list[dict]:
    """A row of the "MIG devices:" box as [{gpu, gpu_instance, compute_instance, device, memory_*}], or []."""
    m = _MIG_ROW_RE.match(line)
    if not m:
        return []
    return [{"gpu": int(m.group(1)), "gpu_instance": int(m.group(2)), "compute_instance": int(m.group(3)),
             "device": int(m.group(4)), "memory_used_mib": int(m.group(5)), "memory_total_mib": int(m.group(6))}]


def _gpu_box_line(line: str, current: dict | None, gpus: list[dict]) -> dict | None:
    """One line of the GPUs' boxes: a box's first row opens a GPU (appended to gpus, returned as the current
    one); the rows after it fill in the current GPU's memory, then its MIG mode. Returns the current GPU."""
    m = _GPU_ROW_RE.match(line)
    if m:
        current = {"index": int(m.group("index")), "name": m.group("name").strip(),
                   "memory_used_mib": None, "memory_total_mib": None, "mig_mode": None}
        gpus.append(current)
    elif current is not None and current["memory_total_mib"] is None:
        mm = _MEMORY_RE.search(line)
        if mm:
            current["memory_used_mib"] = int(mm.group(1))
            current["memory_total_mib"] = int(mm.group(2))
    elif current is not None and current["mig_mode"] is None:
        mm = _MIG_MODE_RE.match(line)
        if mm:
            current["mig_mode"] = mm.group(1)
    return current


def _check_memory(entry: dict, what: str) -> None:
    for key in ("memory_total_mib", "memory_used_mib", "memory_free_mib"):
        value = entry.get(key)
        if value is not None and value < 0:
            raise NvidiaSmiParseError(f"{what} reports {key.replace('_mib', '').replace('_', '.')} {value} MiB: "
                                      "negative memory is not a reading, the output is corrupt")


def check_gpus(gpus: list[dict], source: str) -> None:
    """Raise NvidiaSmiParseError when a capture contradicts itself: a GPU index or UUID listed twice, or
    negative memory. Facts built from such a capture would pin, plan and preflight the wrong GPU."""
    seen_index: dict = {}
    seen_uuid: dict = {}
    for position, gpu in enumerate(gpus):
        index, uuid = gpu.get("index"), gpu.get("uuid")
        if index in seen_index:
            raise NvidiaSmiParseError(f"{source} lists GPU index {index} twice (entries {seen_index[index] + 1} "
                                      f"and {position + 1}): a corrupt or concatenated capture")
        seen_index[index] = position
        if uuid:
            if uuid in seen_uuid:
                raise NvidiaSmiParseError(f"{source} lists GPU UUID {uuid} twice (entries {seen_uuid[uuid] + 1} "
                                          f"and {position + 1}): a corrupt or concatenated capture")
            seen_uuid[uuid] = position
        _check_memory(gpu, f"GPU {index} in {source}")


# --- nvidia-smi -L and MIG devices ------------------------------------------------------------
# "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)" and, under it, one line per MIG device:
# "  MIG 3g.40gb     Device  0: (UUID: MIG-...)"; R450/R460 printed "MIG-GPU-<uuid>/<gi>/<ci>" UUIDs.
_LIST_GPU_RE = re.compile(r"^GPU\s+(\d+):\s+(.*?)\s+\(UUID:\s*(GPU-[^)\s]+)\)$")
_LIST_MIG_RE = re.compile(r"^MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s*(MIG-[^)\s]+)\)$")


def parse_list(text: str) -> list[dict]:
    """Parse `nvidia-smi -L`: [{index, name, uuid, mig_devices: [{device, profile, uuid}]}].

    Other lines (warnings some drivers print) are ignored; a MIG line before any GPU line, or an index
    or UUID listed twice, raises NvidiaSmiParseError."""
    gpus: list[dict] = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        m = _LIST_GPU_RE.match(line)
        if m:
            gpus.append({"index": int(m.group(1)), "name": m.group(2), "uuid": m.group(3), "mig_devices": []})
            continue
        m = _LIST_MIG_RE.match(line)
        if m:
            if not gpus:
                raise NvidiaSmiParseError(f"nvidia-smi -L lists a MIG device before any GPU: {line[:200]!r}")
            gpus[-1]["mig_devices"].append({"device": int(m.group(2)), "profile": m.group(1), "uuid": m.group(3)})
    check_gpus(gpus, "nvidia-smi -L")
    uuids = [d["uuid"] for g in gpus for d in g["mig_devices"]]
    for uuid in uuids:
        if uuids.count(uuid) > 1:
            raise NvidiaSmiParseError(f"nvidia-smi -L lists MIG device {uuid} twice: a corrupt or concatenated capture")
    return gpus


def mig_devices(list_text: str, table_text: str | None) -> list[dict]:
    """Every MIG device of the node, each with the memory of its slice, from `nvidia-smi -L` (UUIDs) and
    the plain table's "MIG devices:" box (memory), joined on (GPU index, MIG device index).

    Returns [{uuid, name, profile, gpu_index, gpu_uuid, device, gpu_instance, compute_instance,
    memory_total_mib, memory_used_mib, memory_free_mib}]: name is the parent's name + " MIG " + the
    profile, as CUDA names the device. Compute instances of one GPU instance share its memory (the box
    says "Shared Memory-Usage"), so each of them reports the whole GPU instance's memory.
    """
    listed = [(g, d) for g in parse_list(list_text) for d in g["mig_devices"]]
    if not listed:
        return []
    if not table_text:
        raise NvidiaSmiParseError("nvidia-smi -L lists MIG devices but no nvidia-smi table was given for their memory")
    rows = {(r["gpu"], r["device"]): r for r in parse_table(table_text)["mig_devices"]}
    out = []
    for gpu, dev in listed:
        row = rows.get((gpu["index"], dev["device"]))
        if row is None:
            raise NvidiaSmiParseError(f"nvidia-smi -L lists MIG device {dev['device']} of GPU {gpu['index']} "
                                      f"({dev['uuid']}) but the table's MIG box has no row for it")
        used, total = row["memory_used_mib"], row["memory_total_mib"]
        out.append({"uuid": dev["uuid"], "name": f"{gpu['name']} MIG {dev['profile']}", "profile": dev["profile"],
                    "gpu_index": gpu["index"], "gpu_uuid": gpu["uuid"], "device": dev["device"],
                    "gpu_instance": row["gpu_instance"], "compute_instance": row["compute_instance"],
                    "memory_total_mib": total, "memory_used_mib": used, "memory_free_mib": total - used})
    return out


# --- failures --------------------------------------------------------------------------------
_FAILURES = (
    # (category, pattern, message, fix)
    ("driver_library_version_mismatch",
     re.compile(r"Driver/library version mismatch", re.I),
     "NVML (user-space driver library) and the loaded kernel module have different versions: "
     "the node is half-upgraded (driver packages changed, old module still loaded).",
     "Reboot the node (or stop every GPU user and reload the module: rmmod nvidia_uvm nvidia_drm "
     "nvidia_modeset nvidia && modprobe nvidia); if it persists, reinstall one driver version so "
     "user-space and kernel module match."),
    ("no_driver_communication",
     re.compile(r"couldn'?t communicate with the NVIDIA driver|NVIDIA driver is not loaded", re.I),
     "nvidia-smi is installed but cannot reach a loaded NVIDIA kernel driver.",
     "On a GPU host: install the driver for this kernel (DKMS/headers), make sure nouveau is "
     "blacklisted, reboot, check `lsmod | grep nvidia`. In a container: start it with GPU access "
     "(--gpus / the NVIDIA container runtime or CDI). On a CPU-only node this is expected: "
     "remove nvidia-smi or use the CPU profile."),
    ("nvml_library_not_found",
     re.compile(r"NVML Shared Library Not Found|libnvidia-ml\.so[.\d]*: cannot open", re.I),
     "nvidia-smi cannot load libnvidia-ml (the driver's user-space library is missing).",
     "Install the driver's user-space packages matching the kernel module (Debian: "
     "libnvidia-ml1 / nvidia-smi; NVIDIA repo: the full driver branch); in a container, use the "
     "NVIDIA container toolkit so the host's library is mounted."),
    ("nvml_unknown_error",
     re.compile(r"Failed to initialize NVML: Unknown Error", re.I),
     "NVML failed with 'Unknown Error' - typical inside a container that lost access to "
     "/dev/nvidia* (e.g. after `systemctl daemon-reload` on the host with cgroup device rules).",
     "Restart the container; for a lasting fix follow the NVIDIA container toolkit notes on "
     "systemd cgroup management (or use CDI). On bare metal: check /dev/nvidia* permissions, reboot."),
    ("no_devices_found",
     re.compile(r"No devices were found", re.I),
     "The driver is loaded but sees no GPU.",
     "Check `lspci | grep -i nvidia`; a GPU that fell off the bus (Xid 79 in dmesg) needs a "
     "reset/reboot; in a container the device list (NVIDIA_VISIBLE_DEVICES / --gpus) may be empty."),
    ("permission_denied",
     re.compile(r"Insufficient Permissions|Permission denied", re.I),
     "nvidia-smi lacks permission to open the GPU devices.",
     "Run as root or give the user access to /dev/nvidia* (video group / udev rule)."),
    ("query_field_unknown",
     re.compile(r"is not a valid field to query", re.I),
     f"nvidia-smi does not know a field of the role's query ({QUERY_GPU_COMMAND}): the loaded driver is "
     "older than the query.",
     "Install the pinned driver (nvidia_driver_install: true, pin in versions.yaml) and run the deploy again."),
    ("not_installed",
     re.compile(r"nvidia-smi: (command )?not found|No such file or directory", re.I),
     "nvidia-smi is not installed (no NVIDIA driver user-space on this node).",
     "Install the NVIDIA driver (the driver role) on GPU nodes; on CPU nodes this is expected."),
)

# Exit codes nvidia-smi uses (its man page: the code is the NVML return code; 127 is the shell's).
EXIT_CODES = {
    "no_driver_communication": 9,          # NVML_ERROR_DRIVER_NOT_LOADED
    "driver_library_version_mismatch": 18,  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
    "no_devices_found": 6,                 # NVML_ERROR_NOT_FOUND
    "nvml_library_not_found": 12,          # NVML_ERROR_LIBRARY_NOT_FOUND
    "permission_denied": 4,                # NVML_ERROR_NO_PERMISSION
    "nvml_unknown_error": 255,             # "Other error or internal driver error"
    "query_field_unknown": 2,              # "A supplied argument or flag is invalid"
    "not_installed": 127,                  # the shell: command not found
}


def diagnose_failure(stdout: str, stderr: str, rc: int) -> dict | None:
    """Map a failed nvidia-smi run to {category, message, fix, rc, output}; None when it succeeded."""
    text = "\n".join(part for part in (stdout or "", stderr or "") if part).strip()
    if rc == 0 and not any(p.search(text) for _, p, _, _ in _FAILURES[:5]):
        return None
    for category, pattern, message, fix in _FAILURES:
        if pattern.search(text):
            return {"category": category, "message": message, "fix": fix, "rc": rc, "output": text}
    if rc == 127:
        category, message, fix = _FAILURES[-1][0], _FAILURES[-1][2], _FAILURES[-1][3]
        return {"category": category, "message": message, "fix": fix, "rc": rc, "output": text}
    first = text.splitlines()[0] if text else "(no output)"
    return {"category": "unknown", "message": f"nvidia-smi failed (rc={rc}): {first}",
            "fix": "Run nvidia-smi by hand on the node and check `dmesg | grep -i -E 'nvrm|xid'`.",
            "rc": rc, "output": text}


def parse_any(text: str) -> list[dict]:
    """GPUs from either CSV (--query-gpu) or table output, in the parse_query_gpu shape."""
    if _DRIVER_RE.search(text or "") and "|" in (text or ""):
        table = parse_table(text)
        return [{
            "index": g["index"], "uuid": None, "name": g["name"],
            "memory_total_mib": g["memory_total_mib"], "memory_used_mib": g["memory_used_mib"],
            "memory_free_mib": (g["memory_total_mib"] - g["memory_used_mib"]
                                if g["memory_total_mib"] is not None and g["memory_used_mib"] is not None
                                else None),
            "driver_version": table["driver_version"], "mig_mode": g["mig_mode"],
        } for g in table["gpus"]]
    return parse_query_gpu(text)


def gpu_facts(stdout: str, stderr: str, rc: int, present: bool, list_stdout: str | None = None,
              table_stdout: str | None = None) -> dict:
    """The facts the gpu_facts role sets from one nvidia-smi run (QUERY_GPU_COMMAND, or the table), and,
    when given, `nvidia-smi -L` (list_stdout) with the plain table (table_stdout) for MIG.

    present=False (no nvidia-smi on the node) → a CPU node, no error. nvidia-smi present but failing
    (or printing something unparseable or self-contradictory) → CPU profile with `error` set; the role
    decides if fatal. `mig_devices` lists the MIG devices (mig_devices()), `mig_gpus` the indexes of
    the GPUs in MIG mode, by the query's mig.mode.current or the table (whole-GPU pins on them are
    refused: CUDA sees only their MIG devices). With mig_gpus empty from the query alone, -L and the
    table have nothing to add: the role runs them only on a node with a GPU in MIG mode.
    """
    facts = {"gpu_count": 0, "gpus": [], "driver_version": None, "profile": "cpu", "error": None,
             "mig_devices": [], "mig_gpus": []}
    if not present:
        return facts
    failure = diagnose_failure(stdout, stderr, rc)
    if failure is not None:
        facts["error"] = {k: failure[k] for k in ("category", "message", "fix")}
        return facts
    try:
        gpus = parse_any(stdout)
        migs = mig_devices(list_stdout, table_stdout) if list_stdout else []
        table_gpus = []
        if table_stdout and _DRIVER_RE.search(table_stdout):
            try:
                table_gpus = parse_table(table_stdout)["gpus"]
            except NvidiaSmiParseError:
                if migs:
                    raise
    except NvidiaSmiParseError as exc:
        facts["error"] = {"category": "unparseable_output",
                          "message": f"nvidia-smi output could not be parsed: {exc}",
                          "fix": "Check the nvidia-smi version and the exact query the role ran: "
                                 + QUERY_GPU_COMMAND}
        return facts
    if not gpus:
        facts["error"] = {"category": "no_devices_found", "message": "nvidia-smi listed no GPU.",
                          "fix": _FAILURES[4][3]}
        return facts
    drivers = {g["driver_version"] for g in gpus if g["driver_version"]}
    mig_gpus = sorted({g["index"] for g in [*gpus, *table_gpus] if g.get("mig_mode") == "Enabled"}
                      | {d["gpu_index"] for d in migs})
    facts.update(gpu_count=len(gpus), gpus=gpus, profile="gpu",
                 driver_version=sorted(drivers)[0] if drivers else None, mig_devices=migs, mig_gpus=mig_gpus)
    return facts
