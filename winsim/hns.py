"""The l2bridge profile's HNS model: the external vSwitch, HNS networks and
host endpoints, the sandbox images' Windows builds (winsim/README.md,
"l2bridge")."""

import json
import uuid

from . import blip
from .net import (
    HNS_DEV,
    VSW_DEV,
    active_routes,
    addrs_of,
    dev_holding,
    gateway_routes,
    ipv4_of,
    link_exists,
    nics,
    set_fwd,
    strong_arp,
)
from .state import ActionError
from .util import norm_image, sh

CONTAINERD_PIPE = "\\\\.\\pipe\\containerd-containerd"


HNS_MISSING = ("HNS failed with error : The specified service does not exist as an installed service. "
               "(the Containers feature is not installed, or waits for a restart)")


DUP = "hnsCall failed in Win32: The object already exists. (0x1392)"


# registry.k8s.io/pause tags -> the Windows builds their manifest lists hold
# (kubernetes build/pause/CHANGELOG.md: 3.4 adds 1809, 1903, 1909, 2004;
# 3.4.1 adds 20H2; 3.6 adds 2022; 3.7 removes 1903, 1909, 2004; 3.9 removes
# 20H2; docs/research/containerd.md#d8: 3.10.2 adds ltsc2025; that 3.10.2 keeps 1809: B).
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


# Microsoft's signed copy (docs/research/kubernetes-website.md#w1; its builds: B) and the v2 one used for 2025
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
    installed and the host restarted (spec §8.1; docs/research/sig-windows-tools.md#s2 "Please reboot and
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
    "vEthernet (<card>)" with a NEW ifIndex (docs/research/flannel.md#f1 "the interface is modified,
    esp the name, index"; docs/research/kubernetes.md#g1, docs/research/microsoft-sdn.md#m1), which starts without
    forwarding (§8.4);
    routes bound to the card's old ifIndex are gone from both stores (docs/research/kubernetes.md#g1:
    routes vanish; docs/research/flannel.md#f1); its default gateway moves with the address (B)."""
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
    # With `vswitch_blackout` every connection drops for a while (blip.py);
    # the call in flight with them.
    if not blip.start(d) and not d.get("vswitch_drops_connection"):
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
    # ManagementIP: HNS publishes it on the network asynchronously (docs/research/flannel.md#f1
    # polls for it); the simulator sets it at once
    net = {"name": name, "id": str(uuid.uuid4()).upper(), "type": "L2Bridge",
           "subnets": [{"prefix": subnet, "gateway": gateway}], "management_ip": management_ip(d),
           "adapter": nic["name"]}
    d["hns_networks"].append(net)
    return net


def image_builds(d, image):
    ref = norm_image(image)
    knob = {norm_image(k): v for k, v in d.get("image_builds", {}).items()}
    if ref in knob:
        return [int(str(b).split(".")[-1]) if "." in str(b) else int(b) for b in knob[ref]]
    return IMAGE_BUILDS.get(ref)


def transparent_hns(d):
    """Docker's transparent network is an HNS network too (type
    Transparent, named as in Docker: B), listed with the others."""
    if not link_exists(HNS_DEV):
        return []
    b = d.get("bound") or {}
    return [{"name": n["name"], "id": str(uuid.uuid5(uuid.NAMESPACE_OID, "winsim:" + n["name"])).upper(),
             "type": "Transparent", "subnets": [{"prefix": n["subnet"], "gateway": n["gateway"]}],
             "management_ip": None, "adapter": b.get("nic")} for n in d["networks"]]


def l2bridge_reboot(d):
    """At a restart HNS networks (and the vSwitch with its vNIC and
    address) persist, endpoints do not (docs/research/kubernetes.md#g1 "the HNS network does seem to
    persist across reboots, the HNS endpoints do not")."""
    for ep in d["hns_endpoints"]:
        endpoint_detach(d, ep)
    d["hns_endpoints"] = []
