"""Windows' adapters, forwarding, firewall and routes, and the Linux devices
and settings standing for them in the host's network namespace (sources in
winsim/README.md, "Network adapters", "Windows Firewall", "Routes")."""

import json
import subprocess

from .util import block_has, sh

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


#
# The l2bridge profile (containerd + HNS L2Bridge + win-bridge + kernelspace
# kube-proxy, Kubernetes 1.24+). Sources: docs/research/l2bridge-profile.md
# (its keys: docs/research/flannel.md#f1 flannel hostgw_windows.go, docs/research/kubernetes.md#g1 GCE
# k8s-node-setup.psm1, docs/research/kubernetes.md#k1
# winkernel proxier.go, docs/research/containerd.md#d2/D6 containerd, docs/research/kubernetes-website.md#w1 website
# intro.md, ...), listed
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


def link_exists(name):
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def ipv4_of(dev):
    try:
        out = json.loads(sh("ip", "-j", "-4", "addr", "show", "dev", dev) or "[]")
    except (RuntimeError, ValueError):
        return []
    return [a["local"] for i in out for a in i.get("addr_info", [])]


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
