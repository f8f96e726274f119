//! Checks that fail a Windows host before anything is changed on it: old
//! build, no Hyper-V module, no Docker, no routable or second adapter,
//! missing binaries, a pod CIDR record that contradicts the plan.

use std::collections::BTreeSet;

use super::desired::WindowsDesired;
use super::facts::{Adapter, WindowsFacts, parse_build};
use super::{HNS_ADAPTER, KUBE_PROXY_SWITCH, POD_CIDR_FILE};
use crate::alloc::Node;
use crate::diff::Conflict;

/// Windows Server 2016 (the first build with Windows containers networking
/// the seeds rely on).
pub const MIN_BUILD: (u32, u32, u32) = (10, 0, 14393);

/// Checks that fail a Windows host before anything is changed.
pub fn preflight(node: &Node, d: &WindowsDesired, f: &WindowsFacts) -> Result<u32, Conflict> {
    let mut problems = Vec::new();
    match parse_build(&f.build) {
        Some(b) if b >= MIN_BUILD => {}
        _ => problems.push(format!(
            "Windows build {} is older than 10.0.14393 (Windows Server 2016)",
            f.build
        )),
    }
    if !f.hyperv_module {
        problems.push(
            "the Hyper-V PowerShell module is missing (Install-WindowsFeature Hyper-V-PowerShell)"
                .into(),
        );
    }
    if f.docker_version.is_empty() {
        problems.push("Docker is not installed".into());
    }
    let index = match routable_adapter(node, d, f) {
        Some(a) => Some(a.index),
        None => {
            problems.push(match &d.adapter {
                Some(n) => format!("no adapter named {n:?}"),
                None => format!(
                    "no adapter holds the node's address {} (name it with windows.adapter)",
                    node.address
                ),
            });
            None
        }
    };
    let hns_exists = f.adapters.iter().any(|a| a.name == HNS_ADAPTER);
    let second = f.adapters.iter().any(|a| {
        Some(a.index) != index
            && a.name != HNS_ADAPTER
            && !a
                .name
                .eq_ignore_ascii_case(&format!("vEthernet ({KUBE_PROXY_SWITCH})"))
    });
    if !hns_exists && !second {
        problems.push(
            "no second network adapter for the transparent network (the seeds need two NICs)"
                .into(),
        );
    }
    let placed: BTreeSet<&str> = d.files.iter().map(|f| f.path.as_str()).collect();
    for req in &d.required_files {
        if !placed.contains(req.as_str())
            && !f.files.iter().any(|x| x.path.eq_ignore_ascii_case(req))
        {
            problems.push(format!(
                "{req} is missing: add windows.binaries (url and sha256) to the inventory"
            ));
        }
    }
    match f.pod_cidr {
        Some(rec) if rec != node.pod_cidr => problems.push(format!(
            "the host records pod CIDR {rec} ({POD_CIDR_FILE}) but the state file assigns {}; if the state file is wrong, pin `pod_cidr: {rec}` for {} in the inventory",
            node.pod_cidr, node.name
        )),
        _ => {}
    }
    if problems.is_empty() {
        Ok(index.expect("routable adapter"))
    } else {
        Err(Conflict::Preflight(problems))
    }
}

/// The adapter that carries the node's routable address: the one the
/// inventory names (`windows.adapter`), else the one holding the address.
pub fn routable_adapter<'f>(
    node: &Node,
    d: &WindowsDesired,
    f: &'f WindowsFacts,
) -> Option<&'f Adapter> {
    match &d.adapter {
        Some(name) => f
            .adapters
            .iter()
            .find(|a| a.name.eq_ignore_ascii_case(name)),
        None => f.adapters.iter().find(|a| a.ipv4.contains(&node.address)),
    }
}
