"""The simulated host as a whole: `execute` runs a script by its
`# kwinctl-sim:` headers on the state, `reboot` restarts the host, and
`handlers` lists the action kinds (`act_<kind>` in actions/)."""

import base64
import json
import os
import subprocess
import sys
import threading
import time

from . import actions, boot, push
from .boot import BOOT_TASK
from .facts import facts
from .files import file_of
from .hns import l2bridge_reboot
from .net import apply_firewall, dev_holding, ensure_nics, hns_release, install_routes
from .scm import scm_start, task_start
from .state import ActionError, ConnectionDropped, State
from .util import log, sh

HEADER = "# kwinctl-sim: "


def handlers():
    """Every action kind this simulator carries out, by name: the `act_<kind>`
    functions of the modules in `actions/`."""
    return actions.named("act_")


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


def execute(script, state_path, connection=True):
    """Run a script by its headers. Returns (stdout, stderr, exit code).
    `connection`: it came over a connection (an action that moves the node's
    address drops it); not for a detached task's script."""
    pushed = push.header_of(script)
    if pushed is not None:
        if pushed["kind"] == "push_status":
            return push.status(state_path, pushed), "", 0
        # a receiving script runs with the file on its stdin (server.py,
        # sshsession.py), never as a script read whole
        return "", "winsim: push_receive needs its stdin streamed\n", 1
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
    known = {"prelude", "probe", "echo", "fail", "sleep", "read_files", "restart_computer",
             "detach_start", "detach_result"}
    host = {}
    restart = False
    detach = None
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
                h["_state_path"] = state_path
                out.append("KWINCTL-FACTS " + json.dumps(facts(d, h), separators=(",", ":")) + "\n")
                continue
            if kind == "detach_start":
                detach = detach_start(d, h, host, out)
                continue
            if kind == "detach_result":
                detach_result(d, h, out)
                continue
            if kind == "restart_computer":
                # `shutdown.exe /r /t 5`: the call returns, the host restarts
                # a moment later (here: `reboot`, with a new boot time)
                restart = True
                out.append("KWINCTL-RESTART scheduled\n")
                continue
            h["_host"] = host
            h["_state_path"] = state_path
            # WinRM's connection lives on the node's address: when an action
            # moves it to another adapter, or removes it, the connection
            # drops mid-call and the client gets no answer.
            where = dev_holding(host.get("address")) if connection else None
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
                    raise ConnectionDropped() from None
                out.append("KWX %d failed 1\n" % h["id"])
                for line in str(e).splitlines() or ["failed"]:
                    out.append("KWE %s\n" % line)
                return "".join(out), "".join(err), 0
    if restart:
        threading.Timer(1.0, reboot, (state_path, False)).start()
    if detach:
        # the scheduled task: a process of its own that outlives this
        # connection (and this SSH session's process group)
        subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "winsim.py"),
                          "detached-run", "--state", state_path, "--token", detach],
                         start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    return "".join(out), "".join(err), 0


# How long after Start-ScheduledTask returns the task's action begins its
# work (the start call's answer goes out first; B).
DETACH_DELAY = 1.0


def detach_start(d, h, host, out):
    """`detach_start`: register and start the task that runs the action
    (kwinctl's `detach_start.ps1`); one at a time. Returns the token when
    it starts."""
    token = h["token"]
    runs = d.setdefault("detached", {})
    if any(r.get("state") == "running" for r in runs.values()):
        out.append("KWX 0 failed 1\nKWE the detached step of an earlier run (\\kwinctl\\kwinctl-detached) "
                   "is still running: wait for it to end, then run kwinctl up again\n")
        return None
    # `detached` is the task's folder (its script and result, one token:
    # the start clears the folder), `detached_task` the registered task
    d["detached"] = {token: {"state": "running", "host": host, "action": h["action"]}}
    d["detached_task"] = {"state": "Running"}
    out.append("KWD %s started\n" % token)
    return token


def detach_result(d, h, out):
    """`detach_result`: the result lines once the task wrote them."""
    token = h["token"]
    r = d.get("detached", {}).get(token)
    if r is None:
        out.append("KWD %s missing\n" % token)
    elif r.get("state") == "done":
        out.append(r["result"])
    else:
        out.append("KWD %s pending\n" % token)


def run_detached(state_path, token):
    """`winsim.py detached-run`: the task's process. It carries out the
    action by its header, then records its lines and `KWD end`; with the
    knob `detach_loses_result` it records nothing (a task that hangs, or
    whose result is lost: kwinctl's wait runs out)."""
    time.sleep(DETACH_DELAY)
    with State(state_path) as d:
        r = d.get("detached", {}).get(token)
        if r is None:
            return 1
        script = "%s%s\n%s%s\n" % (HEADER, json.dumps(r["host"]), HEADER, json.dumps(r["action"]))
    out, err, code = execute(script, state_path, connection=False)
    with State(state_path) as d:
        r = d.get("detached", {}).get(token)
        if r is None or d.get("detach_loses_result"):
            log("detached %s: the result is not recorded (detach_loses_result)" % token)
            return 0
        r["state"] = "done"
        if d.get("detached_task"):
            d["detached_task"]["state"] = "Ready"
        r["result"] = out + ("KWE %s\n" % err.strip() if err.strip() else "") + "KWD end\n"
    return 0


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
        for s in d["services"].values():
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
        # every process ended with the host, the boot task's loops too
        d["boot_instances"] = []
        if BOOT_TASK in d["tasks"] and d["tasks"][BOOT_TASK].get("startup", True):
            boot.start(d, "at startup")
        for name, t in d["tasks"].items():
            if name != BOOT_TASK and t.get("startup", True) and not t["running"]:
                try:
                    task_start(d, name)
                except ActionError:
                    pass
        d.pop("_address_move_ok", None)
