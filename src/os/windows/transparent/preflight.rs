//! Checks that fail a transparent-profile host before anything is changed
//! on it: old build, a build the declared Kubernetes release does not run
//! on, no Hyper-V module, no Docker, no routable adapter or no network card
//! for the transparent network (`nic.rs`), and the shared checks
//! (`../preflight.rs`): missing binaries or binaries of another release, a
//! pause image for another Windows build; and a pod CIDR record that
//! contradicts the plan.

use super::nic::{self, Nics};
use crate::alloc::Node;
use crate::diff::Conflict;
use crate::os::windows::facts::{Adapter, WindowsFacts, parse_build};
use crate::os::windows::k8s;
use crate::os::windows::preflight::{binary_versions, missing_files, pause_image};
use crate::os::windows::{POD_CIDR_FILE, WindowsDesired};

/// Windows Server 2016 (the first build with Windows containers networking
/// the seeds rely on).
pub const MIN_BUILD: (u32, u32, u32) = (10, 0, 14393);

/// Checks that fail a Windows host before anything is changed.
pub fn preflight(node: &Node, d: &WindowsDesired, f: &WindowsFacts) -> Result<Nics, Conflict> {
    let mut problems = Vec::new();
    let m = d.kubernetes_version.minor;
    let build = match parse_build(&f.build) {
        Some(b) if b >= MIN_BUILD => {
            if let Some(why) = k8s::build_refusal(m, d.profile.kind(), b.2) {
                problems.push(why);
            }
            Some(b.2)
        }
        _ => {
            problems.push(format!(
                "Windows build {} is older than 10.0.14393 (Windows Server 2016)",
                f.build
            ));
            None
        }
    };
    if !f.hyperv_module {
        problems.push(
            "the Hyper-V PowerShell module is missing (Install-WindowsFeature Hyper-V-PowerShell)"
                .into(),
        );
    }
    // New-VMSwitch needs the role (its management service), not only the
    // module; installing the role needs a restart.
    match f.hyperv_role.as_str() {
        "Installed" => {}
        "InstallPending" => problems.push(
            "reboot required: the Hyper-V role is installed but waits for a restart (restart the host, then rerun)"
                .into(),
        ),
        "" => problems.push(
            "kwinctl cannot tell whether the Hyper-V role is installed (Get-WindowsFeature Hyper-V failed)"
                .into(),
        ),
        other => problems.push(format!(
            "the Hyper-V role is {}, not installed: Install-WindowsFeature -Name Hyper-V -IncludeManagementTools, then restart the host",
            crate::text::clip(other, 32)
        )),
    }
    if f.docker_version.is_empty() {
        problems.push("Docker is not installed".into());
    }
    let routable = routable_adapter(node, d, f);
    if routable.is_none() {
        problems.push(match &d.adapter {
            Some(n) => format!("no adapter named {n:?}"),
            None => format!(
                "no adapter holds the node's address {} (name it with windows.adapter)",
                node.address
            ),
        });
    }
    let mut nics = None;
    if let Some(r) = routable {
        let nic = nic::choose(
            f,
            r,
            node.address,
            (d.profile.transparent()).and_then(|t| t.transparent_adapter.as_deref()),
            &mut problems,
        );
        let container = build.and_then(|b| {
            let name = nic::container_adapter(b, nic.as_deref().unwrap_or("?"));
            if name.is_none() && k8s::build_refusal(m, d.profile.kind(), b).is_none() {
                problems.push(format!(
                    "kwinctl does not know the name Windows build {b} gives a transparent network's adapter"
                ));
            }
            name
        });
        // (with windows.adapter naming the card, the address may still sit
        // on the network's adapter)
        let holder = f
            .adapters
            .iter()
            .find(|a| a.ipv4.contains(&node.address))
            .unwrap_or(r);
        if let Some(c) = &container
            && let Some(why) = nic::routable_taken(holder, c, &d.network)
        {
            problems.push(why);
        }
        if let (Some(transparent), Some(container)) = (nic, container) {
            nics = Some(Nics {
                routable: r.index,
                transparent,
                container,
            });
        }
    }
    missing_files(d, f, |_| None, &mut problems);
    binary_versions(d, f, &mut problems);
    if let Some(b) = build {
        // Docker: the exact build (docs/research/containerd.md#d9)
        pause_image(d, f, b, false, &mut problems);
    }
    match f.pod_cidr {
        Some(rec) if rec != node.pod_cidr => problems.push(format!(
            "the host records pod CIDR {rec} ({POD_CIDR_FILE}) but the state file assigns {}; if the state file is wrong, pin `pod_cidr: {rec}` for {} in the inventory",
            node.pod_cidr, node.name
        )),
        _ => {}
    }
    match nics {
        Some(n) if problems.is_empty() => Ok(n),
        _ => Err(Conflict::Preflight(problems)),
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
