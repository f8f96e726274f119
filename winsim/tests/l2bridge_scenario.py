"""The l2bridge scenario of winsim's self-test, run by
tests/test_l2bridge_netns.py inside the namespaces it makes (root, 5-10 s):
`python -m winsim.tests.l2bridge_scenario inner` in the simulated host's
namespace (its card "Ethernet" = 198.18.248.2, a Linux peer 198.18.248.10 on
a veth pair; later a pod behind the host's vSwitch; nothing in the machine's
own namespace). It feeds hand-written scripts with kwinctl's
`# kwinctl-sim:` headers to winsim's `execute(script, state_path)` inside
the host's namespace — and, for the
vSwitch step, to a real `winsim.py serve` over WinRM (Basic over HTTP) from
the peer's namespace — and checks what the contract and the spec
(docs/research/l2bridge-profile.md) say:

- the Containers feature: HNS and containerd refuse until installed AND
  restarted (docs/research/sig-windows-tools.md#s2, docs/research/kubernetes.md#g1);
- install_archive: members by base name, version line, marker, a missing
  member refused;
- the first external vSwitch: the node address moves to "vEthernet
  (Ethernet)" with a new ifIndex, routes bound to the card's ifIndex are
  gone from both stores (docs/research/flannel.md#f1, docs/research/kubernetes.md#g1), the WinRM call in flight is
  answered and
  the server keeps answering new connections on the address;
- host endpoint: attached vNIC; 0x1392 for a duplicate IP and for the
  gateway (k8s #74766); forwarding per adapter: a pod on the vSwitch
  (its own namespace, gateway P+2) reaches the peer only once both vNICs
  forward (§8.4);
- routes on the vNIC's ifIndex; endpoints lost at a reboot (docs/research/kubernetes.md#g1) and
  restored by the boot task (boot_run);
- pull_sandbox: containerd's pipe needed; a build without an image entry
  refused (docs/research/kubernetes-website.md#w1, pause CHANGELOG, docs/research/containerd.md#d8);
- kube-proxy's healthz false until its network exists (docs/research/kubernetes.md#k1); a 1.29 kubelet
  fatal without --cgroups-per-qos=false (docs/research/kubernetes.md#k5), 1.30 only warns;
- a network's subnet is immutable unless replaced (new id, endpoints gone);
  reset keeps the placeholder and the vSwitch;
- services wrapped in kube-log-runner: a 1.30 runner refuses -log-file-size
  (Go's flag message), a 1.34 one takes the rotation flags and starts a 1.34
  kubelet, --windows-service is the wrapped program's (1053), kube-proxy's
  network is read behind the runner, a new runner file restarts its services.

Every wait is bounded; the server goes even on failure (the namespaces are
the test's). Prints one `ok  `/`FAIL` line per check; exit 0 when every
check passed.
"""

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # winsim/
NODE, PEER = "198.18.248.2", "198.18.248.10"
P = "10.244.3"


def netns_names(test_id):
    """The host's, the peer's and the pod's namespace for one run."""
    return "kwst%sh" % test_id, "kwst%sp" % test_id, "kwst%sq" % test_id


# the namespaces' names, set by the test for the processes it starts
HOSTNS, PEERNS, PODNS = netns_names(os.environ.get("WINSIM_SELFTEST_ID", str(os.getpid())))
FAILED = []


def check(what, ok, detail=""):
    print("%s %s%s" % ("ok  " if ok else "FAIL", what, "" if ok else ": %s" % (detail,)), flush=True)
    if not ok:
        FAILED.append(what)


def sh(*a, **kw):
    return subprocess.run(list(a), capture_output=True, text=True, timeout=30, check=kw.get("check", True))


# ------------------------------------------------------------------ client (in the peer's namespace)


ENV = ('<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" '
       'xmlns:a="http://schemas.xmlsoap.org/ws/2004/08/addressing" '
       'xmlns:w="http://schemas.dmtf.org/wbem/wsman/1/wsman.xsd" '
       'xmlns:rsp="http://schemas.microsoft.com/wbem/wsman/1/windows/shell"><s:Header>'
       '<a:Action>%s</a:Action><a:MessageID>uuid:1</a:MessageID>%s</s:Header><s:Body>%s</s:Body></s:Envelope>')
SHELL = "http://schemas.microsoft.com/wbem/wsman/1/windows/shell"


def post(ip, action, selectors, body):
    sel = "".join('<w:SelectorSet><w:Selector Name="ShellId">%s</w:Selector></w:SelectorSet>' % s
                  for s in selectors)
    req = urllib.request.Request("http://%s:5985/wsman" % ip, data=(ENV % (action, sel, body)).encode(),
                                 headers={"Content-Type": "application/soap+xml;charset=UTF-8",
                                          "Authorization": "Basic " + base64.b64encode(
                                              b"Administrator:selftest").decode()})
    with urllib.request.urlopen(req, timeout=20) as r:
        return r.read().decode()


def client(ip, script_file):
    """Run a script over WinRM (Basic, HTTP) as one command; print its stdout."""
    import re
    script = open(script_file).read()
    x = post(ip, "http://schemas.xmlsoap.org/ws/2004/09/transfer/Create", [], "<rsp:Shell/>")
    sid = re.search(r"<rsp:ShellId>([^<]+)<", x).group(1)
    if script == "":
        print("SHELL " + sid)
        return
    enc = base64.b64encode(script.encode("utf-16-le")).decode()
    x = post(ip, SHELL + "/Command", [sid], "<rsp:CommandLine><rsp:Command>powershell.exe</rsp:Command>"
             "<rsp:Arguments>-EncodedCommand</rsp:Arguments><rsp:Arguments>%s</rsp:Arguments>"
             "</rsp:CommandLine>" % enc)
    cid = re.search(r"<rsp:CommandId>([^<]+)<", x).group(1)
    x = post(ip, SHELL + "/Receive", [sid], '<rsp:Receive><rsp:DesiredStream CommandId="%s">stdout stderr'
             '</rsp:DesiredStream></rsp:Receive>' % cid)
    for m in re.finditer(r'<rsp:Stream Name="stdout"[^>]*>([^<]*)<', x):
        sys.stdout.write(base64.b64decode(m.group(1)).decode())


def over_winrm(script):
    with tempfile.NamedTemporaryFile("w", suffix=".ps1", delete=False) as f:
        f.write(script)
    try:
        return subprocess.run(["ip", "netns", "exec", PEERNS, sys.executable, "-m", __spec__.name,
                               "client", NODE, f.name], capture_output=True, text=True, timeout=40)
    finally:
        os.unlink(f.name)


# ------------------------------------------------------------------ inner (in the host's namespace)


def tgz(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def inner():
    from winsim import host as winsim  # execute, reboot
    tmp = tempfile.mkdtemp(prefix="winsim-selftest-")
    dl = os.path.join(tmp, "dl")
    os.makedirs(dl)
    state = os.path.join(tmp, "state.json")
    containerd = tgz({"bin/containerd.exe": b"containerd github.com/containerd/containerd v1.7.20 abc\nMZ\n",
                      "bin/containerd-shim-runhcs-v1.exe": b"MZ shim\n", "bin/ctr.exe": b"MZ ctr\n"})
    with open(os.path.join(dl, "containerd.tar.gz"), "wb") as f:
        f.write(containerd)
    with open(state, "w") as f:
        json.dump({"hostname": "WIN1", "build": "10.0.17763", "downloads": dl, "tls12_default": True,
                   "docker_version": None, "firewall_on": False, "nics": [{"name": "Ethernet", "dev": "eth0"}]}, f)
    server = None
    try:
        server = scenario(winsim, state, containerd, tmp)
    finally:
        if server:
            server.kill()
            server.wait(timeout=5)
    print("%d check(s) failed: %s" % (len(FAILED), FAILED) if FAILED else "all checks passed")
    return 1 if FAILED else 0


class Script:
    """A script of headers: the prelude, then actions (ids from 0), the probe."""

    def __init__(self):
        self.lines = ['# kwinctl-sim: {"kind":"prelude","address":"%s","adapter":null}' % NODE]
        self.n = 0

    def act(self, kind, block="", **fields):
        fields.update(kind=kind, id=self.n)
        self.n += 1
        self.lines.append("# kwinctl-sim: " + json.dumps(fields))
        if block:
            self.lines.append(block)
        return self

    def probe(self, **fields):
        fields.update(kind="probe")
        fields.setdefault("services", ["containerd", "kubelet", "kube-proxy"])
        fields.setdefault("health", [10248, 10256])
        self.lines.append("# kwinctl-sim: " + json.dumps(fields))
        return self

    def text(self):
        return "\n".join(self.lines) + "\n"


def run(winsim, state, script):
    out, err, code = winsim.execute(script.text(), state)
    facts = None
    for line in out.splitlines():
        if line.startswith("KWINCTL-FACTS "):
            facts = json.loads(line[len("KWINCTL-FACTS "):])
    return out, facts


def probe(winsim, state):
    return run(winsim, state, Script().probe())[1]


def ok_of(out, i=0):
    return ("KWX %d ok" % i) in out


def adapter(facts, name):
    return next((a for a in facts["adapters"] if a["name"] == name), None)


def upload(path, data):
    return {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "source": "inline",
            "version": None, "version_regex": None}, "$b = [Convert]::FromBase64String('%s')" % \
        base64.b64encode(data).decode()


def service(name, binpath, env=()):
    return {"name": name, "display": name, "binpath": binpath, "env": list(env), "depends": []}


NET = {"name": "cbr0", "subnet": P + ".0/24", "gateway": P + ".1", "adapter": "Ethernet",
       "placeholder": "External", "placeholder_subnet": "192.168.255.0/30", "placeholder_gateway": "192.168.255.1"}
EP = {"network": "cbr0", "name": "cbr0_ep", "ip": P + ".2", "prefix": 24}
# (a service that exists is changed through the service manager: winsim
# reads the block for it, see README "Services")
MANUAL = "New-Service -StartupType Manual\nInvoke-CimMethod -MethodName Change"
CTRD = "C:\\Program Files\\containerd\\containerd.exe"
CTRD_BIN = ('"%s" --run-service --log-file C:\\k\\logs\\containerd.log --config '
            '"C:\\Program Files\\containerd\\config.toml"' % CTRD)


def scenario(winsim, state, containerd, tmp):
    # 1. the Containers feature: refused until installed and restarted
    out, _ = run(winsim, state, Script().act("ensure_hns_network", replace=False, **NET))
    check("ensure_hns_network refused without the Containers feature",
          "KWX 0 failed" in out and "does not exist as an installed service" in out, out)
    out, f = run(winsim, state, Script().act("install_feature", name="Containers").probe())
    check("install_feature -> InstallPending", ok_of(out) and f["containers_feature"] == "InstallPending", out)
    out, _ = run(winsim, state, Script().act("ensure_hns_network", replace=False, **NET))
    check("HNS still refused while InstallPending", "KWX 0 failed" in out, out)

    # 2. containerd from its archive; refused before the restart
    arch = {"name": "containerd", "archive": {"path": "C:\\k\\kwinctl\\containerd.tar.gz",
                                              "sha256": hashlib.sha256(containerd).hexdigest(),
                                              "source": {"url": "https://dl.lab.invalid/containerd.tar.gz"},
                                              "version": "1.7.20", "version_regex": r"^containerd \S+ v1\.7\.20 "},
            "members": [CTRD, "C:\\Program Files\\containerd\\containerd-shim-runhcs-v1.exe",
                        "C:\\Program Files\\containerd\\ctr.exe"],
            "version_binary": CTRD, "marker": "C:\\k\\kwinctl\\containerd.archive"}
    bad = dict(arch, members=arch["members"] + ["C:\\Program Files\\containerd\\nope.exe"])
    out, _ = run(winsim, state, Script().act("install_archive", **bad))
    check("install_archive refuses a missing member", "nope.exe is not in the archive" in out, out)
    wrong = json.loads(json.dumps(arch))
    wrong["archive"]["version_regex"] = r"^containerd \S+ v2\."
    out, _ = run(winsim, state, Script().act("install_archive", **wrong))
    check("install_archive refuses another version", "--version says containerd" in out, out)
    out, f = run(winsim, state, Script().act("install_archive", **arch).probe(
        files=arch["members"] + [arch["marker"]], binaries=[CTRD]))
    paths = {x["path"] for x in f["files"]}
    marker = next((x["sha256"] for x in f["files"] if x["path"] == arch["marker"]), None)
    check("install_archive places the members and the marker",
          ok_of(out) and set(arch["members"]) <= paths
          and marker == hashlib.sha256(hashlib.sha256(containerd).hexdigest().encode()).hexdigest()
          and f["versions"][0]["output"].startswith("containerd github.com/containerd/containerd v1.7.20"), out)
    out, _ = run(winsim, state, Script().act("install_service", "New-Service -StartupType Automatic",
                                             service=service("containerd", CTRD_BIN)))
    check("containerd does not start before the restart", "KWX 0 failed" in out, out)
    out, _ = run(winsim, state, Script().act("pull_sandbox", image="registry.k8s.io/pause:3.10.2"))
    check("pull_sandbox needs containerd's pipe", "failed to dial" in out, out)
    winsim.reboot(state, False)
    f = probe(winsim, state)
    check("the restart installs Containers; containerd (Automatic) starts",
          f["containers_feature"] == "Installed" and f["containerd_pipe"], f.get("services"))

    # 3. the sandbox image must have an entry for the host's build
    out, f = run(winsim, state, Script().act("pull_sandbox", image="registry.k8s.io/pause:3.10.2").probe())
    check("pull_sandbox pause:3.10.2 on 17763", ok_of(out) and "registry.k8s.io/pause:3.10.2"
          in f["sandbox_images"], out)
    set_state(state, build="10.0.26100")
    out, _ = run(winsim, state, Script().act("pull_sandbox", image="registry.k8s.io/pause:3.10.1"))
    check("pull_sandbox takes pause:3.10.1's ltsc2022 entry on 26100 (containerd/platforms' table)",
          ok_of(out), out)
    out, _ = run(winsim, state, Script().act("pull_sandbox", image="registry.k8s.io/pause:3.5"))
    check("pull_sandbox refuses pause:3.5 on 26100 (no 20348 or 26100 entry)",
          "no match for platform in manifest: not found" in out, out)
    out, _ = run(winsim, state, Script().act("pull_sandbox", image="registry.k8s.io/pause:3.10.2"))
    check("pull_sandbox pause:3.10.2 on 26100", ok_of(out), out)
    set_state(state, build="10.0.17763")

    # 4. kubelet: 1.29 fatal without the cgroups flags, 1.30 warns
    kp = b"MZ kube-proxy\nKubernetes v1.30.4\n"
    for exe, data in (("C:\\k\\kube-proxy.exe", kp),):
        fl, block = upload(exe, data)
        out, _ = run(winsim, state, Script().act("place_file", block, file=fl))
        check("place kube-proxy.exe", ok_of(out), out)
    kl29 = b"MZ kubelet\nKubernetes v1.29.9\n"
    fl, block = upload("C:\\k\\kubelet.exe", kl29)
    run(winsim, state, Script().act("place_file", block, file=fl))
    base = ("C:\\k\\kubelet.exe --windows-service --node-ip=%s "
            "--container-runtime-endpoint=npipe:////./pipe/containerd-containerd --resolv-conf= " % NODE)
    out, _ = run(winsim, state, Script().act("install_service", MANUAL,
                                             service=service("kubelet", base)))
    check("kubelet 1.29 exits without --cgroups-per-qos=false", "KWX 0 failed" in out and
          "CgroupsPerQOS" in json.load(open(state))["logs"]["scm:kubelet"], out)
    out, f = run(winsim, state, Script().act(
        "install_service", MANUAL,
        service=service("kubelet", base + "--cgroups-per-qos=false --enforce-node-allocatable=")).probe())
    check("kubelet 1.29 starts with the cgroups flags; healthz 10248 ok",
          ok_of(out) and {"port": 10248, "ok": True} in f["health"], out)
    kl30 = b"MZ kubelet\nKubernetes v1.30.4\n"
    fl, block = upload("C:\\k\\kubelet.exe", kl30)
    out, _ = run(winsim, state, Script().act("place_file", block, file=fl).act(
        "install_service", MANUAL, service=service("kubelet", base)))
    logs = json.load(open(state))["logs"]
    check("kubelet 1.30 starts without them (a warning)", ok_of(out, 1) and "ignored configuration option"
          in logs.get("warnings:kubelet", ""), out)

    # 5. kube-proxy: running, but not healthy until its network exists
    kpbin = "C:\\k\\kube-proxy.exe --windows-service --proxy-mode=kernelspace --hostname-override=win1"
    out, _ = run(winsim, state, Script().act("install_service", MANUAL,
                                             service=service("kube-proxy", kpbin)))
    check("kube-proxy without a network name exits (docs/research/kubernetes.md#k1)", "KUBE_NETWORK and "
          "network-flag not initialized"
          in json.load(open(state))["logs"]["scm:kube-proxy"], out)
    out, _ = run(winsim, state, Script().act("install_service", MANUAL,
                                             service=service("kube-proxy", kpbin + " --enable-dsr=true "
                                                             "--network-name=cbr0")))
    check("kube-proxy 1.30 --enable-dsr without the WinDSR gate exits (docs/research/kubernetes.md#k1, "
          "docs/research/kubernetes.md#k3)",
          "WinDSR feature gate not enabled" in json.load(open(state))["logs"]["scm:kube-proxy"], out)
    kpbin += " --network-name=cbr0 --enable-dsr=true --feature-gates=WinDSR=true"
    out, f = run(winsim, state, Script().act("install_service", MANUAL,
                                             service=service("kube-proxy", kpbin)).probe())
    check("kube-proxy runs but healthz 10256 fails without the network",
          ok_of(out) and {"port": 10256, "ok": False} in f["health"], out)

    # 6. a route on the card, then the first vSwitch, over WinRM
    out, f = run(winsim, state, Script().act("add_route", dst="10.244.0.0/24", via=PEER, replace=False).probe())
    r = [x for x in f["routes"] if x["dst"] == "10.244.0.0/24"]
    card = adapter(f, "Ethernet")
    check("a route bound to the card", ok_of(out) and r and r[0]["index"] == card["index"], f["routes"])
    server = start_server(winsim, state, tmp)
    res = over_winrm(Script().act("ensure_hns_network", replace=False, **NET).text())
    check("the WinRM call that creates the vSwitch is answered", "KWX 0 ok" in res.stdout,
          res.stdout + res.stderr)
    res = over_winrm("")
    check("WinRM answers a new connection on the moved address", res.stdout.startswith("SHELL "),
          res.stdout + res.stderr)
    f = probe(winsim, state)
    v = adapter(f, "vEthernet (Ethernet)")
    check("the node address is on vEthernet (Ethernet) with a new ifIndex, no forwarding",
          v is not None and NODE in v["ipv4"] and v["index"] != card["index"] and not v["forwarding"]
          and NODE not in adapter(f, "Ethernet")["ipv4"], f["adapters"])
    check("the route bound to the card's ifIndex is gone (both stores)",
          not [x for x in f["routes"] if x["dst"] == "10.244.0.0/24"], f["routes"])
    nets = {n["name"]: n for n in f["hns_networks"]}
    check("networks External and cbr0 (L2Bridge, management IP)",
          set(nets) == {"External", "cbr0"} and nets["cbr0"]["type"] == "L2Bridge"
          and nets["cbr0"]["management_ip"] == NODE
          and nets["cbr0"]["subnets"] == [{"prefix": P + ".0/24", "gateway": P + ".1"}], nets)
    check("kube-proxy healthz 10256 ok once cbr0 exists", {"port": 10256, "ok": True} in f["health"],
          f["health"])
    cbr0_id = nets["cbr0"]["id"]

    # 7. host endpoint, 0x1392, forwarding, the route on the vNIC
    out, f = run(winsim, state, Script().act("ensure_host_endpoint", **EP).act(
        "ensure_host_endpoint", **EP).probe())
    ep = adapter(f, "vEthernet (cbr0_ep)")
    check("host endpoint attached: vEthernet (cbr0_ep) holds P+2, no forwarding; again: fine",
          ok_of(out, 0) and ok_of(out, 1) and ep and P + ".2" in ep["ipv4"] and not ep["forwarding"]
          and f["hns_endpoints"][0]["attached"], out)
    out, _ = run(winsim, state, Script().act("ensure_host_endpoint", network="cbr0", name="other_ep",
                                             ip=P + ".2", prefix=24))
    check("a second endpoint with the same IP: 0x1392", "(0x1392)" in out, out)
    out, _ = run(winsim, state, Script().act("ensure_host_endpoint", network="cbr0", name="gw_ep",
                                             ip=P + ".1", prefix=24))
    check("an endpoint on the gateway P+1: 0x1392", "(0x1392)" in out, out)
    # a pod on the vSwitch (its own namespace), its gateway P+2; the peer
    # routes P/24 via the node: no way through until both vNICs forward
    sh("ip", "netns", "add", PODNS)
    sh("ip", "link", "add", "kwpod", "type", "veth", "peer", "name", "eth0", "netns", PODNS)
    sh("ip", "link", "set", "kwpod", "master", "HNSVSwitch", "up")
    for c in (["link", "set", "lo", "up"], ["addr", "add", P + ".5/24", "dev", "eth0"],
              ["link", "set", "eth0", "up"], ["route", "add", "default", "via", P + ".2"]):
        sh("ip", "-n", PODNS, *c)
    sh("ip", "netns", "exec", PEERNS, "ip", "route", "add", P + ".0/24", "via", NODE)

    def pod_reaches_peer():
        return subprocess.run(["ip", "netns", "exec", PODNS, "ping", "-n", "-c", "1", "-W", "1", PEER],
                              capture_output=True, timeout=10).returncode == 0
    check("a pod does not reach the peer before forwarding (§8.4)", not pod_reaches_peer())
    out, _ = run(winsim, state, Script().act("set_forwarding", addresses=[P + ".2"]))
    check("nor with forwarding on the host endpoint's vNIC only", not pod_reaches_peer())
    out, f = run(winsim, state, Script().act("set_forwarding", addresses=[NODE, P + ".2"]).act(
        "add_route", dst="10.244.0.0/24", via=PEER, replace=False).probe())
    v, ep = adapter(f, "vEthernet (Ethernet)"), adapter(f, "vEthernet (cbr0_ep)")
    r = [x for x in f["routes"] if x["dst"] == "10.244.0.0/24"]
    check("forwarding on both vNICs; the route on the vNIC's ifIndex",
          ok_of(out, 0) and ok_of(out, 1) and v["forwarding"] and ep["forwarding"] and r
          and r[0]["index"] == v["index"] and r[0]["persistent"] and r[0]["active"], (out, r))
    out, _ = run(winsim, state, Script().act("set_forwarding", addresses=["10.9.9.9"]))
    check("set_forwarding on an address nobody holds", "No MSFT_NetIPAddress objects found" in out, out)
    check("the pod reaches the peer once both vNICs forward", pod_reaches_peer())
    res = subprocess.run(["ip", "netns", "exec", PEERNS, "ping", "-n", "-c", "1", "-W", "2", P + ".2"],
                         capture_output=True, timeout=10)
    check("the peer reaches the host endpoint P+2 through the node address (firewall off)", res.returncode == 0,
          res.stdout)

    # 8. reboot: endpoints are lost; the boot task brings them back
    boot = {"fingerprint": "x", "services": ["kubelet", "kube-proxy"], "tasks": [], "profile": "l2bridge",
            "node_address": NODE,
            "l2bridge": {"network": dict(NET, replace=False), "endpoint": EP, "forwarding": [NODE, P + ".2"],
                         "routes": [{"dst": "10.244.0.0/24", "via": PEER}]}}
    # (registered without a startup trigger first: the reboot alone)
    out, _ = run(winsim, state, Script().act("install_boot_task", "Register-ScheduledTask", boot=boot))
    winsim.reboot(state, False)
    f = probe(winsim, state)
    check("after a reboot: no endpoint, no vEthernet (cbr0_ep); networks, vSwitch and address stay "
          "(docs/research/kubernetes.md#g1)",
          f["hns_endpoints"] == [] and adapter(f, "vEthernet (cbr0_ep)") is None
          and {n["name"] for n in f["hns_networks"]} == {"External", "cbr0"}
          and NODE in adapter(f, "vEthernet (Ethernet)")["ipv4"], f["hns_endpoints"])
    check("the persistent route came back on the vNIC's ifIndex",
          [x["index"] for x in f["routes"] if x["dst"] == "10.244.0.0/24" and x["active"]]
          == [adapter(f, "vEthernet (Ethernet)")["index"]], f["routes"])
    out, _ = run(winsim, state, Script().act("install_boot_task", "Register-ScheduledTask -AtStartup", boot=boot))
    winsim.reboot(state, False)
    f = probe(winsim, state)
    ep = adapter(f, "vEthernet (cbr0_ep)")
    log = json.load(open(state))["logs"]["C:\\k\\logs\\kwinctl-boot.log"]
    check("the boot task re-creates the endpoint (new id), forwarding, starts the services",
          ep and P + ".2" in ep["ipv4"] and ep["forwarding"] and adapter(f, "vEthernet (Ethernet)")["forwarding"]
          and f["hns_endpoints"][0]["attached"] and "host endpoint: done" in log
          and {"port": 10248, "ok": True} in f["health"] and {"port": 10256, "ok": True} in f["health"],
          (log, f["hns_endpoints"], f["health"]))

    boot_loop(winsim, state, boot)

    # 9. immutable subnet; replace; reset
    other = dict(NET, subnet="10.244.4.0/24", gateway="10.244.4.1")
    out, _ = run(winsim, state, Script().act("ensure_hns_network", replace=False, **other))
    check("another subnet without replace is refused", "cannot be changed" in out, out)
    out, f = run(winsim, state, Script().act("ensure_hns_network", replace=True, **NET).probe())
    n = next(x for x in f["hns_networks"] if x["name"] == "cbr0")
    check("replace: a new id, its endpoints gone, the vSwitch kept",
          ok_of(out) and n["id"] != cbr0_id and f["hns_endpoints"] == []
          and adapter(f, "vEthernet (cbr0_ep)") is None and adapter(f, "vEthernet (Ethernet)"), out)
    out, f = run(winsim, state, Script().act("ensure_host_endpoint", **EP).act(
        "remove_hns_network", name="cbr0").probe())
    check("reset removes cbr0 and its endpoint, keeps External and the vSwitch",
          ok_of(out, 1) and [x["name"] for x in f["hns_networks"]] == ["External"]
          and f["hns_endpoints"] == [] and NODE in adapter(f, "vEthernet (Ethernet)")["ipv4"], out)
    # 10. CNI conf files: names, sorted
    for name in ("20-other.conf", "10-kwinctl.conf"):
        fl, block = upload("c:\\etc\\cni\\net.d\\" + name, b"{}")
        run(winsim, state, Script().act("place_file", block, file=fl))
    f = probe(winsim, state)
    check("cni_conf_files: names, sorted", f["cni_conf_files"] == ["10-kwinctl.conf", "20-other.conf"],
          f["cni_conf_files"])
    log_runner(winsim, state, base)
    return server


# ------------------------------------------------------------------ the boot task's loop


PEER2 = "198.18.248.11"  # another next hop on the node's subnet (need not answer)
TASK = "'\\kwinctl\\'"


def boot_block(fixed, routes):
    """An install_boot_task block as kwinctl's template writes it: `fixed`
    False as before the fix (re-registers without stopping the running
    instance, starts none; the loop's Remove-NetRoute takes the destination
    on every interface in the active store), True as after it."""
    if fixed:
        repair = ("    foreach ($store in @(''ActiveStore'', ''PersistentStore'')) {\n"
                  "        Remove-NetRoute -AddressFamily IPv4 -DestinationPrefix ''%s'' -InterfaceIndex $ifIndex "
                  "-NextHop ''%s'' -PolicyStore $store -Confirm:$false -ErrorAction SilentlyContinue\n    }")
    else:
        repair = ("    Remove-NetRoute -AddressFamily IPv4 -DestinationPrefix ''%s'' -Confirm:$false "
                  "-ErrorAction SilentlyContinue")
    script = "\n".join(["function Confirm-KwRoutes {"] + [
        (repair % (r["dst"], r["via"]) if fixed else repair % r["dst"])
        + "\n    New-NetRoute -DestinationPrefix ''%s'' -InterfaceIndex $ifIndex -NextHop ''%s''" % (r["dst"], r["via"])
        for r in routes] + ["}", "while ($true) {", "    Start-Sleep -Seconds 10", "}"])
    lines = ["$name = 'kwinctl-boot'", "if (Get-ScheduledTask -TaskPath %s -TaskName $name) {" % TASK]
    if fixed:
        lines.append("    Stop-ScheduledTask -TaskPath %s -TaskName $name" % TASK)
    lines += ["    Unregister-ScheduledTask -TaskPath %s -TaskName $name -Confirm:$false" % TASK, "}"]
    if fixed:
        lines.append("Get-CimInstance -ClassName Win32_Process -Filter \"Name = 'powershell.exe'\" | Where-Object "
                     "{ $_.CommandLine -like '*kwinctl-boot-start.ps1*' } | ForEach-Object "
                     "{ Stop-Process -Id $_.ProcessId -Force }")
    lines += ["Set-Content -LiteralPath $script -Encoding UTF8 -Value '%s'" % script,
              "$trigger = New-ScheduledTaskTrigger -AtStartup",
              "Register-ScheduledTask -TaskPath %s -TaskName $name -Trigger $trigger | Out-Null" % TASK]
    if fixed:
        lines.append("Start-ScheduledTask -TaskPath %s -TaskName $name" % TASK)
    return "\n".join(lines)


def boot_loop(winsim, state, boot):
    """12. The boot task's loop (winsim/README.md "The boot task's loop"):
    an instance keeps the spec and script it started with; re-registering
    does not stop it; its unscoped, one-store route repair re-adds a
    removed route and takes a moved one's new next hop away; a fixed
    install stops it and starts a new one, whose repair touches only its
    own route, in both stores."""
    from winsim import boot as bootmod
    from winsim.state import State

    def spec(routes, fp):
        b = json.loads(json.dumps(boot))
        b["l2bridge"]["routes"] = routes
        b["fingerprint"] = fp
        return b

    def install(fixed, routes, fp):
        out, _ = run(winsim, state, Script().act("install_boot_task", boot_block(fixed, routes),
                                                 boot=spec(routes, fp)))
        check("install_boot_task (%s) ok" % ("fixed" if fixed else "old"), ok_of(out), out)

    def tick():
        with State(state) as d:
            for inst in list(d.get("boot_instances", [])):
                bootmod.loop_once(d, inst)

    def st():
        return json.load(open(state))

    def vias(dst):
        return sorted(via for x, via, _ in winsim_routes() if x == dst)

    def winsim_routes():
        from winsim.net import active_routes
        return active_routes()

    def runner(*acts):
        s = Script()
        for kind, fields in acts:
            s.act(kind, "foreach ($store in @('ActiveStore', 'PersistentStore')) { Remove-NetRoute -PolicyStore "
                  "$store }", **fields)
        out, _ = run(winsim, state, s)
        check("the runner's route actions", all(ok_of(out, i) for i in range(len(acts))), out)

    a, b9 = "10.244.0.0/24", "10.244.9.0/24"
    runner(("add_route", {"dst": b9, "via": PEER, "replace": False}))
    first = [{"dst": a, "via": PEER}, {"dst": b9, "via": PEER}]
    install(False, first, "old1")
    d = st()
    check("an old install starts no instance (no loop before the first reboot)",
          d.get("boot_instances", []) == [] and not d["tasks"]["kwinctl-boot"]["running"], d.get("boot_instances"))
    winsim.reboot(state, False)
    d = st()
    check("at startup an instance starts with the registered spec",
          [i["spec"]["fingerprint"] for i in d["boot_instances"]] == ["old1"], d.get("boot_instances"))
    # peer b9 leaves the inventory, a's next hop moves to PEER2: the runner
    # deletes and replaces the routes, then re-installs the task (old way)
    runner(("del_route", {"dst": b9, "via": PEER}), ("add_route", {"dst": a, "via": PEER2, "replace": True}))
    second = [{"dst": a, "via": PEER2}]
    install(False, second, "old2")
    d = st()
    check("re-registering does not stop the running instance (it keeps its spec)",
          [i["spec"]["fingerprint"] for i in d["boot_instances"]] == ["old1"], d["boot_instances"])
    tick()
    check("the stale loop re-adds the removed peer's route", vias(b9) == [PEER], winsim_routes())
    check("the stale loop's unscoped Remove-NetRoute takes the moved route's new next hop away",
          vias(a) == [PEER], winsim_routes())
    log = st()["logs"].get("winsim:boot-loop", "")
    check("the loop log says what the instance changed", "instance 1: New-NetRoute %s via %s" % (b9, PEER) in log,
          log)
    # the one-store repair: a route gone from the active store but kept in
    # the persistent one is never repaired (New-NetRoute: already exists)
    sh("ip", "route", "del", b9)
    tick()
    log = st()["logs"].get("C:\\k\\logs\\kwinctl-boot.log", "")
    check("an active-store-only repair cannot add a route the persistent store holds",
          vias(b9) == [] and "Instance MSFT_NetRoute already exists" in log, (winsim_routes(), log))

    # the fixed install: the old instance's powershell.exe ends, the new
    # registration's instance starts at once
    runner(("del_route", {"dst": b9, "via": PEER}), ("add_route", {"dst": a, "via": PEER2, "replace": True}))
    install(True, second, "new1")
    d = st()
    check("a fixed install ends the earlier instance and starts one with the new spec",
          [i["spec"]["fingerprint"] for i in d["boot_instances"]] == ["new1"]
          and d["tasks"]["kwinctl-boot"]["running"], d["boot_instances"])
    for _ in range(3):
        tick()
    check("no stale route: the removed peer's stays removed, the moved one keeps its new next hop",
          vias(b9) == [] and vias(a) == [PEER2], winsim_routes())
    # the scoped repair in both stores: only its own route, also when only
    # the persistent copy is left
    sh("ip", "route", "replace", a, "nexthop", "via", PEER2, "nexthop", "via", PEER)
    sh("ip", "route", "replace", a, "via", PEER)
    tick()
    d = st()
    check("the scoped repair leaves another next hop alone and restores its own in both stores",
          vias(a) == [PEER, PEER2] and sum(1 for p in d["persistent_routes"] if p["dst"] == a) == 1,
          (winsim_routes(), d["persistent_routes"]))
    sh("ip", "route", "replace", a, "via", PEER2)
    # IgnoreNew; Stop-ScheduledTask stops the registered task's instances
    out, _ = run(winsim, state, Script().act("start_task", "Start-ScheduledTask", name="kwinctl-boot"))
    check("Start-ScheduledTask while an instance runs starts no second one",
          ok_of(out) and len(st()["boot_instances"]) == 1, st()["boot_instances"])
    install(False, second, "old3")
    out, _ = run(winsim, state, Script().act(
        "remove_task", "Stop-ScheduledTask -TaskPath %s -TaskName $name\nUnregister-ScheduledTask" % TASK,
        name="kwinctl-boot"))
    check("Stop-ScheduledTask stops only the registered task's instances (none: new1's registration is gone)",
          [i["spec"]["fingerprint"] for i in st()["boot_instances"]] == ["new1"], st()["boot_instances"])
    install(True, second, "new2")
    out, _ = run(winsim, state, Script().act(
        "remove_task", "Stop-ScheduledTask -TaskPath %s -TaskName $name\nUnregister-ScheduledTask" % TASK,
        name="kwinctl-boot"))
    check("remove_task with Stop-ScheduledTask stops the running instance", st()["boot_instances"] == [],
          st()["boot_instances"])
    # as before this step: the boot task registered with the scenario's spec
    runner(("add_route", {"dst": a, "via": PEER, "replace": True}))
    out, _ = run(winsim, state, Script().act("install_boot_task", "Register-ScheduledTask -AtStartup", boot=boot))


RUNNER = "C:\\k\\kube-log-runner.exe"
ROTATE = "-log-file-size=100M -log-file-age=168h -flush-interval=5s "


def runner_bin(service_log, flags=""):
    """The binpath kwinctl gives a service on l2bridge >= 1.26 (the contract):
    the runner, its flags, then the program's command line."""
    return "%s -log-file=C:\\k\\logs\\%s.log %s" % (RUNNER, service_log, flags)


def log_runner(winsim, state, base):
    """11. services wrapped in kube-log-runner (kube-log-runner.go; Kubernetes'
    e2e_node kubelet_windows.go and GCE k8s-node-setup.psm1 register the
    runner as the service's program). containerd runs (the reboot above);
    kubelet.exe and kube-proxy.exe are 1.30.4 here."""
    from winsim.scm import kube_proxy_network

    def st():
        return json.load(open(state))

    def place(path, data):
        fl, block = upload(path, data)
        out, _ = run(winsim, state, Script().act("place_file", block, file=fl))
        check("place %s" % path, ok_of(out), out)
    place(RUNNER, b"MZ kwinctl lab fake kube-log-runner.exe\nKubernetes v1.30.4\n")
    # (b) a 1.30 runner has no rotation flags: Go's flag package stops it
    out, _ = run(winsim, state, Script().act("install_service", MANUAL,
                                             service=service("kubelet", runner_bin("kubelet", ROTATE) + base)))
    d = st()
    check("a 1.30 runner refuses -log-file-size: the start fails with Go's flag message and usage",
          "KWX 0 failed" in out and "cannot be started" in out and d["services"]["kubelet"]["status"] == "Stopped"
          and d["logs"].get("runner:kubelet", "").startswith("flag provided but not defined: -log-file-size\n"
                                                      "Usage of %s:" % RUNNER), (out, d["logs"].get("runner:kubelet")))
    # (c) the runner starts, but the program it wraps lacks --windows-service: 1053
    out, _ = run(winsim, state, Script().act("install_service", MANUAL, service=service(
        "kubelet", runner_bin("kubelet") + base.replace(" --windows-service", ""))))
    d = st()
    check("a runner wrapping a kubelet without --windows-service: 1053, the runner had started it",
          "KWX 0 failed" in out and "(1053)" in d["logs"].get("scm:kubelet", "")
          and d["services"]["kubelet"]["status"] == "Stopped"
          and "Executable path: C:\\k\\kubelet.exe" in d["logs"].get("runner:kubelet", ""), out)
    # (d) kube-proxy's network is read from the wrapped program's arguments
    kp = "C:\\k\\kube-proxy.exe --windows-service --proxy-mode=kernelspace --network-name=cbr0"
    out, f = run(winsim, state, Script().act("install_service", MANUAL, service=service(
        "kube-proxy", runner_bin("kube-proxy") + kp)).act("ensure_hns_network", replace=False, **NET).probe())
    d = st()
    check("kube-proxy behind a 1.30 runner: running, its --network-name found through the runner's argv, "
          "healthz 10256 ok; the short Command env line",
          ok_of(out, 0) and ok_of(out, 1) and d["services"]["kube-proxy"]["status"] == "Running"
          and kube_proxy_network(d) == "cbr0" and {"port": 10256, "ok": True} in f["health"]
          and "Command env: (log-file=C:\\k\\logs\\kube-proxy.log, also-stdout=false, redirect-stderr=true)"
          in d["logs"].get("runner:kube-proxy", ""), (out, d["logs"].get("runner:kube-proxy")))
    # (a) a 1.34 runner with the rotation flags starts a 1.34 kubelet service
    # (placing the runner restarts kube-proxy, which runs it: file in use)
    place(RUNNER, b"MZ kwinctl lab fake kube-log-runner.exe\nKubernetes v1.34.1\n")
    place("C:\\k\\kubelet.exe", b"MZ kwinctl lab fake kubelet.exe\nKubernetes v1.34.1\n")
    out, f = run(winsim, state, Script().act("install_service", MANUAL,
                                             service=service("kubelet", runner_bin("kubelet", ROTATE) + base)).probe())
    d = st()
    check("a 1.34 runner with -log-file-size/-log-file-age/-flush-interval starts a 1.34 kubelet service; "
          "it got 100M = 100000000 bytes, 168h, 5s; the kubelet's warnings are in its log file",
          ok_of(out) and d["services"]["kubelet"]["status"] == "Running" and {"port": 10248, "ok": True} in f["health"]
          and "Command env: (enable-flush=5s, log-file=C:\\k\\logs\\kubelet.log, log-file-size=100000000, "
          "log-file-age=168h0m0s, also-stdout=false, redirect-stderr=true)" in d["logs"].get("runner:kubelet", "")
          and "Args (comma-delimited): C:\\k\\kubelet.exe,--windows-service," in d["logs"].get("runner:kubelet", "")
          and "ignored configuration option" in d["logs"].get("C:\\k\\logs\\kubelet.log", ""),
          (out, d["logs"].get("runner:kubelet")))
    # the runner file is in use by both services: a new one restarts both
    d["logs"].pop("runner:kubelet", None)
    d["logs"].pop("runner:kube-proxy", None)
    with open(state, "w") as fh:
        json.dump(d, fh)
    place(RUNNER, b"MZ kwinctl lab fake kube-log-runner.exe\nKubernetes v1.34.2\n")
    d = st()
    check("replacing the runner restarts the services running it",
          d["services"]["kubelet"]["status"] == "Running" and d["services"]["kube-proxy"]["status"] == "Running"
          and "Command env:" in d["logs"].get("runner:kubelet", "")
          and "Command env:" in d["logs"].get("runner:kube-proxy", ""), sorted(d["logs"]))


def set_state(state, **kv):
    with open(state) as f:
        d = json.load(f)
    d.update(kv)
    with open(state, "w") as f:
        json.dump(d, f)


def start_server(winsim, state, tmp):
    """winsim.py serve on the node's address (the venv's python: pyspnego)."""
    py = os.path.join(HERE, ".venv", "bin", "python")
    if not os.path.exists(py):
        subprocess.run([os.path.join(HERE, "setup-venv.sh")], check=True, timeout=300,
                       stdout=subprocess.DEVNULL)
    env = dict(os.environ, WINSIM_PASSWORD="selftest")
    p = subprocess.Popen([py, os.path.join(HERE, "winsim.py"), "serve", "--listen", NODE, "--http-port", "5985",
                          "--state", state, "--allow-basic", "--log", os.path.join(tmp, "winsim.log")],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import socket
    for _ in range(100):
        try:
            socket.create_connection((NODE, 5985), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return p


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "inner":
        sys.exit(inner())
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        client(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit("usage: python -m winsim.tests.l2bridge_scenario inner|client IP SCRIPT")
