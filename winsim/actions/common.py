"""Action handlers both profiles use: routes, files, services, tasks, the boot
task, firewall rules, the pod CIDR record."""

import hashlib
import os
import re

from .. import boot, k8sbin, pods, push
from ..boot import BOOT_TASK
from ..files import fetched, file_of, file_version, record_file
from ..net import active_routes, apply_firewall, remove_routes
from ..scm import running_dependents, scm_start, scm_stop, swap_restart, task_start
from ..state import ActionError
from ..util import DETACH_DIR, DETACH_TASK, block_has, sh

# One handler per action kind: `act_<kind>(d, h)` carries out the header
# `h` (the action's serde form) on the state `d`. The name is the contract
# with kwinctl: an action's kind is also its template's name, and
# kwinctl's contract test (src/os/contract.rs) checks that every kind has a
# handler here (`winsim.py kinds` lists them).


def act_record_pod_cidr(d, h):
    d["pod_cidr"] = h["pod_cidr"]
    d["cluster"] = "%s %s" % (h["cluster"], h["cluster_id"])
    d["lock_host"] = h.get("lock_host") or None


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


def act_place_file(d, h):
    f = h["file"]
    dest = f["path"]
    content = fetched(d, h, f)
    sha = hashlib.sha256(content).hexdigest()
    line = k8sbin.version_line(content)
    if f.get("version_regex"):
        if line is None:
            tmp = re.sub(r"(\.[^.\\]*)?$", lambda m: ".kwinctl-%d-tmp%s" % (os.getpid(), m.group(1) or ""), dest,
                         count=1)
            raise ActionError("Program '%s' failed to run: The specified executable is not a valid application "
                              "for this OS platform." % os.path.basename(tmp.replace("\\", "/")))
        if not re.match(f["version_regex"], line):
            raise ActionError("%s: --version says %s, but the inventory declares kubernetes_version %s"
                              % (dest, line, f.get("version")))
    if f.get("version_regex") and block_has(h, r"Copy-Item[^\n]*\$dest \+ '\.previous'"):
        keep_previous(d, dest)
    record_file(d, dest, sha, line)
    pods.keep_text(d, dest, content)
    swap_restart(d, h, [dest])


def keep_previous(d, dest):
    """Copy-Item $dest ($dest + '.previous'): the binary being replaced is
    kept beside it, for an upgrade's rollback."""
    old = file_of(d, dest)
    if old is None:
        return
    prev = file_of(d, dest + ".previous")
    if prev is not None:
        d["files"].pop(prev)
        d["file_versions"].pop(prev, None)
    d["files"][dest + ".previous"] = d["files"][old]
    d["file_versions"][dest + ".previous"] = d["file_versions"].get(old)


def act_restore_previous(d, h):
    """Each binary not already of the release goes back to the copy kept
    beside it (`<path>.previous`), which must be of it; the services running
    it are stopped for the swap and started again, then kubelet and
    kube-proxy are started if they are not running."""
    for dest in h["paths"]:
        line = file_version(d, dest)
        if file_of(d, dest) and line and re.match(h["version_regex"], line):
            continue
        prev = file_of(d, dest + ".previous")
        if prev is None:
            raise ActionError("%s: no previous copy to put back (%s.previous is missing); place release %s there "
                              "by hand" % (dest, dest, h["version"]))
        pline = d["file_versions"].get(prev)
        if not (pline and re.match(h["version_regex"], pline)):
            raise ActionError("%s: the copy kept beside it says %s, not release %s; place release %s there by hand"
                              % (dest, pline, h["version"], h["version"]))
        record_file(d, dest, d["files"][prev], pline)
        swap_restart(d, h, [dest])
    for name in ("kubelet", "kube-proxy"):
        if name in d["services"] and d["services"][name]["status"] != "Running":
            scm_start(d, name)


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


def act_install_boot_task(d, h):
    """Register the boot task (a new registration, with the script the block
    writes). Running instances go only as the block says: Stop-ScheduledTask
    before Unregister-ScheduledTask stops the registered task's instances,
    ending the script's powershell.exe ends every one; unregistering and
    registering again stops none (boot.py). Start-ScheduledTask after
    Register-ScheduledTask starts the new one."""
    old = d["tasks"].get(BOOT_TASK)
    if old is not None and boot.stops_registered(h):
        boot.stop_instances(d, old.get("registration"), "Stop-ScheduledTask")
    if boot.kills_script_processes(h):
        boot.stop_instances(d, None, "its powershell.exe ended")
    reg = d.get("next_boot_registration", 1)
    d["next_boot_registration"] = reg + 1
    d["tasks"][BOOT_TASK] = {
        "state": "Ready", "running": False, "startup": block_has(h, r"-AtStartup"),
        "description": "kwinctl: the pods' network, gateway and forwarding, then kubelet and kube-proxy "
                       "[kwinctl %s]" % h["boot"]["fingerprint"],
        "boot": h["boot"], "registration": reg, "script": boot.script_of(h),
    }
    if boot.starts_registered(h):
        boot.start(d, "Start-ScheduledTask after Register-ScheduledTask")


def act_start_task(d, h):
    if h["name"] not in d["tasks"]:
        raise ActionError("Start-ScheduledTask : The system cannot find the file specified.")
    t = d["tasks"][h["name"]]
    if "boot" in t:
        boot.start(d, "Start-ScheduledTask")
    else:
        task_start(d, h["name"])


def act_remove_task(d, h):
    t = d["tasks"].get(h["name"])
    if t is not None and "boot" in t and boot.stops_registered(h):
        boot.stop_instances(d, t.get("registration"), "Stop-ScheduledTask")
    d["tasks"].pop(h["name"], None)
    if h["name"].lower() == DETACH_TASK.lower():
        # Stop-ScheduledTask ends a task still running: its result is
        # never written
        d.pop("detached_task", None)
        for r in d.get("detached", {}).values():
            if r.get("state") == "running":
                r["state"] = "stopped"


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


def act_remove_file(d, h):
    # the text winsim keeps of a placed configuration file, and the
    # kubelet's own files (its kubeconfig, its certificate: tlsboot.py), go too
    for key in (pods.TEXT_KEY, "kubelet_files"):
        kept = d.get(key, {})
        for p in [p for p in kept if p.lower() == h["path"].lower()]:
            kept.pop(p)
    if h["path"].lower().endswith("pod-cidr.txt"):
        d["pod_cidr"] = None
    if h["path"].lower().endswith("cluster.txt"):
        d["cluster"] = None
        d["lock_host"] = None
    p = file_of(d, h["path"])
    if p:
        d["files"].pop(p)
        d["file_versions"].pop(p, None)


def act_remove_folder(d, h):
    """kwinctl's own folders (src/os/windows/leftovers.rs): the push
    folder, the detached task's folder; any other: the files recorded
    under it."""
    p = h["path"].rstrip("\\").lower()
    if p == push.WIN_DIR.lower():
        push.remove_all(h["_state_path"])
    elif p == DETACH_DIR.lower():
        d["detached"] = {}
    for f in [f for f in d["files"] if f.lower().startswith(p + "\\")]:
        d["files"].pop(f)
        d["file_versions"].pop(f, None)
    kept = d.get("kubelet_files", {})
    for f in [f for f in kept if f.lower().startswith(p + "\\")]:
        kept.pop(f)


def act_fail(d, h):
    """A test's action that fails with the given stderr."""
    raise ActionError(h.get("stderr", "failed"))


def act_finish_join(d, h):
    """A joining node (kwinctl's finish_join.ps1.j2): a kubelet without its
    certificate restarted (Restart-Service -Force stops its dependents,
    which the script starts again), the bounded wait for the certificate
    (the simulated kubelet bootstraps as it starts, tlsboot.py: it is there
    at once or never), then the bootstrap kubeconfig and a stale shared
    kubeconfig removed."""
    from .. import tlsboot

    def has_cert():
        return tlsboot._get(tlsboot.node_files(d), h["cert"]) is not None

    if "kubelet" not in d["services"]:
        raise ActionError("the kubelet service is not installed: run `kwinctl up` again")
    if not has_cert():
        dependents = running_dependents(d, "kubelet")
        scm_stop(d, "kubelet")
        scm_start(d, "kubelet")
        for name in dependents:
            scm_start(d, name)
    if not has_cert():
        raise ActionError("the kubelet has no client certificate after %ss (%s): its certificate request was "
                          "not approved or it could not reach the API server; see the kubelet log in C:\\k\\logs, "
                          "and `kubectl get csr` on the control plane" % (h["seconds"], h["cert"]))
    for path in [h["bootstrap"]] + list(h.get("stale") or []):
        act_remove_file(d, {"path": path})
