#!/usr/bin/env python3
"""Self-test of winsim's l2bridge handlers, without kwinctl.

Run as root: `python3 winsim/selftest_l2bridge.py` (5-10 s). It makes three
network namespaces of its own (a simulated Windows host, its card
"Ethernet" = 198.18.248.2, and a Linux peer 198.18.248.10 on a veth pair;
later a pod behind the host's vSwitch; nothing in the machine's own
namespace), feeds hand-written scripts with the contract's
`# kwinctl-sim:` headers (kwinctl's src/os/windows/action.rs) to winsim's
`execute(script, state_path)` inside the host's namespace — and, for the
vSwitch step, to a real `winsim.py serve` over WinRM (Basic over HTTP) from
the peer's namespace — and checks what the contract and the spec
(docs/research/l2bridge-profile.md) say:

- the Containers feature: HNS and containerd refuse until installed AND
  restarted (docs/research/sig-windows-tools.md#s2, docs/research/kubernetes.md#g1);
- install_archive: members by base name, version line, marker, a missing
  member refused;
- the first external vSwitch: the node address moves to "vEthernet
  (Ethernet)" with a new ifIndex, routes bound to the card's ifIndex are
  gone from both stores (docs/research/flannel.md#f1, docs/research/kubernetes.md#g1), the WinRM call in flight is answered and
  the server keeps answering new connections on the address;
- host endpoint: attached vNIC; 0x1392 for a duplicate IP and for the
  gateway (k8s #74766); forwarding per adapter: a pod on the vSwitch
  (its own namespace, gateway P+2) reaches the peer only once both vNICs
  forward (docs/research/l2bridge-profile.md#p8-item-4);
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

Every wait is bounded; the namespaces and the server go even on failure.
Exit 0 when every check passed.
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

HERE = os.path.dirname(os.path.abspath(__file__))
NODE, PEER = "198.18.248.2", "198.18.248.10"
P = "10.244.3"
# the namespaces' names, set by the outer process for the inner one
_ID = os.environ.setdefault("WINSIM_SELFTEST_ID", str(os.getpid()))
HOSTNS, PEERNS, PODNS = "kwst%sh" % _ID, "kwst%sp" % _ID, "kwst%sq" % _ID
FAILED = []


def check(what, ok, detail=""):
    print("%s %s%s" % ("ok  " if ok else "FAIL", what, "" if ok else ": %s" % (detail,)), flush=True)
    if not ok:
        FAILED.append(what)


def sh(*a, **kw):
    return subprocess.run(list(a), capture_output=True, text=True, timeout=30, check=kw.get("check", True))


# ------------------------------------------------------------------ k8sbin's table (no root needed)


def flag_table():
    """The release edges of the flags kwinctl must not pass (docs/research/l2bridge-profile.md#p5, docs/research/l2bridge-profile.md#p6)."""
    sys.path.insert(0, HERE)
    import k8sbin

    def starts(component, version, *args):
        return k8sbin.check_args(component, "Kubernetes v%s" % version, list(args)) is None
    ok = "--cgroups-per-qos=false", "--enforce-node-allocatable="
    for flag, last in (("--container-runtime=remote", "1.26.0"), ("--pod-infra-container-image=p", "1.34.0"),
                       ("--log-dir=C:\\k\\logs", "1.25.0"), ("--logtostderr=false", "1.25.0"),
                       ("--network-plugin=cni", "1.23.0")):
        nxt = "1.%d.0" % (int(last.split(".")[1]) + 1)
        check("kubelet %s: on %s, not on %s" % (flag.split("=")[0], last, nxt),
              starts("kubelet", last, flag, *ok) and not starts("kubelet", nxt, flag, *ok))
    kp = ("--proxy-mode=kernelspace", "--network-name=cbr0", "--enable-dsr=true")
    check("kube-proxy --enable-dsr: needs WinDSR=true on 1.32, default on 1.33, locked true on 1.34",
          not starts("kube-proxy", "1.32.0", *kp) and starts("kube-proxy", "1.32.0", *kp, "--feature-gates=WinDSR=true")
          and starts("kube-proxy", "1.33.0", *kp) and not starts("kube-proxy", "1.34.0", *kp, "--feature-gates=WinDSR=false"))
    check("kube-proxy: no userspace on 1.26; kernelspace is the default there (needs a network name)",
          starts("kube-proxy", "1.25.0", "--proxy-mode=userspace") and not starts("kube-proxy", "1.26.0", "--proxy-mode=userspace")
          and not starts("kube-proxy", "1.26.0") and starts("kube-proxy", "1.26.0", "--network-name=cbr0"))
    check("kubelet cgroups: fatal on 1.29, not on 1.30", not starts("kubelet", "1.29.0") and starts("kubelet", "1.30.0"))
    # kube-log-runner (kube-log-runner.go; Go's flag package; resource.Quantity)
    argv = k8sbin.split_command_line("C:\\k\\kube-log-runner.exe -log-file=C:\\k\\logs\\kubelet.log "
                                     "-log-file-size=100M -log-file-age=168h -flush-interval=5s "
                                     "C:\\k\\kubelet.exe --windows-service --v=2")
    runner, prog = k8sbin.unwrap(argv)
    check("unwrap: the runner's flags, then the program and its arguments (Go's flag stops at the first non-flag)",
          runner == argv[:5] and prog == ["C:\\k\\kubelet.exe", "--windows-service", "--v=2"], (runner, prog))
    check("unwrap: not a runner -> (None, argv)", k8sbin.unwrap(["C:\\k\\kubelet.exe", "--v=2"])
          == (None, ["C:\\k\\kubelet.exe", "--v=2"]))
    check("quantities: 100M = 100000000, 100Mi = 104857600",
          k8sbin.go_quantity("100M") == (100000000, None) and k8sbin.go_quantity("100Mi") == (104857600, None))
    r30, r34 = "Kubernetes v1.30.0", "Kubernetes v1.34.0"
    check("runner 1.30: -log-file-size undefined (exit 2 text); 1.34 takes it; --log-file (two dashes) and "
          "`-log-file PATH` accepted; no program: not enough arguments to run",
          k8sbin.runner_check(r30, argv).startswith("flag provided but not defined: -log-file-size\n")
          and k8sbin.runner_check(r34, argv) is None
          and k8sbin.runner_check(r30, ["kube-log-runner.exe", "--log-file", "x.log", "kubelet.exe"]) is None
          and k8sbin.runner_check(r34, ["kube-log-runner.exe", "-log-file=x.log"]).endswith(
              "not enough arguments to run")
          and "invalid value \"100MB\" for flag -log-file-size" in k8sbin.runner_check(
              r34, ["kube-log-runner.exe", "-log-file-size=100MB", "kubelet.exe"]))


# ------------------------------------------------------------------ outer


def outer():
    flag_table()
    if os.geteuid() != 0:
        sys.exit("selftest_l2bridge: needs root (network namespaces)")
    try:
        sh("ip", "netns", "add", HOSTNS)
        sh("ip", "netns", "add", PEERNS)
        sh("ip", "-n", HOSTNS, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", PEERNS)
        for ns, ip in ((HOSTNS, NODE), (PEERNS, PEER)):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", ip + "/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
        r = subprocess.run(["ip", "netns", "exec", HOSTNS, sys.executable, os.path.abspath(__file__), "inner"],
                           timeout=120)
        return r.returncode or (1 if FAILED else 0)
    finally:
        for ns in (HOSTNS, PEERNS, PODNS):
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for p in pids:
                try:
                    os.kill(int(p), 9)
                except (OSError, ValueError):
                    pass
            sh("ip", "netns", "del", ns, check=False)


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
        return subprocess.run(["ip", "netns", "exec", PEERNS, sys.executable, os.path.abspath(__file__),
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
    sys.path.insert(0, HERE)
    import winsim
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
    check("pull_sandbox refuses pause:3.10.1 on 26100 (no ltsc2025 entry)",
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
    check("kube-proxy without a network name exits (docs/research/kubernetes.md#k1)", "KUBE_NETWORK and network-flag not initialized"
          in json.load(open(state))["logs"]["scm:kube-proxy"], out)
    out, _ = run(winsim, state, Script().act("install_service", MANUAL,
                                             service=service("kube-proxy", kpbin + " --enable-dsr=true "
                                                             "--network-name=cbr0")))
    check("kube-proxy 1.30 --enable-dsr without the WinDSR gate exits (docs/research/kubernetes.md#k1, docs/research/kubernetes.md#k3)",
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
    check("a pod does not reach the peer before forwarding (docs/research/l2bridge-profile.md#p8-item-4)", not pod_reaches_peer())
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
            "l2bridge": {"network": dict(NET, replace=False), "endpoint": EP, "forwarding": [NODE, P + ".2"],
                         "routes": [{"dst": "10.244.0.0/24", "via": PEER}]}}
    # (registered without a startup trigger first: the reboot alone)
    out, _ = run(winsim, state, Script().act("install_boot_task", "Register-ScheduledTask", boot=boot))
    winsim.reboot(state, False)
    f = probe(winsim, state)
    check("after a reboot: no endpoint, no vEthernet (cbr0_ep); networks, vSwitch and address stay (docs/research/kubernetes.md#g1)",
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
          and winsim.kube_proxy_network(d) == "cbr0" and {"port": 10256, "ok": True} in f["health"]
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
    sys.exit(outer())
