//! Checks that fail a Windows host before anything is changed on it: old
//! build, a build the declared Kubernetes release does not run on, no
//! Hyper-V module, no Docker, no routable adapter or no network card for
//! the transparent network (`nic.rs`), missing
//! binaries or binaries of another release, a pause image for another
//! Windows build, a pod CIDR record that contradicts the plan.

use super::POD_CIDR_FILE;
use super::WindowsDesired;
use super::facts::{Adapter, WindowsFacts, parse_build};
use super::k8s;
use super::nic::{self, Nics};
use crate::alloc::Node;
use crate::diff::Conflict;
use crate::inventory::KubeVersion;

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

/// A file both profiles need that is neither on the host nor placed by
/// this run (no `windows.binaries` entry): what to add to the inventory.
/// `archive_key` names the inventory entry of a profile's archive that
/// holds a required file, when one does.
pub(super) fn missing_files(
    d: &WindowsDesired,
    f: &WindowsFacts,
    archive_key: impl Fn(&str) -> Option<&'static str>,
    problems: &mut Vec<String>,
) {
    let placed = d.placed();
    let is = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    for req in &d.required_files {
        if placed.iter().any(|p| is(p, req)) || f.files.iter().any(|x| is(&x.path, req)) {
            continue;
        }
        let key = if is(req, super::LOG_RUNNER_EXE) {
            format!(
                "windows.binaries.kube-log-runner (kube-log-runner.exe of Kubernetes {v}, from its node archive kubernetes-node-windows-amd64.tar.gz or https://dl.k8s.io/v{v}/bin/windows/amd64/kube-log-runner.exe, with its sha256): from 1.26 on kubelet and kube-proxy write no log files themselves",
                v = d.kubernetes_version
            )
        } else if let Some(key) = archive_key(req) {
            key.into()
        } else {
            "windows.binaries (url and sha256)".into()
        };
        problems.push(format!("{req} is missing: add {key} to the inventory"));
    }
}

/// Binaries already on the host that kwinctl keeps must be the declared
/// release (one it is about to replace is checked by the action that
/// places the new one).
pub(super) fn binary_versions(d: &WindowsDesired, f: &WindowsFacts, problems: &mut Vec<String>) {
    let declared = &d.kubernetes_version;
    // (kubelet.exe and kube-proxy.exe; containerd's files are checked by
    // their own release)
    let kube = |p: &str| {
        let p = p.to_ascii_lowercase();
        p.ends_with(r"\kubelet.exe") || p.ends_with(r"\kube-proxy.exe")
    };
    for path in d.required_files.iter().filter(|p| kube(p)) {
        let on_host = f.files.iter().find(|x| x.path.eq_ignore_ascii_case(path));
        let Some(on_host) = on_host else { continue };
        let replaced = d.files.iter().any(|p| {
            p.path.eq_ignore_ascii_case(path) && !p.sha256.eq_ignore_ascii_case(&on_host.sha256)
        });
        if replaced {
            continue;
        }
        let out = f
            .versions
            .iter()
            .find(|v| v.path.eq_ignore_ascii_case(path))
            .map(|v| v.output.trim())
            .unwrap_or("");
        match KubeVersion::of_binary(out) {
            Some(v) if declared.accepts(&v) => {}
            Some(v) => problems.push(format!(
                "{path} is Kubernetes {v} (its --version), but the inventory declares kubernetes_version {declared}: set kubernetes_version to {v}, or give windows.binaries for {declared}"
            )),
            None => problems.push(format!(
                "{path} --version printed {:?}, not \"Kubernetes vX.Y.Z\": kwinctl cannot tell its release (expected {declared}); replace it through windows.binaries",
                crate::text::clip(out, 80)
            )),
        }
    }
}

/// Process isolation runs only images of the host's own Windows build
/// (Microsoft, "Windows container version compatibility": e.g. on a Windows
/// Server 2019 host a Windows Server 2016 image "Supports process isolation:
/// No"), except that containerd from 1.7.20 (`table`) also runs the
/// previous LTSC's images on a newer LTSC host (docs/research/containerd.md#d9);
/// a pause image the host cannot run leaves every pod unable to start.
pub(super) fn pause_image(
    d: &WindowsDesired,
    f: &WindowsFacts,
    build: u32,
    table: bool,
    problems: &mut Vec<String>,
) {
    let m = d.kubernetes_version.minor;
    let image = &d.pause_image;
    let matching = k8s::default_pause(m, build)
        .filter(|i| *i != image.as_str())
        .map(|i| format!("use {i}"))
        .unwrap_or_else(|| format!("use a pause image built for Windows build {build}"));
    let given = if d.pause_image_given {
        "cluster.pause_image"
    } else {
        "kwinctl's default pause image"
    };
    if !d.pause_image_given && k8s::default_pause(m, build) != Some(image.as_str()) {
        problems.push(format!(
            "{given} {image} is for another Windows build than this host's {build}: {matching} (set cluster.pause_image)"
        ));
        return;
    }
    let present = f
        .image_os
        .iter()
        .find(|i| i.image.eq_ignore_ascii_case(image) && !i.os_version.trim().is_empty());
    if let Some(i) = present {
        match parse_build(&i.os_version) {
            Some(ib) if k8s::image_runs(build, ib.2, table) => {}
            _ => problems.push(format!(
                "{given} {image} on this host is built for Windows {} but the host is build {build}; process isolation needs the same build: {matching} (cluster.pause_image)",
                i.os_version
            )),
        }
    } else if let Some(builds) = k8s::pause_builds(image)
        && !builds.iter().any(|b| k8s::image_runs(build, *b, table))
    {
        problems.push(format!(
            "{given} {image} has images for Windows builds {builds:?} only (kwinctl's table, src/os/windows/k8s.yaml), not this host's {build}: {matching} (cluster.pause_image)"
        ));
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
