"""What the probe prints (`KWINCTL-FACTS {json}`): the same JSON kwinctl's
PowerShell probe gives on Windows."""

import base64
import hashlib
import struct
import subprocess

from . import push
from .files import file_of, file_version
from .hns import transparent_hns
from .net import HNS_DEV, active_routes, adapters, fwd, ipv4_of, link_exists
from .scm import containerd_running, health
from .tlsboot import probe_fact
from .util import DETACH_DIR, DETACH_TASK, block_has, norm_image

CNI_DIR = "c:\\etc\\cni\\net.d\\"


def action_facts(d, probe):
    """The facts kept beside the action that changes them: each
    `fact_<key>(d, probe)` function of the modules in `actions/` gives the
    probe's `<key>` (as each `act_<kind>` carries out a kind), so a new
    action and its fact are one winsim file."""
    from .actions import named  # the action modules import what this module does

    return {key: f(d, probe) for key, f in named("fact_").items()}


def detached_task(d, probe):
    """The detached task, when registered (it runs powershell.exe: never
    `running` by the probe's rule, as the boot task)."""
    t = d.get("detached_task")
    if not t or DETACH_TASK not in probe.get("tasks", []):
        return []
    return [{"name": DETACH_TASK, "state": t["state"], "description": "kwinctl: detached",
             "running": False, "at_startup": False}]


def kwinctl_folders(d, probe):
    """kwinctl's own folders the probe asks about that exist: the push
    folder when it holds anything, the detached task's when a run left
    its script or result."""
    out = []
    for f in probe.get("folders", []):
        low = f.lower()
        if low == push.WIN_DIR.lower() and "_state_path" in probe and push.held(probe["_state_path"]):
            out.append(f)
        elif low == DETACH_DIR.lower() and d.get("detached"):
            out.append(f)
        elif any(k.lower().startswith(low.rstrip("\\") + "\\") for k in d.get("kubelet_files", {})):
            # the kubelet's certificate directory, when it holds anything
            out.append(f)
    return out


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
    return dict(l2bridge_facts(d, probe), **action_facts(d, probe), **{
        "v": 1, "os": "windows", "hostname": d.get("hostname", "WINSIM"),
        # the probe's [string](... '') of a host without Docker is "", never null
        "build": d["build"], "ubr": d["ubr"],
        "hyperv_module": d["hyperv_module"], "docker_version": d["docker_version"] or "",
        "adapters": listed,
        "routing_installed": d["routing_state"] == "Installed",
        "routing_state": d["routing_state"],
        "hyperv_role": d["hyperv_role"],
        "switches": [s for s in d["switches"] if link_exists(s["name"])],
        "networks": [{k: v for k, v in n.items() if k in ("name", "driver", "subnet", "gateway", "interface")}
                     for n in d["networks"] if hns],
        "routes": routes,
        "images": d["images"],
        "files": [{"path": p, "sha256": sha} for p, sha in d["files"].items() if p.lower() in wanted_files]
        # the kubelet's own files (its kubeconfig: tlsboot.py), as Get-FileHash hashes them
        + [{"path": p, "sha256": hashlib.sha256(t.encode()).hexdigest()}
           for p, t in d.get("kubelet_files", {}).items() if p.lower() in wanted_files],
        "services": [service_fact(d, probe, n, s) for n, s in d["services"].items()
                     if n in probe.get("services", [])],
        # `running`: the probe looks for the process of C:\k\<name>.exe, the
        # binary a service's task wraps; the boot task runs powershell.exe,
        # so it never counts as running, whatever its loop does
        "tasks": [{"name": n, "state": t["state"], "description": t["description"],
                   "running": bool(t["running"]) and "service" in t,
                   # an enabled MSFT_TaskBootTrigger: the block's -AtStartup,
                   # unless a test turned it off ("startup": false)
                   "at_startup": bool(t.get("startup"))}
                  for n, t in d["tasks"].items() if n in probe.get("tasks", probe.get("services", []))]
                 + detached_task(d, probe),
        "folders": kwinctl_folders(d, probe),
        "versions": [{"path": p, "output": file_version(d, p) or ""}
                     for p in probe.get("binaries", []) if file_of(d, p) is not None],
        "image_os": [{"image": i, "os_version": d["image_os"].get(norm_image(i), "")}
                     for i in probe.get("images", []) if norm_image(i) in d["images"]],
        "firewall": [{"name": n, "enabled": r.get("enabled", True), "description": r.get("description", "")}
                     for n, r in d["firewall"].items() if n.lower().startswith("kwinctl-")],
        "pod_cidr": d["pod_cidr"],
        "cluster": d.get("cluster"),
        "lock_host": d.get("lock_host"),
        "reach": reach,
        "kubelet_client": probe_fact(d, probe.get("kubelet_client")),
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
        # (max_conf_num=1, docs/research/containerd.md#d2)
        "cni_conf_files": sorted(p[len(CNI_DIR):] for p in d["files"]
                                 if p.lower().startswith(CNI_DIR) and "\\" not in p[len(CNI_DIR):]),
        "sandbox_images": list(d["sandbox_images"]),
        "containerd_pipe": containerd_running(d),
        "health": [{"port": int(p), "ok": health(d, int(p))} for p in probe.get("health", [])],
    }
