//! The minijinja environment over `templates/` (embedded in the binary).
//!
//! Templates only say *how* to do one action on one OS; which actions run is
//! decided in `diff`. Every value that reaches a script goes through the `sh`
//! filter (single-quoted) or `sh_comment` (made safe for a comment line).

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use minijinja::{Environment, UndefinedBehavior, context};

use crate::diff::windows::WinAction;
use crate::diff::{Action, Describe};
use crate::facts::ROUTE_PROTO;
use crate::plan::{FileSource, HNS_ADAPTER, KUBE_PROXY_SWITCH, NodePlan};

/// Every template, embedded: (name, source).
const TEMPLATES: &[(&str, &str)] = &[
    (
        "linux/prelude.sh",
        include_str!("../templates/linux/prelude.sh.j2"),
    ),
    (
        "linux/probe.sh",
        include_str!("../templates/linux/probe.sh.j2"),
    ),
    (
        "linux/set_routes.sh",
        include_str!("../templates/linux/set_routes.sh.j2"),
    ),
    (
        "linux/record_pod_cidr.sh",
        include_str!("../templates/linux/record_pod_cidr.sh.j2"),
    ),
    (
        "linux/enable_forwarding.sh",
        include_str!("../templates/linux/enable_forwarding.sh.j2"),
    ),
    (
        "linux/set_route.sh",
        include_str!("../templates/linux/set_route.sh.j2"),
    ),
    (
        "linux/del_route.sh",
        include_str!("../templates/linux/del_route.sh.j2"),
    ),
    (
        "linux/write_boot_script.sh",
        include_str!("../templates/linux/write_boot_script.sh.j2"),
    ),
    (
        "linux/install_unit.sh",
        include_str!("../templates/linux/install_unit.sh.j2"),
    ),
    (
        "linux/remove_node_files.sh",
        include_str!("../templates/linux/remove_node_files.sh.j2"),
    ),
    (
        "linux/boot.sh",
        include_str!("../templates/linux/boot.sh.j2"),
    ),
    (
        "linux/boot.service",
        include_str!("../templates/linux/boot.service.j2"),
    ),
    (
        "windows/prelude.ps1",
        include_str!("../templates/windows/prelude.ps1.j2"),
    ),
    (
        "windows/probe.ps1",
        include_str!("../templates/windows/probe.ps1.j2"),
    ),
    (
        "windows/record_pod_cidr.ps1",
        include_str!("../templates/windows/record_pod_cidr.ps1.j2"),
    ),
    (
        "windows/enable_routing.ps1",
        include_str!("../templates/windows/enable_routing.ps1.j2"),
    ),
    (
        "windows/create_switch.ps1",
        include_str!("../templates/windows/create_switch.ps1.j2"),
    ),
    (
        "windows/create_network.ps1",
        include_str!("../templates/windows/create_network.ps1.j2"),
    ),
    (
        "windows/set_gateway_address.ps1",
        include_str!("../templates/windows/set_gateway_address.ps1.j2"),
    ),
    (
        "windows/add_route.ps1",
        include_str!("../templates/windows/add_route.ps1.j2"),
    ),
    (
        "windows/del_route.ps1",
        include_str!("../templates/windows/del_route.ps1.j2"),
    ),
    (
        "windows/pull_image.ps1",
        include_str!("../templates/windows/pull_image.ps1.j2"),
    ),
    (
        "windows/place_file.ps1",
        include_str!("../templates/windows/place_file.ps1.j2"),
    ),
    (
        "windows/install_service.ps1",
        include_str!("../templates/windows/install_service.ps1.j2"),
    ),
    (
        "windows/start_service.ps1",
        include_str!("../templates/windows/start_service.ps1.j2"),
    ),
    (
        "windows/remove_service.ps1",
        include_str!("../templates/windows/remove_service.ps1.j2"),
    ),
    (
        "windows/remove_network.ps1",
        include_str!("../templates/windows/remove_network.ps1.j2"),
    ),
    (
        "windows/remove_switch.ps1",
        include_str!("../templates/windows/remove_switch.ps1.j2"),
    ),
    (
        "windows/remove_file.ps1",
        include_str!("../templates/windows/remove_file.ps1.j2"),
    ),
];

/// Quote a value for POSIX sh: always single quotes, `'` as `'\''`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Quote a value for PowerShell: a single-quoted (verbatim) string. PowerShell
/// also takes the typographic single quotes as quote characters, so every one
/// of them is doubled too.
pub fn ps_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if matches!(c, '\'' | '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}') {
            out.push(c);
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// A PowerShell array body: `'a', 'b'` (empty for no items).
pub fn ps_list(items: &[String]) -> String {
    items
        .iter()
        .map(|i| ps_quote(i))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Make a value safe inside a `#` comment: no line breaks or control chars.
fn sh_comment(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

pub struct Renderer {
    env: Environment<'static>,
}

impl Default for Renderer {
    fn default() -> Self {
        Self::new()
    }
}

/// How long the verify probe waits for each ping (seconds).
pub const PING_WAIT_SECS: u32 = 2;

impl Renderer {
    pub fn new() -> Renderer {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(true);
        env.add_filter("sh", |v: String| sh_quote(&v));
        env.add_filter("sh_comment", |v: String| sh_comment(&v));
        env.add_filter("ps", |v: String| ps_quote(&v));
        env.add_filter("ps_comment", |v: String| sh_comment(&v));
        for (name, src) in TEMPLATES {
            env.add_template(name, src)
                .unwrap_or_else(|e| panic!("template {name}: {e}"));
        }
        Renderer { env }
    }

    fn render(&self, name: &str, ctx: minijinja::Value) -> String {
        self.env
            .get_template(name)
            .and_then(|t| t.render(ctx))
            .unwrap_or_else(|e| panic!("template {name}: {e:#}"))
    }

    /// The read-only probe; `reach` lists addresses to ping (verify).
    /// `nodes`: also list the cluster's nodes with kubectl (control plane).
    pub fn linux_probe(&self, reach: &[Ipv4Addr], nodes: bool) -> String {
        let reach: Vec<String> = reach.iter().map(|a| a.to_string()).collect();
        self.render(
            "linux/probe.sh",
            context! { reach, ping_wait => PING_WAIT_SECS, nodes },
        )
    }

    /// `/etc/kwinctl/boot.sh` for a node.
    pub fn linux_boot_script(&self, node: &NodePlan) -> String {
        let routes: Vec<_> = node
            .routes()
            .into_iter()
            .map(|(dst, via)| context! { dst => dst.to_string(), via => via.to_string() })
            .collect();
        self.render(
            "linux/boot.sh",
            context! {
                host => node.name, cluster => node.cluster_name,
                pod_cidr => node.pod_cidr.to_string(), routes, proto => ROUTE_PROTO,
            },
        )
    }

    pub fn linux_unit(&self) -> String {
        self.render("linux/boot.service", context! {})
    }

    /// The shell for one action (a body run under `set -e`).
    pub fn linux_action(&self, a: &Action) -> String {
        let p = ROUTE_PROTO;
        match a {
            Action::RecordPodCidr { pod_cidr } => self.render(
                "linux/record_pod_cidr.sh",
                context! { pod_cidr => pod_cidr.to_string() },
            ),
            Action::EnableForwarding => self.render("linux/enable_forwarding.sh", context! {}),
            Action::AddRoute { dst, via } | Action::ReplaceRoute { dst, via, .. } => self.render(
                "linux/set_route.sh",
                context! { dst => dst.to_string(), via => via.to_string(), proto => p },
            ),
            Action::DelRoute { dst, .. } => self.render(
                "linux/del_route.sh",
                context! { dst => dst.to_string(), proto => p },
            ),
            Action::WriteBootScript { content } => self.render(
                "linux/write_boot_script.sh",
                context! { content, sha => crate::diff::sha256_hex(content) },
            ),
            Action::InstallUnit { content } => {
                self.render("linux/install_unit.sh", context! { content })
            }
            Action::RemoveNodeFiles => self.render("linux/remove_node_files.sh", context! {}),
        }
    }

    /// One script for a host: the prelude, each action as a function run by
    /// `kw_run` (stopping at the first failure), then — when `then_probe` is
    /// given — the probe, so that applying and re-probing is one remote call.
    pub fn linux_script(
        &self,
        host: &str,
        cluster: &str,
        actions: &[&Action],
        then_probe: Option<(&[Ipv4Addr], bool)>,
    ) -> String {
        let mut s = self.render("linux/prelude.sh", context! { host, cluster });
        let mut i = 0;
        while i < actions.len() {
            // A run of two or more route additions is one `ip -batch`.
            let run = actions[i..]
                .iter()
                .take_while(|a| route_set(a).is_some())
                .count();
            let (comment, body, runner, n) = if run >= 2 {
                let last = i + run - 1;
                let routes: Vec<_> = actions[i..=last]
                    .iter()
                    .filter_map(|a| route_set(a))
                    .map(|(dst, via)| context! { dst => dst.to_string(), via => via.to_string() })
                    .collect();
                let body = self.render(
                    "linux/set_routes.sh",
                    context! { routes, proto => ROUTE_PROTO },
                );
                (
                    format!("actions {i}-{last}: {run} routes"),
                    body,
                    format!("kw_run_batch {i} {last}"),
                    run,
                )
            } else {
                let a = actions[i];
                (
                    format!("action {i}: {}", sh_comment(&a.describe())),
                    self.linux_action(a),
                    format!("kw_run {i}"),
                    1,
                )
            };
            s.push_str(&format!(
                "\n# {comment}\nkw_action_{i}() (\nset -e\n{}\n)\n{runner} kw_action_{i}\n[ \"$kw_rc\" -eq 0 ] || exit 0\n",
                body.trim_end()
            ));
            i += n;
        }
        if let Some((reach, nodes)) = then_probe {
            s.push('\n');
            s.push_str(&self.linux_probe(reach, nodes));
        }
        s
    }
}

/// A route that `ip route replace` sets: destination and next hop.
fn route_set(a: &Action) -> Option<(Ipv4Net, Ipv4Addr)> {
    match a {
        Action::AddRoute { dst, via } | Action::ReplaceRoute { dst, via, .. } => Some((*dst, *via)),
        _ => None,
    }
}

/// The one-line machine-readable header a Windows block starts with: the
/// simulated Windows host acts on it (the PowerShell below it is for Windows).
pub fn sim_header(v: serde_json::Value) -> String {
    format!("# kwinctl-sim: {v}\n")
}

/// Where the Windows probe looks, and what it pings.
pub struct WinProbe<'a> {
    pub files: &'a [String],
    pub services: &'a [String],
    pub reach: &'a [Ipv4Addr],
}

impl Renderer {
    pub fn windows_probe(&self, p: &WinProbe) -> String {
        let reach: Vec<String> = p.reach.iter().map(|a| a.to_string()).collect();
        let header = sim_header(serde_json::json!({
            "kind": "probe", "files": p.files, "services": p.services, "reach": reach,
        }));
        header
            + &self.render(
                "windows/probe.ps1",
                context! {
                    files => ps_list(p.files), services => ps_list(p.services),
                    reach => ps_list(&reach),
                },
            )
    }

    /// The PowerShell for one action.
    pub fn windows_action(&self, a: &WinAction) -> String {
        match a {
            WinAction::RecordPodCidr { pod_cidr } => self.render(
                "windows/record_pod_cidr.ps1",
                context! { pod_cidr => pod_cidr.to_string() },
            ),
            WinAction::EnableRouting => self.render("windows/enable_routing.ps1", context! {}),
            WinAction::CreateSwitch => self.render(
                "windows/create_switch.ps1",
                context! { switch => KUBE_PROXY_SWITCH },
            ),
            WinAction::CreateNetwork {
                name,
                subnet,
                gateway,
                replace,
            } => self.render(
                "windows/create_network.ps1",
                context! { name, subnet => subnet.to_string(), gateway => gateway.to_string(), replace },
            ),
            WinAction::SetGatewayAddress { gateway, prefix } => self.render(
                "windows/set_gateway_address.ps1",
                context! { adapter => HNS_ADAPTER, gateway => gateway.to_string(), prefix },
            ),
            WinAction::AddRoute { dst, via, replace } => self.render(
                "windows/add_route.ps1",
                context! { dst => dst.to_string(), via => via.to_string(), replace },
            ),
            WinAction::DelRoute { dst, .. } => self.render(
                "windows/del_route.ps1",
                context! { dst => dst.to_string() },
            ),
            WinAction::PullImage { image } => {
                self.render("windows/pull_image.ps1", context! { image })
            }
            WinAction::PlaceFile { file } => {
                let (url, content) = match &file.source {
                    FileSource::Url(u) => (Some(u.clone()), None),
                    FileSource::Inline(b) => (
                        None,
                        Some(base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b)),
                    ),
                };
                self.render(
                    "windows/place_file.ps1",
                    context! { path => file.path, sha256 => file.sha256, url, content },
                )
            }
            WinAction::InstallService { service, .. } => self.render(
                "windows/install_service.ps1",
                context! {
                    name => service.name, display => service.display, binpath => service.binpath,
                    depends => ps_list(&service.depends), env => ps_list(&service.env),
                },
            ),
            WinAction::StartService { name } => {
                self.render("windows/start_service.ps1", context! { name })
            }
            WinAction::RemoveService { name } => {
                self.render("windows/remove_service.ps1", context! { name })
            }
            WinAction::RemoveNetwork { name } => {
                self.render("windows/remove_network.ps1", context! { name })
            }
            WinAction::RemoveSwitch => self.render(
                "windows/remove_switch.ps1",
                context! { switch => KUBE_PROXY_SWITCH },
            ),
            WinAction::RemoveFile { path } => {
                self.render("windows/remove_file.ps1", context! { path })
            }
        }
    }

    /// One PowerShell script for a Windows host: prelude, each action as a
    /// block led by its simulator header, then (optionally) the probe.
    pub fn windows_script(
        &self,
        host: &str,
        cluster: &str,
        address: Ipv4Addr,
        adapter: Option<&str>,
        actions: &[&WinAction],
        then_probe: Option<&WinProbe>,
    ) -> String {
        let mut s = sim_header(
            serde_json::json!({"kind": "prelude", "address": address.to_string(), "adapter": adapter}),
        );
        s += &self.render(
            "windows/prelude.ps1",
            context! { host, cluster, address => address.to_string(), adapter },
        );
        for (i, a) in actions.iter().enumerate() {
            let mut v = serde_json::to_value(a).expect("action JSON");
            v["id"] = i.into();
            let body = self.windows_action(a);
            s.push('\n');
            s += &sim_header(v);
            s += &format!(
                "# action {i}: {}\nInvoke-KwAction {i} {{\n{}\n}}\nif (-not $script:KwOk) {{ exit 0 }}\n",
                sh_comment(&a.describe()),
                body.trim_end()
            );
        }
        if let Some(p) = then_probe {
            s.push('\n');
            s += &self.windows_probe(p);
        }
        s
    }
}

/// The script a host would get on a freshly installed machine (`render`).
pub fn fresh_script(
    r: &Renderer,
    inv: &crate::inventory::Inventory,
    host: &crate::inventory::Host,
    node: &NodePlan,
) -> Result<String, String> {
    use crate::diff::{LinuxDesired, diff_linux, windows::diff_windows};
    use crate::facts::{LinuxFacts, windows::FileFact, windows::WindowsFacts};
    use crate::inventory::Os;
    match host.os {
        Os::Linux => {
            let boot = r.linux_boot_script(node);
            let unit = r.linux_unit();
            let d = diff_linux(
                &LinuxDesired {
                    node,
                    boot_script: &boot,
                    unit: &unit,
                },
                &LinuxFacts::fresh(true),
            )
            .map_err(|e| e.to_string())?;
            let actions: Vec<_> = d.actions().collect();
            Ok(r.linux_script(&host.name, &inv.cluster.name, &actions, None))
        }
        Os::Windows => {
            let desired =
                crate::plan::windows_desired(inv, host, node, &crate::plan::Uploads::default())?;
            let mut facts = WindowsFacts::fresh(node.address, desired.adapter.as_deref());
            // Binaries kwinctl does not place are assumed to be there already.
            for req in &desired.required_files {
                if !desired.files.iter().any(|f| &f.path == req) {
                    facts.files.push(FileFact {
                        path: req.clone(),
                        sha256: String::new(),
                    });
                }
            }
            let d = diff_windows(node, &desired, &facts).map_err(|e| e.to_string())?;
            let actions: Vec<_> = d.actions().collect();
            Ok(r.windows_script(
                &host.name,
                &inv.cluster.name,
                node.address,
                desired.adapter.as_deref(),
                &actions,
                None,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_comment("a\nrm -rf /"), "a?rm -rf /");
    }

    #[test]
    fn every_template_renders_and_actions_are_wrapped() {
        let r = Renderer::new();
        let acts = [
            Action::RecordPodCidr {
                pod_cidr: "198.19.0.0/24".parse().unwrap(),
            },
            Action::EnableForwarding,
            Action::AddRoute {
                dst: "198.19.1.0/24".parse().unwrap(),
                via: "198.18.1.3".parse().unwrap(),
            },
            Action::DelRoute {
                dst: "198.19.9.0/24".parse().unwrap(),
                via: None,
            },
            Action::WriteBootScript {
                content: "#!/bin/sh\necho hi\n".into(),
            },
            Action::RemoveNodeFiles,
        ];
        let refs: Vec<&Action> = acts.iter().collect();
        let s = r.linux_script(
            "h'1",
            "c",
            &refs,
            Some((&["198.18.1.3".parse().unwrap()], true)),
        );
        assert!(
            s.contains("kw_run 5 kw_action_5\n[ \"$kw_rc\" -eq 0 ] || exit 0\n"),
            "{s}"
        );
        assert!(s.contains("ip -4 route replace '198.19.1.0/24' via '198.18.1.3' proto 198"));
        assert!(s.contains("ip -4 route del '198.19.9.0/24' proto 198"));
        assert!(s.contains("#!/bin/sh\necho hi\nKWINCTL_BOOT_EOF\n"), "{s}");
        assert!(s.contains("ping -n -q -c 1 -W 2 '198.18.1.3'"));
        assert!(s.trim_end().ends_with("printf 'KWF end\\n'"), "{s}");
        assert!(s.contains("kubectl get nodes"), "{s}");
        // the shell accepts it
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s.sh");
        std::fs::write(&f, &s).unwrap();
        let st = std::process::Command::new("sh")
            .arg("-n")
            .arg(&f)
            .status()
            .unwrap();
        assert!(st.success(), "sh -n rejected the script");
    }

    #[test]
    fn consecutive_routes_are_one_ip_batch() {
        let r = Renderer::new();
        let route = |i: u8| Action::AddRoute {
            dst: format!("198.19.{i}.0/24").parse().unwrap(),
            via: format!("198.18.1.{i}").parse().unwrap(),
        };
        let acts = [
            Action::EnableForwarding,
            route(2),
            route(3),
            route(4),
            Action::DelRoute {
                dst: "198.19.9.0/24".parse().unwrap(),
                via: None,
            },
            route(5),
        ];
        let refs: Vec<&Action> = acts.iter().collect();
        let s = r.linux_script("h1", "c", &refs, None);
        assert!(s.contains("kw_run 0 kw_action_0\n"), "{s}");
        assert!(s.contains("kw_run_batch 1 3 kw_action_1\n"), "{s}");
        assert!(
            s.contains(
                "route replace 198.19.2.0/24 via 198.18.1.2 proto 198\n\
                 route replace 198.19.3.0/24 via 198.18.1.3 proto 198\n\
                 route replace 198.19.4.0/24 via 198.18.1.4 proto 198\n\
                 KWINCTL_ROUTES_EOF\n"
            ),
            "{s}"
        );
        // a lone route stays its own action
        assert!(s.contains("kw_run 4 kw_action_4\n"), "{s}");
        assert!(s.contains("kw_run 5 kw_action_5\n"), "{s}");
        assert_eq!(s.matches("ip -4 -batch").count(), 1, "{s}");
    }

    /// The probe template and the facts parser agree: run the probe here,
    /// read-only, and parse what it prints.
    #[test]
    fn the_probe_runs_and_parses() {
        use std::io::Write;
        let r = Renderer::new();
        let script = r.linux_probe(&["127.0.0.1".parse().unwrap()], true);
        let mut child = std::process::Command::new("sh")
            .arg("-s")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let f = crate::facts::LinuxFacts::parse(&stdout, &String::from_utf8_lossy(&out.stderr))
            .unwrap_or_else(|e| panic!("{e}\n{stdout}"));
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(f.hostname, hostname.trim());
        assert!(f.routes.iter().any(|r| r.dev.is_some()), "{stdout}");
        assert_eq!(f.reach.len(), 1, "{stdout}");
    }
}
