//! The release checks made before any host is asked (`check` and every
//! command exit 2 on them): the profile × release, the containerd release,
//! and the note about the one kubelet identity.

use ipnet::Ipv4Net;

use super::*;

/// Why containerd `cv` does not go with Kubernetes `m`, if it does not
/// (containerd's own support table, `containerd:` in k8s.yaml).
pub fn containerd_refusal(m: Minor, cv: ContainerdVersion) -> Option<String> {
    let Some(row) = TABLE
        .containerd
        .iter()
        .find(|r| covers(&r.since, Some(&r.until), m))
    else {
        return Some(format!(
            "kwinctl's containerd table has no row for Kubernetes {m}"
        ));
    };
    let mins: Vec<ContainerdVersion> = row
        .minimum
        .iter()
        .map(|s| ContainerdVersion::parse(s).expect("k8s.yaml: containerd minimum"))
        .collect();
    let fits = mins.iter().any(|min| min.line() == cv.line() && cv >= *min);
    (!fits).then(|| {
        let list: Vec<String> = mins.iter().map(|v| format!("{v}+")).collect();
        format!(
            "containerd {cv} is not among the releases containerd supports for Kubernetes {m} ({}; containerd RELEASES.md)",
            list.join(", ")
        )
    })
}

/// The inventory's Windows-profile problems, found before anything is
/// contacted (`check` and every other command exit 2 on them): a release
/// the profile cannot run, or a kubeconfig choice it cannot.
pub fn inventory_problems(inv: &Inventory) -> Vec<Problem> {
    if !inv.hosts.iter().any(|h| h.os == Os::Windows) {
        return Vec::new();
    }
    let Some(v) = inv.cluster.kubernetes_version else {
        return Vec::new(); // the inventory's own rules require it
    };
    let Some(p) = inv.cluster.windows_profile() else {
        return Vec::new();
    };
    let pos = &inv.cluster.pos;
    let mut problems = Vec::new();
    identity_problems(inv, &v, &mut problems);
    let kc = inv.cluster.kubeconfig.is_some() || identity(&inv.cluster) == Identity::Bootstrap;
    if let Some(why) = refusal(v.minor, p, kc) {
        // A release that works with a kubeconfig but not without one: point
        // at the api_server line and say to add one.
        let needs_kc = !kc && refusal(v.minor, p, true).is_none();
        let at = if needs_kc {
            pos.api_server.unwrap_or(pos.name)
        } else if inv.cluster.windows_profile_given.is_some() {
            pos.windows_profile.unwrap_or_default()
        } else {
            pos.kubernetes_version.unwrap_or_default()
        };
        let other = match p {
            Profile::Transparent => Profile::L2Bridge,
            Profile::L2Bridge => Profile::Transparent,
        };
        let hint = if needs_kc {
            "set cluster.kubeconfig (a kubeconfig with embedded credentials naming the API server)"
                .to_string()
        } else if refusal(v.minor, other, kc).is_none() {
            format!(
                "Kubernetes {} runs the {} profile: set cluster.windows_profile: {} (or leave it out to choose by release)",
                v.minor,
                other.name(),
                other.name()
            )
        } else {
            format!(
                "use Kubernetes {} on the Windows nodes with the {} profile, or {} with the {} profile",
                range_text(p),
                p.name(),
                range_text(other),
                other.name()
            )
        };
        problems.push(Problem {
            pos: at,
            message: why,
            hint,
        });
    }
    if p == Profile::L2Bridge && problems.is_empty() {
        match inv.cluster.containerd_version {
            None => problems.push(Problem {
                pos: pos.kubernetes_version.unwrap_or(pos.name),
                message: format!(
                    "cluster.containerd_version is required for the l2bridge Windows profile (Kubernetes {v})"
                ),
                hint: format!(
                    "write the release of the containerd archive the Windows nodes run{} (its config file's format and the releases it supports depend on it)",
                    newest_containerd(v.minor)
                        .map(|c| format!(", e.g. containerd_version: \"{c}\""))
                        .unwrap_or_default()
                ),
            }),
            Some(cv) => {
                if let Some(why) = containerd_refusal(v.minor, cv) {
                    problems.push(Problem {
                        pos: pos.containerd_version.unwrap_or_default(),
                        message: why,
                        hint: format!(
                            "use a containerd release containerd supports for this Kubernetes release{} (github.com/containerd/containerd RELEASES.md, \"Kubernetes Support\")",
                            newest_containerd(v.minor)
                                .map(|c| format!(", e.g. containerd_version: \"{c}\""))
                                .unwrap_or_default()
                        ),
                    });
                }
            }
        }
    }
    if p == Profile::L2Bridge {
        placeholder_problems(inv, &mut problems);
    }
    if problems.is_empty() {
        unused_binaries(inv, v.minor, p, &mut problems);
    }
    if p == Profile::L2Bridge && problems.is_empty() {
        missing_binaries(inv, v, &mut problems);
    }
    if let (Some(r), true) = (inv.cluster.log_runner_version, problems.is_empty()) {
        let at = pos.log_runner_version.unwrap_or_default();
        if !wrapped(Component::Kubelet, v.minor, p) {
            problems.push(Problem {
                pos: at,
                message: format!(
                    "log_runner_version is set, but Kubernetes {v} on the {} profile runs no kube-log-runner (kubelet and kube-proxy write their own log files up to 1.25; the runner wraps them on the l2bridge profile from 1.26)",
                    p.name()
                ),
                hint: "remove log_runner_version (and windows.binaries.kube-log-runner)".into(),
            });
        } else if r.minor < Minor::new(1, 23) {
            problems.push(Problem {
                pos: at,
                message: format!(
                    "log_runner_version {r}: kube-log-runner ships in Kubernetes' release archives from 1.23 on (PR #106123)"
                ),
                hint: "take kube-log-runner.exe from a 1.34+ release (it rotates its files) and name that release here".into(),
            });
        }
    }
    problems
}

/// A `windows.binaries` entry the profile does not install in release `m`
/// (containerd and the CNI plugins belong to l2bridge, kube-log-runner to
/// l2bridge from 1.26): refused, as a misspelt name is, rather than left
/// out without a word. Once per binary, at the first host that has it.
fn unused_binaries(inv: &Inventory, m: Minor, p: Profile, problems: &mut Vec<Problem>) {
    let l2 = p == Profile::L2Bridge;
    let used = |name: &str| match name {
        "containerd" | "cni-plugins" => l2,
        "kube-log-runner" => l2 && wrapped(Component::Kubelet, m, p),
        _ => true,
    };
    let mut seen: Vec<&str> = Vec::new();
    for h in inv.hosts.iter().filter(|h| h.os == Os::Windows) {
        let w = &h.windows;
        for name in w.binaries.keys().chain(w.preinstalled.iter()) {
            if used(name) || seen.contains(&name.as_str()) {
                continue;
            }
            seen.push(name);
            let why = if name == "kube-log-runner" && l2 {
                format!(
                    "kubelet and kube-proxy {m} write their own log files (klog's --log-dir, up to 1.25)"
                )
            } else {
                format!(
                    "it belongs to the l2bridge profile, and Kubernetes {m} runs the {} profile",
                    p.name()
                )
            };
            problems.push(Problem {
                pos: h.pos,
                message: format!(
                    "{}: windows.binaries.{name} is given, but kwinctl does not install it: {why}",
                    h.name
                ),
                hint: format!(
                    "remove windows.binaries.{name} where it is set (the host, a group or defaults)"
                ),
            });
        }
    }
}

/// The l2bridge profile's binaries for release `v`: (entry, what it is,
/// where the publisher puts it for this release).
fn needed_binaries(inv: &Inventory, v: KubeVersion) -> Vec<(&'static str, &'static str, String)> {
    let vs = format!("{}.{}", v.minor, v.patch.unwrap_or(0));
    let k8s = |exe: &str| format!("https://dl.k8s.io/v{vs}/bin/windows/amd64/{exe}.exe");
    let cv = inv
        .cluster
        .containerd_version
        .map(|c| c.to_string())
        .unwrap_or_default();
    let mut list = vec![
        ("kubelet", "kubelet.exe", k8s("kubelet")),
        ("kube-proxy", "kube-proxy.exe", k8s("kube-proxy")),
        (
            "containerd",
            "the containerd archive",
            format!(
                "https://github.com/containerd/containerd/releases/download/v{cv}/containerd-{cv}-windows-amd64.tar.gz"
            ),
        ),
        (
            "cni-plugins",
            "the CNI plugins archive (win-bridge.exe, host-local.exe)",
            "https://github.com/containernetworking/plugins/releases/download/v1.6.2/cni-plugins-windows-amd64-v1.6.2.tgz".into(),
        ),
    ];
    if wrapped(Component::Kubelet, v.minor, Profile::L2Bridge) {
        list.push((
            "kube-log-runner",
            "kube-log-runner.exe",
            k8s("kube-log-runner"),
        ));
    }
    list
}

/// Every binary the l2bridge profile needs that a Windows host has no
/// `windows.binaries` entry for (neither placed by kwinctl nor marked
/// `preinstalled: true`): one problem each, at the host.
fn missing_binaries(inv: &Inventory, v: KubeVersion, problems: &mut Vec<Problem>) {
    let needed = needed_binaries(inv, v);
    for h in inv.hosts.iter().filter(|h| h.os == Os::Windows) {
        let w = &h.windows;
        for (name, what, url) in &needed {
            if w.binaries.contains_key(*name) || w.preinstalled.iter().any(|p| p == name) {
                continue;
            }
            problems.push(Problem {
                pos: h.pos,
                message: format!(
                    "{}: windows.binaries.{name} is missing: the l2bridge profile (Kubernetes {v}) runs {what} on every Windows node",
                    h.name
                ),
                hint: format!(
                    "add `{name}: {{ url: \"{url}\", sha256: FILL-IN }}` under windows.binaries (defaults, a group or the host), then `kwinctl checksums -i INVENTORY --write` fills in its SHA-256; or, if the node has it already, `{name}: {{ preinstalled: true }}`"
                ),
            });
        }
    }
}

/// A note for every Windows host's plan: the one kubelet identity they share.
pub fn identity_note(v: &KubeVersion, https: bool) -> Option<String> {
    // The Node authorizer and NodeRestriction arrived in 1.7 (CHANGELOG-1.7:
    // "Node authorizer ... --authorization-mode=Node"): from then on a
    // kubelet may only change its own Node object, which it must name as
    // system:node:<name>.
    (https && v.minor >= Minor::new(1, 7)).then(|| {
        "every Windows node uses the one identity in cluster.kubeconfig: with the Node authorizer and NodeRestriction (1.7+), that identity must be allowed to write every Windows node's Node and pods (e.g. bound to system:node for all of them), so one node's credentials can act for the others".into()
    })
}

/// How Windows nodes get their credentials (`cluster.identity`): as the
/// inventory says; else the shared identity when it gives
/// `cluster.kubeconfig` (today's inventories keep working) or the API
/// server is not https (nothing to bootstrap against); else bootstrap where
/// the release can (the table's `tls_bootstrap` row), shared where not.
pub fn identity(c: &crate::inventory::Cluster) -> Identity {
    if let Some(i) = c.identity_given {
        return i;
    }
    let https = c
        .api_server
        .as_deref()
        .is_some_and(|a| a.starts_with("https://"));
    match c.kubernetes_version {
        Some(v) if https && c.kubeconfig.is_none() && can_join(v.minor) => Identity::Bootstrap,
        _ => Identity::Shared,
    }
}

/// Whether release `m` can join a node by TLS bootstrapping
/// (`tls_bootstrap.join_since`).
pub fn can_join(m: Minor) -> bool {
    m >= minor(&TABLE.tls_bootstrap.join_since)
}

/// The inventory's problems with its identity choice: bootstrap on a
/// release without it, bootstrap without a control plane to get tokens
/// from, shared over https without a kubeconfig.
fn identity_problems(inv: &Inventory, v: &KubeVersion, problems: &mut Vec<Problem>) {
    let c = &inv.cluster;
    let pos = &c.pos;
    let https = c
        .api_server
        .as_deref()
        .is_some_and(|a| a.starts_with("https://"));
    match identity(c) {
        Identity::Bootstrap if !can_join(v.minor) => problems.push(Problem {
            pos: pos.identity.unwrap_or(pos.name),
            message: format!(
                "cluster.identity is bootstrap, but Kubernetes {v} has no TLS bootstrapping (from {}; src/os/windows/k8s.yaml `tls_bootstrap`, docs/research/bootstrap.md#bt-releases)",
                TABLE.tls_bootstrap.join_since
            ),
            hint: "set `identity: shared` and cluster.kubeconfig, or use Kubernetes 1.8 or later".into(),
        }),
        Identity::Bootstrap if !https => problems.push(Problem {
            pos: pos.identity.unwrap_or(pos.name),
            message: "cluster.identity is bootstrap, but api_server is not https: a node's certificate is for TLS".into(),
            hint: "write api_server as https://HOST:6443".into(),
        }),
        Identity::Bootstrap
            if !inv
                .hosts
                .iter()
                .any(|h| h.role == crate::inventory::Role::ControlPlane && h.os == Os::Linux) =>
        {
            problems.push(Problem {
                pos: pos.identity.unwrap_or(pos.name),
                message: "cluster.identity is bootstrap, but the inventory has no Linux control-plane host: kwinctl makes each run's bootstrap token there (`kubeadm token create`)".into(),
                hint: "add the control plane as a host with `role: control-plane`, or set `identity: shared` and cluster.kubeconfig".into(),
            })
        }
        Identity::Shared if https && c.kubeconfig.is_none() && c.identity_given.is_none() => {
            problems.push(Problem {
                pos: pos.api_server.unwrap_or(pos.name),
                message: format!(
                    "api_server is https, and Kubernetes {v} cannot join Windows nodes with their own identity: without cluster.kubeconfig their kubelet and kube-proxy would have no credentials and no CA for it"
                ),
                hint: "set `identity: shared` and cluster.kubeconfig to a kubeconfig with embedded credentials".into(),
            })
        }
        _ => {}
    }
}

/// Whether release `v` can join a Windows node with an identity of its own
/// (a bootstrap token, an approved CSR, its own client certificate) and
/// rotate that certificate, from the table's `tls_bootstrap` row with its
/// sources (docs/research/bootstrap.md#bt-releases).
pub fn join_note(v: &KubeVersion) -> String {
    let row = &TABLE.tls_bootstrap;
    let join = minor(&row.join_since);
    let rotation = minor(&row.rotation_since);
    let can = |since: Minor| if v.minor >= since { "has" } else { "lacks" };
    format!(
        "Kubernetes {v} {} TLS bootstrapping (a node's own client certificate from a bootstrap token, {}+) and {} client certificate rotation ({}+); sources: src/os/windows/k8s.yaml `tls_bootstrap`, docs/research/bootstrap.md#bt-releases",
        can(join),
        row.join_since,
        can(rotation),
        row.rotation_since,
    )
}

/// What the profile is, in words.
pub fn profile_words(p: Profile) -> &'static str {
    match p {
        Profile::Transparent => "Docker transparent network, userspace kube-proxy",
        Profile::L2Bridge => {
            "containerd, HNS L2Bridge network with win-bridge, kernelspace kube-proxy"
        }
    }
}

/// The release `kwinctl init` writes, and the example other hints give: the
/// newest the l2bridge profile's table knows, at its first patch release.
pub fn newest_release() -> String {
    let (_, hi) = profile_range(Profile::L2Bridge);
    format!("{}.0", hi.unwrap_or(Minor::new(1, 24)))
}

/// The newest containerd release line's minimum containerd supports for
/// Kubernetes `m` (what `kwinctl init` writes), if the table knows `m`.
pub fn newest_containerd(m: Minor) -> Option<&'static str> {
    TABLE
        .containerd
        .iter()
        .find(|r| covers(&r.since, Some(&r.until), m))
        .and_then(|r| r.minimum.last())
        .map(String::as_str)
}

/// The l2bridge profile puts a placeholder HNS network (192.168.255.0/30,
/// `hns::PLACEHOLDER_SUBNET`) on every Windows node's vSwitch: it must not
/// share addresses with the pod network (a node's block would overlap it on
/// the same vSwitch, and a route to it would compete with the placeholder's
/// on-link one), the service network or a node's address.
fn placeholder_problems(inv: &Inventory, problems: &mut Vec<Problem>) {
    use crate::inventory::nets_overlap;
    use crate::os::windows::hns::PLACEHOLDER_SUBNET;
    let ph: Ipv4Net = PLACEHOLDER_SUBNET.parse().expect("placeholder subnet");
    let what = format!(
        "the l2bridge profile's placeholder HNS network {ph}, which kwinctl creates on every Windows node's vSwitch"
    );
    let c = &inv.cluster;
    for (key, net, at) in [
        ("cluster_cidr", c.cluster_cidr, c.pos.cluster_cidr),
        ("service_cidr", c.service_cidr, c.pos.service_cidr),
    ] {
        if nets_overlap(&net, &ph) {
            problems.push(Problem {
                pos: at,
                message: format!("cluster.{key} {net} overlaps {what}"),
                hint: format!(
                    "pick a {key} that does not contain {ph} (e.g. {})",
                    if key == "cluster_cidr" {
                        "10.244.0.0/16"
                    } else {
                        "10.96.0.0/12"
                    }
                ),
            });
        }
    }
    for h in inv.hosts.iter().filter(|h| ph.contains(&h.address)) {
        problems.push(Problem {
            pos: h.pos,
            message: format!("host {}'s address {} is inside {what}", h.name, h.address),
            hint: format!("give the node an address outside {ph}"),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cluster.identity` as the release, the API server and the kubeconfig
    /// decide it, and the choices `check` refuses (issue 35).
    #[test]
    fn the_identity_follows_the_release_and_bad_choices_are_refused() {
        let inv = |cluster: &str, cp: bool| {
            let control = if cp {
                "  - { name: lin01, os: linux, role: control-plane, address: 10.0.0.10 }\n"
            } else {
                "  - { name: lin01, os: linux, address: 10.0.0.10 }\n"
            };
            let text = format!(
                "cluster:\n  name: c\n  cluster_cidr: 10.244.0.0/16\n  service_cidr: 10.96.0.0/12\n{cluster}hosts:\n{control}  - {{ name: win01, os: windows, address: 10.0.0.11 }}\n"
            );
            crate::inventory::Inventory::parse(std::path::Path::new("i.yaml"), &text).unwrap()
        };
        let https = "  api_server: https://10.0.0.10:6443\n";
        let modern =
            format!("{https}  kubernetes_version: \"1.30.4\"\n  containerd_version: \"1.7.20\"\n");
        let i = inv(&modern, true);
        assert_eq!(identity(&i.cluster), Identity::Bootstrap);
        // (the binaries this inventory leaves out are other rules' problems)
        let about = |p: &Vec<crate::inventory::Problem>| {
            p.iter()
                .filter(|p| {
                    ["identity", "kubeconfig", "control-plane", "credentials"]
                        .iter()
                        .any(|w| p.message.contains(w))
                })
                .count()
        };
        assert_eq!(
            about(&inventory_problems(&i)),
            0,
            "{:?}",
            inventory_problems(&i)
        );
        // no control plane to make tokens on
        let p = inventory_problems(&inv(&modern, false));
        assert!(
            p.iter()
                .any(|p| p.message.contains("no Linux control-plane host")),
            "{p:?}"
        );
        // 1.7: shared, and without a kubeconfig there are no credentials
        let old = format!("{https}  kubernetes_version: \"1.7.16\"\n");
        assert_eq!(identity(&inv(&old, true).cluster), Identity::Shared);
        let p = inventory_problems(&inv(&old, true));
        assert!(
            p.iter()
                .any(|p| p.message.contains("without cluster.kubeconfig")),
            "{p:?}"
        );
        // bootstrap asked for on 1.7
        let asked = format!("{old}  identity: bootstrap\n");
        let p = inventory_problems(&inv(&asked, true));
        assert!(
            p.iter()
                .any(|p| p.message.contains("has no TLS bootstrapping")),
            "{p:?}"
        );
        // http: nothing to bootstrap against
        let http = "  api_server: http://10.0.0.10:8080\n  kubernetes_version: \"1.30.4\"\n  containerd_version: \"1.7.20\"\n";
        assert_eq!(identity(&inv(http, true).cluster), Identity::Shared);
    }
}
