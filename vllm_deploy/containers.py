"""The instance record as a container sees it (Compose mode).

The record is the same one the systemd unit renders; only what differs inside a container is
translated here, so the two templates cannot drift apart:

* the image's ENTRYPOINT already runs ``python -m vllm.entrypoints.openai.api_server``, so the
  command is the record's argv after the module;
* the server listens on all of the container's interfaces (``--host 0.0.0.0``) and the host-side
  port mapping binds the record's address, so ``bind: 127.0.0.1`` still means local-only;
* the GPUs are selected by the Compose device request: inside the container they are renumbered
  from 0, so the record's ``CUDA_VISIBLE_DEVICES`` (host indexes) must not be passed on.
"""

from __future__ import annotations

from typing import Any

ENTRYPOINT_MODULE = "vllm.entrypoints.openai.api_server"
# Exported into the container so the image's HEALTHCHECK probes the instance's port.
HEALTH_PORT_VAR = "VLLM_DEPLOY_PORT"


def container_args(record: dict[str, Any]) -> list[str]:
    """The record's argv for the image's ENTRYPOINT: no `-m MODULE`, and `--host 0.0.0.0`."""
    argv = [str(a) for a in record["argv"]]
    if argv[:2] == ["-m", ENTRYPOINT_MODULE]:
        argv = argv[2:]
    elif "-m" in argv[:1]:
        raise ValueError(f"instance {record.get('name')!r} runs module {argv[1]!r}, the image runs {ENTRYPOINT_MODULE}")
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--host" and i + 1 < len(argv):
            out += ["--host", "0.0.0.0"]
            skip = True
        elif arg.startswith("--host="):
            out.append("--host=0.0.0.0")
        else:
            out.append(arg)
    return out


def container_env(record: dict[str, Any]) -> dict[str, str]:
    """The record's environment for the container (no host GPU indexes; the health port and a persistent
    Triton cache added)."""
    env = {k: str(v) for k, v in record["env"].items() if k != "CUDA_VISIBLE_DEVICES"}
    env[HEALTH_PORT_VAR] = str(record["port"])
    # Triton caches compiled kernels under $HOME, which is the container's own and gone at every
    # recreate: keep them in the mounted VLLM_CACHE_ROOT (a systemd unit's HOME persists already).
    if "VLLM_CACHE_ROOT" in env:
        env.setdefault("TRITON_CACHE_DIR", env["VLLM_CACHE_ROOT"].rstrip("/") + "/triton")
    return dict(sorted(env.items()))


def device_ids(record: dict[str, Any]) -> list[str]:
    """GPU indexes or UUIDs for the Compose device request, as strings (Compose requires strings)."""
    return [str(d) for d in record["devices"]]


def compose_escape(value: Any) -> Any:
    """A value as a Compose file must spell it: Compose interpolates `$VAR`/`${VAR}` in every string,
    so a literal `$` (a served name, a path, a flag's JSON) is written `$$`. Mappings and lists recursively."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, dict):
        return {compose_escape(k): compose_escape(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [compose_escape(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise TypeError(f"a Compose value is a string, number, boolean, list or mapping, not {type(value).__name__}")
