//! Groups: named sets of hosts with settings of their own, as Ansible's
//! groups and group variables are. A host names the groups it is in
//! (`groups: [web, dc1]`); `groups:` at the top gives each group's `ssh`,
//! `winrm`, `windows` and `linux` settings. Every host is also in the built-in groups
//! of its OS and role (`linux`/`windows`, `control-plane`/`worker`), which
//! may have settings too; `defaults` is what Ansible calls `all`.
//!
//! Each key is taken from the host's own block, else from its groups, else
//! from `defaults`. Two groups of one host giving one key different values is
//! an error naming both places (Ansible would pick one by depth and then by
//! name; an operator reading the file cannot see that choice), unless the
//! host sets the key itself.

use std::collections::BTreeMap;

use serde_saphyr::Spanned;

use super::linux::RawLinux;
use super::raw::{
    Pairs, RawBinaries, RawDefaults, RawGroup, RawHost, RawSsh, RawWinRm, RawWindows,
};
use super::same::Same;
use super::validator::Validator;
use super::{Os, Pos, Role, valid_name};
use crate::text::echo;

/// The groups every host is in by its OS and role; `all` is `defaults`.
pub const BUILT_IN: [&str; 4] = ["linux", "windows", "control-plane", "worker"];

/// A group declared under `groups:`.
pub(super) struct Declared<'a> {
    pub name: String,
    pub pos: Pos,
    pub settings: Option<&'a RawGroup>,
}

/// A host's settings after layering: defaults < groups < the host's own.
#[derive(Default)]
pub(super) struct Layered {
    pub ssh: RawSsh,
    pub winrm: RawWinRm,
    pub windows: RawWindows,
    pub linux: RawLinux,
}

/// Two groups of a host set one key differently.
pub(super) struct Clash {
    pub key: String,
    pub first: (String, Pos),
    pub second: (String, Pos),
    pub host: String,
}

/// `winrm.password_env` and `winrm.password_file` of one layer.
#[derive(Clone)]
struct Password(Option<Spanned<String>>, Option<Spanned<String>>);

impl Same for Password {
    fn same(&self, o: &Self) -> bool {
        let v = |s: &Option<Spanned<String>>| s.as_ref().map(|s| s.value.clone());
        v(&self.0) == v(&o.0) && v(&self.1) == v(&o.1)
    }
}

fn password(w: Option<&RawWinRm>) -> Option<Spanned<Password>> {
    let w = w?;
    let at = w.password_env.as_ref().or(w.password_file.as_ref())?;
    Some(Spanned::new(
        Password(w.password_env.clone(), w.password_file.clone()),
        at.referenced,
        at.defined,
    ))
}

/// One key: the host's own value, else the one its groups agree on, else
/// the default.
fn pick<'a, T: Clone + Same + 'a>(
    key: &str,
    host: &str,
    own: Option<&Spanned<T>>,
    groups: impl Iterator<Item = (&'a str, Option<&'a Spanned<T>>)>,
    default: Option<&Spanned<T>>,
    clashes: &mut Vec<Clash>,
) -> Option<Spanned<T>> {
    if let Some(v) = own {
        return Some(v.clone());
    }
    let mut chosen: Option<(&str, &Spanned<T>)> = None;
    for (g, v) in groups {
        let Some(v) = v else { continue };
        match chosen {
            None => chosen = Some((g, v)),
            Some((first, f)) if !f.value.same(&v.value) => clashes.push(Clash {
                key: key.to_string(),
                first: (first.to_string(), Pos::from(f)),
                second: (g.to_string(), Pos::from(v)),
                host: host.to_string(),
            }),
            Some(_) => {}
        }
    }
    chosen.map(|(_, v)| v.clone()).or_else(|| default.cloned())
}

/// Layer the listed keys of one block.
macro_rules! layer {
    ($out:expr, $host:expr, $own:expr, $groups:expr, $def:expr, $clashes:expr, $block:literal,
     [$($f:ident = $k:literal),* $(,)?]) => {
        $(
            $out.$f = pick(
                concat!($block, ".", $k),
                $host,
                $own.and_then(|o| o.$f.as_ref()),
                $groups.iter().map(|(n, g)| (*n, g.and_then(|g| g.$f.as_ref()))),
                $def.and_then(|d| d.$f.as_ref()),
                $clashes,
            );
        )*
    };
}

/// A host's settings from its own blocks, its groups' (in the order they
/// are declared) and the defaults.
pub(super) fn layered(
    h: &RawHost,
    groups: &[(&str, &RawGroup)],
    defaults: &RawDefaults,
    clashes: &mut Vec<Clash>,
) -> Layered {
    // every key of every block is layered below: a key added to a block
    // and not here fails to compile (instead of being silently dropped)
    let RawSsh {
        user: _,
        port: _,
        identity: _,
        known_hosts: _,
        bastion: _,
    } = RawSsh::default();
    let RawWinRm {
        user: _,
        password_env: _,
        password_file: _,
        port: _,
        tls: _,
        auth: _,
        ca_file: _,
        cert_sha256: _,
        allow_basic_over_http: _,
        keytab: _,
        spn: _,
        bastion: _,
    } = RawWinRm::default();
    let RawWindows {
        binaries:
            RawBinaries {
                kubelet: _,
                kube_proxy: _,
                containerd: _,
                cni_plugins: _,
                kube_log_runner: _,
            },
        binaries_source: _,
        adapter: _,
        network_name: _,
        transparent_adapter: _,
        nodeport_sources: _,
        taints: _,
        cert_margin_days: _,
    } = RawWindows::default();
    let RawLinux { boot_wait: _ } = RawLinux::default();
    let host = h.name.value.as_str();
    let mut out = Layered::default();
    let ssh: Vec<(&str, Option<&RawSsh>)> =
        groups.iter().map(|(n, g)| (*n, g.ssh.as_ref())).collect();
    layer!(
        out.ssh,
        host,
        h.ssh.as_ref(),
        ssh,
        defaults.ssh.as_ref(),
        clashes,
        "ssh",
        [
            user = "user",
            port = "port",
            identity = "identity",
            known_hosts = "known_hosts",
            bastion = "bastion"
        ]
    );
    let winrm: Vec<(&str, Option<&RawWinRm>)> =
        groups.iter().map(|(n, g)| (*n, g.winrm.as_ref())).collect();
    layer!(
        out.winrm,
        host,
        h.winrm.as_ref(),
        winrm,
        defaults.winrm.as_ref(),
        clashes,
        "winrm",
        [
            user = "user",
            port = "port",
            tls = "tls",
            auth = "auth",
            ca_file = "ca_file",
            cert_sha256 = "cert_sha256",
            allow_basic_over_http = "allow_basic_over_http",
            keytab = "keytab",
            spn = "spn",
            bastion = "bastion"
        ]
    );
    // password_env and password_file are one setting: the layer that gives
    // either decides both.
    let chosen = pick(
        "winrm.password_env/password_file",
        host,
        password(h.winrm.as_ref()).as_ref(),
        winrm
            .iter()
            .map(|(n, w)| (*n, password(*w)))
            .collect::<Vec<_>>()
            .iter()
            .map(|(n, p)| (*n, p.as_ref())),
        password(defaults.winrm.as_ref()).as_ref(),
        clashes,
    );
    if let Some(p) = chosen {
        (out.winrm.password_env, out.winrm.password_file) = (p.value.0, p.value.1);
    }
    let windows: Vec<(&str, Option<&RawWindows>)> = groups
        .iter()
        .map(|(n, g)| (*n, g.windows.as_ref()))
        .collect();
    let own = h.windows.as_ref();
    let def = defaults.windows.as_ref();
    layer!(
        out.windows,
        host,
        own,
        windows,
        def,
        clashes,
        "windows",
        [
            binaries_source = "binaries_source",
            adapter = "adapter",
            network_name = "network_name",
            transparent_adapter = "transparent_adapter",
            nodeport_sources = "nodeport_sources",
            taints = "taints",
            cert_margin_days = "cert_margin_days"
        ]
    );
    let bins: Vec<(&str, Option<&RawBinaries>)> = windows
        .iter()
        .map(|(n, w)| (*n, w.map(|w| &w.binaries)))
        .collect();
    layer!(
        out.windows.binaries,
        host,
        own.map(|w| &w.binaries),
        bins,
        def.map(|w| &w.binaries),
        clashes,
        "windows.binaries",
        [
            kubelet = "kubelet",
            kube_proxy = "kube-proxy",
            containerd = "containerd",
            cni_plugins = "cni-plugins",
            kube_log_runner = "kube-log-runner"
        ]
    );
    let linux: Vec<(&str, Option<&RawLinux>)> =
        groups.iter().map(|(n, g)| (*n, g.linux.as_ref())).collect();
    layer!(
        out.linux,
        host,
        h.linux.as_ref(),
        linux,
        defaults.linux.as_ref(),
        clashes,
        "linux",
        [boot_wait = "boot_wait"]
    );
    out
}

/// The declared groups' names, built-in ones aside, in the file's order.
pub(super) fn in_order(declared: &BTreeMap<String, Declared>) -> Vec<String> {
    let mut v: Vec<&Declared> = declared
        .iter()
        .filter(|(k, _)| !BUILT_IN.contains(&k.as_str()))
        .map(|(_, d)| d)
        .collect();
    v.sort_by_key(|d| (d.pos.line, d.pos.column));
    v.into_iter().map(|d| d.name.clone()).collect()
}

impl Validator {
    /// The `groups:` section: names valid, not `all`, not twice, not a
    /// host's name. Returns them by lower-case name.
    pub(super) fn declared<'a>(
        &mut self,
        raw: &'a Pairs<Spanned<String>, Option<RawGroup>>,
        hosts: &[Spanned<RawHost>],
    ) -> BTreeMap<String, Declared<'a>> {
        let mut out: BTreeMap<String, Declared> = BTreeMap::new();
        for (name, settings) in &raw.0 {
            let pos = Pos::from(name);
            let key = name.value.to_ascii_lowercase();
            if !valid_name(&name.value) {
                self.problem(
                    pos,
                    format!("group name {} is not a valid name", echo(&name.value)),
                    "use letters, digits, '-', '_' and '.', starting with a letter or digit (at most 63)",
                );
                continue;
            }
            if key == "all" {
                self.problem(
                    pos,
                    "`all` is not a group here: every host's settings are `defaults:`",
                    "move these settings to `defaults:`",
                );
                continue;
            }
            if let Some(prev) = out.get(&key) {
                self.problem(
                    pos,
                    format!(
                        "group {} is declared twice (first at line {})",
                        echo(&name.value),
                        prev.pos.line
                    ),
                    "merge the two entries",
                );
                continue;
            }
            if let Some(h) = hosts
                .iter()
                .find(|h| h.value.name.value.eq_ignore_ascii_case(&name.value))
            {
                self.problem(
                    pos,
                    format!(
                        "group {} has the name of host {} (line {}): --limit {} would be ambiguous",
                        echo(&name.value),
                        echo(&h.value.name.value),
                        Pos::from(&h.value.name).line,
                        echo(&name.value)
                    ),
                    "rename the group",
                );
                continue;
            }
            out.insert(
                key,
                Declared {
                    name: name.value.clone(),
                    pos,
                    settings: settings.as_ref(),
                },
            );
        }
        out
    }

    /// The declared groups a host lists (checked), in the order they are
    /// declared, and the settings of every group it is in (built-in ones
    /// included).
    pub(super) fn membership<'a>(
        &mut self,
        h: &RawHost,
        os: Option<Os>,
        role: Role,
        declared: &'a BTreeMap<String, Declared<'a>>,
    ) -> (Vec<String>, Vec<(&'a str, &'a RawGroup)>) {
        let mut listed: Vec<&Declared> = Vec::new();
        for g in h.groups.iter().flatten() {
            let key = g.value.to_ascii_lowercase();
            if BUILT_IN.contains(&key.as_str()) || key == "all" {
                self.problem(
                    g.into(),
                    format!(
                        "{} is a built-in group: a host is in it by its {}",
                        echo(&g.value),
                        if key == "all" {
                            "being in the inventory"
                        } else if key == "linux" || key == "windows" {
                            "os"
                        } else {
                            "role"
                        }
                    ),
                    "remove it from the host's groups",
                );
                continue;
            }
            match declared.get(&key) {
                Some(d) if !listed.iter().any(|l| std::ptr::eq(*l, d)) => listed.push(d),
                Some(_) => {}
                None => {
                    let known: Vec<&str> = declared
                        .values()
                        .filter(|d| !BUILT_IN.contains(&d.name.to_ascii_lowercase().as_str()))
                        .map(|d| d.name.as_str())
                        .collect();
                    self.problem(
                        g.into(),
                        format!("host {} names group {}, which is not declared", h.name.value, echo(&g.value)),
                        if known.is_empty() {
                            "declare it under `groups:` (`NAME: {}` for a group without settings)".to_string()
                        } else {
                            format!(
                                "declare it under `groups:` (`NAME: {{}}` for a group without settings); declared: {}",
                                known.join(", ")
                            )
                        },
                    );
                }
            }
        }
        let built_in = [
            (os == Some(Os::Linux), "linux"),
            (os == Some(Os::Windows), "windows"),
            (role == Role::ControlPlane, "control-plane"),
            (role == Role::Worker, "worker"),
        ];
        let mut settings: Vec<&Declared> = declared
            .iter()
            .filter(|(k, d)| {
                built_in.iter().any(|(yes, b)| *yes && k.as_str() == *b)
                    || listed.iter().any(|l| std::ptr::eq(*l, *d))
            })
            .map(|(_, d)| d)
            .collect();
        settings.sort_by_key(|d| (d.pos.line, d.pos.column));
        listed.sort_by_key(|d| (d.pos.line, d.pos.column));
        (
            listed.iter().map(|d| d.name.clone()).collect(),
            settings
                .iter()
                .filter_map(|d| d.settings.map(|s| (d.name.as_str(), s)))
                .collect(),
        )
    }

    /// One problem per pair of groups that clash on a key, naming the hosts
    /// in both.
    pub(super) fn clashes(&mut self, clashes: Vec<Clash>) {
        type At = (usize, usize);
        let mut by: BTreeMap<(String, At, At), (Clash, Vec<String>)> = BTreeMap::new();
        for c in clashes {
            let k = (
                c.key.clone(),
                (c.first.1.line, c.first.1.column),
                (c.second.1.line, c.second.1.column),
            );
            let host = c.host.clone();
            by.entry(k).or_insert_with(|| (c, Vec::new())).1.push(host);
        }
        for (_, (c, hosts)) in by {
            self.problem(
                c.second.1,
                format!(
                    "groups {} (line {}:{}) and {} (line {}:{}) set {} differently, and host{} {} {} in both",
                    c.first.0,
                    c.first.1.line,
                    c.first.1.column,
                    c.second.0,
                    c.second.1.line,
                    c.second.1.column,
                    c.key,
                    if hosts.len() == 1 { "" } else { "s" },
                    hosts.join(", "),
                    if hosts.len() == 1 { "is" } else { "are" },
                ),
                format!(
                    "make the groups agree, or set {} on the host itself (a host's own setting wins over its groups')",
                    c.key
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::inventory::{Connection, Inventory, InventoryError};

    const BASE: &str = "\
cluster:
  name: g
  cluster_cidr: 192.168.0.0/16
  service_cidr: 10.96.0.0/12
  api_server: http://10.0.0.10:8080
  kubernetes_version: 1.13.12
defaults:
  ssh: { user: root, port: 22 }
  winrm: { password_env: ALL_PW }
";

    fn parse(s: &str) -> Result<Inventory, InventoryError> {
        Inventory::parse(Path::new("inv.yaml"), &format!("{BASE}{s}"))
    }

    fn ssh(inv: &Inventory, host: &str) -> (Option<String>, Option<u16>) {
        match &inv.host(host).unwrap().connection {
            Connection::Ssh(s) => (s.user.clone(), s.port),
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn defaults_then_groups_then_the_host() {
        let inv = parse(
            "\
groups:
  dc1: { ssh: { user: ops } }
  bastioned: { ssh: { port: 2222 } }
  windows: { winrm: { user: kadmin, port: 5985, tls: false } }
hosts:
  - { name: a, os: linux, address: 10.0.0.1, groups: [dc1, bastioned] }
  - { name: b, os: linux, address: 10.0.0.2, groups: [dc1], ssh: { user: me } }
  - { name: c, os: linux, address: 10.0.0.3 }
  - { name: w, os: windows, address: 10.0.0.4, groups: [dc1], winrm: { password_file: pw } }
",
        )
        .unwrap();
        assert_eq!(ssh(&inv, "a"), (Some("ops".into()), Some(2222)));
        assert_eq!(ssh(&inv, "b"), (Some("me".into()), Some(22)));
        assert_eq!(ssh(&inv, "c"), (Some("root".into()), Some(22)));
        match &inv.host("w").unwrap().connection {
            // the built-in group `windows`; dc1's ssh settings do not make
            // it an SSH host; the host's password_file replaces the default
            // password_env
            Connection::WinRm(w) => {
                assert_eq!((w.user.as_str(), w.port, w.tls), ("kadmin", 5985, false));
                assert!(
                    matches!(&w.password, crate::inventory::PasswordSource::File(p) if p.ends_with("pw"))
                );
            }
            c => panic!("{c:?}"),
        }
        assert_eq!(inv.groups, ["dc1", "bastioned"]);
        let names = |g: &str| -> Vec<String> {
            inv.group_members(g)
                .unwrap()
                .iter()
                .map(|h| h.name.clone())
                .collect()
        };
        assert_eq!(names("DC1"), ["a", "b", "w"]);
        assert_eq!(names("windows"), ["w"]);
        assert_eq!(names("worker"), ["a", "b", "c", "w"]);
        assert!(inv.group_members("nope").is_none());
    }

    #[test]
    fn two_groups_setting_one_key_differently_is_an_error_naming_both() {
        let text = "\
groups:
  web:
    ssh: { user: ops }
  prod:
    ssh: { user: admin }
hosts:
  - { name: a, os: linux, address: 10.0.0.1, groups: [web, prod] }
  - { name: b, os: linux, address: 10.0.0.2, groups: [prod, web] }
  - { name: c, os: linux, address: 10.0.0.3, groups: [web, prod], ssh: { user: me } }
";
        let e = parse(text).unwrap_err().to_string();
        assert!(
            e.contains(
                "inv.yaml:14:18: groups web (line 12:18) and prod (line 14:18) set ssh.user differently, and hosts a, b are in both"
            ),
            "{e}"
        );
        assert!(e.contains("set ssh.user on the host itself"), "{e}");
        assert_eq!(e.matches("differently").count(), 1, "{e}");
        // the same value twice is no clash
        assert!(parse(&text.replace("admin", "ops")).is_ok());
    }

    #[test]
    fn group_names_are_checked() {
        let e = |s: &str| parse(s).unwrap_err().to_string();
        let host = "hosts:\n  - { name: a, os: linux, address: 10.0.0.1, groups: [webs] }\n";
        let t = e(&format!("groups:\n  web: {{}}\n{host}"));
        assert!(
            t.contains("inv.yaml:13:55: host a names group \"webs\", which is not declared"),
            "{t}"
        );
        assert!(t.contains("declared: web"), "{t}");
        let t = e(&format!(
            "groups:\n  webs: {{}}\n{}",
            host.replace("[webs]", "[webs, windows]")
        ));
        assert!(
            t.contains("\"windows\" is a built-in group: a host is in it by its os"),
            "{t}"
        );
        let t = e(&format!(
            "groups:\n  all: {{}}\n  webs:\n  Webs: {{}}\n  a: {{}}\n{host}"
        ));
        assert!(t.contains("`all` is not a group here"), "{t}");
        assert!(t.contains("group \"Webs\" is declared twice"), "{t}");
        assert!(t.contains("group \"a\" has the name of host \"a\""), "{t}");
        let t = e("groups:\n  web: { ssh: { usr: x } }\nhosts: []\n");
        assert!(t.contains("unknown field"), "{t}");
    }

    #[test]
    fn windows_settings_layer_per_key_and_binaries_per_entry() {
        let inv = parse(
            "  windows:
    adapter: Ethernet
groups:
  k13:
    windows:
      binaries:
        kubelet: { url: https://x/kubelet.exe, sha256: aa }
        kube-proxy: { url: https://x/kube-proxy.exe, sha256: bb }
hosts:
  - name: w
    os: windows
    address: 10.0.0.4
    groups: [k13]
    windows: { binaries: { kubelet: { path: C:/k/kubelet.exe } } }
",
        )
        .unwrap();
        let w = &inv.host("w").unwrap().windows;
        assert_eq!(w.adapter.as_deref(), Some("Ethernet"));
        let k = &w.binaries["kubelet"];
        assert_eq!((k.url.as_deref(), k.sha256.as_deref()), (None, None));
        assert_eq!(w.binaries["kube-proxy"].sha256.as_deref(), Some("bb"));
    }
}
