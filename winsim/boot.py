"""kwinctl's boot task (`\\kwinctl\\kwinctl-boot`) and its running instances.

The task's script (kwinctl's boot_script template) puts the pods' network
back at startup and starts kubelet and kube-proxy (`boot_run`); on the
l2bridge profile it then loops, every 10 s, over the network, the host
endpoint, forwarding and the routes. A running instance of the task is a
record in the state (`boot_instances`): the spec and the script it started
with, so an instance started by an earlier registration keeps applying its
own (possibly stale) routes. The server's `BootClock` runs each instance's
loop body every `boot_loop_seconds` (default 10, the script's
`Start-Sleep -Seconds 10`). Sources: winsim/README.md, "The boot task's
loop".
"""

import json
import re
import threading
import time

from .actions.l2bridge import act_ensure_hns_network, act_ensure_host_endpoint, act_set_forwarding
from .actions.transparent import act_create_network, set_gateway
from .hns import hns_network
from .net import (
    HNS_DEV,
    active_routes,
    adapter_named,
    dev_holding,
    install_routes,
    ipv4_of,
    link_exists,
    routable_dev,
    set_fwd,
)
from .scm import scm_start, task_start
from .state import ActionError, State
from .util import log, sh

BOOT_TASK = "kwinctl-boot"
BOOT_LOG = "C:\\k\\logs\\kwinctl-boot.log"
# what the simulator saw the boot task's instances change (not a Windows
# file: a record for tests, like the `runner:` logs)
LOOP_LOG = "winsim:boot-loop"
LOOP_SECONDS = 10
LOG_LINES = 200

# A registration from before winsim read the script: kwinctl's boot script
# as it was then (the l2bridge one loops; its route repair is unscoped and
# touches the active store only).
OLD_SCRIPT = {"loops": None, "route_scoped": False, "route_stores": ["ActiveStore"]}


def statements(block):
    """The block without its single-quoted strings (the boot script is one:
    the `Set-Content -Value '...'` the task runs), so what the block itself
    runs can be told from what the script it writes says."""
    return re.sub(r"'(?:[^']|'')*'", "''", block)


def script_of(h):
    """What the boot script an install_boot_task block writes does, read
    from its text: whether it loops (`while ($true)`), and how its route
    repair removes a route (`Remove-NetRoute` with `-InterfaceIndex` and
    `-NextHop`: that route only, else the destination on every interface;
    `-PolicyStore` over both stores, else the active one only)."""
    block = h.get("_block", "")
    removes = [line for line in block.splitlines() if "Remove-NetRoute" in line]
    both = bool(removes) and all("-PolicyStore" in r for r in removes) and "PersistentStore" in block
    return {
        "loops": re.search(r"while \(\$true\)", block) is not None,
        "route_scoped": bool(removes) and all("-InterfaceIndex" in r and "-NextHop" in r for r in removes),
        "route_stores": ["ActiveStore", "PersistentStore"] if both else ["ActiveStore"],
    }


def block_runs(h, pattern):
    """Where in the block's own statements (not in the script it writes)
    `pattern` first occurs, or -1."""
    m = re.search(pattern, statements(h.get("_block", "")))
    return m.start() if m else -1


def stops_registered(h):
    """The block stops the registered task's instances before unregistering
    it: Stop-ScheduledTask "stops all running instances of a task"; after
    Unregister-ScheduledTask there is no task of that name to stop."""
    stop = block_runs(h, r"Stop-ScheduledTask")
    unregister = block_runs(h, r"Unregister-ScheduledTask")
    return stop >= 0 and (unregister < 0 or stop < unregister)


def kills_script_processes(h):
    """The block ends the powershell.exe processes running the boot script
    (whatever registration started them): it finds them by their command
    line (the boot script itself says none of these words)."""
    s = h.get("_block", "")
    return re.search(r"powershell\.exe", s) is not None and re.search(r"CommandLine", s) is not None \
        and re.search(r"Stop-Process|Terminate", s) is not None


def starts_registered(h):
    """The block starts the task it has just registered."""
    start = block_runs(h, r"Start-ScheduledTask")
    register = block_runs(h, r"(?<!Un)Register-ScheduledTask")
    return start >= 0 and register >= 0 and start > register


def append_log(d, key, lines):
    old = d["logs"].get(key, "")
    kept = (old.splitlines() if old else []) + lines
    d["logs"][key] = "\n".join(kept[-LOG_LINES:])


def instances(d):
    return d.setdefault("boot_instances", [])


def stop_instances(d, registration=None, why=""):
    """Stop-ScheduledTask (the registered task's instances) or ending the
    script's powershell.exe (every instance: registration None)."""
    kept, stopped = [], []
    for i in instances(d):
        (stopped if registration is None or i["registration"] == registration else kept).append(i)
    d["boot_instances"] = kept
    if stopped:
        append_log(d, LOOP_LOG, ["instance %d stopped (%s)" % (i["id"], why) for i in stopped])
    t = d["tasks"].get(BOOT_TASK)
    if t and not any(i["registration"] == t.get("registration") for i in kept):
        t["running"] = False


def start(d, why):
    """An instance of the registered boot task starts: its script's boot
    steps now, then (a looping script) its loop on the server's clock.
    Task Scheduler's default MultipleInstancesPolicy, IgnoreNew, starts no
    second instance of a task while one runs."""
    t = d["tasks"][BOOT_TASK]
    reg = t.get("registration")
    if any(i["registration"] == reg for i in instances(d)):
        append_log(d, LOOP_LOG, ["%s: an instance is running: none started (IgnoreNew)" % why])
        return
    script = dict(OLD_SCRIPT, **t.get("script", {}))
    if script["loops"] is None:
        script["loops"] = t["boot"].get("profile") == "l2bridge"
    boot_run(d, t["boot"], script)
    if script["loops"]:
        n = d.get("next_boot_instance", 1)
        d["next_boot_instance"] = n + 1
        d["boot_instances"].append({"id": n, "registration": reg, "spec": t["boot"], "script": script})
        t["running"] = True
        append_log(d, LOOP_LOG, ["instance %d started (%s), fingerprint %s" % (n, why, t["boot"]["fingerprint"])])


def boot_run(d, b, script=None):
    """What the boot script does at startup: the network (re-created on its
    card when Docker dropped it), the gateway address with DHCP off and
    forwarding, forwarding on the routable adapter, then kwinctl's services
    and tasks. A failed step is logged and the next one runs."""
    script = script or OLD_SCRIPT
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

    def start_service(name):
        # Start-Service on a running service does nothing (B)
        if d["services"].get(name, {}).get("status") != "Running":
            scm_start(d, name)

    if b.get("profile") == "l2bridge":
        for what, f in l2bridge_steps(d, b, script, "boot"):
            step(what, f)
    else:
        step("network", network)
        step("gateway address", gateway)
        step("forwarding", forwarding)
    for name in b["services"]:
        step("start " + name, lambda n=name: start_service(n))
    for name in b["tasks"]:
        step("start " + name, lambda n=name: task_start(d, n))
    d["logs"][BOOT_LOG] = "\n".join(log_lines)


def l2bridge_steps(d, b, script, who):
    """The l2bridge boot script's Confirm-Kw* functions, run at boot and in
    every pass of its loop: the network (only if missing), the host
    endpoint (lost at reboot, docs/research/kubernetes.md#g1; left alone while its address exists),
    forwarding, the routes (docs/research/flannel.md#f2 re-checks its routes)."""
    lb = b["l2bridge"]
    host = {"address": (lb.get("forwarding") or [None])[0]}

    def network():
        if hns_network(d, lb["network"]["name"]) is None:
            act_ensure_hns_network(d, dict(lb["network"], replace=False, _host=host))

    def endpoint():
        if dev_holding(lb["endpoint"]["ip"]) is None:
            act_ensure_host_endpoint(d, dict(lb["endpoint"], _host=host))

    return [
        ("network", network),
        ("host endpoint", endpoint),
        ("forwarding", lambda: act_set_forwarding(d, {"addresses": lb.get("forwarding", [])})),
        ("routes", lambda: confirm_routes(d, b, script, who)),
    ]


def confirm_routes(d, b, script, who):
    """Confirm-KwRoutes: each of the spec's routes that is not in the active
    store (Get-NetRoute's default) on the node address's adapter with its
    next hop is removed (Remove-NetRoute as the script writes it: scoped to
    the adapter and next hop, or the destination on every interface; in
    the stores it names) and added (New-NetRoute: both stores; the same
    route already in the persistent store is an error, which ends the
    function). What it changes goes to the loop log."""
    node = b.get("node_address") or (b["l2bridge"].get("forwarding") or [None])[0]
    dev = dev_holding(node)
    if dev is None:
        raise ActionError("Get-NetIPAddress : No MSFT_NetIPAddress objects found with property 'IPAddress' "
                          "equal to '%s'." % node)
    changed = []
    for r in b["l2bridge"].get("routes", []):
        dst, via = r["dst"], r["via"]
        if any((x, y, v) == (dst, via, dev) for x, y, v in active_routes()):
            continue
        if script["route_scoped"]:
            gone = [(x, y, v) for x, y, v in active_routes() if (x, y, v) == (dst, via, dev)]
            keep = [y for x, y, v in active_routes() if x == dst and (y, v) != (via, dev)]
            where = "%s via %s on the node's adapter" % (dst, via)
        else:
            gone = [(x, y, v) for x, y, v in active_routes() if x == dst]
            keep = []
            where = "%s on every interface" % dst
        if gone:
            sh("ip", "route", "del", dst, check=False)
            install_routes(dst, keep)
        if "PersistentStore" in script["route_stores"]:
            before = len(d["persistent_routes"])
            d["persistent_routes"] = [p for p in d["persistent_routes"]
                                      if not (p["dst"] == dst and (not script["route_scoped"] or p["via"] == via))]
            gone += [("persistent", None, None)] * (before - len(d["persistent_routes"]))
        changed.append("%s: Remove-NetRoute %s (%s): %d removed%s" % (
            who, where, ", ".join(script["route_stores"]), len(gone),
            "".join(" [%s via %s]" % (x, y) for x, y, _ in gone if y)))
        if any((p["dst"], p["via"]) == (dst, via) for p in d["persistent_routes"]):
            changed.append("%s: New-NetRoute %s via %s: already in the persistent store" % (who, dst, via))
            append_log(d, LOOP_LOG, changed)
            raise ActionError("New-NetRoute : Instance MSFT_NetRoute already exists")
        install_routes(dst, keep + [via])
        d["persistent_routes"].append({"dst": dst, "via": via, "dev": dev})
        changed.append("%s: New-NetRoute %s via %s" % (who, dst, via))
    if changed:
        append_log(d, LOOP_LOG, changed)


def loop_once(d, inst):
    """One pass of an instance's loop (after its Start-Sleep): each
    Confirm-Kw* function; a failure is logged (Write-KwLog) and the next
    one runs."""
    for what, f in l2bridge_steps(d, inst["spec"], inst["script"], "instance %d" % inst["id"]):
        try:
            f()
        except (ActionError, RuntimeError) as e:
            append_log(d, BOOT_LOG, ["%s: failed: %s" % (what, e)])


def loop_seconds(d):
    """The loop's period: the state's knob `boot_loop_seconds` (tests make
    it short), else the script's 10 s."""
    try:
        return min(max(float(d.get("boot_loop_seconds", LOOP_SECONDS)), 0.2), 3600.0)
    except (TypeError, ValueError):
        return float(LOOP_SECONDS)


class BootClock(threading.Thread):
    """The simulated host's clock for its running boot-task instances (in
    the server's process): each instance's loop body runs a period after
    the server first sees it, then a period after each pass. Instances are
    records in the state, so one started by `winsim.py reboot` (another
    process) runs here too; the state is read without its lock (it is
    replaced atomically) and locked only when a pass is due."""

    TICK = 0.2

    def __init__(self, state_path):
        super().__init__(daemon=True, name="boot-clock")
        self.state_path = state_path
        self.stopped = threading.Event()
        self.next_pass = {}  # instance id -> time.monotonic() of its next pass

    def run(self):
        while not self.stopped.wait(self.TICK):
            try:
                self.step()
            except Exception as e:  # keep the clock going; say why
                log("boot clock: %s: %s" % (type(e).__name__, e))

    def step(self):
        try:
            with open(self.state_path) as f:
                peek = json.load(f)
        except (OSError, ValueError):
            return
        now = time.monotonic()
        period = loop_seconds(peek)
        ids = {i["id"] for i in peek.get("boot_instances") or []}
        for k in list(self.next_pass):
            if k not in ids:
                del self.next_pass[k]
        due = set()
        for k in ids:
            if k not in self.next_pass:
                self.next_pass[k] = now + period
            elif now >= self.next_pass[k]:
                due.add(k)
        if not due:
            return
        with State(self.state_path) as d:
            for inst in list(instances(d)):
                if inst["id"] in due:
                    loop_once(d, inst)
        for k in due:
            self.next_pass[k] = time.monotonic() + loop_seconds(peek)
