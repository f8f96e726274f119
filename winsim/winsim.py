#!/usr/bin/env python3
"""A simulated Windows Server host for kwinctl's tests and lab.

It speaks the real WinRM protocol (WS-Management / WinRS over HTTP and HTTPS,
NTLM with message encryption via pyspnego, and Basic), so kwinctl's real WinRM
client (winrm-rs) talks to it as to Windows. It has no PowerShell: each
block of a script kwinctl sends starts with a header line
`# kwinctl-sim: {json}`, and the simulator carries out that header's Linux
equivalent inside its own network namespace:

  switch / transparent network -> Linux bridges (KubeProxySwitch, HNSTransparent)
  gateway address              -> the address on the HNSTransparent bridge
  persistent routes            -> real routes via eth0, remembered in the state
  RRAS                         -> IPv4 forwarding
  images, files, services      -> records in the state file
  l2bridge: the external vSwitch -> the bridge HNSVSwitch (the card enslaved,
                                  the node address on it); a host endpoint
                                  -> a veth pair on it; HNS networks,
                                  containerd's images -> records

Unknown headers are errors. `reboot` drops what a reboot drops (routes not
persistent, the HNS network when asked to) and restarts auto-start services.

Usage:
  winsim.py serve --listen IP --http-port 5985 [--https-port 5986 --cert C --key K]
                  --user NAME --password-env VAR --state FILE [--allow-basic]
                  [--allow-unencrypted] [--log FILE]
  winsim.py reboot --state FILE [--drop-hns]
  winsim.py gencert --cert C --key K --ca CA --cn NAME   (prints the server cert's SHA-256)
  winsim.py kinds                                        (the action kinds it handles, one a line)
"""

import argparse
import base64
import fcntl
import hashlib
import http.server
import ipaddress
import json
import os
import re
import socketserver
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k8sbin  # noqa: E402  (the simulated kubelet.exe / kube-proxy.exe)

HEADER = "# kwinctl-sim: "
BOUNDARY = b"--Encrypted Boundary"
SPNEGO_PROTOCOL = "application/HTTP-SPNEGO-session-encrypted"
NS_SHELL = "http://schemas.microsoft.com/wbem/wsman/1/windows/shell"
ACTION_CREATE = "http://schemas.xmlsoap.org/ws/2004/09/transfer/Create"
ACTION_DELETE = "http://schemas.xmlsoap.org/ws/2004/09/transfer/Delete"
ACTION_COMMAND = NS_SHELL + "/Command"
ACTION_SEND = NS_SHELL + "/Send"
ACTION_RECEIVE = NS_SHELL + "/Receive"
ACTION_SIGNAL = NS_SHELL + "/Signal"

LOG_LOCK = threading.Lock()
LOG_FILE = None


def log(msg):
    with LOG_LOCK:
        if LOG_FILE:
            with open(LOG_FILE, "a") as f:
                f.write(msg + "\n")


# ------------------------------------------------------------------ state


class State:
    """The simulated host's persistent state, shared with `reboot` (locked)."""

    def __init__(self, path):
        self.path = path
        self.lock_path = path + ".lock"

    def __enter__(self):
        self.lock_file = open(self.lock_path, "a+")
        fcntl.flock(self.lock_file, fcntl.LOCK_EX)
        try:
            with open(self.path) as f:
                self.data = json.load(f)
        except FileNotFoundError:
            self.data = {}
        d = self.data
        d.setdefault("build", "10.0.14393")
        d.setdefault("hyperv_module", True)
        d.setdefault("docker_version", "17.06.2-ee-16")
        d.setdefault("routing_installed", False)
        # Get-WindowsFeature InstallState; a knob makes the Routing install
        # wait for a restart
        d.setdefault("hyperv_role", "Installed")
        d.setdefault("routing_state", "Installed" if d["routing_installed"] else "Available")
        d.setdefault("switches", [])
        d.setdefault("networks", [])
        d.setdefault("images", [])
        d.setdefault("files", {})
        # path -> what `<file> --version` prints (None: not a program)
        d.setdefault("file_versions", {})
        d.setdefault("services", {})
        # kwinctl's scheduled tasks (\\kwinctl\\<name>)
        d.setdefault("tasks", {})
        # image -> the Windows version it is built on (docker inspect .OsVersion)
        d.setdefault("image_os", {})
        # what the simulated binaries wrote (log files, the event log)
        d.setdefault("logs", {})
        d.setdefault("pod_cidr", None)
        d.setdefault("persistent_routes", [])
        # the network cards (see "adapters" below) and the adapters' DHCP
        # setting: a card without static configuration is on DHCP
        d.setdefault("nics", [dict(n) for n in DEFAULT_NICS])
        d.setdefault("dhcp", {n["name"]: i > 0 for i, n in enumerate(d["nics"])})
        # forwarding of the adapters that are records (Docker's NAT adapter)
        d.setdefault("fwd_records", {})
        # the card a transparent network took: {nic, dev, addrs, adapter}
        d.setdefault("bound", None)
        # Windows Firewall: rules by name ({display, description, protocol,
        # icmp_type, program, remote, enabled}); on unless the knob says not
        d.setdefault("firewall", {})
        d.setdefault("firewall_on", True)
        # l2bridge (see "l2bridge" below): Get-WindowsFeature states, HNS
        # networks and endpoints, the external vSwitch, containerd's images
        d.setdefault("features", {})
        d["features"].setdefault("Containers", "Available")
        d.setdefault("hns_networks", [])
        d.setdefault("hns_endpoints", [])
        d.setdefault("vswitch", None)
        d.setdefault("sandbox_images", [])
        d.setdefault("next_ifindex", 10)
        return d

    def __exit__(self, exc_type, exc, tb):
        # (a dropped connection keeps what the script did)
        if exc_type is None or issubclass(exc_type, ConnectionDropped):
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.data, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        fcntl.flock(self.lock_file, fcntl.LOCK_UN)
        self.lock_file.close()
        return False


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), (r.stderr or r.stdout).strip()))
    return r.stdout


def link_exists(name):
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def ipv4_of(dev):
    try:
        out = json.loads(sh("ip", "-j", "-4", "addr", "show", "dev", dev) or "[]")
    except (RuntimeError, ValueError):
        return []
    return [a["local"] for i in out for a in i.get("addr_info", [])]


def norm_image(s):
    s = s.strip().lower()
    last = s.rsplit("/", 1)[-1]
    return s if (":" in last or "@" in last) else s + ":latest"


# ------------------------------------------------------------------ adapters
#
# Windows' adapters and the Linux devices standing for them in the host's
# namespace (sources in winsim/README.md, "Network adapters"):
#   network cards        state "nics" (default "Ethernet" = eth0, which holds
#                        the node's address, and "Ethernet 2" = eth1, a veth)
#   the internal switch  the bridge KubeProxySwitch, "vEthernet (KubeProxySwitch)"
#   a transparent net    the bridge HNSTransparent, with the card it took as
#                        a port; named by build (2016: "vEthernet
#                        (HNSTransparent)", 2019: "vEthernet (<card>)")
#   Docker's NAT adapter a record (nothing routes through it here)
# Forwarding is per adapter, as Set-NetIPInterface's is: Linux's
# net.ipv4.conf.<dev>.forwarding ("packets received on this interface can
# be forwarded"), never the global ip_forward.

HNS_DEV = "HNSTransparent"
SWITCH_DEV = "KubeProxySwitch"
NAT_INDEX, SWITCH_INDEX, HNS_INDEX = 7, 8, 9
DEFAULT_NICS = [{"name": "Ethernet", "dev": "eth0"}, {"name": "Ethernet 2", "dev": "eth1"}]


def build_no(d):
    return int(str(d["build"]).split(".")[2])


def hns_adapter_name(d, nic):
    return "vEthernet (HNSTransparent)" if build_no(d) == 14393 else "vEthernet (%s)" % nic


def nat_adapter_name(d):
    return "vEthernet (HNS Internal NIC)" if build_no(d) == 14393 else "vEthernet (nat)"


def nics(d):
    """The network cards, in ifIndex order (4, 5, ...)."""
    return [dict(n, index=n.get("index", 4 + i), status=n.get("status", "Up"))
            for i, n in enumerate(d["nics"])]


def ensure_nics(d):
    """Cards other than eth0 are one end of a veth pair (the other end,
    <dev>p, is the cable), created on first use."""
    for n in nics(d):
        if not link_exists(n["dev"]):
            sh("ip", "link", "add", n["dev"], "type", "veth", "peer", "name", n["dev"] + "p")
            sh("ip", "link", "set", n["dev"] + "p", "up")
        sh("ip", "link", "set", n["dev"], "up" if n["status"] == "Up" else "down")


def fwd(dev):
    try:
        with open("/proc/sys/net/ipv4/conf/%s/forwarding" % dev) as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def strong_arp(dev):
    """Answer ARP only for the adapter's own addresses (Linux arp_ignore=1),
    as Windows' strong host model does, so a pod's gateway P+2 is the host
    endpoint's vNIC and no other adapter (B: Windows' ARP behaviour)."""
    with open("/proc/sys/net/ipv4/conf/%s/arp_ignore" % dev, "w") as f:
        f.write("1\n")


def set_fwd(dev, on):
    with open("/proc/sys/net/ipv4/conf/%s/forwarding" % dev, "w") as f:
        f.write("1\n" if on else "0\n")


def adapters(d):
    """Every adapter Get-NetAdapter would list: name, index, dev (None for a
    record), physical, status."""
    out = [{"name": n["name"], "index": n["index"], "dev": n["dev"], "physical": True, "status": n["status"]}
           for n in nics(d)]
    if d["docker_version"]:
        out.append({"name": nat_adapter_name(d), "index": NAT_INDEX, "dev": None, "physical": False,
                    "status": "Up", "ipv4": ["172.28.16.1"]})
    if link_exists(SWITCH_DEV):
        out.append({"name": "vEthernet (%s)" % SWITCH_DEV, "index": SWITCH_INDEX, "dev": SWITCH_DEV,
                    "physical": False, "status": "Up"})
    if link_exists(HNS_DEV) and d.get("bound"):
        out.append({"name": d["bound"]["adapter"], "index": HNS_INDEX, "dev": HNS_DEV, "physical": False,
                    "status": "Up"})
    # l2bridge: the external vSwitch's host vNIC and the attached host endpoints
    if d.get("vswitch") and link_exists(VSW_DEV):
        out.append({"name": d["vswitch"]["adapter"], "index": d["vswitch"]["index"], "dev": VSW_DEV,
                    "physical": False, "status": "Up"})
    for e in d.get("hns_endpoints", []):
        if e.get("dev") and link_exists(e["dev"]):
            out.append({"name": "vEthernet (%s)" % e["name"], "index": e["index"], "dev": e["dev"],
                        "physical": False, "status": "Up"})
    return out


def adapter_named(d, name):
    return next((a for a in adapters(d) if a["name"].lower() == (name or "").lower()), None)


def addrs_of(dev):
    """IPv4 addresses of `dev` as address/prefix."""
    try:
        out = json.loads(sh("ip", "-j", "-4", "addr", "show", "dev", dev) or "[]")
    except (RuntimeError, ValueError):
        return []
    return ["%s/%d" % (a["local"], a["prefixlen"]) for i in out for a in i.get("addr_info", [])]


def dev_holding(addr):
    if not addr:
        return None
    for i in json.loads(sh("ip", "-j", "-4", "addr", "show") or "[]"):
        if any(a["local"] == addr for a in i.get("addr_info", [])):
            return i["ifname"]
    return None


def routable_dev(d, host):
    """The routable adapter's device: the one the inventory names, else the
    one holding the node's address (the prelude's Get-KwRoutableIndex)."""
    if host.get("adapter"):
        a = adapter_named(d, host["adapter"])
        return a["dev"] if a else None
    return dev_holding(host.get("address"))


def gateway_routes(dev):
    return [r for r in json.loads(sh("ip", "-j", "-4", "route", "show", "dev", dev) or "[]") if "gateway" in r]


def move_addresses(src, dst, addrs):
    routes = gateway_routes(src)
    for a in addrs:
        sh("ip", "addr", "del", a, "dev", src, check=False)
        sh("ip", "addr", "add", a, "dev", dst, check=False)
    for r in routes:
        sh("ip", "route", "replace", r["dst"], "via", r["gateway"], check=False)


def hns_take(d, nic, network):
    """HNS builds an external switch on the card: the card becomes its port
    and its IPv4 configuration (addresses, DHCP, gateway routes) moves to
    the switch's new virtual adapter, which starts without forwarding."""
    sh("ip", "link", "add", HNS_DEV, "type", "bridge")
    sh("ip", "link", "set", HNS_DEV, "up")
    set_fwd(HNS_DEV, False)
    addrs = addrs_of(nic["dev"])
    sh("ip", "link", "set", nic["dev"], "master", HNS_DEV)
    move_addresses(nic["dev"], HNS_DEV, addrs)
    name = hns_adapter_name(d, nic["name"])
    d["bound"] = {"nic": nic["name"], "dev": nic["dev"], "addrs": addrs, "adapter": name}
    d["dhcp"][name] = d["dhcp"].get(nic["name"], False)
    network["adapter"] = name


def hns_release(d):
    """The network is gone (docker network rm, or HNS lost it): the switch
    and its adapter go, the card gets its addresses back."""
    b = d.get("bound")
    if link_exists(HNS_DEV):
        if b and link_exists(b["dev"]):
            sh("ip", "link", "set", b["dev"], "nomaster", check=False)
            back = [a for a in addrs_of(HNS_DEV) if a in b["addrs"]]
            move_addresses(HNS_DEV, b["dev"], back)
        sh("ip", "link", "del", HNS_DEV)
    if b:
        d["dhcp"].pop(b["adapter"], None)
    d["bound"] = None


def apply_firewall(d):
    """Inbound ICMPv4 echo is dropped (Linux net.ipv4.icmp_echo_ignore_all,
    per namespace: the host's own addresses only, forwarded traffic is not
    filtered) until an enabled inbound rule allows ICMPv4 type 8. The rules'
    remote addresses are recorded, not enforced (the kernel here has no
    packet filter)."""
    allowed = not d["firewall_on"] or any(
        r.get("enabled", True) and r.get("protocol", "").lower() == "icmpv4" and str(r.get("icmp_type")) == "8"
        for r in d["firewall"].values())
    with open("/proc/sys/net/ipv4/icmp_echo_ignore_all", "w") as f:
        f.write("0\n" if allowed else "1\n")


def block_has(h, pattern):
    """Whether the action's PowerShell block (the lines under its header)
    holds a statement: where what Windows does depends on a statement the
    script runs (see winsim/README.md), the simulator looks for it there."""
    return re.search(pattern, h.get("_block", "")) is not None


# ------------------------------------------------------------------ facts


def facts(d, probe):
    listed = []
    index_of_dev = {}
    for a in adapters(d):
        dev = a["dev"]
        if dev:
            index_of_dev[dev] = a["index"]
        listed.append({
            "name": a["name"], "index": a["index"],
            "ipv4": ipv4_of(dev) if dev else a.get("ipv4", []),
            "forwarding": fwd(dev) if dev else d["fwd_records"].get(a["name"], False),
            "physical": a["physical"], "status": a["status"], "dhcp": d["dhcp"].get(a["name"], False),
        })
    # the active store is the kernel's table; the persistent store is the
    # state's persistent_routes (what a reboot brings back)
    persistent = {(r["dst"], r["via"]) for r in d["persistent_routes"]}
    routes = []
    for dst, via, dev in active_routes():
        routes.append({
            "dst": dst, "via": via, "index": index_of_dev.get(dev, 99),
            "persistent": (dst, via) in persistent, "active": True,
        })
    active = {(r["dst"], r["via"]) for r in routes}
    for r in d["persistent_routes"]:
        if (r["dst"], r["via"]) not in active:
            routes.append({"dst": r["dst"], "via": r["via"], "index": index_of_dev.get(r.get("dev"), 99),
                           "persistent": True, "active": False})
    hns = link_exists(HNS_DEV)
    wanted_files = [p.lower() for p in probe.get("files", [])]
    reach = []
    for ip in probe.get("reach", []):
        ok = subprocess.run(["ping", "-n", "-c", "1", "-W", "2", ip], capture_output=True).returncode == 0
        reach.append("%s %s" % (ip, "ok" if ok else "fail"))
    return dict(l2bridge_facts(d, probe), **{
        "v": 1, "os": "windows", "hostname": d.get("hostname", "WINSIM"),
        # the probe's [string](... '') of a host without Docker is "", never null
        "build": d["build"], "hyperv_module": d["hyperv_module"], "docker_version": d["docker_version"] or "",
        "adapters": listed,
        "routing_installed": d["routing_state"] == "Installed",
        "routing_state": d["routing_state"],
        "hyperv_role": d["hyperv_role"],
        "switches": [s for s in d["switches"] if link_exists(s["name"])],
        "networks": [{k: v for k, v in n.items() if k in ("name", "driver", "subnet", "gateway", "interface")}
                     for n in d["networks"] if hns],
        "routes": routes,
        "images": d["images"],
        "files": [{"path": p, "sha256": sha} for p, sha in d["files"].items() if p.lower() in wanted_files],
        "services": [service_fact(d, probe, n, s) for n, s in d["services"].items()
                     if n in probe.get("services", [])],
        "tasks": [{"name": n, "state": t["state"], "description": t["description"], "running": t["running"]}
                  for n, t in d["tasks"].items() if n in probe.get("tasks", probe.get("services", []))],
        "versions": [{"path": p, "output": file_version(d, p) or ""}
                     for p in probe.get("binaries", []) if file_of(d, p) is not None],
        "image_os": [{"image": i, "os_version": d["image_os"].get(norm_image(i), "")}
                     for i in probe.get("images", []) if norm_image(i) in d["images"]],
        "firewall": [{"name": n, "enabled": r.get("enabled", True), "description": r.get("description", "")}
                     for n, r in d["firewall"].items() if n.lower().startswith("kwinctl-")],
        "pod_cidr": d["pod_cidr"],
        "cluster": d.get("cluster"),
        "reach": reach,
        "boot_time": "2026-01-01T00:00:00.0000000+00:00#%d" % d.get("boot_count", 0),
    })


def failure_actions_blob(restart):
    """The registry's FailureActions after `sc.exe failure <name> reset=
    86400 actions= restart/10000/restart/10000/restart/10000`: a
    SERVICE_FAILURE_ACTIONS (reset period, reboot message, command, count,
    actions offset) and its SC_ACTIONs (type 1 = SC_ACTION_RESTART, delay)."""
    if not restart:
        return b""
    return struct.pack("<5I", 86400, 0, 0, 3, 20) + struct.pack("<2I", 1, 10000) * 3


def service_fact(d, probe, name, s):
    """What the probe reports of a service: the service manager's copy of
    its command line, dependencies and start mode (Win32_Service,
    Get-Service), its registry environment and recovery."""
    env = s.get("env")
    if env is None:
        # @((Get-ItemProperty …).Environment) of a service without one is
        # @($null) in PowerShell, unless the probe filters it out
        env = [] if block_has(probe, r"\.Environment \| Where-Object") else [None]
    fact = {"name": name, "status": s["status"], "start": s["start"], "binpath": s["binpath"],
            "env": env, "depends": s["depends"],
            # `sc.exe qfailure`'s text says RESTART only on an English host
            "restart": bool(s.get("restart")) and d.get("locale", "en-US").startswith("en")}
    if block_has(probe, r"-Name FailureActions"):
        fact["failure_actions"] = base64.b64encode(failure_actions_blob(s.get("restart"))).decode()
    return fact


def file_of(d, path):
    """The recorded path (Windows paths compare without case)."""
    for p in d["files"]:
        if p.lower() == path.lower():
            return p
    return None


def file_version(d, path):
    p = file_of(d, path)
    return d["file_versions"].get(p) if p else None


# ------------------------------------------------------------------ binaries


def start_binary(d, exe, args, env=None):
    """Start `exe` with the arguments `args` (a list) as Windows would;
    returns what it printed before exiting, or None if it keeps running.
    What a release that starts prints as warnings goes to the logs."""
    p = file_of(d, exe)
    if p is None:
        return "The system cannot find the file specified"
    line = d["file_versions"].get(p)
    component = os.path.basename(exe.replace("\\", "/")).lower()
    if component.endswith(".exe"):
        component = component[:-4]
    if component == "containerd":
        return containerd_start(d, line, args)
    why = k8sbin.check_args(component, line, args, env)
    if why is None and component == "kubelet":
        why = kubelet_needs_runtime(d, line, args)
    if why is None:
        notes = k8sbin.warnings(component, line, args)
        if notes:
            d["logs"]["warnings:" + component] = "\n".join(notes)
    return why


def runner_start(d, name, argv, env):
    """The service process is kube-log-runner (k8sbin "kube-log-runner"):
    its file must exist; its release (its version line) decides its flags;
    a flag error or no program makes it exit before anything runs (Go's flag
    package / log.Fatal: the start fails as a program that exits does).
    Otherwise it opens -log-file (O_APPEND), runs the program with stdout,
    and stderr unless -redirect-stderr=false, going to that file, and lives
    as long as the program does (kube-log-runner.go configureAndRun).
    Returns (why it exited or None, the program's argv).

    What the runner itself prints (the flag errors, log.Printf's "Running
    command:" / "Command env:" lines) goes to ITS stderr: Go's log package
    writes to os.Stderr and the runner never redirects it (the source's
    log.Printf; so not to the log file); a service has no console, so on
    Windows that text is lost. winsim keeps it in logs["runner:<service>"]
    so a test can read the settings the runner got. The log file
    logs[<-log-file>] gets what the program prints (its warnings, or why it
    exited)."""
    p = file_of(d, argv[0])
    if p is None:
        return "The system cannot find the file specified", [""]
    line = d["file_versions"].get(p)
    why = k8sbin.runner_check(line, argv)
    if why is not None:
        d["logs"]["runner:" + name] = why
        return why, [""]
    v = k8sbin.minor_of(line)
    settings, prog, _ = k8sbin.runner_parse(argv[1:], v, argv[0])
    runner_log = k8sbin.runner_command_env(line, settings, prog)
    why = start_binary(d, prog[0], prog[1:], env)
    component = os.path.basename(prog[0].replace("\\", "/")).lower()
    component = component[:-4] if component.endswith(".exe") else component
    # klog writes to stderr; the file gets it with -redirect-stderr (default true)
    printed = why if why is not None else "\n".join(k8sbin.warnings(component, file_version(d, prog[0]), prog[1:]))
    if printed and not settings["-redirect-stderr"]:
        runner_log += printed.rstrip("\n") + "\n"
        printed = ""
    log_file = settings["-log-file"]
    if log_file:
        key = next((k for k in d["logs"] if k.lower() == log_file.lower()), log_file)
        d["logs"][key] = d["logs"].get(key, "") + (printed.rstrip("\n") + "\n" if printed else "")
    if why is not None:
        # the program exited: cmd.Wait's error through log.Fatal
        runner_log += "%s running command: exit status 1\n" % k8sbin.GO_LOG_TIME
    d["logs"]["runner:" + name] = runner_log
    return why, prog


def scm_start(d, name):
    """Start-Service: SCM runs the ImagePath and waits for the program to
    report to it. A program that exits first fails the start; one without
    --windows-service never reports (it is not a service program) and SCM
    gives up (error 1053). Start-Service's message is the same for both
    (B: the wording, from PowerShell 5.1's ServiceController); kwinctl's
    template adds the command line to run by hand. The services it depends
    on start first (other dependencies, such as docker, are taken as
    running)."""
    s = d["services"][name]
    for dep in s["depends"]:
        if dep in d["services"] and d["services"][dep]["status"] != "Running":
            scm_start(d, dep)
    argv = k8sbin.split_command_line(s["binpath"]) or [""]
    if k8sbin.is_runner(argv[0]):
        why, prog = runner_start(d, name, argv, s.get("env"))
    else:
        prog = argv
        why = start_binary(d, argv[0], argv[1:], s.get("env"))
    # the flag that makes the program talk to SCM: kubelet and kube-proxy's
    # --windows-service (K4); containerd's --run-service, which
    # --register-service stores with the other arguments (D6). Behind
    # kube-log-runner it is the wrapped program's (the runner itself never
    # talks to SCM; Kubernetes' e2e_node kubelet_windows.go and GCE's
    # k8s-node-setup.psm1 pass --windows-service to the program) [V].
    scm_flag = "--run-service" if is_containerd(prog[0]) else "--windows-service"
    if why is None and scm_flag not in prog[1:]:
        why = "The service did not respond to the start or control request in a timely fashion (1053)"
    d["logs"]["scm:" + name] = why or ""
    if why is None:
        s["status"] = "Running"
        return
    s["status"] = "Stopped"
    raise ActionError("Service '%s (%s)' cannot be started due to the following error: Cannot start service %s "
                      "on computer '.'. To see why, run its command line by hand: %s"
                      % (s.get("display", name), name, name, s["binpath"]))


def task_start(d, name):
    """The start script: Start-Process with the arguments, stderr to the
    error log; Confirm-KwRunning's message when the binary is gone."""
    t = d["tasks"][name]
    if "boot" in t:
        boot_run(d, t["boot"])
        return
    svc = t["service"]
    why = start_binary(d, svc["exe"], k8sbin.split_command_line(svc["args"]), svc.get("env"))
    err_log = "C:\\k\\logs\\%s.err.log" % name
    d["logs"][err_log] = why or ""
    t["state"] = "Running"
    t["running"] = why is None
    if why is not None:
        tail = " | ".join([x for x in why.splitlines() if x.strip()][-5:])
        raise ActionError("%s exited right after it started: %s" % (name, tail))


# ------------------------------------------------------------------ actions


class ActionError(Exception):
    pass


class ConnectionDropped(Exception):
    """The script cut the host off from the client (its address moved or
    went): the state is kept and the connection is closed unanswered."""


# One handler per action kind: `act_<kind>(d, h)` carries out the header
# `h` (the action's serde form) on the state `d`. The name is the contract
# with kwinctl: an action's kind is also its template's name, and
# kwinctl's contract test (src/os/contract.rs) checks that every kind has a
# handler here (`winsim.py kinds` lists them).


def act_record_pod_cidr(d, h):
    d["pod_cidr"] = h["pod_cidr"]
    d["cluster"] = "%s %s" % (h["cluster"], h["cluster_id"])


def slow(d, kind):
    """A slow action takes its simulated time (knob "durations": kind ->
    seconds; none by default, at most 60)."""
    import time
    time.sleep(min(float(d.get("durations", {}).get(kind, 0)), 60))


def act_enable_routing(d, h):
    # the block installs the role unless Get-WindowsFeature says Installed
    # (or, when the block says so, InstallPending)
    skip = ["Installed"] + (["InstallPending"] if block_has(h, r"'InstallPending'") else [])
    if d["routing_state"] not in skip:
        slow(d, "enable_routing")
        d["routing_state"] = "InstallPending" if d.get("routing_needs_restart") else "Installed"
    d["routing_installed"] = True
    dev = routable_dev(d, h["_host"])
    if dev is None:
        raise ActionError("Set-NetIPInterface : Cannot validate argument on parameter 'InterfaceIndex'. "
                          "The argument is null or empty.")
    set_fwd(dev, True)
    # the template's sweep: every vEthernet adapter that exists right now
    if block_has(h, r"-like 'vEthernet \(\*'"):
        for a in adapters(d):
            if a["name"].startswith("vEthernet ("):
                if a["dev"]:
                    set_fwd(a["dev"], True)
                else:
                    d["fwd_records"][a["name"]] = True


def act_create_switch(d, h):
    if d["hyperv_role"] != "Installed":
        # the module is there, the role (its management service) is not
        raise ActionError("New-VMSwitch : The Hyper-V Virtual Machine Management service is not running or "
                          "the Hyper-V role is not installed.")
    if not link_exists(SWITCH_DEV):
        sh("ip", "link", "add", SWITCH_DEV, "type", "bridge")
        set_fwd(SWITCH_DEV, False)
    sh("ip", "link", "set", SWITCH_DEV, "up")
    d["switches"] = [s for s in d["switches"] if s["name"] != SWITCH_DEV]
    d["switches"].append({"name": SWITCH_DEV, "type": "Internal"})


def act_create_network(d, h):
    names = [n["name"] for n in d["networks"] if link_exists(HNS_DEV)]
    if h["name"] in names and not h["replace"]:
        raise ActionError("Error response from daemon: network with name %s already exists" % h["name"])
    if h["replace"]:
        hns_release(d)
        d["networks"] = []
    iface = h.get("interface")
    if iface is not None:
        nic = next((n for n in nics(d) if n["name"].lower() == iface.lower()), None)
        if nic is None:
            raise ActionError("Error response from daemon: HNS failed with error : The network adapter '%s' "
                              "was not found." % iface)
    else:
        # No card named: HNS takes the first "open" one (Up, not on an
        # external switch), here in ifIndex order, whichever it is.
        taken = d["bound"]["nic"] if d.get("bound") else None
        nic = next((n for n in nics(d) if n["status"] == "Up" and n["name"] != taken), None)
        if nic is None:
            raise ActionError("Error response from daemon: HNS failed with error : Element not found.")
    hns_release(d)
    network = {"name": h["name"], "driver": "transparent", "subnet": h["subnet"], "gateway": h["gateway"],
               "interface": iface}
    hns_take(d, nic, network)
    d["networks"] = [network]


def act_set_gateway_address(d, h):
    # kwinctl before naming the adapter by build always said this one
    set_gateway(d, h.get("adapter", "vEthernet (HNSTransparent)"), h["gateway"], h["prefix"],
                h.get("node_address"), block_has(h, r"-Dhcp Disabled"), block_has(h, r"-Forwarding Enabled"))


def set_gateway(d, name, gateway, prefix, node, dhcp_off, forwarding):
    """The gateway address on the network's adapter (every other IPv4
    address on it goes), refusing the adapter holding the node's address."""
    a = adapter_named(d, name)
    if a is None or not a["dev"]:
        raise ActionError("Set-NetIPInterface : No MSFT_NetIPInterface objects found with property "
                          "'InterfaceAlias' equal to '%s'." % name)
    if node and node in ipv4_of(a["dev"]):
        raise ActionError("%s holds the node address %s: the transparent network took the routable card; not "
                          "touching it (remove the network from the console, then rerun)" % (name, node))
    if dhcp_off:
        d["dhcp"][name] = False
    sh("ip", "addr", "flush", "dev", a["dev"])
    if d["dhcp"].get(name):
        raise ActionError("New-NetIPAddress : Inconsistent parameters PolicyStore PersistentStore and Dhcp Enabled")
    sh("ip", "addr", "add", "%s/%d" % (gateway, prefix), "dev", a["dev"])
    if forwarding:
        set_fwd(a["dev"], True)


def active_routes():
    """(dst, via, dev) of every route with a next hop in the kernel's main
    table (a multipath route gives one per next hop)."""
    out = []
    for r in json.loads(sh("ip", "-j", "-4", "route", "show", "table", "main") or "[]"):
        dst = r["dst"] if "/" in r["dst"] or r["dst"] == "default" else r["dst"] + "/32"
        if dst == "default":
            dst = "0.0.0.0/0"
        for nh in r.get("nexthops", [r]):
            if "gateway" in nh:
                out.append((dst, nh["gateway"], nh.get("dev")))
    return out


def install_routes(dst, vias):
    """The kernel route for `dst`: several next hops make it multipath
    (Windows routes over each of two routes of one metric)."""
    if len(vias) == 1:
        sh("ip", "route", "replace", dst, "via", vias[0], check=False)
    elif vias:
        args = ["ip", "route", "replace", dst]
        for v in vias:
            args += ["nexthop", "via", v]
        sh(*args, check=False)


def remove_routes(d, h):
    """Remove-NetRoute for the destination: from the active store, and from
    the persistent one only when the block says so (-PolicyStore
    PersistentStore; Get-NetRoute's default store is the active one)."""
    sh("ip", "route", "del", h["dst"], check=False)
    if block_has(h, r"PersistentStore"):
        d["persistent_routes"] = [r for r in d["persistent_routes"] if r["dst"] != h["dst"]]


def act_add_route(d, h):
    if h.get("replace"):
        remove_routes(d, h)
    # New-NetRoute writes both stores ("By default, a route is saved in both
    # stores"); a copy of another next hop left in the persistent store
    # stays, and the same route already there is an error
    if any((r["dst"], r["via"]) == (h["dst"], h["via"]) for r in d["persistent_routes"]):
        raise ActionError("New-NetRoute : Instance MSFT_NetRoute already exists")
    sh("ip", "route", "replace", h["dst"], "via", h["via"])
    dev = next((v for dst, via, v in active_routes() if dst == h["dst"]), None)
    d["persistent_routes"] = [r for r in d["persistent_routes"]
                              if (r["dst"], r["via"]) != (h["dst"], h["via"])]
    d["persistent_routes"].append({"dst": h["dst"], "via": h["via"], "dev": dev})


def act_del_route(d, h):
    remove_routes(d, h)


def act_pull_image(d, h):
    img = norm_image(h["image"])
    if img not in d["images"]:
        slow(d, "pull_image")
        d["images"].append(img)
    # docker pulls a manifest list's entry for the host's build; an image the
    # state says is of another build (knob "image_os") stays that build, and
    # the action refuses it as kwinctl's template does
    os_version = d["image_os"].setdefault(img, d["build"] + ".0")
    build = d["build"].split(".")[2]
    if os_version.split(".")[2:3] != [build]:
        raise ActionError("%s is built for Windows %s, but this host is build %s: process isolation needs the same "
                          "build; set cluster.pause_image to an image for build %s" % (h["image"], os_version, build, build))


def act_place_file(d, h):
    f = h["file"]
    dest = f["path"]
    content = fetched(d, h, f)
    sha = hashlib.sha256(content).hexdigest()
    line = k8sbin.version_line(content)
    if f.get("version_regex"):
        if line is None:
            tmp = re.sub(r"(\.[^.\\]*)?$", lambda m: ".kwinctl-%d-tmp%s" % (os.getpid(), m.group(1) or ""), dest, count=1)
            raise ActionError("Program '%s' failed to run: The specified executable is not a valid application "
                              "for this OS platform." % os.path.basename(tmp.replace("\\", "/")))
        if not re.match(f["version_regex"], line):
            raise ActionError("%s: --version says %s, but the inventory declares kubernetes_version %s"
                              % (dest, line, f.get("version")))
    record_file(d, dest, sha, line)
    swap_restart(d, h, [dest])


def record_file(d, dest, sha, line):
    old = file_of(d, dest)
    if old:
        d["files"].pop(old)
        d["file_versions"].pop(old, None)
        d.get("file_contents", {}).pop(old, None)
    d["files"][dest] = sha
    d["file_versions"][dest] = line


def swap_restart(d, h, paths):
    """Services running one of these binaries were stopped for the swap and
    are started again; a start script restarts its binary from the new file."""
    low = [p.lower() for p in paths]
    holding = [n for n, x in d["services"].items()
               if x["status"] == "Running" and any(p in x["binpath"].lower() for p in low)]
    dependents = [o for n in holding for o in running_dependents(d, n)]
    for name in holding:
        scm_stop(d, name)
    for name in holding:
        scm_start(d, name)
    if block_has(h, r"DependentServices"):
        for name in dependents:
            scm_start(d, name)
    for name, t in d["tasks"].items():
        if t.get("service") and t["service"]["exe"].lower() in low:
            try:
                task_start(d, name)
            except ActionError:
                pass


def fetched(d, h, f):
    """The bytes of a WinFile: downloaded (as Invoke-WebRequest) or
    uploaded (base64 in the block), SHA-256 checked."""
    dest = f["path"]
    src = f.get("source") or {}
    if "url" in src:
        # Invoke-WebRequest over TLS: on .NET 4.6 (build 14393) only SSL 3
        # and TLS 1.0 are offered unless the block adds TLS 1.2 first; the
        # lab's download server, like dl.k8s.io, takes TLS 1.2 only
        if (src["url"].lower().startswith("https://") and not d.get("tls12_default", False)
                and not block_has(h, r"SecurityProtocol.*Tls12[\s\S]*Invoke-WebRequest")):
            raise ActionError("Invoke-WebRequest : The request was aborted: Could not create SSL/TLS secure channel.")
        slow(d, "place_file")
        content = download(d, src["url"])
    else:
        # an upload: the bytes are in the block's PowerShell, as base64
        m = re.search(r"FromBase64String\('([A-Za-z0-9+/=]*)'\)", h.get("_block", ""))
        if not m:
            raise ActionError("winsim: no base64 content in the upload's block")
        content = base64.b64decode(m.group(1))
    sha = hashlib.sha256(content).hexdigest()
    if sha != f["sha256"].lower():
        raise ActionError("%s: SHA-256 is %s, expected %s" % (dest, sha, f["sha256"].lower()))
    return content


def download(d, url):
    """Invoke-WebRequest: the lab's downloads are files under the folder the
    state names (`downloads`), by the URL's path; nothing else resolves."""
    m = re.match(r"https?://([^/]+)(/.*)?$", url)
    host = m.group(1) if m else url
    root = d.get("downloads")
    if root and m and m.group(2):
        local = os.path.normpath(os.path.join(root, m.group(2).lstrip("/")))
        if local.startswith(os.path.normpath(root) + os.sep) and os.path.isfile(local):
            with open(local, "rb") as fh:
                return fh.read()
        raise ActionError("Invoke-WebRequest : The remote server returned an error: (404) Not Found.")
    raise ActionError("Invoke-WebRequest : The remote name could not be resolved: '%s'" % host)


def scm_stop(d, name):
    """Stop-Service -Force: the services depending on it (the service
    manager's copy of their dependencies) stop first."""
    for other, o in d["services"].items():
        if name in o["depends"] and o["status"] == "Running":
            scm_stop(d, other)
    d["services"][name]["status"] = "Stopped"


def running_dependents(d, name):
    return [o for o, x in d["services"].items() if name in x["depends"] and x["status"] == "Running"]


def act_install_service(d, h):
    s = h["service"]
    name = s["name"]
    # the start mode the block gives New-Service, Set-Service or Change
    m = re.search(r"-StartupType (\w+)|StartMode = '(\w+)'", h.get("_block", ""))
    start = (m.group(1) or m.group(2)) if m else "Automatic"
    old = d["services"].get(name)
    dependents = []
    if old is None:
        d["services"][name] = {
            "status": "Stopped", "start": start, "binpath": s["binpath"], "display": s["display"],
            "env": s["env"], "depends": s["depends"], "restart": True,
        }
    else:
        dependents = running_dependents(d, name)
        scm_stop(d, name)
        if block_has(h, r"-MethodName Change") or block_has(h, r"'sc\.exe' @\('config'"):
            # through the service manager: its copy changes now
            old["binpath"], old["depends"] = s["binpath"], s["depends"]
            old.pop("registry", None)
        else:
            # raw registry writes: the service manager reads them at boot
            old["registry"] = {"binpath": s["binpath"], "depends": s["depends"]}
        old.update(start=start, env=s["env"], restart=True)
    scm_start(d, name)
    if block_has(h, r"DependentServices"):
        for other in dependents:
            scm_start(d, other)


def act_start_service(d, h):
    if h["name"] not in d["services"]:
        raise ActionError("Start-Service: Cannot find any service with service name '%s'." % h["name"])
    scm_start(d, h["name"])


def act_restart_service(d, h):
    """Restart-Service -Force: stopped (its dependents with it) and started."""
    if h["name"] not in d["services"]:
        raise ActionError("Restart-Service : Cannot find any service with service name '%s'." % h["name"])
    scm_stop(d, h["name"])
    scm_start(d, h["name"])


def act_install_task(d, h):
    s = h["service"]
    d["tasks"][s["name"]] = {
        "state": "Ready", "running": False,
        "description": "%s [kwinctl %s]" % (s["display"], s["fingerprint"]),
        "service": {"exe": s["exe"], "args": s["args"], "env": s["env"]},
        # a trigger at startup, if the block registers one
        "startup": block_has(h, r"-AtStartup"),
    }
    task_start(d, s["name"])


BOOT_TASK = "kwinctl-boot"


def act_install_boot_task(d, h):
    d["tasks"][BOOT_TASK] = {
        "state": "Ready", "running": False, "startup": block_has(h, r"-AtStartup"),
        "description": "kwinctl: the pods' network, gateway and forwarding, then kubelet and kube-proxy "
                       "[kwinctl %s]" % h["boot"]["fingerprint"],
        "boot": h["boot"],
    }


def boot_run(d, b):
    """What the boot script does at startup: the network (re-created on its
    card when Docker dropped it), the gateway address with DHCP off and
    forwarding, forwarding on the routable adapter, then kwinctl's services
    and tasks. A failed step is logged and the next one runs."""
    log_lines = []

    def step(what, f):
        try:
            f()
            log_lines.append("%s: done" % what)
        except (ActionError, RuntimeError) as e:
            log_lines.append("%s: failed: %s" % (what, e))

    def network():
        if not (link_exists(HNS_DEV) and any(n["name"] == b["network"] for n in d["networks"])):
            act_create_network(d, {"name": b["network"], "subnet": b["subnet"], "gateway": b["gateway"],
                                   "interface": b["interface"], "replace": False})

    def gateway():
        a = adapter_named(d, b["adapter"])
        if a is None or not a["dev"] or b["gateway"] not in ipv4_of(a["dev"]):
            set_gateway(d, b["adapter"], b["gateway"], b["prefix"], b["node_address"], True, False)

    def forwarding():
        a = adapter_named(d, b["adapter"])
        if a is None or not a["dev"]:
            raise ActionError("No MSFT_NetIPInterface objects found for '%s'" % b["adapter"])
        set_fwd(a["dev"], True)
        dev = routable_dev(d, {"address": b["node_address"], "adapter": b.get("routable_adapter")})
        if dev:
            set_fwd(dev, True)

    if b.get("profile") == "l2bridge":
        l2bridge_boot(d, b, step)
    else:
        step("network", network)
        step("gateway address", gateway)
        step("forwarding", forwarding)
    for name in b["services"]:
        step("start " + name, lambda n=name: scm_start(d, n))
    for name in b["tasks"]:
        step("start " + name, lambda n=name: task_start(d, n))
    d["logs"]["C:\\k\\logs\\kwinctl-boot.log"] = "\n".join(log_lines)


def act_start_task(d, h):
    if h["name"] not in d["tasks"]:
        raise ActionError("Start-ScheduledTask : The system cannot find the file specified.")
    task_start(d, h["name"])


def act_remove_task(d, h):
    d["tasks"].pop(h["name"], None)


def act_remove_service(d, h):
    if h["name"] in d["services"]:
        scm_stop(d, h["name"])
    d["services"].pop(h["name"], None)


def act_set_firewall(d, h):
    # the block removes every kwinctl-* rule, then adds the header's
    d["firewall"] = {n: r for n, r in d["firewall"].items() if not n.lower().startswith("kwinctl-")}
    for r in h["rules"]:
        d["firewall"][r["name"]] = {
            "display": r["display"], "description": r["description"], "protocol": r["protocol"],
            "icmp_type": 8 if r["protocol"].lower() == "icmpv4" else None, "program": r.get("program"),
            "remote": r["remote"], "enabled": True,
        }
    apply_firewall(d)


def act_remove_firewall(d, h):
    d["firewall"] = {n: r for n, r in d["firewall"].items() if not n.lower().startswith("kwinctl-")}
    apply_firewall(d)


def act_remove_network(d, h):
    hns_release(d)
    d["networks"] = [n for n in d["networks"] if n["name"] != h["name"]]


def act_remove_switch(d, h):
    if link_exists(SWITCH_DEV):
        sh("ip", "link", "del", SWITCH_DEV)
    d["switches"] = []


def act_remove_file(d, h):
    if h["path"].lower().endswith("pod-cidr.txt"):
        d["pod_cidr"] = None
    if h["path"].lower().endswith("cluster.txt"):
        d["cluster"] = None
    p = file_of(d, h["path"])
    if p:
        d["files"].pop(p)
        d["file_versions"].pop(p, None)


def act_fail(d, h):
    """A test's action that fails with the given stderr."""
    raise ActionError(h.get("stderr", "failed"))


# ------------------------------------------------------------------ l2bridge
#
# The l2bridge profile (containerd + HNS L2Bridge + win-bridge + kernelspace
# kube-proxy, Kubernetes 1.24+). Sources: shared/research/modern-profile.md
# (its keys: F1 flannel hostgw_windows.go, G1 GCE k8s-node-setup.psm1, K1
# winkernel proxier.go, D2/D6 containerd, W1 website intro.md, ...), listed
# per behaviour in winsim/README.md "l2bridge". Linux stands-ins:
#   the external vSwitch      the bridge VSW_DEV, the card enslaved, the
#                             card's MAC, the node address moved to it: its
#                             host vNIC "vEthernet (<card>)" with a new ifIndex
#   an HNS network            a record (L2Bridge networks share the vSwitch)
#   a host endpoint attached  a veth pair: hepN (in the host, holding the
#                             endpoint's IP: "vEthernet (<name>)") and hepNb,
#                             a port of the vSwitch
#   containerd's images       records (sandbox_images)

VSW_DEV = "HNSVSwitch"
CONTAINERD_PIPE = "\\\\.\\pipe\\containerd-containerd"
HNS_MISSING = ("HNS failed with error : The specified service does not exist as an installed service. "
               "(the Containers feature is not installed, or waits for a restart)")
DUP = "hnsCall failed in Win32: The object already exists. (0x1392)"

# registry.k8s.io/pause tags -> the Windows builds their manifest lists hold
# (kubernetes build/pause/CHANGELOG.md: 3.4 adds 1809, 1903, 1909, 2004;
# 3.4.1 adds 20H2; 3.6 adds 2022; 3.7 removes 1903, 1909, 2004; 3.9 removes
# 20H2; D8: 3.10.2 adds ltsc2025; that 3.10.2 keeps 1809: B).
_P34 = [17763, 18362, 18363, 19041]
_P341 = _P34 + [19042]
_P36 = _P341 + [20348]
_P37 = [17763, 19042, 20348]
_P39 = [17763, 20348]
PAUSE_BUILDS = {"3.4": _P34, "3.4.1": _P341, "3.5": _P341, "3.6": _P36, "3.7": _P37, "3.8": _P37,
                "3.9": _P39, "3.10": _P39, "3.10.1": _P39, "3.10.2": _P39 + [26100]}
IMAGE_BUILDS = {}
for _repo in ("registry.k8s.io/pause", "k8s.gcr.io/pause"):  # k8s.gcr.io: the same images (B)
    for _tag, _b in PAUSE_BUILDS.items():
        IMAGE_BUILDS["%s:%s" % (_repo, _tag)] = _b
# Microsoft's signed copy (W1; its builds: B) and the v2 one used for 2025
# (B: image-builder PR #1985)
IMAGE_BUILDS["mcr.microsoft.com/oss/kubernetes/pause:3.6"] = [17763, 20348]
IMAGE_BUILDS["mcr.microsoft.com/oss/v2/kubernetes/pause:3.10.1-3"] = [17763, 20348, 26100]


def new_ifindex(d):
    """Windows gives every new adapter a new ifIndex."""
    i = d["next_ifindex"]
    d["next_ifindex"] = i + 1
    return i


def hns_ready(d):
    """HNS (and so containerd) works only once the Containers feature is
    installed and the host restarted (spec §8.1; S2 "Please reboot and
    re-run this script"; dockerd without it: "failed to open service hns:
    The specified service does not exist as an installed service",
    MicrosoftDocs/Virtualization-Documentation #1270)."""
    if d["features"].get("Containers") != "Installed":
        raise ActionError(HNS_MISSING)


def hns_network(d, name):
    return next((n for n in d["hns_networks"] if n["name"].lower() == (name or "").lower()), None)


def hns_endpoint(d, name):
    return next((e for e in d["hns_endpoints"] if e["name"].lower() == (name or "").lower()), None)


def card_named(d, name, host):
    if name:
        return next((n for n in nics(d) if n["name"].lower() == name.lower()), None)
    # no card named: the one holding the node's address, else the first Up
    dev = dev_holding(host.get("address"))
    return next((n for n in nics(d) if n["dev"] == dev), None) or \
        next((n for n in nics(d) if n["status"] == "Up"), None)


def vswitch_create(d, nic):
    """The first L2Bridge network on a card makes the external vSwitch: the
    card becomes its port, its address moves to the vSwitch's host vNIC
    "vEthernet (<card>)" with a NEW ifIndex (F1 "the interface is modified,
    esp the name, index"; G1, M1), which starts without forwarding (§8.4);
    routes bound to the card's old ifIndex are gone from both stores (G1:
    routes vanish; F1); its default gateway moves with the address (B)."""
    dev = nic["dev"]
    addrs = addrs_of(dev)
    defaults = [r for r in gateway_routes(dev) if r["dst"] == "default"]
    old = [(dst, via) for dst, via, v in active_routes() if v == dev]
    for dst, via in old:
        sh("ip", "route", "del", dst, "via", via, "dev", dev, check=False)
    d["persistent_routes"] = [r for r in d["persistent_routes"] if r.get("dev") != dev]
    sh("ip", "link", "add", VSW_DEV, "type", "bridge")
    # the host vNIC takes the card's MAC, so the neighbours' ARP entries stay right (B)
    mac = json.loads(sh("ip", "-j", "link", "show", "dev", dev))[0]["address"]
    sh("ip", "link", "set", VSW_DEV, "address", mac)
    set_fwd(VSW_DEV, False)
    strong_arp(VSW_DEV)
    sh("ip", "link", "set", dev, "master", VSW_DEV)
    sh("ip", "link", "set", VSW_DEV, "up")
    for a in addrs:
        sh("ip", "addr", "del", a, "dev", dev, check=False)
        sh("ip", "addr", "add", a, "dev", VSW_DEV, check=False)
    for r in defaults:
        sh("ip", "route", "replace", "default", "via", r["gateway"], "dev", VSW_DEV, check=False)
    name = "vEthernet (%s)" % nic["name"]
    d["vswitch"] = {"nic": nic["name"], "dev": dev, "addrs": addrs, "adapter": name, "index": new_ifindex(d)}
    d["dhcp"][name] = d["dhcp"].get(nic["name"], False)
    # WinRM keeps answering on the address (its socket is bound to the
    # address, not the card); the call in flight survives the blip unless
    # the knob says the connection dies (spec §8.2 "multi-second
    # connectivity loss"; whether a WinRM call survives it: B)
    if not d.get("vswitch_drops_connection"):
        d["_address_move_ok"] = True


def management_ip(d):
    if not d.get("vswitch"):
        return None
    ips = ipv4_of(VSW_DEV)
    return ips[0] if ips else None


def endpoint_detach(d, ep):
    if ep.get("dev") and link_exists(ep["dev"]):
        sh("ip", "link", "del", ep["dev"], check=False)
    ep["dev"], ep["index"] = None, None


def network_remove(d, net):
    """Removing a network destroys its endpoints (host vNICs too) (§8.3)."""
    for ep in [e for e in d["hns_endpoints"] if e["network_id"] == net["id"]]:
        endpoint_detach(d, ep)
        d["hns_endpoints"].remove(ep)
    d["hns_networks"].remove(net)


def network_create(d, name, subnet, gateway, nic, host):
    if d.get("vswitch") and d["vswitch"]["nic"].lower() != nic["name"].lower():
        raise ActionError("winsim: a second external vSwitch (on %s; the first is on %s) is not simulated"
                          % (nic["name"], d["vswitch"]["nic"]))
    if not d.get("vswitch"):
        vswitch_create(d, nic)
    # ManagementIP: HNS publishes it on the network asynchronously (F1
    # polls for it); the simulator sets it at once
    net = {"name": name, "id": str(uuid.uuid4()).upper(), "type": "L2Bridge",
           "subnets": [{"prefix": subnet, "gateway": gateway}], "management_ip": management_ip(d),
           "adapter": nic["name"]}
    d["hns_networks"].append(net)
    return net


def act_install_feature(d, h):
    """Install-WindowsFeature: Installed stays; otherwise InstallPending
    until the restart (S2 "Please reboot and re-run this script"; G1
    "computer must be restarted")."""
    name = h["name"]
    if d["features"].get(name, "Available") == "Installed":
        return
    slow(d, "install_feature")
    d["features"][name] = "InstallPending"


def act_install_archive(d, h):
    """Download/upload and SHA-256 as place_file; tar.exe (bsdtar) opens it;
    each member path gets the archive's file of the same base name; the
    version binary's `--version` (its first line) must match; then the
    marker (content: the archive's SHA-256). Services running a member are
    stopped for the swap and started again, as place_file."""
    import io
    import tarfile
    a = h["archive"]
    content = fetched(d, h, a)
    sha = hashlib.sha256(content).hexdigest()
    try:
        tf = tarfile.open(fileobj=io.BytesIO(content), mode="r:*")
        files = {}
        for m in tf.getmembers():
            if m.isfile():
                files.setdefault(os.path.basename(m.name).lower(), tf.extractfile(m).read())
    except (tarfile.TarError, OSError, EOFError):
        raise ActionError("tar.exe: Error opening archive: Unrecognized archive format")
    record_file(d, a["path"], sha, None)
    members = {}
    for path in h["members"]:
        base = path.replace("\\", "/").rsplit("/", 1)[-1]
        if base.lower() not in files:
            raise ActionError("%s: %s is not in the archive" % (h["name"], base))
        members[path] = files[base.lower()]

    def first_line(b):
        lines = b.decode("utf-8", "replace").splitlines()
        return lines[0].strip() if lines else None

    vb = h.get("version_binary")
    if vb and a.get("version_regex"):
        got = next((first_line(c) for p, c in members.items() if p.lower() == vb.lower()), None)
        if got is None or not re.match(a["version_regex"], got):
            raise ActionError("%s: --version says %s, but the inventory declares %s version %s"
                              % (vb, got, h["name"], a.get("version")))
    for path, c in members.items():
        record_file(d, path, hashlib.sha256(c).hexdigest(), first_line(c))
    record_file(d, h["marker"], hashlib.sha256(sha.encode("ascii")).hexdigest(), None)
    d.setdefault("file_contents", {})[h["marker"]] = sha
    swap_restart(d, h, list(members))


def act_ensure_hns_network(d, h):
    """The placeholder network, then the pod network (§3). A network's
    subnet and gateway cannot change: delete and create (replace), which
    destroys its endpoints and gives a new id (§8.3)."""
    hns_ready(d)
    nic = card_named(d, h.get("adapter"), h.get("_host", {}))
    if nic is None:
        raise ActionError("New-HnsNetwork : HNS failed with error : The network adapter '%s' was not found."
                          % h.get("adapter"))
    host = h.get("_host", {})
    if h.get("placeholder") and hns_network(d, h["placeholder"]) is None:
        network_create(d, h["placeholder"], h["placeholder_subnet"], h["placeholder_gateway"], nic, host)
    net = hns_network(d, h["name"])
    want = [{"prefix": h["subnet"], "gateway": h["gateway"]}]
    if net is not None and (h.get("replace") or net["subnets"] != want):
        if not h.get("replace"):
            s0 = net["subnets"][0] if net["subnets"] else {}
            raise ActionError("HNS network %s has subnet %s and gateway %s; a network's subnet and gateway "
                              "cannot be changed: it must be deleted and created again (its endpoints go with it)"
                              % (net["name"], s0.get("prefix"), s0.get("gateway")))
        network_remove(d, net)
        net = None
    if net is None:
        network_create(d, h["name"], h["subnet"], h["gateway"], nic, host)
    for n in d["hns_networks"]:
        n["management_ip"] = n["management_ip"] or management_ip(d)


def act_ensure_host_endpoint(d, h):
    """The host endpoint (F1 "Ensure a 1.2 endpoint ... in the host
    compartment", HostAttach(1)): an endpoint of that name with another IP
    goes first; an IP another endpoint holds, or the network's gateway,
    is 0x1392 (k8s #74766); attaching makes the host vNIC "vEthernet
    (<name>)" with the IP, no forwarding; already attached is fine (F1,
    flannel #1391)."""
    hns_ready(d)
    net = hns_network(d, h["network"])
    if net is None:
        raise ActionError("New-HnsEndpoint : Cannot bind argument to parameter 'NetworkId' because it is null. "
                          "(there is no HNS network named '%s')" % h["network"])
    ep = hns_endpoint(d, h["name"])
    if ep is not None and (ep["ip"] != h["ip"] or ep["network_id"] != net["id"]):
        endpoint_detach(d, ep)
        d["hns_endpoints"].remove(ep)
        ep = None
    if ep is None:
        gateways = [s["gateway"] for s in net["subnets"]]
        if h["ip"] in gateways or any(e["ip"] == h["ip"] for e in d["hns_endpoints"]):
            raise ActionError("New-HnsEndpoint : " + DUP)
        ep = {"name": h["name"], "id": str(uuid.uuid4()).upper(), "network_id": net["id"], "ip": h["ip"],
              "prefix": h["prefix"], "dev": None, "index": None}
        d["hns_endpoints"].append(ep)
    if ep.get("dev") and link_exists(ep["dev"]):
        return  # "This endpoint is already attached to the switch." (F1: success)
    i = new_ifindex(d)
    dev = "hep%d" % i
    sh("ip", "link", "add", dev, "type", "veth", "peer", "name", dev + "b")
    sh("ip", "link", "set", dev + "b", "master", VSW_DEV)
    sh("ip", "link", "set", dev + "b", "up")
    set_fwd(dev, False)
    strong_arp(dev)
    sh("ip", "addr", "add", "%s/%d" % (h["ip"], h["prefix"]), "dev", dev)
    sh("ip", "link", "set", dev, "up")
    ep["dev"], ep["index"] = dev, i


def act_set_forwarding(d, h):
    """Set-NetIPInterface -Forwarding Enabled on the adapter holding each
    address (F2; G1 uses netsh for "vEthernet (cbr0)")."""
    for addr in h["addresses"]:
        dev = dev_holding(addr)
        if dev is None:
            raise ActionError("Get-NetIPAddress : No MSFT_NetIPAddress objects found with property 'IPAddress' "
                              "equal to '%s'.  Verify the value of the property and retry." % addr)
        set_fwd(dev, True)


def image_builds(d, image):
    ref = norm_image(image)
    knob = {norm_image(k): v for k, v in d.get("image_builds", {}).items()}
    if ref in knob:
        return [int(str(b).split(".")[-1]) if "." in str(b) else int(b) for b in knob[ref]]
    return IMAGE_BUILDS.get(ref)


def act_pull_sandbox(d, h):
    """ctr -n k8s.io pull: needs containerd's pipe; process isolation needs
    a windows/amd64 entry of the host's build (W1)."""
    if not containerd_running(d):
        raise ActionError('ctr: failed to dial "%s": context deadline exceeded: connection error: desc = '
                          '"transport: Error while dialing: open %s: The system cannot find the file specified."'
                          % (CONTAINERD_PIPE, CONTAINERD_PIPE))
    builds = image_builds(d, h["image"])
    if builds is None:
        raise ActionError('ctr: failed to resolve reference "%s": %s: not found (winsim knows no such image; '
                          'the state knob image_builds declares one)' % (h["image"], h["image"]))
    if build_no(d) not in builds:
        raise ActionError("ctr: no match for platform in manifest: not found")
    slow(d, "pull_sandbox")
    ref = norm_image(h["image"])
    if ref not in d["sandbox_images"]:
        d["sandbox_images"].append(ref)


def act_remove_hns_network(d, h):
    """Reset: the network and its endpoints go; the placeholder and the
    vSwitch stay (so no second blip; G1 quoting daschott, M1)."""
    net = hns_network(d, h["name"])
    if net is not None:
        network_remove(d, net)


def is_containerd(exe):
    return os.path.basename(exe.replace("\\", "/")).lower() in ("containerd", "containerd.exe")


def containerd_running(d):
    s = d["services"].get("containerd")
    return bool(s) and s["status"] == "Running"


def containerd_start(d, line, args):
    """containerd.exe as a service: a binary whose --version line is
    containerd's; it needs the Containers feature (HCS and HNS) installed
    and the host restarted (spec §8.1; the message: B)."""
    if not line or not re.match(r"^containerd github\.com/containerd/containerd v\d", line):
        return "not a valid Win32 application"
    if d["features"].get("Containers") != "Installed":
        return ('containerd: failed to load plugin io.containerd.grpc.v1.cri: hcs: The specified service does '
                'not exist as an installed service. (the Containers feature is not installed, or waits for a restart)')
    return None


def kubelet_needs_runtime(d, line, args):
    """A 1.24+ kubelet dials its CRI endpoint at start and exits when nothing
    answers ("validate service connection", kubelet remote_runtime.go: B
    for the exact text); the l2bridge endpoint is containerd's pipe (D3)."""
    v = k8sbin.minor_of(line)
    if not v or v < (1, 24):
        return None
    seen, _ = k8sbin.parse_flags(args)
    ep = (seen or {}).get("--container-runtime-endpoint", "npipe:////./pipe/containerd-containerd")
    if "containerd-containerd" in ep and containerd_running(d):
        return None
    return ('E0101 00:00:00.000000    4242 run.go:74] "command failed" err="failed to run Kubelet: validate '
            'service connection: validate CRI v1 runtime API for endpoint \\"%s\\": rpc error: code = '
            'Unavailable desc = connection error: desc = \\"transport: Error while dialing: open %s: The system '
            'cannot find the file specified.\\""' % (ep, CONTAINERD_PIPE))


def component_running(d, name):
    s = d["services"].get(name)
    t = d["tasks"].get(name)
    return bool(s and s["status"] == "Running") or bool(t and t.get("running"))


def service_program(d, binpath):
    """The program a service's command line runs and its arguments: behind
    kube-log-runner, the program it wraps (k8sbin.unwrap, with the runner
    file's release deciding its flags); [] when the runner would refuse."""
    argv = k8sbin.split_command_line(binpath)
    return k8sbin.unwrap(argv, file_version(d, argv[0]) if argv else None)[1]


def kube_proxy_network(d):
    """The HNS network kube-proxy looks for: --network-name, else
    $env:KUBE_NETWORK (K1)."""
    s = d["services"].get("kube-proxy")
    if s:
        argv, env = service_program(d, s["binpath"]), s.get("env")
    elif d["tasks"].get("kube-proxy", {}).get("service"):
        t = d["tasks"]["kube-proxy"]["service"]
        argv, env = [t["exe"]] + k8sbin.split_command_line(t["args"]), t.get("env")
    else:
        return None
    seen, _ = k8sbin.parse_flags(argv[1:])
    return (seen or {}).get("--network-name") or k8sbin.env_value(env, "KUBE_NETWORK")


def health(d, port):
    """curl http://127.0.0.1:PORT/healthz: 10248 the kubelet's, 10256
    kube-proxy's, which stays unhealthy while it loops on "Unable to find
    HNS Network specified" (K1)."""
    if port == 10248:
        return component_running(d, "kubelet")
    if port == 10256:
        return component_running(d, "kube-proxy") and hns_network(d, kube_proxy_network(d)) is not None
    return False


CNI_DIR = "c:\\etc\\cni\\net.d\\"


def transparent_hns(d):
    """Docker's transparent network is an HNS network too (type
    Transparent, named as in Docker: B), listed with the others."""
    if not link_exists(HNS_DEV):
        return []
    b = d.get("bound") or {}
    return [{"name": n["name"], "id": str(uuid.uuid5(uuid.NAMESPACE_OID, "winsim:" + n["name"])).upper(),
             "type": "Transparent", "subnets": [{"prefix": n["subnet"], "gateway": n["gateway"]}],
             "management_ip": None, "adapter": b.get("nic")} for n in d["networks"]]


def l2bridge_facts(d, probe):
    def attached(e):
        return bool(e.get("dev")) and link_exists(e["dev"]) and e["ip"] in ipv4_of(e["dev"])
    return {
        "containers_feature": d["features"].get("Containers", "Available"),
        "hns_networks": [{k: n[k] for k in ("name", "id", "type", "subnets", "management_ip", "adapter")}
                         for n in d["hns_networks"]] + transparent_hns(d),
        "hns_endpoints": [{"name": e["name"], "id": e["id"], "network_id": e["network_id"], "ip": e["ip"],
                           "attached": attached(e)} for e in d["hns_endpoints"]],
        # containerd reads the conf dir sorted by name and loads the first
        # (max_conf_num=1, D2)
        "cni_conf_files": sorted(p[len(CNI_DIR):] for p in d["files"]
                                 if p.lower().startswith(CNI_DIR) and "\\" not in p[len(CNI_DIR):]),
        "sandbox_images": list(d["sandbox_images"]),
        "containerd_pipe": containerd_running(d),
        "health": [{"port": int(p), "ok": health(d, int(p))} for p in probe.get("health", [])],
    }


def l2bridge_reboot(d):
    """At a restart HNS networks (and the vSwitch with its vNIC and
    address) persist, endpoints do not (G1 "the HNS network does seem to
    persist across reboots, the HNS endpoints do not")."""
    for ep in d["hns_endpoints"]:
        endpoint_detach(d, ep)
    d["hns_endpoints"] = []


def l2bridge_boot(d, b, step):
    """The l2bridge boot script: the network (only if missing), the host
    endpoint (lost at reboot, G1), forwarding, the routes (re-added on the
    vNIC if missing; F2 re-checks its routes), each step logged."""
    lb = b["l2bridge"]
    host = {"address": (lb.get("forwarding") or [None])[0]}

    def network():
        if hns_network(d, lb["network"]["name"]) is None:
            act_ensure_hns_network(d, dict(lb["network"], replace=False, _host=host))

    def routes():
        have = {(dst, via) for dst, via, _ in active_routes()}
        for r in lb.get("routes", []):
            if (r["dst"], r["via"]) not in have:
                sh("ip", "route", "replace", r["dst"], "via", r["via"])
            if not any((p["dst"], p["via"]) == (r["dst"], r["via"]) for p in d["persistent_routes"]):
                dev = next((v for dst, via, v in active_routes() if dst == r["dst"]), None)
                d["persistent_routes"].append({"dst": r["dst"], "via": r["via"], "dev": dev})

    step("network", network)
    step("host endpoint", lambda: act_ensure_host_endpoint(d, dict(lb["endpoint"], _host=host)))
    step("forwarding", lambda: act_set_forwarding(d, {"addresses": lb.get("forwarding", [])}))
    step("routes", routes)


def handlers():
    """Every action kind this simulator carries out, by name."""
    return {name[len("act_"):]: f for name, f in globals().items() if name.startswith("act_") and callable(f)}


def act(d, h):
    kind = h.get("kind")
    # Test knob: make an action kind fail the way PowerShell reports errors.
    if kind in d.get("fail_kinds", []):
        raise ActionError("%s : simulated failure of %s\n    + CategoryInfo          : NotSpecified: (:) [], "
                          "RuntimeException" % (kind, kind))
    handler = handlers().get(kind)
    if handler is None:
        raise KeyError(kind)
    handler(d, h)


def execute(script, state_path):
    """Run a script by its headers. Returns (stdout, stderr, exit code)."""
    out, err = [], []
    headers = []
    block = []
    for line in script.splitlines():
        if line.startswith(HEADER):
            if headers:
                headers[-1]["_block"] = "\n".join(block)
            block = []
            try:
                headers.append(json.loads(line[len(HEADER):]))
            except ValueError as e:
                return "", "winsim: bad action header %r: %s\n" % (line, e), 1
        else:
            block.append(line)
    if headers:
        headers[-1]["_block"] = "\n".join(block)
    if not headers:
        return "", "winsim: unknown action header: the script has none\n", 1
    known = {"prelude", "probe", "echo", "fail", "sleep", "read_files", "restart_computer"}
    host = {}
    restart = False
    with State(state_path) as d:
        ensure_nics(d)
        apply_firewall(d)
        for h in headers:
            kind = h.get("kind")
            if "id" not in h and kind not in known:
                h.pop("_block", None)
                return "".join(out), "winsim: unknown action header %s\n" % json.dumps(h), 1
            if kind == "prelude":
                host = h
                continue
            if kind == "echo":
                out.append(h.get("text", "") + "\n")
                continue
            if kind == "sleep":
                import time
                time.sleep(min(float(h.get("seconds", 0)), 30))
                continue
            if kind == "fail" and "id" not in h:
                err.append(h.get("stderr", "") + "\n")
                return "".join(out), "".join(err), int(h.get("code", 1))
            if kind == "read_files":
                # The simulator keeps no file contents, apart from the
                # archive markers (install_archive): every other file reads
                # as absent (plan then says it would be created).
                kept = {k.lower(): v for k, v in d.get("file_contents", {}).items()}
                for i, p in enumerate(h.get("paths", [])):
                    c = kept.get(p.lower()) if file_of(d, p) else None
                    out.append("KWC %d %s\n" % (i, base64.b64encode(c.encode()).decode() if c is not None else "-"))
                continue
            if kind == "probe":
                out.append("KWINCTL-FACTS " + json.dumps(facts(d, h), separators=(",", ":")) + "\n")
                continue
            if kind == "restart_computer":
                # `shutdown.exe /r /t 5`: the call returns, the host restarts
                # a moment later (here: `reboot`, with a new boot time)
                restart = True
                out.append("KWINCTL-RESTART scheduled\n")
                continue
            h["_host"] = host
            # WinRM's connection lives on the node's address: when an action
            # moves it to another adapter, or removes it, the connection
            # drops mid-call and the client gets no answer.
            where = dev_holding(host.get("address"))
            d.pop("_address_move_ok", None)
            try:
                act(d, h)
                # (the first external vSwitch moves the address and keeps
                # the call, unless its knob says otherwise: vswitch_create)
                if d.pop("_address_move_ok", False):
                    where = dev_holding(host.get("address"))
                if where is not None and dev_holding(host.get("address")) != where:
                    log("the node address %s left %s: dropping the connection" % (host.get("address"), where))
                    raise ConnectionDropped()
                out.append("KWX %d ok\n" % h["id"])
            except KeyError as e:
                h.pop("_block", None)
                return "".join(out), "winsim: unknown action header %s (%s)\n" % (json.dumps(h), e), 1
            except (ActionError, RuntimeError) as e:
                if d.pop("_address_move_ok", False):
                    where = dev_holding(host.get("address"))
                if where is not None and dev_holding(host.get("address")) != where:
                    log("the node address %s left %s: dropping the connection" % (host.get("address"), where))
                    raise ConnectionDropped()
                out.append("KWX %d failed 1\n" % h["id"])
                for line in str(e).splitlines() or ["failed"]:
                    out.append("KWE %s\n" % line)
                return "".join(out), "".join(err), 0
    if restart:
        threading.Timer(1.0, reboot, (state_path, False)).start()
    return "".join(out), "".join(err), 0


def reboot(state_path, drop_hns):
    with State(state_path) as d:
        # Win32_OperatingSystem.LastBootUpTime changes with every start
        d["boot_count"] = d.get("boot_count", 0) + 1
        ensure_nics(d)
        apply_firewall(d)
        # a role install waiting for the restart is done
        for k in ("routing_state", "hyperv_role"):
            if d[k] == "InstallPending":
                d[k] = "Installed"
        for k, v in d["features"].items():
            if v == "InstallPending":
                d["features"][k] = "Installed"
        l2bridge_reboot(d)
        if drop_hns:
            # HNS lost the network; at start Docker removes transparent
            # networks HNS does not have (moby daemon_windows.go "Remove
            # networks not present in HNS")
            hns_release(d)
            d["networks"] = []
        # Only the persistent store comes back (several next hops for one
        # destination: all of them).
        for r in json.loads(sh("ip", "-j", "-4", "route", "show", "table", "main") or "[]"):
            if r.get("protocol") != "kernel":
                sh("ip", "route", "del", r["dst"], check=False)
        vias = {}
        for r in d["persistent_routes"]:
            vias.setdefault(r["dst"], []).append(r["via"])
        for dst, v in vias.items():
            install_routes(dst, v)
        for name, s in d["services"].items():
            s["status"] = "Stopped"
            # the service manager reads its configuration from the registry
            s.update(s.pop("registry", {}))
        for name, s in d["services"].items():
            if s["start"] == "Automatic":
                try:
                    scm_start(d, name)
                except ActionError:
                    pass
        for t in d["tasks"].values():
            t["running"] = False
        # tasks at startup: kwinctl's boot task first (it starts the
        # others), then any wrapper task with its own trigger (no WinRM
        # call to keep at boot: the vSwitch's note is dropped)
        if BOOT_TASK in d["tasks"] and d["tasks"][BOOT_TASK].get("startup", True):
            boot_run(d, d["tasks"][BOOT_TASK]["boot"])
        for name, t in d["tasks"].items():
            if name != BOOT_TASK and t.get("startup", True) and not t["running"]:
                try:
                    task_start(d, name)
                except ActionError:
                    pass
        d.pop("_address_move_ok", None)


# ------------------------------------------------------------------ WinRS


def soap_action(xml):
    m = re.search(r"<(?:\w+:)?Action[^>]*>([^<]+)</(?:\w+:)?Action>", xml)
    return m.group(1).strip() if m else ""


def selector(xml, name):
    m = re.search(r'<(?:\w+:)?Selector Name="%s"[^>]*>([^<]+)<' % name, xml)
    return m.group(1) if m else None


def message_id(xml):
    m = re.search(r"<(?:\w+:)?MessageID[^>]*>([^<]+)<", xml)
    return m.group(1) if m else "uuid:" + str(uuid.uuid4())


def envelope(action, relates, body):
    return (
        '<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" '
        'xmlns:a="http://schemas.xmlsoap.org/ws/2004/08/addressing" '
        'xmlns:w="http://schemas.dmtf.org/wbem/wsman/1/wsman.xsd" '
        'xmlns:rsp="%s"><s:Header><a:Action>%s</a:Action>'
        "<a:MessageID>uuid:%s</a:MessageID><a:RelatesTo>%s</a:RelatesTo>"
        "<a:To>http://schemas.xmlsoap.org/ws/2004/08/addressing/role/anonymous</a:To>"
        "</s:Header><s:Body>%s</s:Body></s:Envelope>" % (NS_SHELL, action, uuid.uuid4(), relates, body)
    )


class Shells:
    def __init__(self, state_path):
        self.state_path = state_path
        self.lock = threading.Lock()
        self.shells = {}  # shell id -> {command id -> command}

    def handle(self, xml):
        action = soap_action(xml)
        mid = message_id(xml)
        if action == ACTION_CREATE:
            sid = str(uuid.uuid4()).upper()
            with self.lock:
                self.shells[sid] = {}
            body = ("<rsp:Shell><rsp:ShellId>%s</rsp:ShellId><rsp:ResourceUri>%s/cmd</rsp:ResourceUri>"
                    "<rsp:State>Connected</rsp:State></rsp:Shell>" % (sid, NS_SHELL))
            body = '<x:ResourceCreated xmlns:x="http://schemas.xmlsoap.org/ws/2004/09/transfer">' \
                   '<a:Address>x</a:Address><a:ReferenceParameters><w:SelectorSet>' \
                   '<w:Selector Name="ShellId">%s</w:Selector></w:SelectorSet></a:ReferenceParameters>' \
                   '</x:ResourceCreated>%s' % (sid, body)
            return envelope(ACTION_CREATE + "Response", mid, body)
        sid = selector(xml, "ShellId")
        with self.lock:
            shell = self.shells.get(sid)
        if shell is None:
            raise LookupError("unknown shell %s" % sid)
        if action == ACTION_COMMAND:
            cid = str(uuid.uuid4()).upper()
            cmd = re.search(r"<(?:\w+:)?Command>([^<]*)<", xml)
            args = re.findall(r"<(?:\w+:)?Arguments>([^<]*)<", xml)
            shell[cid] = {"command": cmd.group(1) if cmd else "", "args": args, "stdin": b"", "done": False}
            return envelope(ACTION_COMMAND + "Response", mid,
                            "<rsp:CommandResponse><rsp:CommandId>%s</rsp:CommandId></rsp:CommandResponse>" % cid)
        if action == ACTION_SEND:
            m = re.search(r'<(?:\w+:)?Stream[^>]*CommandId="([^"]+)"[^>]*>([^<]*)<', xml)
            end = re.search(r'<(?:\w+:)?Stream[^>]*End="true"', xml) is not None
            if not m or m.group(1).upper() not in shell:
                raise LookupError("send to an unknown command")
            c = shell[m.group(1).upper()]
            c["stdin"] += base64.b64decode(m.group(2))
            c["eof"] = end
            return envelope(ACTION_SEND + "Response", mid, "<rsp:SendResponse/>")
        if action == ACTION_RECEIVE:
            m = re.search(r'<(?:\w+:)?DesiredStream[^>]*CommandId="([^"]+)"', xml)
            cid = m.group(1).upper() if m else None
            c = shell.get(cid)
            if c is None:
                raise LookupError("receive from an unknown command")
            stdout, stderr, code = self.run(c)
            body = "<rsp:ReceiveResponse>"
            for name, data in (("stdout", stdout), ("stderr", stderr)):
                if data:
                    body += '<rsp:Stream Name="%s" CommandId="%s">%s</rsp:Stream>' % (
                        name, cid, base64.b64encode(data.encode()).decode())
            body += ('<rsp:CommandState CommandId="%s" State="%s/CommandState/Done">'
                     "<rsp:ExitCode>%d</rsp:ExitCode></rsp:CommandState></rsp:ReceiveResponse>" % (cid, NS_SHELL, code))
            return envelope(ACTION_RECEIVE + "Response", mid, body)
        if action == ACTION_SIGNAL:
            return envelope(ACTION_SIGNAL + "Response", mid, "<rsp:SignalResponse/>")
        if action == ACTION_DELETE:
            with self.lock:
                self.shells.pop(sid, None)
            return envelope(ACTION_DELETE + "Response", mid, "")
        raise LookupError("unsupported action %s" % action)

    def run(self, c):
        if c.get("result") == "dropped":
            raise ConnectionDropped()
        if c.get("result"):
            return c["result"]
        script = self.script_of(c)
        if script is None:
            res = ("", "winsim: unknown command: only PowerShell scripts are simulated\n", 1)
        else:
            try:
                res = execute(script, self.state_path)
            except ConnectionDropped:
                c["result"] = "dropped"
                raise
        c["result"] = res
        return res

    @staticmethod
    def script_of(c):
        args = c["args"]
        if "powershell" not in c["command"].lower():
            return None
        if "-EncodedCommand" in args:
            enc = args[args.index("-EncodedCommand") + 1]
            text = base64.b64decode(enc).decode("utf-16-le")
            # kwinctl's bootstrap reads the real script from stdin.
            if "[Console]::In.ReadToEnd()" in text:
                return c["stdin"].decode("utf-8", "replace")
            return text
        return None


# ------------------------------------------------------------------ HTTP + auth


def nt_hash(password):
    from spnego._ntlm_raw.crypto import ntowfv1
    return ntowfv1(password).hex().upper()


def unwrap_body(ctx, body):
    start = body.index(b"application/octet-stream\r\n") + len(b"application/octet-stream\r\n")
    end = body.rindex(BOUNDARY + b"--")
    payload = body[start:end]
    hlen = struct.unpack("<I", payload[:4])[0]
    return ctx.unwrap_winrm(payload[4:4 + hlen], payload[4 + hlen:])


def wrap_body(ctx, plain):
    res = ctx.wrap_winrm(plain)
    body = (BOUNDARY + b"\r\n\tContent-Type: " + SPNEGO_PROTOCOL.encode() + b"\r\n"
            b"\tOriginalContent: type=application/soap+xml;charset=UTF-8;Length=" + str(len(plain)).encode() + b"\r\n"
            + BOUNDARY + b"\r\n\tContent-Type: application/octet-stream\r\n"
            + struct.pack("<I", len(res.header)) + res.header + res.data + BOUNDARY + b"--\r\n")
    ctype = 'multipart/encrypted;protocol="%s";boundary="Encrypted Boundary"' % SPNEGO_PROTOCOL
    return ctype, body


def make_handler(cfg, shells, tls):
    # NTLM contexts waiting for their Type 3, by client address. Windows binds
    # a handshake to its TCP connection; winrm-rs over HTTPS sometimes sends
    # the Type 3 on a new connection, so the simulator is lenient here.
    pending = {}
    pending_lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        ntlm = None  # per connection
        authed = False

        def log_message(self, fmt, *args):
            log("%s:%s %s" % (self.client_address[0], self.client_address[1], fmt % args))

        def reply(self, status, body=b"", headers=()):
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length) if length else b""
            auth = self.headers.get("Authorization", "")
            ctype = self.headers.get("Content-Type", "")
            if os.environ.get("WINSIM_DEBUG"):
                kind = auth.split(" ", 1)[0]
                tok = base64.b64decode(auth.split(" ", 1)[1])[8:12].hex() if " " in auth else ""
                log("debug: auth=%s tok=%s ctype=%s len=%d authed=%s" % (kind, tok, ctype[:40], len(body), self.authed))
            if auth.startswith("Negotiate ") or auth.startswith("NTLM "):
                import spnego
                token = base64.b64decode(auth.split(" ", 1)[1])
                if token[8:12] == b"\x01\x00\x00\x00":
                    self.ntlm = spnego.server(protocol="ntlm")
                    self.authed = False
                elif self.ntlm is None or self.ntlm.complete:
                    with pending_lock:
                        self.ntlm = pending.pop(self.client_address[0], None)
                    if self.ntlm is None:
                        self.ntlm = spnego.server(protocol="ntlm")
                try:
                    out = self.ntlm.step(token)
                except Exception as e:  # wrong password, bad message
                    log("ntlm: refused: %s: %s" % (type(e).__name__, e))
                    self.ntlm = None
                    return self.reply(401, headers=[("WWW-Authenticate", "Negotiate")])
                if not self.ntlm.complete:
                    with pending_lock:
                        pending[self.client_address[0]] = self.ntlm
                    return self.reply(401, headers=[("WWW-Authenticate", "Negotiate " + base64.b64encode(out).decode())])
                with pending_lock:
                    if pending.get(self.client_address[0]) is self.ntlm:
                        del pending[self.client_address[0]]
                self.authed = True
                if not body:
                    return self.reply(200)
            elif auth.startswith("Basic "):
                if not cfg.allow_basic:
                    return self.reply(401, headers=[("WWW-Authenticate", "Negotiate")])
                user, _, pw = base64.b64decode(auth[6:]).decode("utf-8", "replace").partition(":")
                if user.lower() != cfg.user.lower() or pw != cfg.password:
                    log("basic: refused")
                    return self.reply(401, headers=[("WWW-Authenticate", "Basic realm=\"WSMAN\"")])
                return self.serve(body.decode("utf-8", "replace"), sealed=False)
            if not self.authed:
                return self.reply(401, headers=[("WWW-Authenticate", "Negotiate")])
            if ctype.startswith("multipart/encrypted"):
                try:
                    plain = unwrap_body(self.ntlm, body)
                except Exception as e:
                    log("unseal failed: %s" % type(e).__name__)
                    return self.reply(400)
                xml = plain.decode("utf-8", "replace")
                # Test knob: answer the next N sealed requests that open a
                # shell or start a command (the ones kwinctl may repeat)
                # with 401, as a server that no longer holds the
                # connection's NTLM session.
                lose = 0
                try:
                    with open(cfg.state) as f:  # replaced atomically: no lock to read
                        lose = int(json.load(f).get("lose_sessions", 0) or 0)
                except (OSError, ValueError):
                    pass
                if lose > 0 and soap_action(xml) in (ACTION_CREATE, ACTION_COMMAND):
                    with State(cfg.state) as d:
                        d["lose_sessions"] = max(0, int(d.get("lose_sessions", 0) or 0) - 1)
                    log("lose_sessions: answering 401 to a sealed %s" % soap_action(xml).rsplit("/", 1)[-1])
                    self.ntlm, self.authed = None, False
                    return self.reply(401, headers=[("WWW-Authenticate", "Negotiate")])
                return self.serve(xml, sealed=True)
            # NTLM without sealing: only over HTTPS, or when allowed.
            if not (tls or cfg.allow_unencrypted):
                log("refused an unencrypted body over HTTP")
                return self.reply(500)
            return self.serve(body.decode("utf-8", "replace"), sealed=False)

        def serve(self, xml, sealed):
            try:
                answer = shells.handle(xml).encode()
                status = 200
            except ConnectionDropped:
                # no answer: the connection goes, as a TCP connection to an
                # address the host no longer has does
                self.close_connection = True
                return None
            except LookupError as e:
                answer = envelope("http://schemas.dmtf.org/wbem/wsman/1/wsman/fault", message_id(xml),
                                  "<s:Fault><s:Reason><s:Text>%s</s:Text></s:Reason></s:Fault>" % e).encode()
                status = 500
            if sealed:
                ctype, data = wrap_body(self.ntlm, answer)
                return self.reply(status, data, [("Content-Type", ctype)])
            return self.reply(status, answer, [("Content-Type", "application/soap+xml;charset=UTF-8")])

    return Handler


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def serve(cfg):
    global LOG_FILE
    LOG_FILE = cfg.log
    cfg.password = os.environ.get(cfg.password_env)
    if cfg.password is None:
        sys.exit("winsim: %s is not set" % cfg.password_env)
    # The NTLM acceptor's credential store holds the NT hash, not the password.
    store_dir = tempfile.mkdtemp(prefix="winsim-")
    store = os.path.join(store_dir, "ntlm")
    fd = os.open(store, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("%s:1000:%s:%s:[U]:LCT-0\n" % (cfg.user, "0" * 32, nt_hash(cfg.password)))
    os.environ["NTLM_USER_FILE"] = store
    shells = Shells(cfg.state)
    with State(cfg.state) as d:
        apply_firewall(d)
    servers = [Server((cfg.listen, cfg.http_port), make_handler(cfg, shells, False))]
    if cfg.https_port:
        s = Server((cfg.listen, cfg.https_port), make_handler(cfg, shells, True))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cfg.cert, cfg.key)
        s.socket = ctx.wrap_socket(s.socket, server_side=True)
        servers.append(s)
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    log("winsim listening on %s (http %s, https %s)" % (cfg.listen, cfg.http_port, cfg.https_port))
    servers[0].serve_forever()


def gencert(cert, key, cn, ca_out):
    """A CA and a server certificate it signs (for `cn`, an IP or a name).
    Prints the server certificate's SHA-256 (what cert_sha256 pins)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "winsim test CA for " + cn)])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    k = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.DNSName(cn)]
    try:
        sans = [x509.IPAddress(ipaddress.ip_address(cn))]
    except ValueError:
        pass
    c = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
         .issuer_name(ca_name).public_key(k.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
         .not_valid_after(now + datetime.timedelta(days=30))
         .add_extension(x509.SubjectAlternativeName(sans), critical=False)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
         .sign(ca_key, hashes.SHA256()))
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()))
    with open(cert, "wb") as f:
        f.write(c.public_bytes(serialization.Encoding.PEM))
    with open(ca_out, "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    print(hashlib.sha256(c.public_bytes(serialization.Encoding.DER)).hexdigest())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--listen", required=True)
    s.add_argument("--http-port", type=int, default=5985)
    s.add_argument("--https-port", type=int, default=0)
    s.add_argument("--cert")
    s.add_argument("--key")
    s.add_argument("--user", default="Administrator")
    s.add_argument("--password-env", default="WINSIM_PASSWORD")
    s.add_argument("--state", required=True)
    s.add_argument("--allow-basic", action="store_true")
    s.add_argument("--allow-unencrypted", action="store_true")
    s.add_argument("--log")
    r = sub.add_parser("reboot")
    r.add_argument("--state", required=True)
    r.add_argument("--drop-hns", action="store_true")
    g = sub.add_parser("gencert")
    g.add_argument("--cert", required=True)
    g.add_argument("--key", required=True)
    g.add_argument("--cn", required=True)
    g.add_argument("--ca", required=True, help="where to write the CA certificate")
    sub.add_parser("kinds")
    a = p.parse_args()
    if a.cmd == "serve":
        serve(a)
    elif a.cmd == "reboot":
        reboot(a.state, a.drop_hns)
    elif a.cmd == "kinds":
        print("\n".join(sorted(handlers())))
    else:
        gencert(a.cert, a.key, a.cn, a.ca)


if __name__ == "__main__":
    main()
