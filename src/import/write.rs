//! The kwinctl inventory `import` writes: YAML with a comment beside every
//! host, group and setting saying where in the Ansible inventory it came
//! from. Strings are written as JSON strings (valid YAML double-quoted
//! scalars), so no value can change the file's structure.

use std::fmt::Write;
use std::path::Path;

use super::known::HOST_KEY_CHECKING;
use super::map::Plan;
use super::setting::{Scalar, Setting};
use crate::inventory::{Os, Role};

use crate::inventory::PLACEHOLDER;

fn scalar(v: &Scalar) -> String {
    match v {
        Scalar::Str(s) => serde_json::to_string(s).unwrap_or_default(),
        Scalar::Int(n) => n.to_string(),
        Scalar::Bool(b) => b.to_string(),
        Scalar::Placeholder => PLACEHOLDER.to_string(),
    }
}

/// `ssh:` / `winrm:` blocks of settings, at `indent`.
fn blocks(out: &mut String, settings: &[Setting], indent: usize) {
    for block in ["ssh", "winrm"] {
        let mine: Vec<&Setting> = settings
            .iter()
            .filter(|s| s.key.split('.').next() == Some(block))
            .collect();
        if mine.is_empty() {
            continue;
        }
        let only_placeholders = mine.iter().all(|s| s.value == Scalar::Placeholder);
        let empty = if only_placeholders { " {}" } else { "" };
        let _ = writeln!(out, "{:indent$}{block}:{empty}", "");
        for s in mine {
            let key = s.key.split_once('.').map(|(_, k)| k).unwrap_or(s.key);
            let hash = if s.value == Scalar::Placeholder {
                "# "
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "{:w$}{hash}{key}: {}  # {}",
                "",
                scalar(&s.value),
                s.why,
                w = indent + 2
            );
        }
    }
}

pub(super) fn inventory(plan: &Plan, source: &str) -> String {
    let mut o = String::new();
    let windows = plan.hosts.iter().any(|h| h.os == Os::Windows);
    let _ = writeln!(
        o,
        "# Written by `kwinctl import ansible` from {source}.\n\
         # Fill in the cluster: section (`kwinctl check` refuses the {PLACEHOLDER} values\n\
         # until then); comments name the Ansible inventory's lines."
    );
    for (var, at) in &plan.passwords {
        let _ = writeln!(
            o,
            "# WinRM passwords are not copied: export {var} (ansible_password, {at}) before running kwinctl."
        );
    }
    let _ = writeln!(o, "cluster:");
    let mut fill = |key: &str, what: &str| {
        let _ = writeln!(o, "  {key}: {PLACEHOLDER}  # {what}");
    };
    fill(
        "name",
        "a name for the cluster: letters, digits, '-', '_', '.'",
    );
    fill(
        "cluster_cidr",
        "the pod network, e.g. 10.244.0.0/16 (one node_prefix block, /24 by default, per node)",
    );
    fill(
        "service_cidr",
        "the service network, e.g. 10.96.0.0/12 (must not overlap the pod network or the hosts)",
    );
    if windows {
        fill(
            "api_server",
            "what the Windows nodes' kubelet talks to, e.g. https://CONTROL-PLANE:6443",
        );
        fill(
            "kubernetes_version",
            &format!(
                "the Kubernetes release of the Windows nodes' kubelet, e.g. \"{}\"",
                crate::os::windows::k8s::newest_release()
            ),
        );
        let _ = writeln!(
            o,
            "  # kubeconfig: ./kubelet.kubeconfig  # required with an https api_server (see README)"
        );
    }
    if !plan.defaults.is_empty() {
        let _ = writeln!(o, "defaults:  # Ansible's `all` vars");
        blocks(&mut o, &plan.defaults, 2);
    }
    if !plan.groups.is_empty() {
        let _ = writeln!(o, "groups:");
        for g in &plan.groups {
            let note = if g.built_in {
                format!("; built in: every host with os: {}", g.name)
            } else if g.name != g.ansible {
                format!("; {} is a built-in group's name in kwinctl", g.ansible)
            } else {
                String::new()
            };
            let empty = if g.settings.is_empty() && !(g.built_in && g.name == "windows") {
                " {}"
            } else {
                ""
            };
            let _ = writeln!(
                o,
                "  {}:{empty}  # Ansible group {}, line {}{note}",
                g.name, g.ansible, g.line
            );
            blocks(&mut o, &g.settings, 4);
            if g.built_in && g.name == "windows" {
                let _ = writeln!(
                    o,
                    "    # windows:  # every binary the profile runs: url and sha256, or preinstalled \
                     (docs/inventory.md, \"Binaries\"); `kwinctl check` names each one missing\n    \
                     #   binaries:\n    \
                     #     kubelet: {{ url: \"https://...\", sha256: ... }}\n    \
                     #     kube-proxy: {{ url: \"https://...\", sha256: ... }}\n    \
                     #     containerd: {{ preinstalled: true }}  # on the node already"
                );
                if g.settings.is_empty() {
                    let _ = writeln!(o, "    {{}}");
                }
            }
        }
    }
    let _ = writeln!(o, "hosts:");
    for h in &plan.hosts {
        let lines: Vec<String> = h.lines.iter().map(|l| l.to_string()).collect();
        let at: Vec<String> = lines.iter().map(|l| format!("{source}:{l}")).collect();
        let _ = writeln!(o, "  # {}: from {}", h.name, at.join(", "));
        // (names are checked: letters, digits, '-', '_', '.')
        let _ = writeln!(o, "  - name: {}", h.name);
        let os_why = match (h.os, h.windows_ssh) {
            (Os::Linux, _) => "",
            (Os::Windows, false) => "  # ansible_connection winrm/psrp",
            (Os::Windows, true) => "  # ansible_shell_type powershell/cmd over ssh",
        };
        let _ = writeln!(o, "    os: {}{os_why}", h.os);
        if let Some((role, why)) = &h.role {
            let _ = writeln!(
                o,
                "    role: {}  # {why}",
                match role {
                    Role::ControlPlane => "control-plane",
                    Role::Worker => "worker",
                }
            );
        }
        let _ = writeln!(o, "    address: {}  # {}", h.address.0, h.address.1);
        if let Some((c, why)) = &h.connect {
            let _ = writeln!(o, "    connect: {c}  # {why}: where Ansible connects");
        }
        if !h.groups.is_empty() {
            let _ = writeln!(o, "    groups: [{}]", h.groups.join(", "));
        }
        let has_ssh = h.settings.iter().any(|s| s.key.starts_with("ssh."));
        if h.windows_ssh && !has_ssh {
            let _ = writeln!(o, "    ssh: {{}}  # reached over SSH, not WinRM");
        }
        blocks(&mut o, &h.settings, 4);
        if !h.unused.is_empty() {
            let _ = writeln!(o, "    # not used by kwinctl: {}", h.unused.join(", "));
        }
    }
    o
}

/// What the operator does next, on stderr.
pub(super) fn next_steps(plan: &Plan, out: Option<&Path>) -> Vec<String> {
    let n = plan.hosts.len();
    let windows = plan.hosts.iter().filter(|h| h.os == Os::Windows).count();
    let target = out
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "the written inventory".into());
    let mut v = vec![format!(
        "imported {n} host{} ({} Linux, {windows} Windows) and {} group{}",
        if n == 1 { "" } else { "s" },
        n - windows,
        plan.groups.len(),
        if plan.groups.len() == 1 { "" } else { "s" }
    )];
    v.push(format!(
        "next: fill in the {PLACEHOLDER} values of cluster: in {target}, then run `kwinctl check` on it"
    ));
    if !plan
        .hosts
        .iter()
        .any(|h| h.role.as_ref().is_some_and(|r| r.0 == Role::ControlPlane))
    {
        v.push(
            "note: no host is marked control-plane (kwinctl_role=control-plane, or an Ansible group \
             such as kube_control_plane): mark the Linux control plane `role: control-plane`, or `up` \
             refuses to change the cluster"
                .into(),
        );
    }
    for (var, at) in &plan.passwords {
        v.push(format!(
            "export {var}=... (the WinRM password of {at}; not copied)"
        ));
    }
    // one note for the whole inventory, each variable named once
    let (checking, aside): (Vec<&str>, Vec<&str>) = plan
        .ignored
        .iter()
        .map(String::as_str)
        .partition(|k| HOST_KEY_CHECKING.contains(k));
    let mut parts = Vec::new();
    if !aside.is_empty() {
        parts.push(format!(
            "left aside, as they do not change how kwinctl reaches a host (each host's comment \
             in the inventory names the lines): {}",
            aside.join(", ")
        ));
    }
    if !checking.is_empty() {
        parts.push(format!(
            "{} not taken: kwinctl checks every SSH host key against its own known hosts, \
             whatever Ansible was told (docs/ssh-trust.md)",
            checking.join(", ")
        ));
    }
    if !parts.is_empty() {
        v.push(format!("note: {}", parts.join("; ")));
    }
    let pins = plan
        .groups
        .iter()
        .flat_map(|g| &g.settings)
        .chain(plan.defaults.iter())
        .chain(plan.hosts.iter().flat_map(|h| &h.settings))
        .any(|s| s.value == Scalar::Placeholder);
    if pins {
        v.push(
            "pin the WinRM certificates Ansible did not check (the commented cert_sha256 lines): \
             `kwinctl verify -i INVENTORY` prints each listener's SHA-256 and the line to add"
                .into(),
        );
    }
    v
}
