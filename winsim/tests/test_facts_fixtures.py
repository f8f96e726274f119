"""winsim's facts against kwinctl's Windows facts fixtures
(tests/fixtures/windows/*.json, the JSON the probe prints; the Rust unit
tests read them, src/os/windows/fixtures.rs).

Root-free: the few reads winsim makes of the Linux stand-ins (does a
device exist, its addresses, forwarding, the kernel's routes, a health
endpoint) are replaced by answers from the state itself.

- fresh: `facts()` of a fresh state has fresh.json's keys and types;
- converged: `facts()` of the state a real `kwinctl up` left on winsim
  (the state fixtures of test_pods.py, same releases as the fact fixtures)
  has the converged fixture's keys and types, and the same values where
  they do not legitimately differ (see `STABLE`).

A fact added to or renamed in winsim and not in the fixtures (or the
other way round) fails here; the Rust tests hold the fixtures to the probe
template and the parser.
"""

import json
import os

import pytest

from winsim import facts, hns, net
from winsim.state import State

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "windows")
PROBE = os.path.join(REPO, "src", "os", "windows", "templates", "probe.ps1.j2")

# A service's `restart`: winsim prints it beside `failure_actions` (the key
# of an older probe; the parser takes the registry value when both come).
WINSIM_ONLY = {"restart"}


def fixture(name):
    with open(os.path.join(FIXTURES, name + ".json")) as f:
        return json.load(f)


# The l2bridge part of the probe (`{% if l2bridge %}`): winsim prints it
# for every probe, the transparent probe does not have it (the Rust tests
# hold these keys to the template's).
L2BRIDGE_KEYS = set(fixture("l2bridge-converged")) - set(fixture("transparent-converged"))


def shape(v):
    """Keys and JSON types; a list by the merged shape of its entries; null
    (an absent optional value) matches any type."""
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items()}
    if isinstance(v, list):
        merged = None
        for x in v:
            s = shape(x)
            merged = s if merged is None or not isinstance(s, dict) else {**merged, **s}
        return ["empty"] if merged is None else [merged]
    return "null" if v is None else type(v).__name__


def same_shape(a, b, where="facts", skip=frozenset()):
    if "null" in (a, b) or ["empty"] in (a, b):
        return
    assert type(a) is type(b), "%s: %r against %r" % (where, a, b)
    if isinstance(a, dict):
        ka, kb = set(a) - skip, set(b) - skip
        assert ka == kb, "%s: keys only in the fixture %s, only in winsim %s" % (where, ka - kb, kb - ka)
        for k in ka:
            same_shape(a[k], b[k], where + "." + k, skip)
    elif isinstance(a, list):
        same_shape(a[0], b[0], where + "[]", skip)
    else:
        assert a == b, "%s: %s in the fixture, %s from winsim" % (where, a, b)


@pytest.fixture
def linux(monkeypatch):
    """Answers for winsim's reads of the host's devices: `devs` exist and
    forward, health endpoints answer (the addresses and routes: below)."""
    devs = set()
    monkeypatch.setattr(net, "link_exists", lambda name: name in devs)
    monkeypatch.setattr(facts, "link_exists", lambda name: name in devs)
    monkeypatch.setattr(hns, "link_exists", lambda name: name in devs)
    monkeypatch.setattr(facts, "fwd", lambda dev: True)
    monkeypatch.setattr(facts, "health", lambda d, port: True)
    return devs


def probe_of(want):
    """The probe header winsim reads: what it asks for, and its text."""
    with open(PROBE) as f:
        block = f.read()
    return {"files": [x["path"] for x in want["files"]], "services": [s["name"] for s in want["services"]],
            "tasks": [t["name"] for t in want["tasks"]], "binaries": [v["path"] for v in want["versions"]],
            "images": [i["image"] for i in want["image_os"]], "health": [h["port"] for h in want.get("health", [])],
            "reach": [], "_block": block}


def winsim_facts(path, want, devs, monkeypatch):
    with State(str(path)) as d:
        devs.update(n["dev"] for n in d["nics"])
        devs.update(s["name"] for s in d["switches"])
        if d.get("bound"):
            devs.add(net.HNS_DEV)
        if d.get("vswitch"):
            devs.add(net.VSW_DEV)
        devs.update(e["dev"] for e in d["hns_endpoints"] if e.get("dev"))
        # a host endpoint's device holds its address, the vSwitch's vNIC the
        # node's; any other device one address of its own
        held = {e["dev"]: [e["ip"]] for e in d["hns_endpoints"] if e.get("dev")}
        if d.get("vswitch"):
            held[net.VSW_DEV] = [a.split("/")[0] for a in d["vswitch"]["addrs"]]
        monkeypatch.setattr(facts, "ipv4_of",
                            lambda dev: held.get(dev, ["198.18.0.%d" % (10 + sorted(devs).index(dev))]))
        monkeypatch.setattr(facts, "active_routes",
                            lambda: [(r["dst"], r["via"], r.get("dev")) for r in d["persistent_routes"]])
        return json.loads(json.dumps(facts.facts(d, probe_of(want))))


def test_a_fresh_states_facts_have_the_fresh_fixtures_shape(tmp_path, linux, monkeypatch):
    want = fixture("fresh")
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"build": want["build"]}))
    got = winsim_facts(p, want, linux, monkeypatch)
    same_shape(shape(want), shape(got), skip=WINSIM_ONLY)


# What a converged host shows whatever its inventory: these are equal;
# every other value legitimately differs between the fixture's inventory
# and the lab's (addresses, prefixes, interface indexes, digests, the
# fingerprints in descriptions, command lines, --version texts, host name,
# update revision, boot time, HNS ids, the cluster's name and id).
STABLE = {
    "services": lambda f: sorted((s["name"], s["status"], s["start"]) for s in f["services"]),
    "tasks": lambda f: sorted((t["name"], t["state"], t["running"]) for t in f["tasks"]),
    "firewall": lambda f: sorted((r["name"], r["enabled"]) for r in f["firewall"]),
    "files": lambda f: sorted(x["path"].lower() for x in f["files"]),
    "versions": lambda f: sorted(v["path"].lower() for v in f["versions"]),
    "switches": lambda f: f["switches"],
    "networks": lambda f: sorted((n["name"], n["driver"]) for n in f["networks"]),
    "routing": lambda f: (f["routing_installed"], f["routing_state"], f["hyperv_role"], f["hyperv_module"]),
    "recorded": lambda f: (f["pod_cidr"] is not None, len((f["cluster"] or "").split(" "))),
}
STABLE_L2 = {
    "hns_networks": lambda f: sorted((n["name"], n["type"], len(n["subnets"])) for n in f["hns_networks"]),
    "hns_endpoints": lambda f: sorted((e["name"], e["attached"]) for e in f["hns_endpoints"]),
    "l2": lambda f: (f["containers_feature"], f["containerd_pipe"], f["cni_conf_files"], f["sandbox_images"]),
    "health": lambda f: f["health"],
}


@pytest.mark.parametrize("name,state", [("transparent-converged", "tr-110-win1"),
                                        ("l2bridge-converged", "l2-130-win1")])
def test_facts_after_a_real_up_match_the_converged_fixture(tmp_path, linux, monkeypatch, name, state):
    want = fixture(name)
    p = tmp_path / "s.json"
    with open(os.path.join(HERE, "fixtures", state + ".state.json")) as f:
        p.write_text(f.read())
    got = winsim_facts(p, want, linux, monkeypatch)
    l2 = "hns_networks" in want
    if not l2:
        assert L2BRIDGE_KEYS <= set(got), "winsim no longer prints the l2bridge part"
        got = {k: v for k, v in got.items() if k not in L2BRIDGE_KEYS}
    same_shape(shape(want), shape(got), skip=WINSIM_ONLY)
    checks = dict(STABLE, **(STABLE_L2 if l2 else {}))
    for what, of in checks.items():
        assert of(got) == of(want), what
    # the adapters by name: the cards, Docker's NAT adapter, the switches'
    # and endpoints' vNICs (the lab's l2bridge hosts keep winsim's default
    # Docker, whose NAT adapter a containerd-only host does not have)
    names = [(a["name"], a["physical"]) for a in got["adapters"]
             if want["docker_version"] or a["name"] != "vEthernet (nat)"]
    assert sorted(names) == sorted((a["name"], a["physical"]) for a in want["adapters"])
