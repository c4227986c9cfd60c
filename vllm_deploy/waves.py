"""The fleet's rollout waves: which changed instances restart together, so that no model goes dark.

A change to a fleet-wide flag changes every replica of a model (every instance that serves its
served name, across hosts, behind one gateway backend); restarting them all at once takes the
model out of service. The planner orders the restarts into waves, Kubernetes' maxUnavailable
semantics per model:

    fleet_replicas(view)                  -> [{id, host, hosts, name, model, changed, up, ...}]
    plan_waves(replicas, max_unavailable=1, canary=True, canary_ids=None, may_go_dark=())
                                          -> {waves, canary, skipped, blocked, dark, budget, replicas, ...}
    wave_lines(plan)                      -> the lines printed before the first restart (and by --check)
    estimate_seconds(plan, seconds)       -> the rollout's wall time, hosts restarting in parallel

A replica's id is "HOST/NAME"; a multi-node instance is one replica (one engine), named by rank 0's
host, as the gateway names its server. Pure functions: no I/O, no randomness, same input -> same plan.

Waves SPREAD over hosts: the deploy restarts a wave on every host at once, but each host restarts its
own instances of the wave one after another (wave_slots), so a wave lasts as long as its busiest host
takes. The planner therefore gives each wave as many different hosts as it can. With the README layout
(the same instances of models a, b, c, d on every host), 100 hosts and budget 1, that is 100 waves of
4 instances on 4 different hosts: 100 x 60 s = 6000 s at 60 s a restart. The earlier packing put a
wave on the fewest hosts (the canary h1/a..h1/d, then one host's 4 instances per wave): also 100 waves,
but each 4 restarts in a row, 400 x 60 s = 24000 s.
"""

from __future__ import annotations

import re
from heapq import heapify, heappop, heappush, heapreplace
from fractions import Fraction
from typing import Any, Iterable

from vllm_deploy._validation import _closest, _is_int

BUDGET_VAR = "vllm_rollout_max_unavailable"
CANARY_VAR = "vllm_rollout_canary"
DARK_VAR = "vllm_rollout_may_go_dark"
BUDGET_FIX = "use a count >= 1 like 1 or a percentage like 25%"
_COUNT_RE = re.compile(r"^\d+$")
_PERCENT_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*%$")
# Lines name a few ids and count the rest: a 1000-host wave must stay one readable line.
_SHOWN = 8


def _names(items: Iterable[str], shown: int = _SHOWN) -> str:
    items = list(items)
    if len(items) <= shown:
        return ", ".join(items)
    return f"{', '.join(items[:shown])} and {len(items) - shown} more"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def fleet_replicas(view: dict[str, Any]) -> list[dict[str, Any]]:
    """One replica per engine of the fleet, in input order (hosts in dict order, records in list order).

    `view`: {host: {"records": [instance records], "changed": [instance names whose files changed],
    "reachable": bool (default True), "out_of_rotation": [instance names] (default [])}}.

    A multi-node instance appears on each of its hosts but is one engine: one replica, at the place of
    its first appearance, changed if it changed on any of its hosts, up only if every one of its hosts
    is reachable and rank 0's host does not hold it out of rotation (rank 0 is the gateway's server).
    A rank host the view does not have counts as unreachable: the rollout cannot restart that rank.
    Besides the documented keys each replica has `unreachable` (its hosts that are not reachable) and
    `out_of_rotation` (bool): plan_waves tells a replica it may restart while down from one it cannot.
    """
    replicas: dict[str, dict[str, Any]] = {}
    for host, entry in view.items():
        entry = entry or {}
        changed = set(entry.get("changed") or [])
        for record in entry.get("records") or []:
            name = record["name"]
            hosts = list((record.get("multinode") or {}).get("hosts") or [host])
            rid = f"{hosts[0]}/{name}"
            replica = replicas.get(rid)
            if replica is None:
                rank0 = view.get(hosts[0]) or {}
                unreachable = [h for h in hosts if h not in view or not (view[h] or {}).get("reachable", True)]
                out = name in (rank0.get("out_of_rotation") or [])
                replica = replicas[rid] = {
                    "id": rid, "host": hosts[0], "hosts": hosts, "name": name,
                    "model": record["model"]["served_name"], "changed": False,
                    "up": not unreachable and not out, "unreachable": unreachable, "out_of_rotation": out,
                }
            if name in changed:
                replica["changed"] = True
    return list(replicas.values())


def budget_for(max_unavailable: Any, total: int) -> int:
    """How many of a model's `total` replicas may be out of rotation at once (before subtracting those
    already down): a count, or a percentage of the fleet's replicas of the model, rounded down, at
    least 1, at most all. ValueError naming vllm_rollout_max_unavailable for anything else."""
    value = max_unavailable
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and _COUNT_RE.match(value.strip()):
        value = int(value.strip())
    if _is_int(value):
        if value >= 1:
            return value
    elif isinstance(value, str) and (match := _PERCENT_RE.match(value.strip())):
        percent = Fraction(match.group(1))
        if percent > 0:
            return min(total, max(1, int(total * percent / 100)))
    raise ValueError(f"{BUDGET_VAR}: {max_unavailable!r} is not a number of replicas a wave may take out of "
                     f"rotation — {BUDGET_FIX}")


def _id_list(value: Any, var: str) -> list[str]:
    """A list of strings from an inventory value; one string is a list of one (never its characters)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    raise ValueError(f"{var}: must be a list of names, got {value!r} — e.g. {var}: [name]")


def _down_reason(replica: dict[str, Any]) -> str:
    if replica.get("unreachable"):
        return f"{replica['id']} ({', '.join(replica['unreachable'])} unreachable)"
    if replica.get("out_of_rotation"):
        return f"{replica['id']} (out of rotation)"
    return f"{replica['id']} (down)"


def _blocked_why(model: str, up: list[dict[str, Any]], down: list[dict[str, Any]], total: int, budget: int,
                 no_budget: bool, last_one: bool) -> str:
    """One line: the model, its up/down replicas, why it cannot roll, and every fix that would let it."""
    state = f"{model}: {len(up)} of {total} replicas up, {len(down)} down ({_names(_down_reason(r) for r in down)})"
    bring_back = f"bring {_names(r['id'] for r in down)} back into rotation"
    if no_budget and last_one:
        return (f"{state}; the down replicas use the whole budget of {budget} and {up[0]['id']} is the last one in "
                f"rotation — {bring_back}, or raise {BUDGET_VAR} to {len(down) + 1} and add {model} to {DARK_VAR}")
    if no_budget:
        return (f"{state}, which uses its whole budget of {budget} — {bring_back}, "
                f"or raise {BUDGET_VAR} to {len(down) + 1}")
    return (f"{state}; restarting {up[0]['id']}, the last one in rotation, would take {model} dark — "
            f"{bring_back}, or add {model} to {DARK_VAR}")


def _canary_error(cid: str, by_id: dict[str, dict[str, Any]], candidates: list[str]) -> ValueError:
    replica = by_id.get(cid)
    if replica is None:
        problem = "is no instance of the fleet"
    elif not replica["changed"]:
        problem = "did not change in this run"
    else:
        problem = f"is not in rotation ({_down_reason(replica)})"
    close = _closest(cid, candidates)
    hint = f"did you mean {close}? " if close else ""
    return ValueError(f"{CANARY_VAR}: {cid!r} {problem} — {hint}name a changed replica in rotation, one of: "
                      f"{_names(candidates) or '(none)'}")


def plan_waves(replicas: list[dict[str, Any]], *, max_unavailable: Any = 1, canary: bool = True,
               canary_ids: Any = None, may_go_dark: Any = ()) -> dict[str, Any]:
    """The rollout's waves for `replicas` (fleet_replicas' list), each a list of ids restarted together.

    Only changed replicas restart. A model's budget (`max_unavailable`: a count, or a percentage of its
    replicas in the fleet) minus its replicas already down is how many of its up replicas one wave may
    take out of rotation; and a wave never takes a model's last replica in rotation out — except for a
    model in `may_go_dark`, and a model with one replica in the whole fleet (nothing else can serve it:
    its restart is an outage whatever the order, and `dark` says so).

    A changed replica that is out of rotation but reachable (new, stopped, drained) starts in a first
    wave of its own: it serves nothing, so its restart costs no capacity, and once that wave passed its
    gates it is in rotation again, so later waves count it as up (a first deploy is that one wave).
    A changed replica on an unreachable host is `skipped`: the deploy cannot restart it; it picks up
    its files on the run after the host is back. A model that cannot roll within the rules (its
    budget used up by down replicas, or only one replica in rotation) has its changed replicas
    `blocked`, each with one line naming the model, its up/down replicas and the fix.

    With `canary` the canary wave (the first, or the second after a wave of starting replicas;
    `canary_wave` is its index) holds exactly one up replica of each changed model: the one
    `canary_ids` names; else, model by model in order of first appearance, the model's first replica
    whose hosts no other canary uses, or its first replica if every one shares a host with one.
    Later waves are filled greedily (`_pack`), per model up to its budget, and spread: a host
    restarts its instances of a wave one after another while the hosts run at once, so a wave takes
    as long as its busiest host, and each pick goes to the hosts with the fewest picks in the wave so
    far (ties: see `_pack`). At budget 1 the README layout (the same models on every host, at least
    as many hosts as models) gets one instance per host in every wave: 100 hosts x 4 models is 100
    waves of one restart time each, where packing onto the hosts a wave touches (the earlier rule)
    made each of its 100 waves one host's 4 restarts in a row.

    Returns {waves: [[id]], canary: [id], skipped: [{id, why}], blocked: [{id, model, why}],
    dark: [{model, id, why}], budget: {model: allowed}, replicas: {model: total}, already_out: [id],
    canary_wave: index or None, instances: {id: {model, hosts}}} — budget and replicas for every
    model with a changed replica; instances for every replica that is in a wave.
    """
    by_id = _by_id(replicas)
    go_dark = set(_id_list(may_go_dark, DARK_VAR))
    canary_list = _id_list(canary_ids, CANARY_VAR)

    by_model: dict[str, list[dict[str, Any]]] = {}
    for replica in replicas:
        by_model.setdefault(replica["model"], []).append(replica)
    changed_models = [m for m, rs in by_model.items() if any(r["changed"] for r in rs)]
    totals = {m: len(by_model[m]) for m in changed_models}
    budget_for(max_unavailable, 1)  # a bad value is refused even when nothing changed
    # Changed replicas that serve nothing but can be reached (new, stopped, drained): started first,
    # in a wave of their own, so they serve again before any replica in rotation restarts.
    starting = {r["id"] for r in replicas
                if r["changed"] and not r["up"] and r.get("out_of_rotation") and not r.get("unreachable")}
    allowed = {m: max(0, budget_for(max_unavailable, totals[m])
                      - sum(not r["up"] and r["id"] not in starting for r in by_model[m]))
               for m in changed_models}

    candidates = [r["id"] for r in replicas if r["changed"] and r["up"]]
    chosen = _named_canaries(canary_list, by_id, candidates)
    room = _Room(by_model, starting, totals, allowed, go_dark, max_unavailable)
    # in input order: the changed replicas out of rotation it starts first, and those it cannot reach
    already_out = [rid for rid in by_id if rid in starting]
    skipped = [_skip(r) for r in replicas if r["changed"] and not r["up"] and r["id"] not in starting]
    blocked_ids = {b["id"] for b in room.blocked}
    schedule = [by_id[i] for i in candidates if i not in blocked_ids]

    canary_wave = _canary_wave(schedule, changed_models, chosen, by_id) if canary else []
    in_canary = set(canary_wave)
    rest = [r for r in schedule if r["id"] not in in_canary]
    waves = ([list(already_out)] if already_out else []) + ([canary_wave] if canary_wave else []) \
        + _pack(rest, room.cap)

    in_waves = [rid for wave in waves for rid in wave]
    return {
        "waves": waves,
        "canary": canary_wave,
        "skipped": skipped,
        "blocked": room.blocked,
        "dark": _dark(waves, by_id, starting, room.up_count, totals),
        "budget": allowed,
        "replicas": totals,
        "already_out": already_out,
        # The index of the canary wave in `waves` (after the wave that starts what serves nothing), or None.
        "canary_wave": (1 if already_out else 0) if canary_wave else None,
        "instances": {rid: {"model": by_id[rid]["model"], "hosts": list(by_id[rid]["hosts"])} for rid in in_waves},
    }


def _by_id(replicas: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_id: dict[str, dict[str, Any]] = {}
    for replica in replicas:
        if replica["id"] in by_id:
            raise ValueError(f"replica {replica['id']} is listed twice — a multi-node instance is one replica "
                             "(fleet_replicas lists it once)")
        by_id[replica["id"]] = replica
    return by_id


def _named_canaries(canary_list: list[str], by_id: dict[str, dict[str, Any]], candidates: list[str]) -> dict[str, str]:
    """{model: id} of the canaries the inventory names: each a changed replica in rotation, one per model."""
    chosen: dict[str, str] = {}
    for cid in canary_list:
        if cid not in by_id or not by_id[cid]["changed"] or not by_id[cid]["up"]:
            raise _canary_error(cid, by_id, candidates)
        model = by_id[cid]["model"]
        if model in chosen and chosen[model] != cid:
            raise ValueError(f"{CANARY_VAR}: {chosen[model]} and {cid} both serve {model} — name one canary "
                             "per model")
        chosen[model] = cid
    return chosen


class _Room:
    """Per changed model: how many up replicas one wave may take out of rotation (`cap`), how many are in
    rotation once the first wave started the ones that serve nothing (`up_count`), and the changed replicas
    that cannot roll within the rules (`blocked`)."""

    def __init__(self, by_model: dict[str, list[dict[str, Any]]], starting: set[str], totals: dict[str, int],
                 allowed: dict[str, int], go_dark: set[str], max_unavailable: Any):
        self.blocked: list[dict[str, str]] = []
        self.cap: dict[str, int] = {}
        self.up_count: dict[str, int] = {}
        for model in totals:
            reps = by_model[model]
            up = [r for r in reps if r["up"] or r["id"] in starting]   # in rotation once the first wave started them
            down = [r for r in reps if not r["up"] and r["id"] not in starting]
            self.up_count[model] = len(up)
            exempt = model in go_dark or totals[model] == 1
            self.cap[model] = allowed[model] if exempt else min(allowed[model], len(up) - 1)
            changed_up = [r for r in up if r["changed"] and r["id"] not in starting]
            if changed_up and self.cap[model] <= 0:
                why = _blocked_why(model, up, down, totals[model], budget_for(max_unavailable, totals[model]),
                                   no_budget=allowed[model] <= 0, last_one=not exempt and len(up) <= 1)
                self.blocked.extend({"id": r["id"], "model": model, "why": why} for r in changed_up)


def _skip(replica: dict[str, Any]) -> dict[str, str]:
    hosts = replica.get("unreachable") or replica["hosts"]
    return {"id": replica["id"], "why": (
        f"{replica['id']}: {', '.join(hosts)} unreachable, so it is not restarted — it takes its new files "
        "when the deploy runs again with the host back")}


def _canary_wave(schedule: list[dict[str, Any]], changed_models: list[str], chosen: dict[str, str],
                 by_id: dict[str, dict[str, Any]]) -> list[str]:
    """One replica of each changed model: the named one, else the model's first on hosts no other canary uses
    (the canaries spread too), else its first."""
    chosen = dict(chosen)
    used = {h for cid in chosen.values() for h in by_id[cid]["hosts"]}
    of_model: dict[str, list[dict[str, Any]]] = {}
    for r in schedule:
        of_model.setdefault(r["model"], []).append(r)
    for model in changed_models:
        if model in chosen or model not in of_model:
            continue
        pick = next((r for r in of_model[model] if used.isdisjoint(r["hosts"])), of_model[model][0])
        chosen[model] = pick["id"]
        used.update(pick["hosts"])
    return [r["id"] for r in schedule if chosen.get(r["model"]) == r["id"]]


def _dark(waves: list[list[str]], by_id: dict[str, dict[str, Any]], starting: set[str], up_count: dict[str, int],
          totals: dict[str, int]) -> list[dict[str, str]]:
    """The waves that take a model's last replicas in rotation out: its only replica, or one in may_go_dark."""
    dark: list[dict[str, str]] = []
    for number, wave in enumerate(waves, 1):
        taken: dict[str, list[str]] = {}
        for rid in wave:
            if rid not in starting:
                taken.setdefault(by_id[rid]["model"], []).append(rid)
        for model, ids in taken.items():
            if len(ids) < up_count[model]:
                continue
            for rid in ids:
                if totals[model] == 1:
                    why = (f"{model} has one replica in the fleet ({rid}): wave {number} takes it out of service "
                           "for its restart — add a replica on another host to roll it without an outage")
                else:
                    why = (f"{model} is in {DARK_VAR}: wave {number} takes its last replicas in rotation out "
                           f"({', '.join(ids)}) — it serves nothing until they pass their gate")
                dark.append({"model": model, "id": rid, "why": why})
    return dark


def _pack(replicas: list[dict[str, Any]], cap: dict[str, int]) -> list[list[str]]:
    """Greedy waves, spread over hosts: the deploy runs a wave on every host at once and each host its
    own instances of the wave one after another, so a wave lasts as long as its busiest host.

    A wave takes replicas while a model has room (`cap`: how many of its replicas one wave may take).
    Each pick is the replica with room that comes first by:
      1. the fewest picks in this wave on its hosts (its busiest host's: a multi-node replica counts
         on every one of its hosts) — a host the wave does not touch yet, while there is one;
      2. its model has the fewest replicas left on untouched hosts (a model about to run out of them
         goes first: 3 hosts x models a, b, c after the canary h1/a, h2/b, h3/c would otherwise
         take h1/b, h2/a and then find c only on h1 and h2);
      3. its hosts have the most replicas still to restart (a host left for the end restarts them all
         in one wave, one after another: 5 hosts x 4 models would end with h5's 4 in a row);
      4. input order.
    So at budget 1 the README layout with at least as many hosts as models gets one instance a host
    in every wave.

    Indexed, so 1000 hosts plan in well under a second: per model a heap of its replicas keyed by
    (-left, order) and one of those on hosts the wave touches keyed by (picks, -left, order), and a
    heap over the models' best keys with one live entry per model. Within a wave a replica's key only
    grows (picks go up, left goes down), so stale entries are fixed when they surface; a model's
    count of untouched replicas only drops, and each drop pushes a fresh entry for it. The wave lists
    its ids in the order they were picked."""
    on_host: dict[str, list[int]] = {}
    for i, r in enumerate(replicas):
        for h in r["hosts"]:
            on_host.setdefault(h, []).append(i)
    left = {h: len(ix) for h, ix in on_host.items()}   # per host: its replicas not yet in a wave
    ready: dict[str, list[tuple[int, int]]] = {}        # per model: (-most left on its hosts, index)
    for i, r in enumerate(replicas):
        ready.setdefault(r["model"], []).append((-max(left[h] for h in r["hosts"]), i))
    for heap in ready.values():
        heapify(heap)
    if any(cap.get(m, 0) <= 0 for m in ready):
        raise ValueError("_pack: a model without room in a wave cannot be packed (plan_waves blocks it)")
    unplaced = {m: len(heap) for m, heap in ready.items()}
    placed = [False] * len(replicas)

    waves: list[list[str]] = []
    while any(unplaced.values()):
        wave = _Wave(replicas, cap, on_host, left, ready, unplaced, placed)
        waves.append(wave.fill())
        for m, heap in wave.busy.items():               # the next wave starts with no picks
            for _, _, i in heap:
                heappush(ready[m], (-max(left[h] for h in replicas[i]["hosts"]), i))
    return waves


class _Wave:
    """One wave of _pack's: its picks, and the heaps that find the next one (see _pack)."""

    def __init__(self, replicas: list[dict[str, Any]], cap: dict[str, int], on_host: dict[str, list[int]],
                 left: dict[str, int], ready: dict[str, list[tuple[int, int]]], unplaced: dict[str, int],
                 placed: list[bool]):
        self.replicas, self.cap, self.on_host, self.left = replicas, cap, on_host, left
        self.ready, self.unplaced, self.placed = ready, unplaced, placed
        self.load: dict[str, int] = {}                  # per host: picks in this wave
        self.busy: dict[str, list[tuple[int, int, int]]] = {m: [] for m in ready}   # (picks, -left, index)
        self.free = dict(unplaced)                      # per model: its free replicas on untouched hosts
        self.gone: set[int] = set()                     # replicas on hosts the wave touches
        self.taken = dict.fromkeys(ready, 0)
        self.lower: dict[str, tuple[int, int, int]] = {}  # per model: a lower bound of its best key
        self.version = dict.fromkeys(ready, 0)          # per model: its one live entry in `tops`
        self.tops: list[tuple[tuple[int, int, int, int], str, int]] = []

    def key(self, i: int) -> tuple[int, int, int]:
        hosts = self.replicas[i]["hosts"]
        return max(self.load.get(h, 0) for h in hosts), -max(self.left[h] for h in hosts), i

    def best(self, m: str) -> tuple[int, int, int] | None:
        """Model m's best replica now (its key), its heaps' stale tops brought up to date."""
        heap = self.ready[m]
        while heap:
            current = self.key(heap[0][1])
            if current[0] > 0:                          # its host has a pick: to the busy heap
                heappop(heap)
                heappush(self.busy[m], current)
            elif current[1:] > heap[0]:
                heapreplace(heap, current[1:])
            else:
                return current
        heap = self.busy[m]
        while heap:
            current = self.key(heap[0][2])
            if current > heap[0]:
                heapreplace(heap, current)
            else:
                return current
        return None

    def rank(self, m: str, b: tuple[int, int, int]) -> tuple[int, int, int, int]:
        """The pick order: picks on its hosts, the model's replicas on untouched hosts, -left, input order."""
        return b[0], self.free[m], b[1], b[2]

    def push(self, m: str, b: tuple[int, int, int]) -> None:
        self.lower[m] = b
        self.version[m] += 1
        heappush(self.tops, (self.rank(m, b), m, self.version[m]))

    def fill(self) -> list[str]:
        """The wave's ids, in the order they were picked."""
        for m in self.ready:
            if (b := self.best(m)) is not None:
                self.push(m, b)
        wave: list[str] = []
        while self.tops:
            stored, m, v = heappop(self.tops)
            if v != self.version[m] or self.taken[m] >= self.cap[m] or (b := self.best(m)) is None:
                continue
            if self.rank(m, b) > stored:
                self.push(m, b)
                continue
            heappop(self.ready[m] if b[0] == 0 else self.busy[m])
            wave.append(self.pick(m, b))
            if self.taken[m] < self.cap[m]:
                self.push(m, b)
        return wave

    def pick(self, m: str, b: tuple[int, int, int]) -> str:
        """Put replica b[2] of model m in the wave: its hosts' replicas are no longer on untouched hosts."""
        i = b[2]
        r = self.replicas[i]
        self.placed[i] = True
        self.taken[m] += 1
        self.unplaced[m] -= 1
        if b[0] == 0:
            self.free[m] -= 1
        for h in r["hosts"]:
            if not self.load.get(h):
                for j in self.on_host[h]:
                    if not self.placed[j] and j not in self.gone:
                        self.gone.add(j)
                        mj = self.replicas[j]["model"]
                        self.free[mj] -= 1
                        if self.taken[mj] < self.cap[mj] and mj in self.lower:
                            self.push(mj, self.lower[mj])
            self.load[h] = self.load.get(h, 0) + 1
            self.left[h] -= 1
        return r["id"]


def _budget_text(budget: dict[str, int]) -> str:
    values = set(budget.values())
    if len(values) == 1:
        return f"{_plural(values.pop(), 'replica')} of each model per wave"
    return ", ".join(f"{m} {n}" for m, n in budget.items())


def wave_lines(plan: dict[str, Any]) -> list[str]:
    """What the operator reads before the first restart (and with --check): a header, one line per wave,
    then one per skipped replica, per blocked model and per replica whose restart takes its model dark."""
    waves = plan.get("waves") or []
    count = sum(len(w) for w in waves)
    header = f"Rollout plan: {_plural(len(waves), 'wave')} for {_plural(count, 'changed instance')}"
    if plan.get("budget"):
        header += f" (budget: {_budget_text(plan['budget'])})"
    left = [f"{len(plan[k])} {k}" for k in ("blocked", "skipped") if plan.get(k)]
    if left:
        header += f"; not restarted: {', '.join(left)}"
    lines = [header]
    out = set(plan.get("already_out") or [])
    instances = plan.get("instances") or {}
    for number, wave in enumerate(waves, 1):
        tag = " (canary)" if plan.get("canary_wave") == number - 1 else ""
        if out and set(wave) <= out:
            tag = " (not serving: started first)"
        ids = list(wave)
        if len(ids) <= _SHOWN:
            lines.append(f"wave {number}{tag}: {', '.join(ids)}")
            continue
        hosts = list(dict.fromkeys(h for rid in wave for h in (instances.get(rid) or {}).get("hosts")
                                   or [rid.split('/', 1)[0]]))
        lines.append(f"wave {number}{tag}: {len(wave)} instances on {_plural(len(hosts), 'host')}: {_names(hosts)}")
    for item in plan.get("skipped") or []:
        lines.append(f"skipped {item['why']}")
    grouped: dict[str, list[str]] = {}
    for item in plan.get("blocked") or []:
        grouped.setdefault(item["why"], []).append(item["id"])
    for why, ids in grouped.items():
        lines.append(f"blocked {_names(ids)}: {why}")
    for item in plan.get("dark") or []:
        lines.append(f"dark {item['id']}: {item['why']}")
    return lines


def estimate_seconds(plan: dict[str, Any], seconds_per_restart: float | dict[str, float]) -> float:
    """The rollout's wall time: waves one after another; within a wave the hosts in parallel, each host
    restarting its own instances one after another (a multi-node instance occupies every one of its
    hosts). `seconds_per_restart`: one number for every instance, or {id: seconds} (key "default" for
    the ids it does not name)."""
    def seconds(rid: str) -> float:
        value = seconds_per_restart
        if isinstance(value, dict):
            if rid not in value and "default" not in value:
                raise ValueError(f"seconds_per_restart: no time for {rid} — give it one, or a 'default'")
            value = value.get(rid, value.get("default"))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"seconds_per_restart: {value!r} for {rid} is not a number of seconds >= 0")
        return float(value)

    instances = plan.get("instances") or {}
    total = 0.0
    for wave in plan.get("waves") or []:
        per_host: dict[str, float] = {}
        for rid in wave:
            hosts = (instances.get(rid) or {}).get("hosts") or [rid.split("/", 1)[0]]
            for h in hosts:
                per_host[h] = per_host.get(h, 0.0) + seconds(rid)
        total += max(per_host.values(), default=0.0)
    return total


def replica_id(record: dict[str, Any], host: str) -> str:
    """The plan's id of `host`'s record: HOST/NAME, or rank 0's host for a multi-node instance."""
    hosts = (record.get("multinode") or {}).get("hosts") or [host]
    return f"{hosts[0]}/{record['name']}"


def host_wave(records: list[dict[str, Any]], wave: list[str], host: str) -> list[dict[str, Any]]:
    """`host`'s records that restart in `wave`, in the wave's order: its own instances, and the
    multi-node instances it is rank 0 of (rank 0's host restarts every rank)."""
    order = {rid: i for i, rid in enumerate(wave)}
    mine = [r for r in records if replica_id(r, host) in order and replica_id(r, host).startswith(f"{host}/")]
    return sorted(mine, key=lambda r: order[replica_id(r, host)])


def wave_slots(wave: list[str]) -> int:
    """How many instances the busiest host of `wave` restarts, one after another: the deploy runs
    that many slots, each host its n-th instance in slot n, every host at once."""
    per_host: dict[str, int] = {}
    for rid in wave:
        host = rid.split("/", 1)[0]
        per_host[host] = per_host.get(host, 0) + 1
    return max(per_host.values(), default=0)


def not_restarted(records: list[dict[str, Any]], changed: list[str], restarted: list[str], host: str) -> list[dict[str, Any]]:
    """`host`'s changed records that no wave restarted (later waves, blocked, skipped, or after a
    failure): when the rollout stops, their new files go back, so that a stopped rollout leaves them
    as they were and the next run sees them changed again and resumes. A multi-node instance counts
    on rank 0's host, which restarts it."""
    return [r for r in records if r["name"] in set(changed) - set(restarted) and replica_id(r, host).startswith(f"{host}/")]


def rollout_errors(values: dict[str, Any], host: str = "") -> list[str]:
    """Play 1's check of the rollout's inputs (before any host is touched): each problem one line
    naming the host, the variable and the fix. `values`: {name: value}; a name left out is not checked."""
    where = f"{host}: " if host else ""
    errors: list[str] = []
    if BUDGET_VAR in values:
        try:
            budget_for(values[BUDGET_VAR], 1)
        except ValueError as exc:
            errors.append(f"{where}{exc}")
    for var in (CANARY_VAR, DARK_VAR):
        if var in values:
            value = values[var]
            if value is None:
                continue
            try:
                _id_list(value, var)
            except ValueError as exc:
                errors.append(f"{where}{exc}")
                continue
            if var == CANARY_VAR:
                bad = [v for v in _id_list(value, var) if "/" not in v]
                if bad:
                    errors.append(f"{where}{var}: {', '.join(bad)} — name each canary as HOST/INSTANCE, e.g. gpu1/llama")
    return errors


def node_batch_problems(replicas: list[dict[str, Any]], batches: list[list[str]], *, max_unavailable: Any = 1,
                        may_go_dark: Any = ()) -> list[str]:
    """rebuild-node.yml takes whole nodes down, a batch (`serial`) at a time: one line per batch that
    would take more of a model's replicas out of rotation than the budget allows, or a model's last
    one (the same rules as the rollout's waves; a multi-node instance is down with any of its hosts).
    A batch of one node is never refused: nothing smaller can be rebuilt.
    `replicas`: fleet_replicas' list (every replica counts as changed: the rebuild stops them all)."""
    go_dark = set(_id_list(may_go_dark, DARK_VAR))
    total: dict[str, int] = {}
    down: dict[str, int] = {}
    for r in replicas:
        total[r["model"]] = total.get(r["model"], 0) + 1
        down[r["model"]] = down.get(r["model"], 0) + (not r["up"])
    problems = []
    for number, batch in enumerate(batches, 1):
        # One node at a time is as few as a rebuild can take: what that node alone serves goes down
        # with it whatever the budget (a model on one node only, like a single-node fleet).
        if len(batch) < 2:
            continue
        hosts = set(batch)
        taken: dict[str, list[str]] = {}
        for r in replicas:
            if r["up"] and hosts & set(r["hosts"]):
                taken.setdefault(r["model"], []).append(r["id"])
        for model, ids in taken.items():
            budget = budget_for(max_unavailable, total[model])
            allowed = budget - down[model]
            up = total[model] - down[model]
            exempt = model in go_dark or total[model] == 1
            if len(ids) > allowed or (not exempt and len(ids) >= up):
                why = (f"takes {len(ids)} of {model}'s {total[model]} replicas out of rotation at once ({', '.join(ids)})"
                       + (f" with {down[model]} already down" if down[model] else "")
                       + (f": the budget is {budget}" if len(ids) > allowed else ": its last replica in rotation"))
                problems.append(f"rebuild batch {number} ({', '.join(batch)}) {why} — rebuild fewer nodes at a time "
                                f"(-e rebuild_node_serial=1), raise {BUDGET_VAR}, or list {model} in {DARK_VAR}")
    return problems
