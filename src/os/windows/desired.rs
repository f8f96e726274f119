//! What a Windows node should have beyond its pod CIDR and routes: the
//! transparent network's name, the pause image, the files kwinctl places
//! (binaries, kubeconfig) and kubelet and kube-proxy, with command lines
//! built for the declared Kubernetes release from the flag table
//! (`k8s.rs`, `k8s.yaml`), hosted as native services or, before 1.10, by a
//! start script a scheduled task runs (kwinctl's boot task starts both at boot).

use super::k8s::{self, Component, Hosting, Profile, Values};
use super::{KUBE_PROXY_SWITCH, LOG_DIR, LOG_RUNNER_EXE, ProfileDesired, WIN_DIR, WindowsDesired};
use crate::hash::sha256_bytes;
use crate::inventory::{BinariesSource, Host, Identity, Inventory, KubeVersion};
use crate::os::ops::DesiredError;

pub use super::files::{FileSource, Pushed, Uploads, WinFile};
pub use super::service::WinService;

/// Where a binary of `windows.binaries` comes from, and its SHA-256.
pub(super) fn source_of(
    host: &Host,
    name: &str,
    b: &crate::inventory::Binary,
    uploads: &Uploads,
) -> Result<(FileSource, String), DesiredError> {
    let (source, local_sha) = match (&b.url, &b.path) {
        (Some(u), None) if host.windows.binaries_source == BinariesSource::Push => {
            let Some(sha) = &b.sha256 else {
                return Err(DesiredError(format!(
                    "{}: windows.binaries.{name}.sha256 is required with a url",
                    host.name
                )));
            };
            let local = uploads.fetch(u, sha).map_err(|e| {
                DesiredError(format!(
                    "{}: windows.binaries.{name}.url {u} (binaries_source: push): {e}",
                    host.name
                ))
            })?;
            (FileSource::Push(Pushed::of(local)), None)
        }
        (Some(u), None) => (FileSource::Url(u.clone()), None),
        (None, Some(p)) => {
            let local = uploads.read(p).map_err(|e| {
                DesiredError(format!(
                    "{}: windows.binaries.{name}.path {}: {e}",
                    host.name,
                    p.display()
                ))
            })?;
            let sha = local.sha256.clone();
            (FileSource::Push(Pushed::of(local)), Some(sha))
        }
        _ => {
            return Err(DesiredError(format!(
                "{}: windows.binaries.{name} needs exactly one of url or path",
                host.name
            )));
        }
    };
    let sha256 = match (b.sha256.as_ref().map(|s| s.to_ascii_lowercase()), local_sha) {
        (Some(given), Some(actual)) if given != actual => {
            return Err(DesiredError(format!(
                "{}: windows.binaries.{name}: the local file's SHA-256 is {actual}, the inventory says {given}",
                host.name
            )));
        }
        (_, Some(actual)) => actual,
        (Some(given), None) => given,
        (None, None) => {
            return Err(DesiredError(format!(
                "{}: windows.binaries.{name}.sha256 is required with a url",
                host.name
            )));
        }
    };
    Ok((source, sha256.to_ascii_lowercase()))
}

/// What the shared desired state takes from a node's profile: the
/// network's default name, the runtime kubelet waits for, and the
/// services that run it (kwinctl's to install, first).
pub struct Shape {
    pub network: &'static str,
    pub runtime: &'static str,
    pub runtime_services: Vec<WinService>,
}

/// What every part of the desired state is built from.
struct Common<'a> {
    inv: &'a Inventory,
    host: &'a Host,
    uploads: &'a Uploads,
    version: KubeVersion,
    profile: Profile,
}

impl WindowsDesired {
    /// The desired state of a Windows node: files, services and their flags.
    pub fn of(
        inv: &Inventory,
        host: &Host,
        uploads: &Uploads,
    ) -> Result<WindowsDesired, DesiredError> {
        let w = &host.windows;
        let required = |key: &str| {
            DesiredError(format!(
                "{}: cluster.{key} is required for Windows hosts",
                host.name
            ))
        };
        let version =
            (inv.cluster.kubernetes_version).ok_or_else(|| required("kubernetes_version"))?;
        let api_server = inv
            .cluster
            .api_server
            .as_deref()
            .ok_or_else(|| required("api_server"))?;
        let profile =
            (inv.cluster.windows_profile()).unwrap_or(Profile::default_for(version.minor));
        let c = Common {
            inv,
            host,
            uploads,
            version,
            profile,
        };
        let shape = ProfileDesired::shape(profile);
        let network = w
            .network_name
            .clone()
            .unwrap_or_else(|| shape.network.to_string());
        let mut files = c.binaries()?;
        let (pause_image, pause_image_given) = c.pause_image()?;
        let (services, wrapped) = c.services(shape, api_server, &network, &pause_image)?;
        let shared = k8s::identity(&inv.cluster) == Identity::Shared;
        let mut notes: Vec<String> =
            k8s::identity_note(&version, shared && api_server.starts_with("https://"))
                .into_iter()
                .collect();
        let mut required_files = vec![
            format!(r"{WIN_DIR}\kubelet.exe"),
            format!(r"{WIN_DIR}\kube-proxy.exe"),
        ];
        if wrapped {
            c.log_runner(&mut files, &mut required_files, &mut notes)?;
        }
        let profile = ProfileDesired::of(profile, inv, host, uploads, &pause_image)?;
        required_files.extend(profile.required().iter().cloned());
        Ok(WindowsDesired {
            node_name: host.node_name(),
            cert_margin: crate::identity::cert::days(w.cert_margin_days),
            identity: k8s::identity(&inv.cluster),
            network,
            adapter: w.adapter.clone(),
            nodeport_sources: w.nodeport_sources.clone(),
            api_server_sources: inv.cluster.api_server_sources.clone(),
            kubernetes_version: version,
            pause_image,
            pause_image_given,
            files,
            required_files,
            services,
            notes,
            profile,
        })
    }
}

impl Common<'_> {
    /// kubelet's and kube-proxy's binaries (those the inventory gives),
    /// then the kubeconfig.
    fn binaries(&self) -> Result<Vec<WinFile>, DesiredError> {
        let (host, version) = (self.host, self.version);
        let mut files = Vec::new();
        for (name, exe) in [("kubelet", "kubelet.exe"), ("kube-proxy", "kube-proxy.exe")] {
            let Some(b) = host.windows.binaries.get(name) else {
                continue;
            };
            let path = format!(r"{WIN_DIR}\{exe}");
            let (source, sha256) = source_of(host, name, b, self.uploads)?;
            files.push(WinFile {
                path,
                sha256: sha256.to_ascii_lowercase(),
                source,
                version: Some(version.to_string()),
                version_regex: Some(version.version_line_regex()),
            });
        }
        let shared = k8s::identity(&self.inv.cluster) == Identity::Shared;
        if let Some(kc) = self.inv.cluster.kubeconfig.as_ref().filter(|_| shared) {
            let bytes = crate::inventory::kubeconfig::read(kc).map_err(|e| {
                DesiredError(format!("cannot read kubeconfig {}: {e}", kc.display()))
            })?;
            files.push(WinFile {
                path: super::KUBECONFIG.to_string(),
                sha256: sha256_bytes(&bytes),
                source: FileSource::Inline(bytes.into()),
                version: None,
                version_regex: None,
            });
        }
        Ok(files)
    }

    /// The pause image, and whether the inventory named it (else it is the
    /// table's default for the release).
    fn pause_image(&self) -> Result<(String, bool), DesiredError> {
        if let Some(p) = &self.inv.cluster.pause_image {
            return Ok((p.clone(), true));
        }
        let (m, version) = (self.version.minor, self.version);
        let build = k8s::fresh_build(m, self.profile);
        let p = k8s::default_pause(m, build).ok_or_else(|| {
            DesiredError(format!(
                "{}: kwinctl has no default pause image for Kubernetes {version} on Windows build {build}: set cluster.pause_image",
                self.host.name
            ))
        })?;
        Ok((p.to_string(), false))
    }

    /// The profile's runtime services, then kubelet and kube-proxy; and
    /// whether kube-log-runner wraps them.
    fn services(
        &self,
        shape: Shape,
        api_server: &str,
        network: &str,
        pause_image: &str,
    ) -> Result<(Vec<WinService>, bool), DesiredError> {
        let (inv, m, profile) = (self.inv, self.version.minor, self.profile);
        let ip = self.host.address.to_string();
        let proxy_adapter = format!("vEthernet ({KUBE_PROXY_SWITCH})");
        let taints = self.host.windows.taints.join(",");
        let node_name = self.host.node_name();
        let bootstrap = k8s::identity(&inv.cluster) == Identity::Bootstrap;
        let values = Values {
            ip: &ip,
            node_name: &node_name,
            pause_image,
            kubeconfig: if bootstrap {
                Some(super::KUBELET_CONF)
            } else {
                inv.cluster.kubeconfig.as_ref().map(|_| super::KUBECONFIG)
            },
            proxy_kubeconfig: if bootstrap {
                super::KUBE_PROXY_CONF
            } else {
                super::KUBECONFIG
            },
            bootstrap,
            api_server,
            log_dir: LOG_DIR,
            log_file: "",
            network,
            proxy_adapter: &proxy_adapter,
            host_endpoint: &super::hns::endpoint_name(network),
            cluster_dns: &inv.cluster.dns_service_ip.to_string(),
            cluster_domain: &inv.cluster.dns_domain,
            taints: &taints,
        };
        let mut services = shape.runtime_services;
        let mut wrapped = false;
        // the release kube-log-runner.exe comes from (it has no --version)
        let runner_m = inv.cluster.log_runner_version.unwrap_or(self.version).minor;
        let runtime = shape.runtime;
        for (c, display, depends) in [
            (Component::Kubelet, "Kubernetes kubelet (kwinctl)", runtime),
            (
                Component::KubeProxy,
                "Kubernetes kube-proxy (kwinctl)",
                "kubelet",
            ),
        ] {
            let call = k8s::invocation(c, m, profile, &values)
                .map_err(|e| DesiredError(format!("{}: {e}", self.host.name)))?;
            // A start script only waits for real services (docker), not for
            // kwinctl's other task.
            let depends = match call.hosting {
                Hosting::Service => vec![depends.to_string()],
                Hosting::Task if depends == runtime => vec![depends.to_string()],
                Hosting::Task => vec![],
            };
            let service = WinService::new(
                c.name(),
                display,
                format!(r"{WIN_DIR}\{}.exe", c.name()),
                &call.args,
                call.env,
                depends,
                call.hosting,
            );
            services.push(match k8s::log_runner(c, m, runner_m, profile, &values) {
                Some(args) => {
                    wrapped = true;
                    service.wrapped(LOG_RUNNER_EXE, args)
                }
                None => service,
            });
        }
        Ok((services, wrapped))
    }

    /// kube-log-runner wraps kubelet and kube-proxy: it is required, placed
    /// when the inventory gives it, and a note says when it cannot rotate.
    fn log_runner(
        &self,
        files: &mut Vec<WinFile>,
        required_files: &mut Vec<String>,
        notes: &mut Vec<String>,
    ) -> Result<(), DesiredError> {
        let runner_v = self.inv.cluster.log_runner_version.unwrap_or(self.version);
        required_files.push(LOG_RUNNER_EXE.into());
        if let Some(b) = self.host.windows.binaries.get("kube-log-runner") {
            let (source, sha256) = source_of(self.host, "kube-log-runner", b, self.uploads)?;
            // kube-log-runner has no --version: its release is
            // log_runner_version, else the cluster's
            files.push(WinFile {
                path: LOG_RUNNER_EXE.into(),
                sha256,
                source,
                version: None,
                version_regex: None,
            });
        }
        if !k8s::log_runner_rotates(runner_v.minor, self.profile) {
            notes.push(format!(
                r"kubelet and kube-proxy log to {LOG_DIR}\kubelet.log and {LOG_DIR}\kube-proxy.log through kube-log-runner {runner_v}, which cannot rotate them (rotation arrived in 1.34, PR #127667): they grow without bound; take windows.binaries.kube-log-runner from a 1.34+ release and set cluster.log_runner_version to it (the runner works with any kubelet), or prune the files on the node"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Minor;
    use crate::os::windows::cmdline;
    use crate::os::windows::k8s::TABLE;

    fn inventory(version: &str, kubeconfig: bool) -> Inventory {
        let api = if kubeconfig {
            concat!(
                "api_server: https://10.0.0.10:6443\n  kubeconfig: ",
                env!("CARGO_MANIFEST_DIR"),
                "/inventories/example.kubeconfig"
            )
        } else {
            "api_server: http://10.0.0.10:8080"
        };
        let text = format!(
            "cluster:\n  name: t\n  cluster_cidr: 192.168.0.0/16\n  service_cidr: 10.96.0.0/12\n  {api}\n  \
             kubernetes_version: \"{version}\"\nhosts:\n  - name: w\n    os: windows\n    address: 10.0.0.11\n    \
             windows: {{ binaries: {{ kubelet: {{ url: \"https://h/k.exe\", sha256: aa }} }} }}\n"
        );
        Inventory::parse(std::path::Path::new("t.yaml"), &text).unwrap()
    }

    fn desired(version: &str, kubeconfig: bool) -> Result<WindowsDesired, DesiredError> {
        let inv = inventory(version, kubeconfig);
        WindowsDesired::of(&inv, &inv.hosts[0], &Uploads::default())
    }

    /// Every flag on every command line kwinctl builds, read back the way
    /// Windows splits a command line, exists in the release, for every minor
    /// release the profile runs; the environment too.
    #[test]
    fn every_emitted_flag_is_in_the_table_for_its_release() {
        for n in 5..=23 {
            let m = Minor::new(1, n);
            for kc in [true, false] {
                if !kc && n >= 8 {
                    assert!(desired(&format!("1.{n}.0"), kc).is_err(), "1.{n}");
                    continue;
                }
                let d = desired(&format!("1.{n}.0"), kc).unwrap();
                assert_eq!(
                    d.files[0].version.as_deref(),
                    Some(format!("1.{n}.0").as_str())
                );
                for s in &d.services {
                    let argv = cmdline::split(&s.binpath);
                    assert_eq!(argv[0], s.exe);
                    assert_eq!(cmdline::split(&s.args), argv[1..]);
                    let names = argv[1..]
                        .iter()
                        .map(|a| a.split('=').next().unwrap())
                        .chain(s.env.iter().map(|e| e.split('=').next().unwrap()));
                    for name in names {
                        let row = TABLE
                            .flags
                            .iter()
                            .find(|r| r.component.name() == s.name && r.name == name)
                            .unwrap_or_else(|| panic!("1.{n} {}: {name} not in the table", s.name));
                        assert!(
                            row.exists_in(m),
                            "1.{n} {}: {name} outside its range",
                            s.name
                        );
                    }
                    let native = argv.iter().any(|a| a == "--windows-service");
                    assert_eq!(native, s.hosting == Hosting::Service, "1.{n} {}", s.name);
                }
            }
        }
        for v in ["1.24.0", "1.26.1", "1.4.7"] {
            assert!(desired(v, true).is_err(), "{v}");
        }
    }

    #[test]
    fn the_pause_image_follows_the_release_unless_given() {
        assert_eq!(
            desired("1.9.11", true).unwrap().pause_image,
            "apprenda/pause"
        );
        let d = desired("1.16.15", true).unwrap();
        assert_eq!(d.pause_image, "mcr.microsoft.com/k8s/core/pause:1.2.0");
        assert!(!d.pause_image_given);
        assert!(
            d.services[0]
                .binpath
                .contains("--pod-infra-container-image=mcr.microsoft.com/k8s/core/pause:1.2.0")
        );
    }
}
