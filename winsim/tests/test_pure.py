"""winsim's pure parts, without root or a namespace: header handling, the
facts' renderings, image builds, the command line's table."""

import base64
import json
import struct
import subprocess
import sys
from pathlib import Path

from winsim import facts, hns, host, util

WINSIM_PY = Path(__file__).resolve().parent.parent / "winsim.py"


def test_handlers_are_the_act_functions_of_actions():
    kinds = host.handlers()
    assert {"add_route", "create_network", "ensure_hns_network", "install_boot_task", "start_task"} <= set(kinds)
    for kind, f in kinds.items():
        assert f.__name__ == "act_" + kind
        assert f.__module__.startswith("winsim.actions.")


def test_kinds_subcommand_runs_without_the_server_packages():
    # kwinctl's contract test runs it with the system python3 (src/os/contract.rs)
    out = subprocess.run([sys.executable, "-S", str(WINSIM_PY), "kinds"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == sorted(host.handlers())


def test_command_table_lists_the_subcommands():
    import importlib.util
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("winsim_entry", WINSIM_PY)
        entry = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(entry)
    finally:
        sys.path[:] = saved
    assert {"serve", "reboot", "gencert", "kinds"} <= set(entry.COMMANDS)


def test_execute_refuses_scripts_without_headers(tmp_path):
    state = str(tmp_path / "state.json")
    assert host.execute("Write-Host hi\n", state) == ("", "winsim: unknown action header: the script has none\n", 1)
    out, err, code = host.execute("# kwinctl-sim: {not json\n", state)
    assert code == 1 and "bad action header" in err


def test_block_has_reads_the_block_under_the_header():
    h = {"_block": "Set-NetIPInterface -Dhcp Disabled\nNew-NetIPAddress"}
    assert util.block_has(h, r"-Dhcp Disabled")
    assert not util.block_has(h, r"-Forwarding Enabled")
    assert not util.block_has({}, r"anything")


def test_norm_image():
    assert util.norm_image(" Registry.k8s.io/Pause ") == "registry.k8s.io/pause:latest"
    assert util.norm_image("registry.k8s.io/pause:3.9") == "registry.k8s.io/pause:3.9"
    assert util.norm_image("localhost:5000/pause") == "localhost:5000/pause:latest"
    assert util.norm_image("img@sha256:abc") == "img@sha256:abc"


def test_failure_actions_blob_is_three_restarts_after_10s():
    blob = facts.failure_actions_blob(True)
    reset, _, _, count, offset = struct.unpack("<5I", blob[:20])
    assert (reset, count, offset) == (86400, 3, 20)
    assert [struct.unpack("<2I", blob[20 + 8 * i:28 + 8 * i]) for i in range(3)] == [(1, 10000)] * 3
    assert facts.failure_actions_blob(False) == b""


def svc(**kw):
    s = {"status": "Running", "start": "Manual", "binpath": "C:\\k\\kubelet.exe", "depends": [], "restart": True}
    s.update(kw)
    return s


def test_service_fact_environment_and_recovery():
    d = {"locale": "en-US"}
    # a service without an Environment: @($null) unless the probe filters it
    assert host_fact(d, {}, svc(env=None))["env"] == [None]
    assert host_fact(d, {"_block": "(x).Environment | Where-Object { $_ }"}, svc(env=None))["env"] == []
    f = host_fact(d, {"_block": "-Name FailureActions"}, svc(env=["A=1"]))
    assert f["env"] == ["A=1"] and f["restart"]
    assert base64.b64decode(f["failure_actions"]) == facts.failure_actions_blob(True)
    # sc.exe qfailure says RESTART only on an English host
    assert not host_fact({"locale": "de-DE"}, {}, svc(env=[]))["restart"]


def host_fact(d, probe, s):
    return facts.service_fact(d, probe, "kubelet", s)


def test_image_builds_table_and_knob():
    assert 20348 in hns.image_builds({}, "registry.k8s.io/pause:3.9")
    assert 26100 not in hns.image_builds({}, "registry.k8s.io/pause:3.9")
    assert 26100 in hns.image_builds({}, "registry.k8s.io/pause:3.10.2")
    assert hns.image_builds({}, "example.invalid/unknown:1") is None
    assert hns.image_builds({"image_builds": {"example.invalid/x:1": ["10.0.17763"]}}, "example.invalid/x:1") == [17763]


def test_state_defaults(tmp_path):
    from winsim.state import State
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"build": "10.0.17763"}))
    with State(str(p)) as d:
        assert d["build"] == "10.0.17763" and d["routing_state"] == "Available"
        assert [n["name"] for n in d["nics"]] == ["Ethernet", "Ethernet 2"]
        assert d["dhcp"] == {"Ethernet": False, "Ethernet 2": True}
    assert json.loads(p.read_text())["features"] == {"Containers": "Available"}


def test_two_host_endpoints_of_one_name_need_a_script_that_keeps_one():
    """A reused node may hold two endpoints named cbr0_ep (flannel's name):
    kwinctl's ensure_host_endpoint block keeps the right one and deletes
    the other; a block that takes them as one fails."""
    from winsim.actions.l2bridge import act_ensure_host_endpoint
    from winsim.state import ActionError
    template = Path(__file__).resolve().parents[2] / "src/os/windows/templates/ensure_host_endpoint.ps1.j2"

    def state():
        net = {"name": "cbr0", "id": "N1", "type": "L2Bridge",
               "subnets": [{"prefix": "198.19.1.0/24", "gateway": "198.19.1.1"}]}
        # the right one is attached already ("lo" stands for its vNIC)
        right = {"name": "cbr0_ep", "id": "E1", "network_id": "N1", "ip": "198.19.1.2", "prefix": 24,
                 "dev": "lo", "index": 1}
        stale = {"name": "cbr0_ep", "id": "E2", "network_id": "N0", "ip": "10.244.1.2", "prefix": 24,
                 "dev": None, "index": None}
        return {"features": {"Containers": "Installed"}, "hns_networks": [net], "hns_endpoints": [stale, right]}

    h = {"network": "cbr0", "name": "cbr0_ep", "ip": "198.19.1.2", "prefix": 24,
         "_block": "$ep = @(Invoke-KwHns 'GET' '/endpoints/' $null) | Where-Object { $_.Name -eq 'cbr0_ep' }"}
    try:
        act_ensure_host_endpoint(state(), h)
        raise AssertionError("a block that takes two endpoints as one should fail")
    except ActionError as e:
        assert "2 endpoints are named cbr0_ep" in str(e), e
    d = state()
    act_ensure_host_endpoint(d, dict(h, _block=template.read_text()))
    assert [e["id"] for e in d["hns_endpoints"]] == ["E1"], d["hns_endpoints"]


def test_a_swap_restarts_indirect_dependents_in_start_order():
    """Stop-Service -Force on containerd stops kubelet and kube-proxy (which
    depends on kubelet); a block walking DependentServices starts all three
    again, each after what it depends on; one without leaves them stopped."""
    from winsim import scm

    def state():
        svc = {"containerd": [], "kubelet": ["containerd"], "kube-proxy": ["kubelet"]}
        return {"services": {n: {"status": "Running", "depends": deps, "binpath": "C:\\k\\%s.exe" % n}
                             for n, deps in svc.items()}}

    d = state()
    assert scm.running_dependents_closure(d, ["containerd"]) == ["kubelet", "kube-proxy"]
    scm.scm_stop(d, "containerd")
    assert {n: s["status"] for n, s in d["services"].items()} == {
        "containerd": "Stopped", "kubelet": "Stopped", "kube-proxy": "Stopped"}
    d = state()
    assert scm.running_dependents_closure(d, ["kubelet"]) == ["kube-proxy"]
    assert scm.running_dependents_closure(d, ["kube-proxy"]) == []


def test_the_vswitch_blip_cuts_old_connections_and_new_ones_for_its_window(tmp_path):
    from winsim import blip

    state = tmp_path / "state.json"
    d = {"vswitch_blackout": 5}
    assert blip.start(d)
    state.write_text(json.dumps(d))
    since = d["blackout_from"]
    # during the window: a new connection, and one opened before it
    assert blip.cut(str(state), None)
    assert blip.cut(str(state), since - 10)
    # after it (a window that ended a minute ago, whatever this machine's
    # speed): only a connection opened before the blip
    past = since - 120
    d["blackout_from"], d["blackout_until"] = past, past + 5
    state.write_text(json.dumps(d))
    assert not blip.cut(str(state), None)
    assert not blip.cut(str(state), past + 1)
    assert blip.cut(str(state), past - 10)
    # without the knob nothing is cut
    assert not blip.start({})
    state.write_text("{}")
    assert not blip.cut(str(state), None)


def test_a_detached_action_is_started_once_and_its_result_read():
    d = {}
    out = []
    host_h = {"kind": "prelude", "address": "198.18.0.3"}
    token = host.detach_start(d, {"token": "r1-0", "action": {"kind": "ensure_hns_network", "id": 0}}, host_h, out)
    assert token == "r1-0" and out == ["KWD r1-0 started\n"]
    out = []
    host.detach_result(d, {"token": "r1-0"}, out)
    assert out == ["KWD r1-0 pending\n"]
    # a second start while the first runs is refused
    out = []
    assert host.detach_start(d, {"token": "r2-0", "action": {}}, host_h, out) is None
    assert out[0].startswith("KWX 0 failed 1\nKWE the detached step of an earlier run")
    d["detached"]["r1-0"].update(state="done", result="KWX 0 ok\nKWD end\n")
    out = []
    host.detach_result(d, {"token": "r1-0"}, out)
    assert out == ["KWX 0 ok\nKWD end\n"]
    out = []
    host.detach_result(d, {"token": "other"}, out)
    assert out == ["KWD other missing\n"]


def test_a_rollback_puts_back_only_a_kept_copy_of_the_release():
    """place_file keeps the binary it replaces as <path>.previous (when its
    block copies it there); restore_previous puts that copy back only when it
    is of the release asked for, and leaves a binary already of it alone."""
    import pytest

    from winsim.actions import common
    from winsim.state import ActionError

    exe = "C:\\k\\kubelet.exe"
    regex = r"^Kubernetes v1\.30\.4(?:[-+]\S*)?$"
    h = {"paths": [exe], "version": "1.30.4", "version_regex": regex}

    def state(now, previous=None):
        d = {"files": {exe: "new"}, "file_versions": {exe: now}, "services": {}, "tasks": {}}
        if previous:
            d["files"][exe + ".previous"] = "old"
            d["file_versions"][exe + ".previous"] = previous
        return d

    d = state("Kubernetes v1.30.4")
    common.keep_previous(d, exe)
    assert d["file_versions"][exe + ".previous"] == "Kubernetes v1.30.4"
    d = state("Kubernetes v1.31.2", "Kubernetes v1.30.4")
    common.act_restore_previous(d, h)
    assert (d["files"][exe], d["file_versions"][exe]) == ("old", "Kubernetes v1.30.4")
    d = state("Kubernetes v1.30.4")
    common.act_restore_previous(d, h)
    assert d["file_versions"][exe] == "Kubernetes v1.30.4"
    with pytest.raises(ActionError, match="says Kubernetes v1.29.0, not release 1.30.4"):
        common.act_restore_previous(state("Kubernetes v1.31.2", "Kubernetes v1.29.0"), h)
    with pytest.raises(ActionError, match="no previous copy"):
        common.act_restore_previous(state("Kubernetes v1.31.2"), h)
