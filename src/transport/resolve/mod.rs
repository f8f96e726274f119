//! Resolve every host before anything is contacted: OpenSSH's answer for
//! the host (`sshconf`), the inventory's settings on its command line, and
//! the jump hosts in front of it.
//!
//! The name given to OpenSSH is the inventory name when the config makes it
//! an alias (a `HostName` applies to it); otherwise kwinctl connects to the
//! inventory address and resolves that, as `ssh ADDRESS` would. Settings the
//! config gives the name but not the address are then an error, not dropped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures::StreamExt;

use super::route::{Endpoint, Route, Routes, parse_jumps};
use super::sshconf::{ConfigSource, LocalUser, OpenSsh, Overrides, Scan};
use crate::inventory::{Bastion, Connection, Host};
use crate::text::echo;

/// Directives that change where or as whom OpenSSH connects and that kwinctl
/// does not do: (keyword, is it in effect, why, fix).
mod build;
mod dump;

use dump::*;

/// Resolves hosts through OpenSSH, each distinct question asked once.
pub struct Resolver {
    ssh: Option<OpenSsh>,
    scan: Scan,
    me: LocalUser,
    dumps: Mutex<HashMap<(String, Overrides), DumpCell>>,
    /// The config's `Host` lines (index, patterns) when OpenSSH's answer
    /// for a name depends only on which of them match it (see `shared`).
    hosts: Option<Vec<(usize, Vec<String>)>>,
    /// One answer per set of matching `Host` lines: (the name it was asked
    /// for, the answer).
    classes: Mutex<HashMap<(Vec<usize>, Overrides), Shared>>,
}

impl Resolver {
    pub fn new(source: &ConfigSource) -> Result<Resolver, String> {
        let me = LocalUser::current();
        let scan = Scan::read(source, &me)?;
        // With no config file OpenSSH answers with its defaults, which
        // `builtin` gives without running a process per host (the same
        // answer: `builtin_is_what_ssh_g_says_without_a_config`).
        let ssh = if scan.roots.is_empty() {
            None
        } else {
            OpenSsh::new(source)?
        };
        if ssh.is_none() && !scan.roots.is_empty() {
            let files: Vec<String> = scan.roots.iter().map(|p| p.display().to_string()).collect();
            return Err(format!(
                "ssh config {} cannot be read as OpenSSH reads it: no `ssh` binary on PATH (kwinctl resolves hosts with `ssh -G`); \
                 install the OpenSSH client, or pass --ssh-config none to use no ssh config",
                files.join(", ")
            ));
        }
        // Without `Match` (whose criteria see more than the name), `%` and
        // `${}` (which put the name into values) and canonicalization,
        // OpenSSH's answer for a name is decided by the set of `Host` lines
        // that match it; the name itself only shows as `host`/`hostname`.
        let shared = !scan.lines.iter().any(|l| {
            matches!(l.keyword.as_str(), "match" | "canonicalizehostname")
                || l.text().contains('%')
                || l.text().contains("${")
                || (l.keyword == "host" && !l.args.iter().all(|a| plain_pattern(a)))
        });
        let hosts = shared.then(|| {
            scan.lines
                .iter()
                .enumerate()
                .filter(|(_, l)| l.keyword == "host")
                .map(|(i, l)| (i, l.args.clone()))
                .collect()
        });
        Ok(Resolver {
            ssh,
            scan,
            me,
            dumps: Mutex::new(HashMap::new()),
            hosts,
            classes: Mutex::new(HashMap::new()),
        })
    }

    /// The answer for `name` from the one asked for another name to which
    /// the same lines apply, but for the `HostName`, `User` and `Port`
    /// lines, which are read here (first value wins; `HostName` lower-cased,
    /// as ssh does): one `ssh -G` per distinct set of lines, not per host
    /// (`class_answers_are_what_ssh_g_says` in tests/cli/ssh_differential.rs).
    /// The jump chain of `ProxyJump spec`: the last one is reached through
    /// the ones before it, the first through its own config's ProxyJump.
    async fn jumps(
        &self,
        name: &str,
        spec: Option<&str>,
        depth: usize,
    ) -> Result<Option<Arc<Endpoint>>, String> {
        let Some(spec) = spec.filter(|s| !s.eq_ignore_ascii_case("none")) else {
            return Ok(None);
        };
        if spec.contains('%') {
            return Err(format!(
                "{name}: ssh config ProxyJump {} ({}): kwinctl does not expand tokens in ProxyJump: write the jump host out",
                echo(spec),
                self.scan.where_set("proxyjump")
            ));
        }
        let list = parse_jumps(spec).map_err(|e| format!("{name}: {e}"))?;
        let mut prev: Option<Arc<Endpoint>> = None;
        for (i, j) in list.iter().enumerate() {
            let o = Overrides {
                user: j.user.clone(),
                port: j.port,
                ..Default::default()
            };
            let via = if i == 0 { None } else { Some(prev.clone()) };
            prev = Some(self.endpoint(&j.host, &o, via, depth + 1).await?);
        }
        Ok(prev)
    }

    /// An inventory bastion (like `ssh -J`, with its own settings).
    async fn bastion(&self, b: &Bastion) -> Result<Arc<Endpoint>, String> {
        let o = Overrides {
            user: b.user.clone(),
            port: b.port,
            identity: b.identity.clone(),
            known_hosts: b.known_hosts.clone(),
        };
        self.endpoint(&b.address, &o, None, 1)
            .await
            .map_err(|e| format!("bastion {}: {e}", echo(&b.address)))
    }

    async fn route(&self, h: &Host) -> Result<Route, String> {
        match &h.connection {
            Connection::WinRm(w) => Ok(Route::WinRm {
                addr: format!("{}@{}:{}", w.user, h.reach(), w.port),
                via: match &w.bastion {
                    Some(b) => Some(self.bastion(b).await?),
                    None => None,
                },
            }),
            Connection::Ssh(s) => {
                let o = Overrides {
                    user: s.user.clone(),
                    port: s.port,
                    identity: s.identity.clone(),
                    known_hosts: s.known_hosts.clone(),
                };
                let via = match &s.bastion {
                    Some(b) => Some(Some(self.bastion(b).await?)),
                    None => None,
                };
                let by_name = self.dump(&h.name, &o).await?;
                let alias = by_name
                    .one("hostname")
                    .is_some_and(|n| !n.eq_ignore_ascii_case(&h.name));
                if alias {
                    return Ok(Route::Ssh(self.build(&h.name, &by_name, via, 0).await?));
                }
                let addr = h.reach().to_string();
                // Does the config single the name out? Compared with a name
                // no block can mean, its own tokens (%h, %n) put back to the
                // name, so `Host *` settings do not count.
                let nobody = self.dump(NOBODY, &o).await?;
                let lname = h.name.to_ascii_lowercase();
                let differ: Vec<String> = DECIDING
                    .iter()
                    .filter(|k| {
                        let theirs: Vec<String> = nobody
                            .all(k)
                            .iter()
                            .map(|x| x.replace(NOBODY, &lname))
                            .collect();
                        by_name.all(k) != theirs.as_slice()
                    })
                    .map(|k| format!("{k} {}", echo(&by_name.all(k).join(" "))))
                    .collect();
                if !differ.is_empty() {
                    return Err(format!(
                        "the ssh config gives the name {} its own settings ({}) but no HostName, so kwinctl \
                         connects to the inventory address and resolves that, as `ssh {addr}` would, without them: \
                         add `HostName {addr}` to the block for {} (then the name is an alias), or write the block for the address",
                        h.name,
                        differ.join("; "),
                        h.name
                    ));
                }
                let by_addr = self.dump(&addr, &o).await?;
                Ok(Route::Ssh(self.build(&addr, &by_addr, via, 0).await?))
            }
        }
    }
}

/// A comma-separated algorithm list.
pub(super) fn list(v: Option<&str>) -> Option<Vec<String>> {
    v.map(|v| v.split(',').map(str::to_string).collect())
}

/// A `*KnownHostsFile` value: space-separated paths (`none`: no file).
pub(super) fn files(v: Option<&str>, me: &LocalUser) -> Vec<PathBuf> {
    v.unwrap_or("")
        .split_whitespace()
        .filter(|p| !p.eq_ignore_ascii_case("none"))
        .map(|p| me.tilde(p))
        .collect()
}

/// Resolve every host of a run before anything is contacted. Every host's
/// problem is reported, one per line.
pub fn resolve(hosts: &[&Host], source: &ConfigSource) -> Result<Routes, String> {
    let r = Resolver::new(source)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the resolver: {e}"))?;
    // `ssh -G` costs a few ms of CPU: a few at once keep both cores busy.
    let results: Vec<(String, Result<Route, String>)> = rt.block_on(
        futures::stream::iter(hosts.iter())
            .map(|h| {
                let r = &r;
                async move { (h.name.clone(), r.route(h).await) }
            })
            .buffered(8)
            .collect(),
    );
    let mut routes = Routes::default();
    let mut errors = Vec::new();
    for (name, res) in results {
        match res {
            Ok(route) => {
                routes.0.insert(name.to_ascii_lowercase(), route);
            }
            Err(e) => errors.push(format!("host {name}: {e}")),
        }
    }
    if errors.is_empty() {
        Ok(routes)
    } else {
        Err(errors.join("\n"))
    }
}

/// One name resolved as `ssh -G -F FILE [-l USER] [-p PORT] [-i KEY] NAME`
/// answers, with the same code a run uses (the entry point of
/// tests/cli/ssh_differential.rs).
pub fn resolve_name(source: &ConfigSource, name: &str, o: &Overrides) -> Result<Endpoint, String> {
    resolve_names(source, &[name], o)?.remove(0)
}

/// [`resolve_name`] for several names with one resolver (answers shared as
/// in a run).
pub fn resolve_names(
    source: &ConfigSource,
    names: &[&str],
    o: &Overrides,
) -> Result<Vec<Result<Endpoint, String>>, String> {
    let r = Resolver::new(source)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the resolver: {e}"))?;
    Ok(names
        .iter()
        .map(|n| rt.block_on(r.endpoint(n, o, None, 0)).map(|e| (*e).clone()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_address_is_where_ssh_and_winrm_go() {
        let inv = crate::inventory::Inventory::parse(
            std::path::Path::new("inv.yaml"),
            "\
cluster:
  name: c
  cluster_cidr: 10.244.0.0/16
  service_cidr: 10.96.0.0/12
  api_server: http://10.96.0.1:8080
  kubernetes_version: 1.7.16
hosts:
  - name: lin
    os: linux
    address: 198.18.0.1
    connect: 198.19.0.1
  - name: win
    os: windows
    address: 198.18.0.2
    connect: 198.19.0.2
    winrm: { user: a, password_env: X }
",
        )
        .unwrap();
        let hosts: Vec<&Host> = inv.hosts.iter().collect();
        let routes = resolve(&hosts, &ConfigSource::None).unwrap();
        let lin = routes.get("lin").unwrap().describe();
        let win = routes.get("win").unwrap().describe();
        assert!(
            lin.contains("198.19.0.1") && !lin.contains("198.18.0.1"),
            "{lin}"
        );
        assert!(win.contains("198.19.0.2:5986"), "{win}");
        assert_eq!(inv.hosts[0].address.to_string(), "198.18.0.1");
    }

    #[test]
    fn builtin_is_what_ssh_g_says_without_a_config() {
        let me = LocalUser::current();
        let Some(ssh) = OpenSsh::new(&ConfigSource::None).unwrap() else {
            panic!("the OpenSSH client (ssh) is needed for this test");
        };
        let with = |ssh| Resolver {
            ssh,
            scan: Scan::default(),
            me: me.clone(),
            dumps: Mutex::new(HashMap::new()),
            hosts: None,
            classes: Mutex::new(HashMap::new()),
        };
        let (openssh, builtin) = (with(Some(ssh)), with(None));
        // (an -i file must exist: OpenSSH drops a missing one, as the
        // inventory never gives one, see check_credentials)
        let id = tempfile::NamedTempFile::new().unwrap();
        let all = Overrides {
            user: Some("ops".into()),
            port: Some(2222),
            identity: Some(id.path().to_path_buf()),
            known_hosts: Some("/kh/known".into()),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for name in ["h1", "198.18.1.2", "Web.Example"] {
            for o in [Overrides::default(), all.clone()] {
                let (a, b) = rt.block_on(async {
                    (
                        openssh.endpoint(name, &o, None, 0).await.unwrap(),
                        builtin.endpoint(name, &o, None, 0).await.unwrap(),
                    )
                });
                assert_eq!(a, b, "{name} {o:?}");
            }
        }
    }
}
