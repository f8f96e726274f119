//! The plan of the kwinctl inventory: per host its OS, role, address,
//! groups and settings, per group and for `defaults` theirs (each variable
//! mapped by `vars.rs`). What kwinctl cannot honour is refused with the
//! variable's position (never dropped); what does not concern connecting is
//! listed on the host as not used.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

use super::address::address;
use super::setting::{Kinds, Scalar, Setting};
use super::vars::{Problems, at, kind_of, settings, text, unused};
use super::winrm::{https, winrm_truth};
use super::{AHost, FileProblems, Layer, Model, Val, Var};
use crate::inventory::{Os, Pos, Role};

pub(super) struct GroupPlan {
    /// Its name in the kwinctl inventory.
    pub name: String,
    pub ansible: String,
    pub line: usize,
    /// Holds the hosts of a kwinctl built-in group (`windows`, ...).
    pub built_in: bool,
    pub settings: Vec<Setting>,
}

pub(super) struct HostPlan {
    pub name: String,
    pub lines: Vec<usize>,
    pub os: Os,
    /// A Windows host reached over SSH (`ansible_shell_type=powershell`).
    pub windows_ssh: bool,
    pub role: Option<(Role, String)>,
    pub address: (Ipv4Addr, String),
    /// Where Ansible connects, when not `address` (kubespray's `ip` set).
    pub connect: Option<(Ipv4Addr, String)>,
    pub groups: Vec<String>,
    pub settings: Vec<Setting>,
    /// Variables that do not concern connecting: `name (where)`.
    pub unused: Vec<String>,
}

pub(super) struct Plan {
    pub defaults: Vec<Setting>,
    pub groups: Vec<GroupPlan>,
    pub hosts: Vec<HostPlan>,
    /// Variables the operator must export: (name, where the password was).
    pub passwords: Vec<(String, String)>,
    /// The Ansible variables left aside, each named once.
    pub ignored: Vec<String>,
}

/// Ansible groups whose hosts are Kubernetes control-plane nodes: kubespray's
/// (`kube_control_plane`, formerly `kube-master`/`kube_master`), k0s-ansible's
/// (`initial_controller`, `controller`), and the plain names.
const CONTROL_PLANE_GROUPS: [&str; 7] = [
    "kube_control_plane",
    "kube-master",
    "kube_master",
    "initial_controller",
    "controller",
    "control_plane",
    "control-plane",
];

/// Map the whole inventory, or every problem found.
pub(super) fn plan(m: &Model, base: &Path, resolve: bool) -> Result<Plan, FileProblems> {
    let mut p = Problems::default();
    let mut passwords = Vec::new();
    let effective: Vec<BTreeMap<String, (Var, Layer)>> =
        m.hosts.iter().map(|h| m.effective(h)).collect();
    let kinds: Vec<(Os, Kinds)> = effective
        .iter()
        .map(|e| {
            let (os, mut k) = kind_of(e, &mut p);
            k.https = k.winrm && https(e);
            (os, k)
        })
        .collect();
    let kinds_of = |hosts: &[&AHost]| -> Kinds {
        let mut k = Kinds::default();
        for h in hosts {
            let i = m.hosts.iter().position(|x| x.name == h.name).unwrap();
            k.ssh |= kinds[i].1.ssh;
            k.winrm |= kinds[i].1.winrm;
            k.linux |= kinds[i].1.linux;
            k.windows |= kinds[i].1.windows;
            k.https |= kinds[i].1.https;
        }
        k
    };
    let roles: Vec<Option<(Role, String)>> = m
        .hosts
        .iter()
        .zip(&effective)
        .map(|(h, eff)| {
            eff.get("kwinctl_role")
                .and_then(|(v, _)| match text(v, &mut p) {
                    Some("control-plane") => Some((Role::ControlPlane, at(v))),
                    Some("worker") => Some((Role::Worker, at(v))),
                    Some(o) => {
                        p.refuse(
                            v,
                            format!("{o:?} is not a role"),
                            "use control-plane or worker",
                        );
                        None
                    }
                    None => None,
                })
                .or_else(|| {
                    m.groups_of(&h.name)
                        .into_iter()
                        .find(|g| CONTROL_PLANE_GROUPS.contains(&g.as_str()))
                        .map(|g| (Role::ControlPlane, format!("in Ansible group {g}")))
                })
        })
        .collect();
    // in a built-in group of kwinctl: by OS, or by role
    let in_built_in = |g: &str, i: usize| match g {
        "linux" => kinds[i].0 == Os::Linux,
        "windows" => kinds[i].0 == Os::Windows,
        "control-plane" => roles[i].as_ref().is_some_and(|r| r.0 == Role::ControlPlane),
        _ => !roles[i].as_ref().is_some_and(|r| r.0 == Role::ControlPlane),
    };
    let all_vars: Vec<&Var> = m
        .groups
        .iter()
        .filter(|g| g.name == "all")
        .flat_map(|g| g.vars.iter().chain(&g.file_vars))
        .collect();
    let all_hosts: Vec<&AHost> = m.hosts.iter().collect();
    let defaults = settings(
        &all_vars,
        &Layer::All,
        kinds_of(&all_hosts),
        base,
        &mut p,
        &mut passwords,
    );
    let mut groups = Vec::new();
    for g in m
        .groups
        .iter()
        .filter(|g| g.name != "all" && g.name != "ungrouped")
    {
        let members = m.members(&g.name);
        let lower = g.name.to_ascii_lowercase();
        let built_in = crate::inventory::BUILT_IN_GROUPS.contains(&lower.as_str());
        let (name, built_in) = if built_in {
            let same =
                m.hosts.iter().enumerate().all(|(i, h)| {
                    members.iter().any(|x| x.name == h.name) == in_built_in(&lower, i)
                });
            if same {
                (lower.clone(), true)
            } else {
                (format!("{lower}-ansible"), false)
            }
        } else {
            (g.name.clone(), false)
        };
        if !crate::inventory::valid_name(&name) {
            p.refuse(
                &Var {
                    key: "group".into(),
                    value: Val::Null,
                    pos: Pos {
                        line: g.line,
                        column: 1,
                    },
                    what: format!("group {}", g.name),
                    file: 0,
                },
                format!("{:?} is not a name kwinctl takes", g.name),
                "rename the group: letters, digits, '-', '_' and '.', at most 63",
            );
            continue;
        }
        let vars: Vec<&Var> = g.vars.iter().chain(&g.file_vars).collect();
        let s = settings(
            &vars,
            &Layer::Group(g.name.clone()),
            kinds_of(&members),
            base,
            &mut p,
            &mut passwords,
        );
        groups.push(GroupPlan {
            name,
            ansible: g.name.clone(),
            line: g.line,
            built_in,
            settings: s,
        });
    }
    let mut hosts: Vec<HostPlan> = Vec::new();
    for (i, h) in m.hosts.iter().enumerate() {
        let eff = &effective[i];
        let (os, kind) = kinds[i];
        let layer = Layer::Host(h.name.clone());
        // the host's own variables that Ansible uses (not one that a later
        // layer or an alias of the same option overrides)
        let own: Vec<&Var> = h
            .vars
            .iter()
            .chain(&h.file_vars)
            .filter(|v| {
                eff.get(&v.key)
                    .is_some_and(|(e, _)| e.file == v.file && e.pos == v.pos)
            })
            .collect();
        let mut mine = settings(&own, &layer, kind, base, &mut p, &mut passwords);
        // what Ansible would use, and what kwinctl's layers would give
        let mut truth = Vec::new();
        for (v, l) in eff.values() {
            let one = settings(
                &[v],
                l,
                kind,
                base,
                &mut Problems::default(),
                &mut Vec::new(),
            );
            truth.extend(one);
        }
        truth.retain(|t| t.value != Scalar::Placeholder);
        if kind.winrm {
            truth.retain(|t| !matches!(t.key, "winrm.tls" | "winrm.port" | "winrm.auth"));
            truth.extend(winrm_truth(eff, &mut p));
        }
        let member_of: Vec<&GroupPlan> = {
            let in_ = m.groups_of(&h.name);
            groups
                .iter()
                .filter(|g| in_.contains(&g.ansible) || (g.built_in && in_built_in(&g.name, i)))
                .collect()
        };
        for t in &truth {
            if mine.iter().any(|s| s.key == t.key) {
                continue;
            }
            let from_groups: Vec<(&str, &Setting)> = member_of
                .iter()
                .flat_map(|g| {
                    g.settings
                        .iter()
                        .filter(|s| s.key == t.key)
                        .map(|s| (g.name.as_str(), s))
                })
                .collect();
            let kw = match from_groups.split_first() {
                Some((first, rest)) if rest.iter().all(|s| s.1.value == first.1.value) => {
                    Some(&first.1.value)
                }
                Some(_) => None,
                None => defaults.iter().find(|s| s.key == t.key).map(|s| &s.value),
            };
            if kw != Some(&t.value) {
                let names: Vec<&str> = from_groups.iter().map(|g| g.0).collect();
                let why = if names.is_empty() {
                    t.why.clone()
                } else {
                    format!(
                        "{}: groups {} set it differently, and Ansible takes this one (the deeper group; \
                         at equal depth, the later name)",
                        t.why,
                        names.join(", ")
                    )
                };
                mine.push(Setting {
                    key: t.key,
                    value: t.value.clone(),
                    why,
                });
            }
        }
        let role = roles[i].clone();
        let Some(mut addr) = address(h, eff, resolve, &mut p) else {
            continue;
        };
        // kubespray's `ip`: the address the node's services bind to, which
        // the other nodes route through (kwinctl's `address`); Ansible
        // connects to ansible_host (kwinctl's `connect`).
        let mut connect = None;
        if let Some((v, _)) = eff.get("ip")
            && let Some(ip) = text(v, &mut p)
        {
            match ip.parse::<Ipv4Addr>() {
                Ok(ip) if ip == addr.0 => {}
                Ok(ip) => {
                    connect = Some(addr.clone());
                    addr = (
                        ip,
                        format!(
                            "{}: kubespray's node address, the next hop of its pods",
                            at(v)
                        ),
                    );
                }
                Err(_) => {
                    p.refuse(
                        v,
                        format!("kubespray's ip {ip:?} is not an IPv4 address"),
                        "give the node's own IPv4 address as ip",
                    );
                    continue;
                }
            }
        }
        // one routable address per host (kwinctl's check refuses two)
        if let Some(other) = hosts.iter().find(|o| o.address.0 == addr.0) {
            p.refuse(
                &Var {
                    key: format!("host {}", h.name),
                    value: Val::Null,
                    pos: Pos {
                        line: h.lines.first().copied().unwrap_or(1),
                        column: 1,
                    },
                    what: addr.1.clone(),
                    file: 0,
                },
                format!(
                    "its address {} is host {}'s too: every kwinctl host routes its pods through \
                     its own address",
                    addr.0, other.name
                ),
                "give each host its own ansible_host (kubespray: ip), or leave one of them out",
            );
            continue;
        }
        let in_groups = m.groups_of(&h.name);
        // an http listener has no certificate to check
        let no_cert = |k: &str| {
            kind.winrm
                && !kind.https
                && matches!(
                    k,
                    "ansible_winrm_server_cert_validation" | "ansible_psrp_cert_validation"
                )
        };
        let unused: Vec<String> = eff
            .values()
            .filter(|(v, _)| unused(v) || no_cert(&v.key))
            .map(|(v, _)| format!("{} (line {})", v.key, v.pos.line))
            .collect();
        hosts.push(HostPlan {
            name: h.name.clone(),
            lines: h.lines.clone(),
            os,
            windows_ssh: os == Os::Windows && kind.ssh,
            role,
            address: addr,
            connect,
            groups: groups
                .iter()
                .filter(|g| !g.built_in && in_groups.contains(&g.ansible))
                .map(|g| g.name.clone())
                .collect(),
            settings: mine,
            unused,
        });
    }
    for h in &m.hosts {
        if !crate::inventory::valid_name(&h.name) {
            p.refuse(
                &Var {
                    key: "host".into(),
                    value: Val::Null,
                    pos: Pos { line: h.lines.first().copied().unwrap_or(0), column: 1 },
                    what: format!("host {}", h.name),
                    file: 0,
                },
                format!("{:?} is not a name kwinctl takes", h.name),
                "kwinctl names are letters, digits, '-', '_' and '.', at most 63: rename the host and keep its address in ansible_host",
            );
        }
    }
    if !p.0.is_empty() {
        return Err(p.0.into_values().collect());
    }
    let mut ignored: Vec<String> = m
        .groups
        .iter()
        .flat_map(|g| g.vars.iter().chain(&g.file_vars))
        .chain(
            m.hosts
                .iter()
                .flat_map(|h| h.vars.iter().chain(&h.file_vars)),
        )
        .filter(|v| v.key.starts_with("ansible_") && unused(v))
        .map(|v| v.key.clone())
        .collect();
    ignored.sort();
    ignored.dedup();
    Ok(Plan {
        defaults,
        groups,
        hosts,
        passwords,
        ignored,
    })
}
