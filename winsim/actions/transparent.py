"""Action handlers of the transparent profile (Docker's transparent network):
the internal switch, the network, its gateway address, the Routing role."""

from ..net import (
    HNS_DEV,
    SWITCH_DEV,
    adapter_named,
    adapters,
    hns_release,
    hns_take,
    ipv4_of,
    link_exists,
    nics,
    routable_dev,
    set_fwd,
)
from ..state import ActionError
from ..util import block_has, norm_image, sh, slow


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


def act_remove_network(d, h):
    hns_release(d)
    d["networks"] = [n for n in d["networks"] if n["name"] != h["name"]]


def act_remove_switch(d, h):
    if link_exists(SWITCH_DEV):
        sh("ip", "link", "del", SWITCH_DEV)
    d["switches"] = []


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
                          "build; set cluster.pause_image to an image for build %s"
                          % (h["image"], os_version, build, build))
