"""kwinctl's boot task (`\\kwinctl\\kwinctl-boot`): what its script does at
startup (`boot_run`)."""

from .actions.l2bridge import act_ensure_hns_network, act_ensure_host_endpoint, act_set_forwarding
from .actions.transparent import act_create_network, set_gateway
from .hns import hns_network
from .net import HNS_DEV, active_routes, adapter_named, ipv4_of, link_exists, routable_dev, set_fwd
from .scm import scm_start, task_start
from .state import ActionError
from .util import sh

BOOT_TASK = "kwinctl-boot"


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
