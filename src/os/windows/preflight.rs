//! The preflight checks both profiles share: missing binaries or binaries
//! of another release, a pause image for another Windows build. Each
//! profile's preflight (`transparent/preflight.rs`, `l2bridge/diff.rs`)
//! calls them beside its own.

use super::WindowsDesired;
use super::facts::{WindowsFacts, parse_build};
use super::k8s;
use crate::inventory::KubeVersion;

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
