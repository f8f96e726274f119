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
        return d

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
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


def forwarding():
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        return f.read().strip() == "1"


def norm_image(s):
    s = s.strip().lower()
    last = s.rsplit("/", 1)[-1]
    return s if (":" in last or "@" in last) else s + ":latest"


# ------------------------------------------------------------------ facts

ADAPTERS = [("Ethernet", 4, "eth0"), ("Ethernet 2", 5, None)]
VIRTUAL = [("vEthernet (KubeProxySwitch)", 8, "KubeProxySwitch"), ("vEthernet (HNSTransparent)", 9, "HNSTransparent")]
INDEX_OF_DEV = {"eth0": 4, "KubeProxySwitch": 8, "HNSTransparent": 9}


def facts(d, probe):
    fwd = forwarding()
    adapters = []
    for name, index, dev in ADAPTERS:
        adapters.append({"name": name, "index": index, "ipv4": ipv4_of(dev) if dev else [], "forwarding": fwd})
    for name, index, dev in VIRTUAL:
        if link_exists(dev):
            adapters.append({"name": name, "index": index, "ipv4": ipv4_of(dev), "forwarding": fwd})
    persistent = {(r["dst"], r["via"]) for r in d["persistent_routes"]}
    routes = []
    for r in json.loads(sh("ip", "-j", "-4", "route", "show", "table", "main") or "[]"):
        if "gateway" not in r:
            continue
        dst = r["dst"] if "/" in r["dst"] or r["dst"] == "default" else r["dst"] + "/32"
        if dst == "default":
            dst = "0.0.0.0/0"
        routes.append({
            "dst": dst, "via": r["gateway"], "index": INDEX_OF_DEV.get(r.get("dev"), 99),
            "persistent": (dst, r["gateway"]) in persistent,
        })
    hns = link_exists("HNSTransparent")
    wanted_files = [p.lower() for p in probe.get("files", [])]
    reach = []
    for ip in probe.get("reach", []):
        ok = subprocess.run(["ping", "-n", "-c", "1", "-W", "2", ip], capture_output=True).returncode == 0
        reach.append("%s %s" % (ip, "ok" if ok else "fail"))
    return {
        "v": 1, "os": "windows", "hostname": d.get("hostname", "WINSIM"),
        "build": d["build"], "hyperv_module": d["hyperv_module"], "docker_version": d["docker_version"],
        "adapters": adapters,
        "routing_installed": d["routing_installed"],
        "switches": [s for s in d["switches"] if link_exists(s["name"])],
        "networks": [n for n in d["networks"] if hns],
        "routes": routes,
        "images": d["images"],
        "files": [{"path": p, "sha256": sha} for p, sha in d["files"].items() if p.lower() in wanted_files],
        "services": [{k: v for k, v in dict(s, name=n).items() if k in SERVICE_FACTS}
                     for n, s in d["services"].items() if n in probe.get("services", [])],
        "tasks": [{"name": n, "state": t["state"], "description": t["description"], "running": t["running"]}
                  for n, t in d["tasks"].items() if n in probe.get("services", [])],
        "versions": [{"path": p, "output": file_version(d, p) or ""}
                     for p in probe.get("binaries", []) if file_of(d, p) is not None],
        "image_os": [{"image": i, "os_version": d["image_os"].get(norm_image(i), "")}
                     for i in probe.get("images", []) if norm_image(i) in d["images"]],
        "pod_cidr": d["pod_cidr"],
        "cluster": d.get("cluster"),
        "reach": reach,
    }


SERVICE_FACTS = {"name", "status", "start", "binpath", "env", "depends", "restart"}


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


def start_binary(d, exe, args):
    """Start `exe` with the arguments `args` (a list) as Windows would;
    returns what it printed before exiting, or None if it keeps running."""
    p = file_of(d, exe)
    if p is None:
        return "The system cannot find the file specified"
    line = d["file_versions"].get(p)
    component = os.path.basename(exe.replace("\\", "/")).lower()
    if component.endswith(".exe"):
        component = component[:-4]
    return k8sbin.check_args(component, line, args)


def scm_start(d, name):
    """Start-Service: SCM runs the ImagePath and waits for the program to
    report to it. A program that exits first fails the start; one without
    --windows-service never reports (it is not a service program) and SCM
    gives up (error 1053). Start-Service's message is the same for both
    (B: the wording, from PowerShell 5.1's ServiceController); kwinctl's
    template adds the command line to run by hand."""
    s = d["services"][name]
    argv = k8sbin.split_command_line(s["binpath"]) or [""]
    why = start_binary(d, argv[0], argv[1:])
    if why is None and "--windows-service" not in argv[1:]:
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
    svc = t["service"]
    why = start_binary(d, svc["exe"], k8sbin.split_command_line(svc["args"]))
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


# One handler per action kind: `act_<kind>(d, h)` carries out the header
# `h` (the action's serde form) on the state `d`. The name is the contract
# with kwinctl: an action's kind is also its template's name, and
# kwinctl's contract test (src/os/contract.rs) checks that every kind has a
# handler here (`winsim.py kinds` lists them).


def act_record_pod_cidr(d, h):
    d["pod_cidr"] = h["pod_cidr"]
    d["cluster"] = "%s %s" % (h["cluster"], h["cluster_id"])


def act_enable_routing(d, h):
    d["routing_installed"] = True
    with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
        f.write("1\n")


def act_create_switch(d, h):
    if not link_exists("KubeProxySwitch"):
        sh("ip", "link", "add", "KubeProxySwitch", "type", "bridge")
    sh("ip", "link", "set", "KubeProxySwitch", "up")
    d["switches"] = [s for s in d["switches"] if s["name"] != "KubeProxySwitch"]
    d["switches"].append({"name": "KubeProxySwitch", "type": "Internal"})


def act_create_network(d, h):
    names = [n["name"] for n in d["networks"] if link_exists("HNSTransparent")]
    if h["name"] in names and not h["replace"]:
        raise ActionError("Error response from daemon: network with name %s already exists" % h["name"])
    if h["replace"] and link_exists("HNSTransparent"):
        sh("ip", "link", "del", "HNSTransparent")
    if not link_exists("HNSTransparent"):
        sh("ip", "link", "add", "HNSTransparent", "type", "bridge")
    sh("ip", "link", "set", "HNSTransparent", "up")
    d["networks"] = [{"name": h["name"], "driver": "transparent", "subnet": h["subnet"], "gateway": h["gateway"]}]


def act_set_gateway_address(d, h):
    if not link_exists("HNSTransparent"):
        raise ActionError("Get-NetIPAddress: No MSFT_NetIPAddress objects found with property 'InterfaceAlias' "
                          "equal to 'vEthernet (HNSTransparent)'")
    sh("ip", "addr", "flush", "dev", "HNSTransparent")
    sh("ip", "addr", "add", "%s/%d" % (h["gateway"], h["prefix"]), "dev", "HNSTransparent")


def act_add_route(d, h):
    if h.get("replace"):
        sh("ip", "route", "del", h["dst"], check=False)
    sh("ip", "route", "replace", h["dst"], "via", h["via"], "dev", "eth0")
    d["persistent_routes"] = [r for r in d["persistent_routes"] if r["dst"] != h["dst"]]
    d["persistent_routes"].append({"dst": h["dst"], "via": h["via"]})


def act_del_route(d, h):
    sh("ip", "route", "del", h["dst"], check=False)
    d["persistent_routes"] = [r for r in d["persistent_routes"] if r["dst"] != h["dst"]]


def act_pull_image(d, h):
    img = norm_image(h["image"])
    if img not in d["images"]:
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
    src = f.get("source") or {}
    if "url" in src:
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
    line = k8sbin.version_line(content)
    if f.get("version_regex"):
        if line is None:
            tmp = re.sub(r"(\.[^.\\]*)?$", lambda m: ".kwinctl-%d-tmp%s" % (os.getpid(), m.group(1) or ""), dest, count=1)
            raise ActionError("Program '%s' failed to run: The specified executable is not a valid application "
                              "for this OS platform." % os.path.basename(tmp.replace("\\", "/")))
        if not re.match(f["version_regex"], line):
            raise ActionError("%s: --version says %s, but the inventory declares kubernetes_version %s"
                              % (dest, line, f.get("version")))
    old = file_of(d, dest)
    if old:
        d["files"].pop(old)
        d["file_versions"].pop(old, None)
    d["files"][dest] = sha
    d["file_versions"][dest] = line
    # Services running this binary were stopped for the swap and are started
    # again; a start script restarts its binary from the new file.
    for name, s in d["services"].items():
        if s["status"] == "Running" and dest.lower() in s["binpath"].lower():
            scm_start(d, name)
    for name, t in d["tasks"].items():
        if t["service"]["exe"].lower() == dest.lower():
            try:
                task_start(d, name)
            except ActionError:
                pass


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


def act_install_service(d, h):
    s = h["service"]
    d["services"][s["name"]] = {
        "status": "Stopped", "start": "Automatic", "binpath": s["binpath"], "display": s["display"],
        "env": s["env"], "depends": s["depends"], "restart": True,
    }
    scm_start(d, s["name"])


def act_start_service(d, h):
    if h["name"] not in d["services"]:
        raise ActionError("Start-Service: Cannot find any service with service name '%s'." % h["name"])
    scm_start(d, h["name"])


def act_install_task(d, h):
    s = h["service"]
    d["tasks"][s["name"]] = {
        "state": "Ready", "running": False,
        "description": "%s [kwinctl %s]" % (s["display"], s["fingerprint"]),
        "service": {"exe": s["exe"], "args": s["args"], "env": s["env"]},
    }
    task_start(d, s["name"])


def act_start_task(d, h):
    if h["name"] not in d["tasks"]:
        raise ActionError("Start-ScheduledTask : The system cannot find the file specified.")
    task_start(d, h["name"])


def act_remove_task(d, h):
    d["tasks"].pop(h["name"], None)


def act_remove_service(d, h):
    d["services"].pop(h["name"], None)


def act_remove_network(d, h):
    if link_exists("HNSTransparent"):
        sh("ip", "link", "del", "HNSTransparent")
    d["networks"] = [n for n in d["networks"] if n["name"] != h["name"]]


def act_remove_switch(d, h):
    if link_exists("KubeProxySwitch"):
        sh("ip", "link", "del", "KubeProxySwitch")
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
    known = {"prelude", "probe", "echo", "fail", "sleep", "read_files"}
    with State(state_path) as d:
        for h in headers:
            kind = h.get("kind")
            if "id" not in h and kind not in known:
                h.pop("_block", None)
                return "".join(out), "winsim: unknown action header %s\n" % json.dumps(h), 1
            if kind == "prelude":
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
                # The simulator keeps no file contents: every file reads as
                # absent (plan then says it would be created).
                for i, _ in enumerate(h.get("paths", [])):
                    out.append("KWC %d -\n" % i)
                continue
            if kind == "probe":
                out.append("KWINCTL-FACTS " + json.dumps(facts(d, h), separators=(",", ":")) + "\n")
                continue
            try:
                act(d, h)
                out.append("KWX %d ok\n" % h["id"])
            except KeyError as e:
                h.pop("_block", None)
                return "".join(out), "winsim: unknown action header %s (%s)\n" % (json.dumps(h), e), 1
            except (ActionError, RuntimeError) as e:
                out.append("KWX %d failed 1\n" % h["id"])
                for line in str(e).splitlines() or ["failed"]:
                    out.append("KWE %s\n" % line)
                return "".join(out), "".join(err), 0
    return "".join(out), "".join(err), 0


def reboot(state_path, drop_hns):
    with State(state_path) as d:
        # Only persistent routes come back.
        for r in json.loads(sh("ip", "-j", "-4", "route", "show", "table", "main") or "[]"):
            if r.get("protocol") != "kernel":
                sh("ip", "route", "del", r["dst"], check=False)
        for r in d["persistent_routes"]:
            sh("ip", "route", "replace", r["dst"], "via", r["via"], "dev", "eth0", check=False)
        if drop_hns:
            if link_exists("HNSTransparent"):
                sh("ip", "link", "del", "HNSTransparent")
            d["networks"] = []
        for name, s in d["services"].items():
            s["status"] = "Stopped"
            if s["start"] == "Automatic":
                try:
                    scm_start(d, name)
                except ActionError:
                    pass
        for name in d["tasks"]:
            try:
                task_start(d, name)
            except ActionError:
                pass


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
        if c.get("result"):
            return c["result"]
        script = self.script_of(c)
        if script is None:
            res = ("", "winsim: unknown command: only PowerShell scripts are simulated\n", 1)
        else:
            res = execute(script, self.state_path)
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
