"""The rollout's waves (vllm_deploy.waves): what an operator checks in a plan before the first restart.

Every plan is checked against the rules with an independent checker (`assert_rules`: budgets worked
out here from the rule, not by the code under test); the concrete wave counts are worked out by hand
in the comments beside them."""

from __future__ import annotations

import copy
import random
import time

import pytest
from ansible.errors import AnsibleFilterError

from conftest import filter_plugins
from vllm_deploy import waves


def rec(name, model=None, hosts=None):
    """An instance record as far as the planner reads it (instances.build_instance / multinode.rank_records)."""
    record = {"name": name, "model": {"name": model or name, "served_name": model or name}}
    if hosts:
        record["multinode"] = {"hosts": list(hosts)}
    return record


def uniform(hosts, models="abcd", changed=True):
    """The README layout: the same instances (one per model) on every host."""
    return {f"h{i}": {"records": [rec(m) for m in models], "changed": list(models) if changed else []}
            for i in range(1, hosts + 1)}


def plan(view, **kwargs):
    return waves.plan_waves(waves.fleet_replicas(view), **kwargs)


def hand_budget(max_unavailable, total):
    """The budget rule, written out again: a count, or a percentage rounded down, at least 1, at most all."""
    if isinstance(max_unavailable, str) and max_unavailable.endswith("%"):
        return min(total, max(1, total * int(max_unavailable[:-1]) // 100))
    return int(max_unavailable)


def assert_rules(replicas, result, max_unavailable=1, canary=True, may_go_dark=()):
    """(a) budget per wave, (b) every changed up replica that is not blocked in exactly one wave,
    (c) the canary wave right after the starting wave with one replica per changed model, (d) never a
    model's last replica in rotation, (f) every starting replica (changed, reachable, out of
    rotation) in a first wave of its own, counted as up from then on, plus: blocked exactly where the
    rules leave no room, skipped exactly the unreachable, dark exactly where a wave takes what is left."""
    by_id = {r["id"]: r for r in replicas}
    # Starting: changed, every host reachable, held out of rotation (new, stopped, drained). It serves
    # nothing, restarts first at no cost and is in rotation after that wave: up for the budget and
    # for the last-replica rule. Down: unreachable, or out of rotation and unchanged (not restarted,
    # so it stays out).
    starting = {r["id"] for r in replicas if r["changed"] and r["out_of_rotation"] and not r["unreachable"]}
    total, up, changed_models = {}, {}, set()
    for r in replicas:
        total[r["model"]] = total.get(r["model"], 0) + 1
        up[r["model"]] = up.get(r["model"], 0) + (bool(r["up"]) or r["id"] in starting)
        if r["changed"]:
            changed_models.add(r["model"])
    allowed = {m: hand_budget(max_unavailable, total[m]) - (total[m] - up[m]) for m in total}
    exempt = {m for m in total if m in may_go_dark or total[m] == 1}

    placed = [rid for wave in result["waves"] for rid in wave]
    assert all(result["waves"]), "an empty wave"
    assert len(placed) == len(set(placed)), "a replica in two waves"
    blocked = {b["id"] for b in result["blocked"]}
    skipped = {s["id"] for s in result["skipped"]}
    must_restart = {r["id"] for r in replicas if r["changed"] and r["up"]} - blocked
    assert set(placed) == must_restart | starting                                                  # (b)
    assert skipped == {r["id"] for r in replicas if r["changed"] and r["unreachable"]}
    assert not (blocked & starting), "a starting replica blocked"
    assert result["already_out"] == [r["id"] for r in replicas if r["id"] in starting]              # input order
    if starting:                                                                                  # (f)
        assert set(result["waves"][0]) == starting, result["waves"][0]
    rolling_waves = result["waves"][1:] if starting else result["waves"]

    for m in changed_models:
        cannot = allowed[m] <= 0 or (m not in exempt and up[m] <= 1)
        ids = {r["id"] for r in replicas if r["model"] == m and r["changed"] and r["up"]}
        assert (ids <= blocked) if cannot else not (ids & blocked), m
        assert result["budget"][m] == max(0, allowed[m]) and result["replicas"][m] == total[m]

    dark = set()
    for wave in rolling_waves:
        taken = {}
        for rid in wave:
            assert by_id[rid]["up"], (rid, "a replica out of rotation after the starting wave")
            taken[by_id[rid]["model"]] = taken.get(by_id[rid]["model"], 0) + 1
        for m, n in taken.items():
            assert n <= allowed[m], (m, n, allowed[m], wave)                                      # (a)
            if m not in exempt:
                assert up[m] - n >= 1, (m, wave)                                                  # (d)
            elif n == up[m]:
                dark |= {rid for rid in wave if by_id[rid]["model"] == m}
    assert {d["id"] for d in result["dark"]} == dark

    rolling = {by_id[rid]["model"] for rid in must_restart}
    if canary and rolling:                                                                        # (c)
        assert result["canary_wave"] == (1 if starting else 0)
        first = rolling_waves[0]
        assert first == result["canary"] == result["waves"][result["canary_wave"]]
        assert sorted(by_id[rid]["model"] for rid in first) == sorted(rolling)
    else:
        assert result["canary"] == [] and result["canary_wave"] is None


LAYOUTS = [(hosts, models) for hosts in (1, 2, 3, 10, 100) for models in ("a", "ab", "abc", "abcd")] + [(1000, "abcd")]
BUDGETS = [1, 2, "2", "25%", "50%", "100%", "150%"]


@pytest.mark.parametrize("hosts, models", LAYOUTS)
def test_readme_layouts_keep_every_rule(hosts, models):
    view = uniform(hosts, models)
    replicas = waves.fleet_replicas(view)
    for budget in BUDGETS:
        for canary in (True, False):
            result = waves.plan_waves(replicas, max_unavailable=budget, canary=canary)
            assert_rules(replicas, result, budget, canary)
            assert waves.plan_waves(copy.deepcopy(replicas), max_unavailable=budget, canary=canary) == result  # (e)


def random_fleet(seed):
    """Uneven fleets: models on some hosts only, hosts down or drained, unchanged instances, multi-node ones."""
    rng = random.Random(seed)
    hosts = [f"n{i}" for i in range(rng.randint(1, 30))]
    view = {h: {"records": [], "changed": [], "reachable": rng.random() > 0.15, "out_of_rotation": []} for h in hosts}
    for model in "abcdef"[:rng.randint(1, 6)]:
        for h in rng.sample(hosts, rng.randint(1, len(hosts))):
            name = f"{model}-{len(view[h]['records'])}"
            view[h]["records"].append(rec(name, model))
            if rng.random() > 0.2:
                view[h]["changed"].append(name)
            if rng.random() < 0.1:
                view[h]["out_of_rotation"].append(name)
    if len(hosts) >= 2 and rng.random() < 0.5:
        pair = rng.sample(hosts, 2)
        for h in pair:
            view[h]["records"].append(rec("big", "a", pair))
        view[pair[rng.randint(0, 1)]]["changed"].append("big")
    return view


@pytest.mark.parametrize("seed", range(60))
def test_uneven_fleets_keep_every_rule(seed):
    replicas = waves.fleet_replicas(random_fleet(seed))
    for budget in (1, 2, "34%", "100%"):
        for canary in (True, False):
            for dark in ((), ("a",)):
                result = waves.plan_waves(replicas, max_unavailable=budget, canary=canary, may_go_dark=dark)
                assert_rules(replicas, result, budget, canary, dark)
                assert waves.plan_waves(copy.deepcopy(replicas), max_unavailable=budget, canary=canary,
                                        may_go_dark=dark) == result


def test_100_hosts_4_models_budget_1_is_100_waves_of_4_hosts_each():
    result = plan(uniform(100))
    # Budget 1 per model: each wave one replica of each model, each on a host of its own.
    # Canary, model by model: a -> h1/a; b: h1 is used -> h2/b; c -> h3/c; d -> h4/d.
    # Then each pick: an untouched host; the model with the fewest replicas on untouched hosts; the
    # host with the most left; input order. Every wave takes one of each model, so the models stay
    # level. Round 0: h5-h100 have 4 left, h1-h4 3: wave 2 is h5/a, then (touching h5 cost b, c, d
    # one each: a tie) h6/b, h7/c, h8/d; block by block (hosts 4j-3..4j), host i of a block model i.
    # Round 1 (wave 26, every host 3 left, each model 75): h1/b (input order); touching h1 leaves c, d
    # with 74 against a's 75: c first, h2/c; then d (73 against 74), h3/d; then h4/a — host i takes
    # model i+1; a block's hosts drop to 2 left, so the next wave is the next block. Round 2 (2 left
    # each: host i has models i+2, i+3) is i+2 the same way, round 3 (one left) i+3. So wave 25r + j
    # is block j with host i on model (i + r) mod 4, r in 0..3, j in 1..25: 100 waves.
    expected = [[f"h{4 * (j - 1) + 1 + i}/{'abcd'[(i + r) % 4]}" for i in range(4)] for r in range(4) for j in range(1, 26)]
    assert result["canary"] == ["h1/a", "h2/b", "h3/c", "h4/d"]
    assert result["waves"] == expected
    assert [waves.wave_slots(w) for w in result["waves"]] == [1] * 100
    # 60 s a restart: 100 waves of one restart each = 6000 s. The earlier packing (onto the hosts a
    # wave touches) gave the canary h1/a..h1/d then one host's 4 instances a wave: also 100 waves, but
    # each 4 restarts in a row, 100 x 4 x 60 = 24000 s.
    assert waves.estimate_seconds(result, 60) == 100 * 60 == 6000
    assert result["budget"] == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert result["replicas"] == {"a": 100, "b": 100, "c": 100, "d": 100}
    assert result["dark"] == result["blocked"] == result["skipped"] == []


def test_100_hosts_4_models_25_percent_is_a_canary_then_4_waves():
    result = plan(uniform(100), max_unavailable="25%")
    # 25% of 100 = 25 per model per wave. After the canary (h1/a, h2/b, h3/c, h4/d) 99 per model are
    # left: 25 + 25 + 25 + 24, every wave filling each model's budget.
    assert [len(w) for w in result["waves"]] == [4, 100, 100, 100, 96]
    assert result["canary"] == ["h1/a", "h2/b", "h3/c", "h4/d"]
    # Wave 2: the models stay level while each untouched host costs all four one, so the hosts with
    # 4 left go first (h5-h100, in order), each with its first model with room: a on h5-h29, b on
    # h30-h54, c on h55-h79, d on h80-h100 (21); then d on the hosts with 3 left: h1/d, h2/d, h3/d
    # (h4 has only a, b, c, all full); d's 25th goes to a touched host: h5-h79 have 3 left each, and
    # h5/d comes first, so h5 restarts 2.
    assert result["waves"][1] == ([f"h{i}/a" for i in range(5, 30)] + [f"h{i}/b" for i in range(30, 55)]
                                  + [f"h{i}/c" for i in range(55, 80)] + [f"h{i}/d" for i in range(80, 101)]
                                  + ["h1/d", "h2/d", "h3/d", "h5/d"])
    # Worked the same way: wave 3 is h4/a, b on h6-h29, then c (49 against b's 49, h30 before h55) on
    # h30-h54, d (down to 25) on h55-h79, a on h80-h100, h2/a, h3/a, h1/b, and a's 25th on a touched
    # host (h30/a: 2 on h30); wave 4 is h4/b, h5/b, c on h6-h29 and h80, d on h31-h54 and h30, a on
    # h55-h79, b on h81-h100 and h3, and b's last 2 on touched hosts (h55/b, h56/b); after it every
    # host has at most one left, so wave 5 is one instance a host.
    def run(model, first, last):
        return [f"h{i}/{model}" for i in range(first, last + 1)]
    assert result["waves"][2] == (["h4/a"] + run("b", 6, 29) + run("c", 30, 54) + run("d", 55, 79) + run("a", 80, 100)
                                  + ["h2/a", "h3/a", "h1/b", "h30/a"])
    assert result["waves"][3] == (["h4/b", "h5/b"] + run("c", 6, 29) + ["h80/c"] + run("d", 31, 54) + ["h30/d"]
                                  + run("a", 55, 79) + run("b", 81, 100) + ["h3/b", "h55/b", "h56/b"])
    assert [waves.wave_slots(w) for w in result["waves"]] == [1, 2, 2, 2, 1]
    # 60 s a restart: 8 x 60 = 480 s. The earlier packing: the canary on h1 (4 in a row), then 25 hosts
    # x 4 models a wave, 4 in a row on each: 5 x 240 = 1200 s.
    assert waves.estimate_seconds(result, 60) == 480
    assert result["budget"] == {"a": 25, "b": 25, "c": 25, "d": 25}


def test_2_hosts_2_models_budget_1_put_each_wave_on_both_hosts():
    result = plan(uniform(2, "ab"))
    # Canary: a -> h1/a, b: h1 is used -> h2/b. Left: h1/b and h2/a, one on each host, in input order.
    assert result["canary"] == ["h1/a", "h2/b"]
    assert result["waves"] == [["h1/a", "h2/b"], ["h1/b", "h2/a"]]
    assert [waves.wave_slots(w) for w in result["waves"]] == [1, 1]


def test_readme_layouts_at_budget_1_restart_one_instance_per_host_per_wave():
    # With at least as many hosts as models every wave can put each model on a host of its own; the
    # planner does, so every wave takes one restart time, and each model's n replicas take n waves.
    for hosts in range(2, 101):
        for models in ("a", "ab", "abc", "abcd")[:min(4, hosts)]:
            result = plan(uniform(hosts, models))
            assert [waves.wave_slots(w) for w in result["waves"]] == [1] * len(result["waves"]), (hosts, models)
            assert len(result["waves"]) == hosts, (hosts, models)


def test_without_canary_waves_are_packed_from_the_start():
    # 10 hosts x a, b, budget 3. Wave 1: a and b level (each host touched costs both one), input
    # order: h1-h3 a, then h4-h6 b. Wave 2 (a on h4-h10, b on h1-h3 and h7-h10: 7 each): the hosts
    # with 2 left first, h7-h9 a, h10/b, then h1/b, h2/b. Wave 3 (one left on each host, a and b 4
    # each): h3/b (input order), then b has fewer (3 against 4): h7/b, h8/b, then a: h4-h6.
    # Wave 4 the rest, h9/b, h10/a. One instance a host in every wave.
    result = plan(uniform(10, "ab"), max_unavailable=3, canary=False)
    assert result["canary"] == []
    assert result["waves"] == [
        ["h1/a", "h2/a", "h3/a", "h4/b", "h5/b", "h6/b"],
        ["h7/a", "h8/a", "h9/a", "h10/b", "h1/b", "h2/b"],
        ["h3/b", "h7/b", "h8/b", "h4/a", "h5/a", "h6/a"],
        ["h9/b", "h10/a"],
    ]
    assert [waves.wave_slots(w) for w in result["waves"]] == [1, 1, 1, 1]


def test_all_replicas_at_once_still_leaves_one_in_rotation():
    # "100%" allows 10, but a model with 10 replicas keeps one in rotation: 9, then 1.
    result = plan(uniform(10, "a"), max_unavailable="100%", canary=False)
    assert [len(w) for w in result["waves"]] == [9, 1]


def uneven():
    """Model A on 3 hosts, B on 1, C on 7 hosts of which n6 and n7 are unreachable; everything changed."""
    view = {f"n{i}": {"records": [], "changed": []} for i in range(1, 8)}
    for i in range(1, 8):
        names = (["a"] if i <= 3 else []) + (["b"] if i == 4 else []) + ["c"]
        view[f"n{i}"]["records"] = [rec(n) for n in names]
        view[f"n{i}"]["changed"] = names
    view["n6"]["reachable"] = view["n7"]["reachable"] = False
    return view


def test_uneven_layout_with_room_for_c():
    result = plan(uneven(), max_unavailable=3)
    # a: budget 3 but keeps one of its 3 in rotation -> 2 a wave. b: one replica, an outage.
    # c: budget 3 - 2 unreachable = 1 a wave.
    # Canary, models in order a, c, b: n1/a; c: n1 used -> n2/c; b -> n4/b. Wave 2: a has 2 left
    # (n2, n3) against c's 4, so a first: n3/a (n3 has the most left), n2/a; then c's one: n1/c.
    assert result["budget"] == {"a": 3, "b": 3, "c": 1}
    assert result["canary"] == ["n1/a", "n2/c", "n4/b"]
    assert result["waves"] == [["n1/a", "n2/c", "n4/b"], ["n3/a", "n2/a", "n1/c"], ["n3/c"], ["n4/c"], ["n5/c"]]
    assert [s["id"] for s in result["skipped"]] == ["n6/c", "n7/c"]
    assert "n6 unreachable" in result["skipped"][0]["why"]
    assert [(d["model"], d["id"]) for d in result["dark"]] == [("b", "n4/b")]
    assert "one replica in the fleet" in result["dark"][0]["why"]


def test_uneven_layout_budget_1_blocks_c_and_says_how_to_unblock_it():
    result = plan(uneven())
    assert result["waves"] == [["n1/a", "n4/b"], ["n2/a"], ["n3/a"]]
    assert [b["id"] for b in result["blocked"]] == ["n1/c", "n2/c", "n3/c", "n4/c", "n5/c"]
    why = result["blocked"][0]["why"]
    assert why.startswith("c: 5 of 7 replicas up, 2 down (n6/c (n6 unreachable), n7/c (n7 unreachable))")
    assert "bring n6/c, n7/c back" in why and "raise vllm_rollout_max_unavailable to 3" in why
    lines = waves.wave_lines(result)
    assert lines[0] == "Rollout plan: 3 waves for 4 changed instances (budget: a 1, c 0, b 1); not restarted: 5 blocked, 2 skipped"
    assert f"blocked n1/c, n2/c, n3/c, n4/c, n5/c: {why}" in lines
    assert any(line.startswith("dark n4/b: b has one replica") for line in lines)
    assert any(line.startswith("skipped n6/c: n6 unreachable") for line in lines)


def multinode_view():
    """Model m: one multi-node instance on h1+h2 and single-host replicas on h3, h4; model x on h1-h3."""
    return {
        "h1": {"records": [rec("big", "m", ["h1", "h2"]), rec("x")], "changed": ["x"]},
        "h2": {"records": [rec("big", "m", ["h1", "h2"]), rec("x")], "changed": ["big", "x"]},
        "h3": {"records": [rec("m"), rec("x")], "changed": ["m", "x"]},
        "h4": {"records": [rec("m")], "changed": ["m"]},
    }


def test_a_multi_node_instance_is_one_replica_named_by_rank_0():
    replicas = waves.fleet_replicas(multinode_view())
    big = [r for r in replicas if r["name"] == "big"]
    assert big == [{"id": "h1/big", "host": "h1", "hosts": ["h1", "h2"], "name": "big", "model": "m",
                    "changed": True, "up": True, "unreachable": [], "out_of_rotation": False}]  # changed on h2 only
    assert [r["id"] for r in replicas] == ["h1/big", "h1/x", "h2/x", "h3/m", "h3/x", "h4/m"]


def test_a_multi_node_instance_counts_once_against_its_model():
    result = plan(multinode_view())
    assert result["replicas"] == {"m": 3, "x": 3}
    # Canary: m -> h1/big (h1 and h2); x: h1/x and h2/x share a host with it -> h3/x. Then one host
    # left each: input order, h1/x (x full) and h3/m; then h2/x and h4/m.
    assert result["waves"] == [["h1/big", "h3/x"], ["h1/x", "h3/m"], ["h2/x", "h4/m"]]
    assert result["instances"]["h1/big"]["hosts"] == ["h1", "h2"]


def test_a_multi_node_instance_with_a_rank_host_down_is_skipped_and_uses_the_budget():
    view = multinode_view()
    view["h2"]["reachable"] = False
    result = plan(view)
    assert result["skipped"] == [{"id": "h1/big", "why": result["skipped"][0]["why"]}, result["skipped"][1]]
    assert "h2 unreachable" in result["skipped"][0]["why"] and result["skipped"][1]["id"] == "h2/x"
    assert {b["id"] for b in result["blocked"]} == {"h3/m", "h4/m", "h1/x", "h3/x"}


def test_a_multi_node_rank_outside_the_view_counts_as_unreachable():
    view = multinode_view()
    del view["h2"]
    big = waves.fleet_replicas(view)[0]
    assert big["id"] == "h1/big" and big["up"] is False and big["unreachable"] == ["h2"]


@pytest.mark.parametrize("budget, waves_expected, blocked", [
    (1, [], ["h1/a", "h2/a", "h1/b", "h2/b"]),               # one of 3 down uses the whole budget of 1
    (2, [["h1/a", "h2/b"], ["h1/b", "h2/a"]], []),          # 2 - 1 down = 1 a wave, a canary per host
])
def test_a_host_already_down(budget, waves_expected, blocked):
    view = uniform(3, "ab")
    view["h3"]["reachable"] = False
    result = plan(view, max_unavailable=budget)
    assert result["waves"] == waves_expected
    assert [b["id"] for b in result["blocked"]] == blocked
    assert [s["id"] for s in result["skipped"]] == ["h3/a", "h3/b"]


def test_an_out_of_rotation_replica_restarts_first_at_no_cost():
    view = uniform(3, "a")
    view["h2"]["out_of_rotation"] = ["a"]
    result = plan(view, max_unavailable=2)
    # h2/a is changed, reachable and out of rotation: it starts in a first wave of its own (it serves
    # nothing, so that costs no capacity), then counts as up: 3 up, 0 down, allowed 2 - 0 = 2, and
    # the last-replica rule leaves 3 - 1 = 2 a wave. Wave 2 the canary (a's first replica, h1/a),
    # wave 3 the one left, h3/a.
    assert result["waves"] == [["h2/a"], ["h1/a"], ["h3/a"]]
    assert result["canary"] == ["h1/a"] and result["canary_wave"] == 1 and result["already_out"] == ["h2/a"]
    assert result["budget"] == {"a": 2} and result["blocked"] == result["skipped"] == result["dark"] == []
    assert waves.wave_lines(result) == [
        "Rollout plan: 3 waves for 3 changed instances (budget: 2 replicas of each model per wave)",
        "wave 1 (not serving: started first): h2/a",
        "wave 2 (canary): h1/a",
        "wave 3: h3/a",
    ]
    # Budget 1: h2/a no longer uses it up (it is in rotation again after wave 1): allowed 1 - 0 = 1,
    # so the same three waves, nothing blocked (the old rule spent the budget on h2/a and blocked
    # h1/a and h3/a).
    tight = plan(view)
    assert tight["waves"] == [["h2/a"], ["h1/a"], ["h3/a"]] and tight["canary"] == ["h1/a"]
    assert tight["canary_wave"] == 1 and tight["budget"] == {"a": 1} and tight["blocked"] == []
    # An unchanged replica held out of rotation is not restarted, so it stays out and still uses the
    # budget: 1 - 1 down = 0, h1/a and h3/a are blocked and nothing starts.
    view["h2"]["changed"] = []
    held = plan(view)
    assert held["waves"] == [] and held["already_out"] == [] and held["canary_wave"] is None
    assert [b["id"] for b in held["blocked"]] == ["h1/a", "h3/a"]
    assert "h2/a (out of rotation)" in held["blocked"][0]["why"]


def test_a_first_deploy_is_one_wave():
    # The README layout deployed for the first time: every instance new, so changed and out of
    # rotation. All 20 are starting: one wave of all of them, in input order; no replica is in
    # rotation, so nothing is left to roll, no canary, and nothing goes dark (none serves yet).
    view = uniform(10, "ab")
    for entry in view.values():
        entry["out_of_rotation"] = ["a", "b"]
    ids = [f"h{i}/{m}" for i in range(1, 11) for m in "ab"]
    for canary in (True, False):
        result = plan(view, canary=canary)
        assert result["waves"] == [ids]
        assert result["canary"] == [] and result["canary_wave"] is None and result["already_out"] == ids
        assert result["blocked"] == result["skipped"] == result["dark"] == []
        assert result["budget"] == {"a": 1, "b": 1} and result["replicas"] == {"a": 10, "b": 10}
        assert waves.wave_lines(result) == [
            "Rollout plan: 1 wave for 20 changed instances (budget: 1 replica of each model per wave)",
            "wave 1 (not serving: started first): 20 instances on 10 hosts: "
            "h1, h2, h3, h4, h5, h6, h7, h8 and 2 more",
        ]


def test_scale_out_with_a_change_starts_the_new_replica_first_and_blocks_nothing():
    # h1/a and h2/a serve a, h3/a is new (out of rotation); the change touches all three. h3/a starts
    # first; after it 3 are up, 0 down: allowed 1 - 0 = 1, and 3 - 1 = 2 may go, so 1 a wave: the
    # canary h1/a, then h2/a. The old rule counted h3/a as down (1 - 1 = 0) and blocked h1/a, h2/a.
    view = uniform(3, "a")
    view["h3"]["out_of_rotation"] = ["a"]
    result = plan(view)
    assert result["waves"] == [["h3/a"], ["h1/a"], ["h2/a"]]
    assert result["canary"] == ["h1/a"] and result["canary_wave"] == 1 and result["already_out"] == ["h3/a"]
    assert result["blocked"] == result["skipped"] == [] and result["budget"] == {"a": 1}
    # Without a canary the starting wave is still first and on its own: the same waves.
    plain = plan(view, canary=False)
    assert plain["waves"] == [["h3/a"], ["h1/a"], ["h2/a"]]
    assert plain["canary"] == [] and plain["canary_wave"] is None
    # Budget 2, no canary: h3/a is up after wave 1, so h1/a and h2/a may go together (3 - 2 = 1 left
    # in rotation); still not in h3/a's wave. The old rule: 2 - 1 down = 1 a wave.
    wide = plan(view, max_unavailable=2, canary=False)
    assert wide["waves"] == [["h3/a"], ["h1/a", "h2/a"]] and wide["budget"] == {"a": 2}
    assert waves.wave_lines(wide)[1:] == ["wave 1 (not serving: started first): h3/a", "wave 2: h1/a, h2/a"]


def test_an_unreachable_replica_still_counts_as_down_next_to_a_starting_one():
    # 4 hosts of a: h3/a starting, h4 unreachable. Budget 1 - 1 down (h4/a) = 0: h1/a and h2/a are
    # blocked; h3/a still starts (no cost), h4/a is skipped. h3/a counts as up in the message.
    view = uniform(4, "a")
    view["h3"]["out_of_rotation"] = ["a"]
    view["h4"]["reachable"] = False
    result = plan(view)
    assert result["waves"] == [["h3/a"]] and result["canary"] == [] and result["canary_wave"] is None
    assert [b["id"] for b in result["blocked"]] == ["h1/a", "h2/a"]
    assert [s["id"] for s in result["skipped"]] == ["h4/a"]
    assert result["blocked"][0]["why"] == (
        "a: 3 of 4 replicas up, 1 down (h4/a (h4 unreachable)), which uses its whole budget of 1 — bring h4/a "
        "back into rotation, or raise vllm_rollout_max_unavailable to 2")
    # Budget 2: 2 - 1 = 1 a wave (3 up, so 2 could go): h3/a, the canary h1/a, then h2/a.
    wider = plan(view, max_unavailable=2)
    assert wider["waves"] == [["h3/a"], ["h1/a"], ["h2/a"]] and wider["canary_wave"] == 1
    assert wider["budget"] == {"a": 1} and wider["blocked"] == []


def test_canary_wave_is_0_when_nothing_is_starting():
    # Nothing out of rotation: the canary is the first wave.
    result = plan(uniform(3, "ab"))
    assert result["canary_wave"] == 0 and result["waves"][0] == result["canary"] == ["h1/a", "h2/b"]
    assert result["already_out"] == []
    assert waves.wave_lines(result)[1] == "wave 1 (canary): h1/a, h2/b"
    # An unreachable host is skipped, not started: still 0 (budget 2 - 1 down leaves 1 a wave).
    view = uniform(3, "ab")
    view["h3"]["reachable"] = False
    assert plan(view, max_unavailable=2)["canary_wave"] == 0
    # A host both unreachable and holding a out of rotation: down, skipped, not starting.
    view["h3"]["out_of_rotation"] = ["a"]
    down = plan(view, max_unavailable=2)
    assert down["canary_wave"] == 0 and down["already_out"] == []
    assert [s["id"] for s in down["skipped"]] == ["h3/a", "h3/b"]
    assert plan(uniform(3, "ab"), canary=False)["canary_wave"] is None


def test_the_uneven_fleets_exercise_starting_replicas():
    # The property test above is only as good as its fleets: some must start replicas first, with a
    # canary after them, and some must have nothing starting.
    starts, after = 0, 0
    for seed in range(60):
        result = waves.plan_waves(waves.fleet_replicas(random_fleet(seed)))
        starts += bool(result["already_out"])
        after += result["canary_wave"] == 1
    assert 10 <= starts < 60 and after >= 5, (starts, after)


def test_the_last_replica_in_rotation_is_blocked_unless_the_model_may_go_dark():
    view = uniform(2, "a")
    view["h2"]["reachable"] = False
    result = plan(view, max_unavailable=2)
    assert result["waves"] == [] and [b["id"] for b in result["blocked"]] == ["h1/a"]
    why = result["blocked"][0]["why"]
    assert why == ("a: 1 of 2 replicas up, 1 down (h2/a (h2 unreachable)); restarting h1/a, the last one in rotation, "
                   "would take a dark — bring h2/a back into rotation, or add a to vllm_rollout_may_go_dark")
    assert f"blocked h1/a: {why}" in waves.wave_lines(result)
    allowed = plan(view, max_unavailable=2, may_go_dark=["a"])
    assert allowed["waves"] == [["h1/a"]] and allowed["blocked"] == []
    assert [(d["model"], d["id"]) for d in allowed["dark"]] == [("a", "h1/a")]
    assert "vllm_rollout_may_go_dark" in allowed["dark"][0]["why"]
    assert any(line.startswith("dark h1/a: a is in vllm_rollout_may_go_dark") for line in waves.wave_lines(allowed))


def test_a_model_with_one_replica_restarts_and_the_plan_says_it_goes_dark():
    view = {"h1": {"records": [rec("solo"), rec("a")], "changed": ["solo", "a"]},
            "h2": {"records": [rec("a")], "changed": ["a"]}}
    result = plan(view)
    # Canary: solo -> h1/solo; a: h1 used -> h2/a. Then h1/a.
    assert result["waves"] == [["h1/solo", "h2/a"], ["h1/a"]]
    assert result["dark"] == [{"model": "solo", "id": "h1/solo", "why": result["dark"][0]["why"]}]
    assert result["dark"][0]["why"].startswith("solo has one replica in the fleet (h1/solo): wave 1")


def test_may_go_dark_lets_a_wave_take_every_replica():
    result = plan(uniform(3, "a"), max_unavailable="100%", canary=False, may_go_dark="a")
    assert result["waves"] == [["h1/a", "h2/a", "h3/a"]]
    assert [d["id"] for d in result["dark"]] == ["h1/a", "h2/a", "h3/a"]


def test_only_changed_replicas_restart_but_all_count():
    view = uniform(4, "a", changed=False)
    view["h2"]["changed"] = ["a"]
    result = plan(view, max_unavailable="50%")
    assert result["waves"] == [["h2/a"]] and result["replicas"] == {"a": 4} and result["budget"] == {"a": 2}
    assert plan(uniform(4, "a", changed=False))["waves"] == []


@pytest.mark.parametrize("budget, total, expected", [
    (1, 100, 1), ("3", 100, 3), (" 2 ", 5, 2), (2.0, 5, 2), ("25%", 100, 25), ("25%", 3, 1), ("33%", 10, 3),
    ("150%", 4, 4), ("1%", 1000, 10), ("12.5%", 16, 2),
])
def test_good_budgets(budget, total, expected):
    assert waves.budget_for(budget, total) == expected


@pytest.mark.parametrize("budget", [0, -1, "0", "0%", "-5%", "abc", "", "25 percent", None, True, 1.5, [1]])
def test_bad_budgets_name_the_variable_the_value_and_the_fix(budget):
    with pytest.raises(ValueError) as err:
        plan(uniform(2, "a"), max_unavailable=budget)
    message = str(err.value)
    assert message.startswith("vllm_rollout_max_unavailable: ") and repr(budget) in message
    assert "a count >= 1 like 1 or a percentage like 25%" in message and "\n" not in message


def test_bad_budget_is_refused_even_when_nothing_changed():
    with pytest.raises(ValueError, match="vllm_rollout_max_unavailable"):
        plan(uniform(2, "a", changed=False), max_unavailable=0)


def test_canary_ids_pick_the_canary():
    result = plan(uniform(3, "ab"), canary_ids=["h3/b"])
    assert result["canary"] == ["h1/a", "h3/b"] and result["waves"][0] == ["h1/a", "h3/b"]
    # Left: h1/b, h2/a, h2/b, h3/a; a and b 2 each, h2 has the most left: h2/a (input order), then b
    # on an untouched host: h1/b; then h2/b, h3/a.
    assert result["waves"][1:] == [["h2/a", "h1/b"], ["h2/b", "h3/a"]]
    # A named canary's host counts as used: a's canary avoids h1.
    assert plan(uniform(3, "ab"), canary_ids=["h1/b"])["canary"] == ["h1/b", "h2/a"]


def test_with_more_models_than_hosts_a_canary_shares_a_host_with_its_first_replica():
    result = plan(uniform(2, "abc"))
    # a -> h1/a, b -> h2/b, c: both hosts used -> c's first replica, h1/c.
    assert result["canary"] == ["h1/a", "h1/c", "h2/b"]
    # Left: h1/b, h2/a, h2/c, one each; h2 has 2 left: h2/a, then h1/b, and c's only one is on h2.
    assert result["waves"][1:] == [["h2/a", "h1/b", "h2/c"]]


@pytest.mark.parametrize("canary_ids, says", [
    (["h9/a"], "'h9/a' is no instance of the fleet"),
    (["h1/bb"], "'h1/bb' is no instance of the fleet — did you mean h1/b?"),
    (["h2/b"], "'h2/b' did not change in this run"),
    (["h3/a"], "'h3/a' is not in rotation (h3/a (h3 unreachable))"),
    (["h1/a", "h2/a"], "h1/a and h2/a both serve a — name one canary per model"),
    ({"h1/a": 1}, "must be a list of names"),
])
def test_bad_canary_ids_name_the_variable_and_the_choices(canary_ids, says):
    view = uniform(3, "ab")
    view["h2"]["changed"] = ["a"]
    view["h3"]["reachable"] = False
    with pytest.raises(ValueError) as err:
        plan(view, canary_ids=canary_ids)
    message = str(err.value)
    assert message.startswith("vllm_rollout_canary: ") and says in message
    if "both serve" not in says and "list of names" not in says:
        assert message.endswith("one of: h1/a, h1/b, h2/a")


def test_twice_listed_replica_is_refused():
    replicas = waves.fleet_replicas(uniform(1, "a"))
    with pytest.raises(ValueError, match="listed twice"):
        waves.plan_waves(replicas + replicas)


def test_wave_lines_are_short_and_plain():
    lines = waves.wave_lines(plan(uniform(100), max_unavailable="25%"))
    assert lines[:3] == [
        "Rollout plan: 5 waves for 400 changed instances (budget: 25 replicas of each model per wave)",
        "wave 1 (canary): h1/a, h2/b, h3/c, h4/d",
        # wave 2 (worked out in the 25% test): h5-h100, then h1, h2, h3 (and h5 again).
        "wave 2: 100 instances on 99 hosts: h5, h6, h7, h8, h9, h10, h11, h12 and 91 more",
    ]
    assert len(lines) == 6 and all(len(line) < 200 and "\x1b" not in line for line in lines)
    assert waves.wave_lines(plan(uniform(2, "a"), canary=False))[1] == "wave 1: h1/a"


@pytest.mark.parametrize("seconds, expected", [
    # Waves [h1/big (h1+h2), h3/x], [h1/x, h3/m], [h2/x, h4/m]: one instance a host in each.
    (10, 10 + 10 + 10),
    ({"h1/big": 60, "default": 10}, 60 + 10 + 10),
    ({"h1/big": 60, "h1/x": 5, "h2/x": 30, "h3/m": 1, "h3/x": 2, "h4/m": 3}, 60 + 5 + 30),
])
def test_estimate_seconds(seconds, expected):
    assert waves.estimate_seconds(plan(multinode_view()), seconds) == expected


def test_estimate_seconds_adds_up_a_hosts_own_instances_of_a_wave():
    # h1 restarts big then x (20 s) while h2 restarts big (its rank, 10 s): the wave takes 20 s.
    wave = {"waves": [["h1/big", "h1/x"]],
            "instances": {"h1/big": {"model": "m", "hosts": ["h1", "h2"]}, "h1/x": {"model": "x", "hosts": ["h1"]}}}
    assert waves.estimate_seconds(wave, 10) == 20


def test_estimate_seconds_needs_a_time_for_every_instance():
    with pytest.raises(ValueError, match="no time for h3/x"):
        waves.estimate_seconds(plan(multinode_view()), {"h1/big": 60})
    with pytest.raises(ValueError, match="not a number of seconds"):
        waves.estimate_seconds(plan(multinode_view()), -1)
    assert waves.estimate_seconds({"waves": []}, 10) == 0


def test_a_1000_host_plan_is_fast():
    started = time.perf_counter()
    result = plan(uniform(1000), max_unavailable=1)
    assert time.perf_counter() - started < 1.0
    # As for 100 hosts: 250 blocks of 4 hosts a round, 4 rounds, one instance a host in every wave.
    assert len(result["waves"]) == 1000
    assert all(waves.wave_slots(w) == 1 for w in result["waves"])


def _filters():
    return filter_plugins()


def test_the_filters_return_the_plan_and_its_lines():
    filters = _filters()
    replicas = filters["vllm_rollout_replicas"](multinode_view())
    result = filters["vllm_rollout_waves"](replicas, "50%", True, None, ["m"])
    assert result["waves"][0] == ["h1/big", "h3/x"]        # x's canary avoids big's hosts h1, h2
    assert result["lines"] == waves.wave_lines({k: v for k, v in result.items() if k != "lines"})
    with pytest.raises(AnsibleFilterError, match=r"^vllm_rollout_waves: vllm_rollout_max_unavailable: 'abc'"):
        filters["vllm_rollout_waves"](replicas, "abc")


# What each host of the play does with the plan (roles/vllm_serve/tasks/wave.yml, unstage_rest.yml).

def test_each_host_restarts_its_own_instances_of_a_wave_in_the_waves_order():
    records = [rec("a"), rec("b"), rec("mn", hosts=["h2", "h1"])]
    wave = ["h1/b", "h2/a", "h1/a", "h2/mn"]
    assert [r["name"] for r in waves.host_wave(records, wave, "h1")] == ["b", "a"]
    # The multi-node instance restarts from rank 0's host (h2), never from h1.
    assert [r["name"] for r in waves.host_wave(records, wave, "h2")] == ["a", "mn"]


def test_a_wave_runs_as_many_slots_as_its_busiest_host_has_instances():
    assert waves.wave_slots(["h1/a", "h2/a", "h1/b", "h1/c"]) == 3
    assert waves.wave_slots(["h1/a"]) == 1
    assert waves.wave_slots([]) == 0


def test_the_instances_not_restarted_are_the_changed_ones_the_rollout_did_not_reach():
    records = [rec("a"), rec("b"), rec("c"), rec("mn", hosts=["h2", "h1"])]
    left = waves.not_restarted(records, changed=["a", "b", "mn"], restarted=["a"], host="h1")
    # c did not change; a restarted; mn is rank 0's (h2's) to restart and to put back.
    assert [r["name"] for r in left] == ["b"]
    assert [r["name"] for r in waves.not_restarted(records, ["mn"], [], "h2")] == ["mn"]


@pytest.mark.parametrize("values, fragment", [
    ({"vllm_rollout_max_unavailable": 0}, "vllm_rollout_max_unavailable: 0 is not a number"),
    ({"vllm_rollout_max_unavailable": "half"}, "use a count >= 1 like 1 or a percentage like 25%"),
    ({"vllm_rollout_canary": "gpu1"}, "vllm_rollout_canary: gpu1 — name each canary as HOST/INSTANCE"),
    ({"vllm_rollout_canary": [{"host": "gpu1"}]}, "vllm_rollout_canary: must be a list of names"),
    ({"vllm_rollout_may_go_dark": 3}, "vllm_rollout_may_go_dark: must be a list of names"),
])
def test_bad_rollout_inputs_are_refused_in_one_line_naming_host_and_variable(values, fragment):
    errors = waves.rollout_errors(values, host="gpu1")
    assert len(errors) == 1 and errors[0].startswith("gpu1: ") and fragment in errors[0], errors


def test_the_defaults_and_good_rollout_inputs_pass():
    assert waves.rollout_errors({"vllm_rollout_max_unavailable": 1, "vllm_rollout_canary": [],
                                 "vllm_rollout_may_go_dark": []}) == []
    assert waves.rollout_errors({"vllm_rollout_max_unavailable": "25%", "vllm_rollout_canary": ["gpu1/llama"],
                                 "vllm_rollout_may_go_dark": ["tiny-llama"]}) == []


def test_a_rebuild_batch_within_the_budget_passes():
    replicas = waves.fleet_replicas(uniform(4, "ab"))
    assert waves.node_batch_problems(replicas, [["h1"], ["h2"], ["h3"], ["h4"]]) == []
    # 50% of 4 replicas is 2: two nodes at a time fit
    assert waves.node_batch_problems(replicas, [["h1", "h2"], ["h3", "h4"]], max_unavailable="50%") == []


def test_a_rebuild_batch_over_the_budget_is_named_with_the_fix():
    replicas = waves.fleet_replicas(uniform(3, "a"))
    [line] = waves.node_batch_problems(replicas, [["h1", "h2"], ["h3"]])
    assert line == ("rebuild batch 1 (h1, h2) takes 2 of a's 3 replicas out of rotation at once (h1/a, h2/a): the budget is 1"
                    " — rebuild fewer nodes at a time (-e rebuild_node_serial=1), raise vllm_rollout_max_unavailable,"
                    " or list a in vllm_rollout_may_go_dark")


def test_a_rebuild_never_takes_a_models_last_replica_unless_it_may_go_dark():
    view = uniform(3, "a")
    view["h3"]["reachable"] = False
    replicas = waves.fleet_replicas(view)
    [line] = waves.node_batch_problems(replicas, [["h1", "h2"]], max_unavailable=3)
    assert "with 1 already down: its last replica in rotation" in line
    assert waves.node_batch_problems(replicas, [["h1", "h2"]], max_unavailable=3, may_go_dark=["a"]) == []
    # one replica in the whole fleet: its node's rebuild is its outage, nothing else could serve it
    assert waves.node_batch_problems(waves.fleet_replicas(uniform(1, "a")), [["h1"]]) == []


def test_one_node_at_a_time_is_never_refused():
    """A single node serving a model twice (the compose scenario's layout): serial 1 is the least a
    rebuild can do, so it goes on; what the node serves is down while it rebuilds."""
    view = {"h1": {"records": [rec("img-a", "tiny"), rec("img-b", "tiny")]}}
    assert waves.node_batch_problems(waves.fleet_replicas(view), [["h1"]]) == []


def test_a_multi_node_instance_is_down_with_any_of_its_hosts():
    view = {"h1": {"records": [rec("mn", "a", hosts=["h1", "h2"])]}, "h2": {"records": [rec("mn", "a", hosts=["h1", "h2"])]},
            "h3": {"records": [rec("x", "a")]}}
    replicas = waves.fleet_replicas(view)
    assert waves.node_batch_problems(replicas, [["h2"], ["h3"]]) == []
    assert len(waves.node_batch_problems(replicas, [["h2", "h3"]])) == 1
