"""winsim/pods.py: what a pod started on a simulated Windows host gets.

The fixtures are the state files of simulated hosts after `kwinctl up` on
the lab (`lab/lab.sh up`, then `kwinctl up`; only the `downloads` folder
and the text of non-configuration files dropped):

- l2-130-win1/win2: l2bridge, Kubernetes 1.30.4, containerd 1.7.20
  (config.toml version 2), Windows Server 2019 / 2022;
- l2-134-win1: l2bridge, Kubernetes 1.34.2, containerd 2.1.4 (version 3),
  Windows Server 2022;
- tr-110-win1 / tr-113-win1: transparent, Kubernetes 1.10.13 / 1.13.12,
  Windows Server 2016.

Run: python -m pytest winsim/tests (Python 3.11+, no other package).
"""

import copy
import json
import os
import subprocess
import sys

import pytest

from winsim import pods

HERE = os.path.dirname(os.path.abspath(__file__))
WINSIM = os.path.dirname(HERE)

DNS_IP = "198.18.240.10"
CNI_CONF = "C:\\etc\\cni\\net.d\\10-kwinctl.conf"


def state(name):
    with open(os.path.join(HERE, "fixtures", name + ".state.json")) as f:
        return json.load(f)


def with_kubelet_flags(d, *flags):
    """The state with flags appended to the kubelet's command line (what the
    lead's kwinctl change writes)."""
    d = copy.deepcopy(d)
    d["services"]["kubelet"]["binpath"] += " " + " ".join(flags)
    return d


def place(d, path, text):
    """A file placed with this text (as winsim's place_file keeps it)."""
    import hashlib
    b = text.encode()
    d["files"][path] = hashlib.sha256(b).hexdigest()
    pods.keep_text(d, path, b)


def remove(d, path):
    d["files"].pop(pods.file_key(d, path))


# ------------------------------------------------------------------ l2bridge


@pytest.mark.parametrize("fixture", ["l2-130-win1", "l2-130-win2", "l2-134-win1"])
def test_l2bridge_today_pod_dns_is_localhost(fixture):
    """Today's kwinctl: no --cluster-dns, --resolv-conf="": GetPodDNS falls
    back to Default -> 127.0.0.1, and containerd's runtime DNS wins over the
    CNI file's block (the issue's breaker 1)."""
    d = state(fixture)
    dec = pods.start(d, "default", "p1")
    assert dec["ok"], dec
    p = d["pod_cidr"].rsplit(".", 1)[0]  # P: the host's /24
    assert dec["ip"] == p + ".3" and dec["prefix_len"] == 24 and dec["gateway"] == p + ".2"
    assert dec["nameservers"] == ["127.0.0.1"]
    assert dec["searches"] == ["."]
    assert [e["reason"] for e in dec["events"]] == ["MissingClusterDNS"]
    assert any("wins over the file's dns block" in w for w in dec["why"])


@pytest.mark.parametrize("fixture", ["l2-130-win1", "l2-134-win1"])
def test_l2bridge_with_cluster_dns_gets_the_cluster_dns(fixture):
    d = with_kubelet_flags(state(fixture), "--cluster-dns=" + DNS_IP, "--cluster-domain=cluster.local")
    dec = pods.start(d, "kw-test", "p1")
    assert dec["ok"], dec
    assert dec["nameservers"] == [DNS_IP]
    assert dec["searches"] == ["kw-test.svc.cluster.local", "svc.cluster.local", "cluster.local"]
    assert dec["events"] == []


def test_containerd_2_reads_version_3_config():
    d = state("l2-134-win1")
    why = []
    cfg = pods.containerd_config(d, why)
    assert cfg["conf_dir"] == "C:/etc/cni/net.d" and cfg["bin_dirs"] == ["C:/opt/cni/bin"]
    assert "version 3" in why[0]


def test_containerd_version_1_config_names_the_plugin_cri():
    d = state("l2-130-win1")
    place(d, "C:\\Program Files\\containerd\\config.toml",
          '[plugins.cri.cni]\nbin_dir = "C:/other/bin"\nconf_dir = "C:/etc/cni/net.d"\n')
    dec = pods.start(d, "default", "p")
    assert 'failed to find plugin "win-bridge" in path [C:/other/bin]' in dec["error"], dec


def test_dns_policies_none_and_default():
    d = with_kubelet_flags(state("l2-130-win1"), "--cluster-dns=" + DNS_IP)
    none = pods.start(d, "default", "a", "None")
    assert none["ok"] and none["nameservers"] == ["198.18.240.10"]  # the file's block: no runtime servers
    dflt = pods.start(d, "default", "b", "Default")
    assert dflt["nameservers"] == ["127.0.0.1"] and dflt["searches"] == ["."]
    no_domain = pods.start(d, "default", "c")
    assert no_domain["nameservers"] == [DNS_IP] and no_domain["searches"] == ["svc.cluster.local"]


def test_host_local_is_sequential_and_runs_out():
    d = state("l2-130-win1")
    ips = [pods.start(d, "default", "p%d" % i)["ip"] for i in range(3)]
    assert ips == ["198.19.1.3", "198.19.1.4", "198.19.1.5"]
    assert pods.delete(d, "default", "p0")
    # host-local goes on after the last address it reserved
    assert pods.start(d, "default", "p3")["ip"] == "198.19.1.6"
    for i in range(4, 400):
        dec = pods.start(d, "default", "p%d" % i)
        if not dec["ok"]:
            break
    assert "no IP addresses available in range set: 198.19.1.3-198.19.1.254" in dec["error"], dec
    assert dec["phase"] == "Pending"
    # the freed .3 is found when the allocator wraps around
    pods.delete(d, "default", "p1")
    assert pods.start(d, "default", "again")["ip"] == "198.19.1.4"


def drop_network(d):
    d["hns_networks"] = [n for n in d["hns_networks"] if n["name"] != "cbr0"]


def set_status(service, status):
    def f(d):
        d["services"][service]["status"] = status
    return f


@pytest.mark.parametrize("breaks, error", [
    (lambda d: remove(d, CNI_CONF), "cni plugin not initialized"),
    (lambda d: remove(d, "C:\\opt\\cni\\bin\\win-bridge.exe"),
     'failed to find plugin "win-bridge" in path [C:/opt/cni/bin]'),
    (drop_network, 'Network name "cbr0" not found'),
    # no config.toml: containerd's own conf dir, where nothing is
    (lambda d: remove(d, "C:\\Program Files\\containerd\\config.toml"), "C:\\Program Files\\containerd\\cni\\conf"),
    (set_status("containerd", "Stopped"), "containerd is not running"),
    (set_status("kubelet", "Stopped"), "kubelet is not running"),
], ids=["no-conf", "no-plugin", "no-network", "containerd-defaults", "containerd-stopped", "kubelet-stopped"])
def test_a_break_in_the_chain_keeps_the_pod_pending(breaks, error):
    d = state("l2-130-win1")
    breaks(d)
    dec = pods.start(d, "default", "p")
    assert not dec["ok"] and dec["phase"] == "Pending" and dec["ip"] is None
    assert error in dec["error"], dec


def test_the_first_conf_file_in_name_order_wins():
    d = state("l2-130-win1")
    conf = json.loads(pods.text_of(d, CNI_CONF))
    conf["name"] = "cbr9"
    place(d, "C:\\etc\\cni\\net.d\\05-other.conflist", json.dumps({"cniVersion": "0.3.1", "name": "cbr9",
                                                                   "plugins": [conf]}))
    dec = pods.start(d, "default", "p")
    assert 'Network name "cbr9" not found' in dec["error"], dec
    # an extension libcni does not list is not a conf file
    remove(d, "C:\\etc\\cni\\net.d\\05-other.conflist")
    place(d, "C:\\etc\\cni\\net.d\\05-other.conf.bak", "{}")
    assert pods.start(d, "default", "p")["ok"]


def test_without_the_dns_capability_the_files_dns_block_counts():
    d = state("l2-130-win1")
    conf = json.loads(pods.text_of(d, CNI_CONF))
    del conf["capabilities"]["dns"]
    place(d, CNI_CONF, json.dumps(conf))
    dec = pods.start(d, "default", "p")
    assert dec["nameservers"] == [DNS_IP] and dec["searches"] == ["svc.cluster.local"]


def test_a_changed_file_is_not_read_from_stale_text():
    d = state("l2-130-win1")
    d["files"][pods.file_key(d, CNI_CONF)] = "0" * 64
    assert pods.text_of(d, CNI_CONF) is None
    assert "does not know its content" in pods.start(d, "default", "p")["error"]


def test_image_of_another_build_or_os_is_refused():
    d = state("l2-130-win1")  # Windows Server 2019
    nano = "mcr.microsoft.com/windows/nanoserver:ltsc2022"
    assert "no match for platform" in pods.start(d, "default", "a", image=nano)["error"]
    assert "no match for platform" in pods.start(d, "default", "b", image="busybox:1.36")["error"]
    ok = pods.start(d, "default", "c", image="registry.k8s.io/e2e-test-images/agnhost:2.52")
    assert ok["ok"], ok


def with_build(d, build, containerd=None):
    d = copy.deepcopy(d)
    d["build"] = build
    if containerd:
        exe = pods.file_key(d, "C:\\Program Files\\containerd\\containerd.exe")
        d["file_versions"][exe] = "containerd github.com/containerd/containerd v%s 0123456789abcdef" % containerd
    return d


def test_containerd_runs_the_previous_ltsc_image_on_a_newer_ltsc_host():
    """containerd/platforms' compatibility table: a 2025 host runs ltsc2022
    images; a 2022 host runs no ltsc2025 image; before 2022 the exact build."""
    nano22 = "mcr.microsoft.com/windows/nanoserver:ltsc2022"
    nano25 = "mcr.microsoft.com/windows/nanoserver:ltsc2025"
    on25 = with_build(state("l2-134-win1"), "10.0.26100")
    dec = pods.start(on25, "default", "a", image=nano22)
    assert dec["ok"], dec
    assert any("runs %s's entry for build 20348" % nano22 in w for w in dec["why"]), dec["why"]
    assert pods.start(on25, "default", "b", image=nano25)["ok"]
    on22 = state("l2-134-win1")
    assert "no match for platform" in pods.start(on22, "default", "c", image=nano25)["error"]
    on19 = state("l2-130-win1")
    assert "no match for platform" in pods.start(on19, "default", "d", image=nano22)["error"]
    # containerd before 1.7.20 matches the exact build only
    old = with_build(state("l2-130-win1"), "10.0.26100", containerd="1.7.19")
    assert "no match for platform" in pods.start(old, "default", "e", image=nano22)["error"]


def test_agnhost_has_no_ltsc2025_entry_but_runs_on_2025_through_the_table():
    agn = "registry.k8s.io/e2e-test-images/agnhost:2.53"
    assert pods.image_builds({}, agn) == [17763, 20348]
    dec = pods.start(with_build(state("l2-134-win1"), "10.0.26100"), "default", "a", image=agn)
    assert dec["ok"] and any("entry for build 20348" in w for w in dec["why"]), dec


def test_e2e_busybox_and_nginx_have_windows_entries_docker_hubs_do_not():
    d = state("l2-130-win1")  # Windows Server 2019
    for image in ("registry.k8s.io/e2e-test-images/busybox:1.29-4", "registry.k8s.io/e2e-test-images/nginx:1.15-4"):
        assert pods.start(d, "default", "e2e", image=image)["ok"], image
    for image in ("busybox:1.36", "docker.io/library/nginx:1.27", "example.com/busybox:1"):
        builds = pods.image_builds({}, image)
        assert (builds == []) == (not image.startswith("example.com")), (image, builds)


def without_resolv_conf(d):
    d = copy.deepcopy(d)
    s = d["services"]["kubelet"]
    assert " --resolv-conf= " in s["binpath"]
    s["binpath"] = s["binpath"].replace(" --resolv-conf= ", " ")
    return d


def test_a_kubelet_without_resolv_conf_starts_no_pod():
    """getHostDNSConfig on Windows: the default /etc/resolv.conf is no
    file there, so GetPodDNS fails for every pod (dns_windows.go)."""
    d = without_resolv_conf(state("l2-130-win1"))
    for policy in ("ClusterFirst", "Default", "None"):
        dec = pods.start(d, "default", "p-" + policy.lower(), policy)
        assert not dec["ok"] and dec["phase"] == "Pending", dec
        assert 'Unexpected resolver config value: "/etc/resolv.conf"' in dec["error"], dec["error"]
    old = without_resolv_conf(state("tr-113-win1"))
    dec = pods.start(old, "default", "p")
    assert "open /etc/resolv.conf: The system cannot find the path specified" in dec["error"], dec


def test_resolv_conf_host_or_a_file_is_read():
    d = with_kubelet_flags(state("l2-130-win1"), "--resolv-conf=Host")
    d["host_dns"], d["host_dns_search"] = ["198.18.0.53"], ["corp.example"]
    dec = pods.start(d, "default", "p", "Default")
    assert dec["ok"] and dec["nameservers"] == ["198.18.0.53"] and dec["searches"] == ["corp.example"], dec
    d = with_kubelet_flags(state("l2-130-win1"), "--resolv-conf=C:/k/resolv.conf")
    place(d, "C:\\k\\resolv.conf", "nameserver 198.18.0.54\nsearch lab.example\n")
    dec = pods.start(d, "default", "q", "Default")
    assert dec["nameservers"] == ["198.18.0.54"] and dec["searches"] == ["lab.example"], dec
    remove(d, "C:\\k\\resolv.conf")
    dec = pods.start(d, "default", "r", "Default")
    assert 'Unexpected resolver config value: "C:/k/resolv.conf"' in dec["error"], dec


# ------------------------------------------------------------------ transparent


def test_transparent_113_gives_no_pod_ip():
    """dockershim 1.13 + CONTAINER_NETWORK + no --network-plugin: the noop
    plugin, then the top-level NetworkSettings.IPAddress, empty for a
    network not named bridge (the issue's breaker 2)."""
    d = state("tr-113-win1")
    dec = pods.start(d, "default", "p")
    assert not dec["ok"] and dec["ip"] is None
    assert dec["phase"] == "Running"
    assert "no pod IP" in dec["error"] and "named bridge" in dec["error"]


def test_transparent_110_pod_ip_from_dockers_networks():
    d = state("tr-110-win1")
    a = pods.start(d, "default", "a")
    b = pods.start(d, "default", "b")
    assert a["ok"] and a["ip"] == "198.19.1.2" and a["gateway"] == "198.19.1.1"
    assert b["ip"] == "198.19.1.3"
    # the kubelet's DNS never reaches the container (host DNS: none here)
    assert a["nameservers"] == []


def test_transparent_with_cluster_dns_still_no_cluster_dns():
    d = with_kubelet_flags(state("tr-110-win1"), "--cluster-dns=" + DNS_IP, "--cluster-domain=cluster.local")
    d["host_dns"] = ["198.18.1.1"]
    dec = pods.start(d, "default", "a")
    assert dec["ok"] and dec["nameservers"] == ["198.18.1.1"]


def test_transparent_network_named_bridge_reports_the_ip():
    d = state("tr-113-win1")
    d["networks"][0]["name"] = "bridge"
    d["services"]["kubelet"]["env"] = ["CONTAINER_NETWORK=bridge"]
    assert pods.start(d, "default", "p")["ip"] == "198.19.1.2"


def test_dockershim_with_cni_uses_the_cni_path():
    d = state("l2-130-win1")
    tr = state("tr-113-win1")
    # a 1.13 kubelet with --network-plugin=cni on the l2bridge host's files
    d["services"]["kubelet"] = dict(tr["services"]["kubelet"])
    d["services"]["kubelet"]["binpath"] += (" --network-plugin=cni --cni-bin-dir=C:\\opt\\cni\\bin "
                                            "--cni-conf-dir=C:\\etc\\cni\\net.d --cluster-dns=" + DNS_IP)
    d["file_versions"][pods.file_key(d, "C:\\k\\kubelet.exe")] = "Kubernetes v1.13.12"
    dec = pods.start(d, "default", "p")
    assert dec["ok"] and dec["runtime"] == "docker" and dec["ip"] == "198.19.1.3"
    assert dec["nameservers"] == [DNS_IP]


# ------------------------------------------------------------------ CLI


def test_cli_pod_start_and_delete(tmp_path):
    p = tmp_path / "state.json"
    p.write_text(json.dumps(state("l2-130-win1")))
    run = [sys.executable, os.path.join(WINSIM, "winsim.py")]
    o = subprocess.run(run + ["pod-start", str(p), "--namespace", "kw", "--name", "a"], capture_output=True,
                       text=True, timeout=30)
    assert o.returncode == 0, o.stderr
    dec = json.loads(o.stdout)
    assert dec["ip"] == "198.19.1.3" and dec["nameservers"] == ["127.0.0.1"]
    assert json.loads(p.read_text())["pods"]["kw/a"]["ip"] == "198.19.1.3"
    o = subprocess.run(run + ["pod-delete", str(p), "--namespace", "kw", "--name", "a"], capture_output=True,
                       text=True, timeout=30)
    assert o.returncode == 0 and json.loads(o.stdout) == {"deleted": True}
    assert json.loads(p.read_text())["pods"] == {}


def test_pod_sandbox_fails_knob_keeps_that_kubelets_pods_pending():
    """The lab's knob: a kubelet of a named release starts no pod with a
    network (the pod stays Pending with the sandbox's error); other
    releases are untouched."""
    d = state("l2-130-win1")
    d["pod_sandbox_fails"] = ["1.31.2"]
    assert pods.start(copy.deepcopy(d), "default", "p1")["ok"]
    d["pod_sandbox_fails"] = ["1.30.4"]
    dec = pods.start(d, "default", "p1")
    assert not dec["ok"] and dec["phase"] == "Pending" and dec["ip"] is None, dec
    assert "failed to setup network for sandbox" in dec["error"]
    assert "pod_sandbox_fails names kubelet v1.30.4" in dec["error"]
