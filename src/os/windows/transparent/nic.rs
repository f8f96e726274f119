//! Which network card the transparent network takes, and the name Windows
//! gives the virtual adapter it makes there.
//!
//! `docker network create -d transparent` makes HNS build an external
//! Hyper-V switch on a network card and move the card's IP configuration to
//! a new virtual adapter. Unless told which card, "HNS will try and use an
//! 'open' network interface which is not already attached to an external
//! vSwitch" (Microsoft's HNS PM, MicrosoftDocs/Virtualization-Documentation
//! PR #595; Azure/azure-container-networking #813: "if we don't tell HNS
//! which adapter to use it will just pick one randomly"). If it picks the
//! card holding the node's address, the address moves under the network
//! and the gateway action would then remove it: the node is lost. So the
//! card is always named (`-o com.docker.network.windowsshim.interface=`,
//! Microsoft, "Bind a network to a specific network interface"), and it is
//! never the routable one.

use std::net::Ipv4Addr;

use crate::os::windows::facts::{Adapter, WindowsFacts};

/// The adapter HNS makes for a transparent network on `nic`: Windows Server
/// 2016 calls it `vEthernet (HNSTransparent)`, 2019 `vEthernet (<card>)`
/// (Juniper contrail-windows-docker-driver, configuration/configuration.go:
/// `case "2016": VAdapterName = "vEthernet (HNSTransparent)"` / `case
/// "2019": VAdapterName = fmt.Sprintf("vEthernet (%s)", cfg.Driver.Adapter)`).
/// `None` for a build kwinctl does not know the name on.
pub fn container_adapter(build: u32, nic: &str) -> Option<String> {
    match build {
        14393 => Some("vEthernet (HNSTransparent)".into()),
        17763 => Some(format!("vEthernet ({nic})")),
        _ => None,
    }
}

/// The adapters a Windows node's network is built on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nics {
    /// The routable adapter's interface index.
    pub routable: u32,
    /// The card the transparent network takes.
    pub transparent: String,
    /// The virtual adapter that network gets (the pods' gateway is on it).
    pub container: String,
}

/// Why `a` cannot take the transparent network, if it cannot.
fn unfit(a: &Adapter, routable: &Adapter, address: Ipv4Addr) -> Option<String> {
    if a.index == routable.index || a.ipv4.contains(&address) {
        return Some(format!("it holds the node's address {address}"));
    }
    if routable
        .name
        .eq_ignore_ascii_case(&format!("vEthernet ({})", a.name))
    {
        return Some(format!(
            "the node's address is already on {}, a virtual adapter on it",
            routable.name
        ));
    }
    if a.name.starts_with("vEthernet (") || !a.physical {
        return Some(
            "it is a virtual adapter (not listed by Get-NetAdapter -Physical)".to_string(),
        );
    }
    if !a.status.eq_ignore_ascii_case("up") {
        return Some(format!(
            "its status is {:?}, not Up",
            crate::text::clip(&a.status, 32)
        ));
    }
    None
}

/// The card for the transparent network: `named` (windows.transparent_adapter)
/// if it is fit, else the only fit one. Problems go to `problems`.
pub fn choose(
    f: &WindowsFacts,
    routable: &Adapter,
    address: Ipv4Addr,
    named: Option<&str>,
    problems: &mut Vec<String>,
) -> Option<String> {
    if let Some(name) = named {
        let Some(a) = f
            .adapters
            .iter()
            .find(|a| a.name.eq_ignore_ascii_case(name))
        else {
            problems.push(format!(
                "no adapter named {name:?} (windows.transparent_adapter); the host's adapters: {}",
                names(&f.adapters)
            ));
            return None;
        };
        if let Some(why) = unfit(a, routable, address) {
            problems.push(format!(
                "windows.transparent_adapter {name:?} cannot take the transparent network: {why}; name an Up network card other than {}",
                routable.name
            ));
            return None;
        }
        return Some(a.name.clone());
    }
    let fit: Vec<&Adapter> = f
        .adapters
        .iter()
        .filter(|a| unfit(a, routable, address).is_none())
        .collect();
    match fit.as_slice() {
        [one] => Some(one.name.clone()),
        [] => {
            let rejected: Vec<String> = f
                .adapters
                .iter()
                .filter_map(|a| unfit(a, routable, address).map(|w| format!("{:?}: {w}", a.name)))
                .collect();
            problems.push(format!(
                "no network card for the transparent network: it needs an Up, physical adapter other than the routable one ({:?}), or HNS takes the routable card and the node is cut off ({})",
                routable.name,
                rejected.join("; ")
            ));
            None
        }
        several => {
            problems.push(format!(
                "several network cards could take the transparent network ({}): name one with windows.transparent_adapter",
                names_of(several)
            ));
            None
        }
    }
}

/// The routable adapter must not be the transparent network's own adapter:
/// then HNS took the routable card (a network created without naming one)
/// and the gateway action would remove the node's address.
pub fn routable_taken(routable: &Adapter, container: &str, network: &str) -> Option<String> {
    (routable.name.eq_ignore_ascii_case(container)
        || routable.name.eq_ignore_ascii_case("vEthernet (HNSTransparent)"))
    .then(|| {
        format!(
            "the node's address is on {:?}, the transparent network's adapter: HNS built the network on the routable card. From the console (WinRM drops while the address moves back), remove it with `docker network rm {network}`, then name a second card in windows.transparent_adapter and rerun",
            routable.name
        )
    })
}

fn names(adapters: &[Adapter]) -> String {
    names_of(&adapters.iter().collect::<Vec<_>>())
}

fn names_of(adapters: &[&Adapter]) -> String {
    adapters
        .iter()
        .map(|a| format!("{:?}", crate::text::clip(&a.name, 64)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter(name: &str, index: u32, ip: Option<&str>, physical: bool) -> Adapter {
        Adapter {
            name: name.into(),
            index,
            ipv4: ip.iter().map(|i| i.parse().unwrap()).collect(),
            forwarding: false,
            physical,
            status: "Up".into(),
            dhcp: false,
        }
    }

    fn facts(adapters: Vec<Adapter>) -> WindowsFacts {
        let mut f = crate::os::windows::fixtures::fresh_2016();
        f.adapters = adapters;
        f
    }

    const ADDR: &str = "10.0.0.11";

    fn pick(f: &WindowsFacts, named: Option<&str>) -> Result<String, String> {
        let routable = f
            .adapters
            .iter()
            .find(|a| a.ipv4.contains(&ADDR.parse().unwrap()))
            .unwrap();
        let mut p = Vec::new();
        choose(f, routable, ADDR.parse().unwrap(), named, &mut p).ok_or(p.join("\n"))
    }

    #[test]
    fn one_nic_and_dockers_nat_adapter_is_refused() {
        // docs/research/windows-transparent.md#defect-4: the old "second adapter" check counted
        // Docker's NAT adapter
        for nat in ["vEthernet (HNS Internal NIC)", "vEthernet (nat)"] {
            let f = facts(vec![
                adapter("Ethernet", 4, Some(ADDR), true),
                adapter(nat, 7, Some("172.28.16.1"), false),
            ]);
            let e = pick(&f, None).unwrap_err();
            assert!(
                e.contains("no network card for the transparent network")
                    && e.contains("virtual adapter"),
                "{e}"
            );
        }
    }

    #[test]
    fn the_only_fit_card_is_chosen_never_the_routable_one() {
        let mut down = adapter("Ethernet 3", 6, None, true);
        down.status = "Disconnected".into();
        let f = facts(vec![
            adapter("Ethernet", 4, Some(ADDR), true),
            adapter("Ethernet 2", 5, None, true),
            down,
            adapter("vEthernet (nat)", 7, Some("172.28.16.1"), false),
        ]);
        assert_eq!(pick(&f, None).unwrap(), "Ethernet 2");
        assert_eq!(pick(&f, Some("ethernet 2")).unwrap(), "Ethernet 2");
        let e = pick(&f, Some("Ethernet")).unwrap_err();
        assert!(e.contains("holds the node's address"), "{e}");
        let e = pick(&f, Some("Ethernet 3")).unwrap_err();
        assert!(e.contains("not Up"), "{e}");
        let e = pick(&f, Some("vEthernet (nat)")).unwrap_err();
        assert!(e.contains("virtual adapter"), "{e}");
        let e = pick(&f, Some("Ethernet 9")).unwrap_err();
        assert!(e.contains("no adapter named \"Ethernet 9\""), "{e}");
    }

    #[test]
    fn several_fit_cards_must_be_named() {
        let f = facts(vec![
            adapter("Ethernet", 4, Some(ADDR), true),
            adapter("Ethernet 2", 5, None, true),
            adapter("Ethernet 3", 6, None, true),
        ]);
        let e = pick(&f, None).unwrap_err();
        assert!(
            e.contains("name one with windows.transparent_adapter"),
            "{e}"
        );
        assert_eq!(pick(&f, Some("Ethernet 3")).unwrap(), "Ethernet 3");
    }

    #[test]
    fn a_card_whose_address_hns_already_moved_is_not_fit() {
        // Windows Server 2019: HNS took "Ethernet", the address is on its
        // virtual adapter; "Ethernet" looks free but is the routable card
        let f = facts(vec![
            adapter("Ethernet", 4, None, true),
            adapter("vEthernet (Ethernet)", 9, Some(ADDR), false),
        ]);
        let e = pick(&f, None).unwrap_err();
        assert!(e.contains("already on vEthernet (Ethernet)"), "{e}");
        let routable = &f.adapters[1];
        assert!(routable_taken(routable, "vEthernet (Ethernet)", "kwinctl").is_some());
        assert!(routable_taken(&f.adapters[0], "vEthernet (Ethernet 2)", "kwinctl").is_none());
    }

    #[test]
    fn the_container_adapter_is_named_by_build() {
        assert_eq!(
            container_adapter(14393, "Ethernet 2").unwrap(),
            "vEthernet (HNSTransparent)"
        );
        assert_eq!(
            container_adapter(17763, "Ethernet 2").unwrap(),
            "vEthernet (Ethernet 2)"
        );
        assert_eq!(container_adapter(17134, "Ethernet 2"), None);
    }
}
