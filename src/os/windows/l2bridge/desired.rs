//! The l2bridge profile's part of a node's desired state: containerd as a
//! service, its release archive and the CNI plugins', containerd's and
//! crictl's configs, and what the CNI config says of the cluster.

use super::{
    CONTAINERD_CONFIG, CONTAINERD_EXE, CniCluster, L2Desired, NETWORK, cni_members,
    containerd_members,
};
use crate::inventory::{ContainerdVersion, Host, Inventory};
use crate::os::ops::DesiredError;
use crate::os::windows::desired::{Shape, Uploads, WinFile, WinService, source_of};
use crate::os::windows::files::Archive;
use crate::os::windows::k8s::Hosting;
use crate::os::windows::{KWINCTL_DIR, LOG_DIR};

/// The network's default name, and containerd as the runtime kubelet
/// waits for. As `containerd --register-service` registers it: the service
/// runs `containerd.exe --run-service` with the other arguments
/// (docs/research/containerd.md#d6), starting automatically.
pub fn shape() -> Shape {
    let containerd = WinService::new(
        "containerd",
        "containerd container runtime (kwinctl)",
        CONTAINERD_EXE.into(),
        &[
            "--run-service".into(),
            format!("--config={CONTAINERD_CONFIG}"),
            format!(r"--log-file={LOG_DIR}\containerd.log"),
        ],
        vec![],
        vec![],
        Hosting::Service,
    )
    .automatic();
    Shape {
        network: NETWORK,
        runtime: "containerd",
        runtime_services: vec![containerd],
    }
}

/// The profile's own desired state (no node in it).
pub fn of(
    inv: &Inventory,
    host: &Host,
    uploads: &Uploads,
    pause_image: &str,
) -> Result<L2Desired, DesiredError> {
    let cv = inv.cluster.containerd_version.ok_or_else(|| {
        DesiredError(format!(
            "{}: cluster.containerd_version is required for the l2bridge Windows profile",
            host.name
        ))
    })?;
    let containerd = archive(
        host,
        uploads,
        cv,
        ("containerd", "containerd.tar.gz"),
        containerd_members(),
        Some(CONTAINERD_EXE),
    )?;
    let cni = archive(
        host,
        uploads,
        cv,
        ("cni-plugins", "cni-plugins.tgz"),
        cni_members(),
        None,
    )?;
    Ok(L2Desired::new(
        cv,
        containerd,
        cni,
        pause_image,
        CniCluster {
            service_cidr: inv.cluster.service_cidr,
            dns_service_ip: inv.cluster.dns_service_ip,
            dns_domain: inv.cluster.dns_domain.clone(),
        },
    ))
}

/// A release archive of `windows.binaries.<name>` (none when the inventory
/// gives none), kept as `file` in kwinctl's folder.
fn archive(
    host: &Host,
    uploads: &Uploads,
    cv: ContainerdVersion,
    (name, file): (&str, &str),
    members: Vec<String>,
    version_binary: Option<&str>,
) -> Result<Option<Archive>, DesiredError> {
    let Some(b) = host.windows.binaries.get(name) else {
        return Ok(None);
    };
    let (source, sha256) = source_of(host, name, b, uploads)?;
    let (version, version_regex) = match version_binary {
        Some(_) => (Some(cv.to_string()), Some(cv.version_line_regex())),
        None => (None, None),
    };
    Ok(Some(Archive {
        name: name.into(),
        archive: WinFile {
            path: format!(r"{KWINCTL_DIR}\{file}"),
            sha256,
            source,
            version,
            version_regex,
        },
        members,
        version_binary: version_binary.map(str::to_string),
        marker: format!(r"{KWINCTL_DIR}\{name}.archive"),
    }))
}
