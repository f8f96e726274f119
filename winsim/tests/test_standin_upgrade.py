"""The lab's kubectl stand-in, its upgrade verbs (lab/standin/upgrade.py)
without root: drain's filters, PodDisruptionBudgets and evictions, cordon,
the log, `kubectl version` (sources: docs/research/upgrade.md)."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "lab"))
from standin import upgrade  # noqa: E402


def pod(name, ns="default", owner=None, phase="Running", labels=None, annotations=None, volumes=None,
        node="win1"):
    md = {"name": name, "namespace": ns, "labels": labels or {}, "annotations": annotations or {}}
    if owner:
        md["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    status = {"phase": phase}
    if phase == "Running":
        status["containerStatuses"] = [{"name": "c", "ready": True}]
    return {"metadata": md, "spec": {"nodeName": node, "volumes": volumes or []}, "status": status}


def pdb(name, ns="default", sel=None, **spec):
    return {"metadata": {"name": name, "namespace": ns},
            "spec": dict(spec, selector={"matchLabels": sel or {}})}


def test_drain_filters_in_upstreams_order():
    rs = pod("web", owner="ReplicaSet")
    ds = pod("agent", owner="DaemonSet")
    mirror = pod("static", annotations={upgrade.MIRROR_ANNOTATION: "x"})
    bare = pod("bare")
    done_bare = pod("job-done", phase="Succeeded")
    evict, warnings, errors = upgrade.pods_for_deletion([rs, ds, mirror, bare, done_bare])
    assert [p["metadata"]["name"] for p in evict] == ["web", "job-done"]
    assert errors.splitlines() == [
        "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): default/agent",
        "cannot delete Pods that declare no controller (use --force to override): default/bare"]
    assert warnings == ""
    # --ignore-daemonsets: the DaemonSet's pod stays, with a warning; --force
    # deletes the pod with no controller; the mirror pod is skipped silently
    evict, warnings, errors = upgrade.pods_for_deletion([rs, ds, mirror, bare], ignore_daemonsets=True,
                                                        force=True)
    assert [p["metadata"]["name"] for p in evict] == ["web", "bare"]
    assert errors == ""
    assert warnings == ("ignoring DaemonSet-managed Pods: default/agent; "
                        "deleting Pods that declare no controller: default/bare")
    # a DaemonSet's mirror pod is the DaemonSet filter's (it comes first)
    both = pod("both", owner="DaemonSet", annotations={upgrade.MIRROR_ANNOTATION: "x"})
    assert upgrade.drain_status(both)[1] == "error"


def test_local_storage_needs_its_flag():
    p = pod("cache", owner="ReplicaSet", volumes=[{"name": "v", "emptyDir": {}}])
    assert upgrade.drain_status(p) == (False, "error", upgrade.LOCAL_FATAL)
    assert upgrade.drain_status(p, delete_emptydir=True) == (True, "warning", upgrade.LOCAL_WARNING)


def test_budgets_and_evictions():
    a = pod("a", labels={"app": "web"}, owner="ReplicaSet")
    b = pod("b", labels={"app": "web"}, owner="ReplicaSet", node="win2")
    pending = pod("c", labels={"app": "web"}, owner="ReplicaSet", phase="Pending")
    pods = [a, b, pending]
    # minAvailable 2 of 2 healthy: nothing may go
    tight = pdb("web", sel={"app": "web"}, minAvailable=2)
    assert upgrade.budget(tight, pods) == (2, 2, 0)
    code, msg = upgrade.eviction(a, pods, [tight])
    assert code == 429
    assert msg.startswith("Cannot evict pod as it would violate the pod's disruption budget.")
    assert msg.endswith("The disruption budget web needs 2 healthy pods and has 2 currently")
    # a Pending pod is evicted without asking its budget
    assert upgrade.eviction(pending, pods, [tight]) is None
    # maxUnavailable 1 of 3 expected: desired 2, healthy 2: none allowed
    assert upgrade.budget(pdb("m", sel={"app": "web"}, maxUnavailable=1), pods) == (2, 2, 0)
    # 50% of 3 rounds up to 2
    assert upgrade.budget(pdb("p", sel={"app": "web"}, minAvailable="50%"), pods)[0] == 2
    loose = pdb("web", sel={"app": "web"}, minAvailable=1)
    assert upgrade.eviction(a, pods, [loose]) is None
    # another namespace's budget, or another selector, does not count
    assert upgrade.eviction(a, pods, [pdb("web", ns="other", sel={"app": "web"}, minAvailable=2)]) is None
    assert upgrade.eviction(a, pods, [pdb("db", sel={"app": "db"}, minAvailable=2)]) is None
    # an empty selector selects every pod of the namespace (policy/v1)
    assert upgrade.eviction(a, pods, [pdb("all", minAvailable=2)])[0] == 429
    # two budgets over one pod: the eviction subresource refuses
    assert upgrade.eviction(a, pods, [loose, pdb("all", minAvailable=0)])[0] == 500


def test_go_durations():
    assert upgrade.go_duration("90s") == 90
    assert upgrade.go_duration("1m30s") == 90
    assert upgrade.go_duration("0") == 0
    with pytest.raises(SystemExit):
        upgrade.go_duration("ninety")


class FakeLab:
    def __init__(self, d, server="1.30.4"):
        self.dir = str(d)
        self.cfg = {"server_version": server}

    def host_of_node(self, name):
        return {"metadata": {"name": name.lower()}} if name.lower() in ("win1", "win2") else None

    def pods(self, ns):
        return []


def log_lines(lab):
    with open(os.path.join(lab.dir, "kubectl", "log")) as f:
        return [line.split(" ", 1)[1].strip() for line in f]


def test_cordon_uncordon_and_the_log(tmp_path, capsys):
    lab = FakeLab(tmp_path)
    upgrade.cmd_cordon(lab, ["win1"])
    upgrade.cmd_cordon(lab, ["win1"])
    upgrade.cmd_uncordon(lab, ["win1"])
    upgrade.cmd_uncordon(lab, ["win1"])
    assert capsys.readouterr().out.splitlines() == [
        "node/win1 cordoned", "node/win1 already cordoned", "node/win1 uncordoned", "node/win1 already uncordoned"]
    assert log_lines(lab) == ["cordon win1", "uncordon win1"]
    with pytest.raises(SystemExit):
        upgrade.cmd_cordon(lab, ["win9"])
    assert 'nodes "win9" not found' in capsys.readouterr().err
    # get nodes: a cordoned node is unschedulable; readiness logged when it changes
    upgrade.cmd_cordon(lab, ["win2"])
    node = {"metadata": {"name": "win2"}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "False"}],
                       "nodeInfo": {"kubeletVersion": "v1.30.4", "operatingSystem": "windows"}}}
    upgrade.observe(lab, [node])
    upgrade.observe(lab, [node])
    assert node["spec"]["unschedulable"] is True
    node["status"]["conditions"][0]["status"] = "True"
    node["status"]["nodeInfo"]["kubeletVersion"] = "v1.31.2"
    upgrade.observe(lab, [node])
    assert log_lines(lab)[2:] == ["cordon win2", "not-ready win2 v1.30.4", "ready win2 v1.31.2"]


def test_annotate_sets_overwrites_and_removes(tmp_path, capsys):
    lab = FakeLab(tmp_path)
    assert upgrade.cmd_annotate(lab, ["node", "win1", "kwinctl.io/upgrade=1.31.2"]) == 0
    # another value needs --overwrite (docs/research/upgrade.md#u10)
    with pytest.raises(SystemExit):
        upgrade.cmd_annotate(lab, ["node", "win1", "kwinctl.io/upgrade=1.32.0"])
    assert "'kwinctl.io/upgrade' already has a value (1.31.2)" in capsys.readouterr().err
    upgrade.cmd_annotate(lab, ["node", "win1", "--overwrite", "kwinctl.io/upgrade=1.32.0"])
    node = {"metadata": {"name": "win1"}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": "v1.31.2", "operatingSystem": "windows"}}}
    upgrade.observe(lab, [node])
    assert node["metadata"]["annotations"] == {"kwinctl.io/upgrade": "1.32.0"}
    upgrade.cmd_annotate(lab, ["node", "win1", "kwinctl.io/upgrade-"])
    node = {"metadata": {"name": "win1"}, "spec": {}, "status": node["status"]}
    upgrade.observe(lab, [node])
    assert "annotations" not in node["metadata"]
    assert [x for x in log_lines(lab) if x.startswith("annotate")] == ["annotate win1 kwinctl.io/upgrade=1.31.2",
                                  "annotate win1 kwinctl.io/upgrade=1.32.0", "annotate win1 kwinctl.io/upgrade-"]


def test_drain_of_an_empty_node_cordons_it(tmp_path, capsys):
    lab = FakeLab(tmp_path)
    assert upgrade.cmd_drain(lab, ["win1", "--ignore-daemonsets", "--timeout=10s"]) == 0
    assert capsys.readouterr().out.splitlines() == ["node/win1 cordoned", "node/win1 drained"]
    assert log_lines(lab) == ["cordon win1", "drained win1"]


def test_version_json(tmp_path, capsys):
    upgrade.cmd_version(FakeLab(tmp_path, "1.31.2"), ["-o", "json"])
    v = json.loads(capsys.readouterr().out)
    assert v["serverVersion"]["gitVersion"] == "v1.31.2"
    assert (v["serverVersion"]["major"], v["serverVersion"]["minor"]) == ("1", "31")
    upgrade.cmd_version(FakeLab(tmp_path, "1.31.2"), [])
    assert capsys.readouterr().out.splitlines()[-1] == "Server Version: v1.31.2"
