"""Filters for the rollout: the fleet's waves (vllm_deploy.waves), the diagnosis of a failed start, the
degrade ladder and the rollback's backups, rebuild-node.yml's batches.

Registered by @_filter (plugins/plugin_utils/_filters.py); an error names the filter."""

from __future__ import annotations

from ansible_collections.vllm_deploy.fleet.plugins.plugin_utils._filters import FilterRegistry, expect, plain
from vllm_deploy import instances, ladder, models

_filter = FilterRegistry()


@_filter
def vllm_diagnose(text):
    """A vLLM server log → {category, summary, figures, fix, phase, phase_confidence, action, ...}."""
    from vllm_deploy import diagnose

    expect(text, (str, bytes), "the log text")
    return diagnose.diagnose(text or "").to_dict()


@_filter
def vllm_degrade_step(flags, diagnosis, engine, floors=None, tried=None):
    """The degrade ladder's next rung for a failed start (None when not about memory or exhausted)."""
    return ladder.next_step(flags or {}, diagnosis or {}, engine=engine, floors=floors, tried=tried)


@_filter
def vllm_is_memory_failure(diagnosis):
    """Whether the degrade ladder can act on a diagnosis (memory categories); others roll back."""
    expect(diagnosis, (dict,), "diagnosis")
    return ladder.is_memory_failure(diagnosis)


@_filter
def vllm_backups_of(entries, name):
    """The files a run replaced for an instance (Ansible's backups), to restore on rollback or keep."""
    expect(entries, (list,), "entries")
    expect(name, (str,), "name")
    return ladder.backups_of(entries, name)


@_filter
def vllm_record_degraded(record, flags):
    """The instance record a degrade-ladder rung runs: other flags, argv recomputed, marked degraded —
    the same record a later run rebuilds from the ladder's saved outcome, so the unit does not change."""
    return instances.apply_degraded(record, {"requested_flags": record["flags"], "flags": flags})


@_filter
def vllm_degraded_outcomes(slurped):
    """{instance: {requested_flags, flags}} from the slurped /etc/vllm/<instance>.degraded.json files."""
    return models.degraded_outcomes(slurped or [])


@_filter
def vllm_rollout_view(hosts, hostvars, reachable):
    """The fleet view vllm_rollout_replicas reads, from every play host's records, changed names
    (`__vllm_serve_changed_names`) and changed instances not running (`__vllm_serve_not_serving`: out
    of rotation, started in the first wave); a host not in `reachable` (failed or unreachable) is down."""
    expect(hosts, (list,), "the play's hosts")
    expect(reachable, (list,), "the reachable hosts")
    view = {}
    for host in hosts or []:
        facts = hostvars[host]
        view[host] = {"records": plain(facts.get("vllm_plan_instances") or []),
                      "changed": list(facts.get("__vllm_serve_changed_names") or []),
                      "out_of_rotation": list(facts.get("__vllm_serve_not_serving") or []),
                      "reachable": host in (reachable or [])}
    return view


@_filter
def vllm_rollout_replicas(view):
    """{host: {records, changed, reachable, out_of_rotation}} → one replica per engine (a multi-node instance once)."""
    from vllm_deploy import waves

    expect(view, (dict,), "the fleet view")
    return waves.fleet_replicas(plain(view or {}))


@_filter
def vllm_rollout_waves(replicas, max_unavailable=1, canary=True, canary_ids=None, may_go_dark=None):
    """vllm_rollout_replicas' list → the rollout plan (waves, canary, skipped, blocked, dark, budget), and its
    `lines` as the deploy prints them before the first restart."""
    from vllm_deploy import waves

    expect(replicas, (list,), "the replicas")
    expect(canary, (bool,), "canary")
    expect(canary_ids, (list, str), "vllm_rollout_canary")
    expect(may_go_dark, (list, str), "vllm_rollout_may_go_dark")
    plan = waves.plan_waves(plain(replicas or []), max_unavailable=plain(max_unavailable),
                            canary=True if canary is None else canary, canary_ids=plain(canary_ids),
                            may_go_dark=plain(may_go_dark) or [])
    return {**plan, "lines": waves.wave_lines(plan)}


@_filter
def vllm_rollout_errors(values, host=""):
    """Every problem with the rollout's inputs (budget, canaries, models that may go dark), one line each."""
    from vllm_deploy import waves

    expect(values, (dict,), "the rollout's inputs")
    expect(host, (str,), "host")
    return waves.rollout_errors(plain(values or {}), host=host)


@_filter
def vllm_rollout_host_wave(records, wave, host):
    """The host's records that restart in this wave, in the wave's order."""
    from vllm_deploy import waves

    expect(records, (list,), "the host's records")
    expect(wave, (list,), "the wave")
    return waves.host_wave(plain(records or []), list(wave or []), str(host))


@_filter
def vllm_rollout_slots(wave):
    """How many instances the busiest host of the wave restarts (one after another)."""
    from vllm_deploy import waves

    expect(wave, (list,), "the wave")
    return waves.wave_slots(list(wave or []))


@_filter
def vllm_rollout_not_restarted(records, changed, restarted, host):
    """The host's changed records the rollout did not restart (their files go back when it stops)."""
    from vllm_deploy import waves

    expect(records, (list,), "the host's records")
    expect(changed, (list,), "the changed instances")
    expect(restarted, (list,), "the restarted instances")
    return waves.not_restarted(plain(records or []), list(changed or []), list(restarted or []), str(host))


@_filter
def vllm_rollout_canary_servers(canary_ids, hostvars):
    """The gateway servers (backend/server) of the plan's single-host canaries ("HOST/NAME")."""
    from vllm_deploy import gateway

    expect(canary_ids, (list,), "the canaries")
    out = []
    for rid in canary_ids or []:
        host, _, name = str(rid).partition("/")
        records = [r for r in plain(hostvars[host].get("vllm_plan_instances") or []) if r["name"] == name]
        if records and "multinode" not in records[0]:
            out.append(gateway.server_ref(records[0], host))
    return out


@_filter
def vllm_rebuild_batch_problems(hosts, hostvars, serial=1, max_unavailable=1, may_go_dark=None):
    """rebuild-node.yml's batches (`serial` hosts at a time, in play order) checked against the rollout's
    budget, from the inventory alone: one line per batch that takes too many replicas of a model out."""
    from vllm_deploy import gateway, waves

    expect(hosts, (list,), "the play's hosts")
    hosts = list(hosts or [])
    size = str(serial).strip()
    if size.endswith("%"):
        size = max(1, int(len(hosts) * float(size[:-1]) / 100))
    else:
        size = int(size)
    if size < 1:
        raise ValueError(f"rebuild_node_serial: {serial!r} must be a count >= 1 or a percentage like 25%")
    view = {}
    for host in hosts:
        facts = hostvars[host]
        view[host] = {"records": gateway.node_records(plain(facts.get("vllm_instances") or []),
                                                      plain(facts.get("vllm_models") or {}),
                                                      plain(facts.get("vllm_multinode_instances") or []), host)}
    replicas = waves.fleet_replicas(view)
    batches = [hosts[i:i + size] for i in range(0, len(hosts), size)]
    return waves.node_batch_problems(replicas, batches, max_unavailable=plain(max_unavailable),
                                     may_go_dark=plain(may_go_dark) or [])


class FilterModule:
    def filters(self):
        return _filter.filters()
