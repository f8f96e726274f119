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
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;

use super::route::{Agent, Endpoint, Family, Route, Routes, Strict, expand_tokens, parse_jumps};
use super::sshconf::{ConfigSource, Dump, LocalUser, OpenSsh, Overrides, Scan};
use crate::inventory::{Bastion, Connection, Host};
use crate::text::echo;

/// Directives that change where or as whom OpenSSH connects and that kwinctl
/// does not do: (keyword, is it in effect, why, fix).
fn refused(d: &Dump) -> Option<(&'static str, String, &'static str)> {
    let set = |k: &str| d.one(k).filter(|v| !v.eq_ignore_ascii_case("none"));
    let checks: [(&str, Option<&str>, &str); 7] = [
        (
            "proxycommand",
            set("proxycommand"),
            "kwinctl runs no proxy command: use ProxyJump, which it honours, or an inventory ssh.bastion",
        ),
        (
            "canonicalizehostname",
            d.one("canonicalizehostname").filter(|v| *v != "false"),
            "kwinctl does not canonicalize names through DNS: write the HostName in full",
        ),
        (
            "bindaddress",
            set("bindaddress"),
            "kwinctl does not choose the local address: remove it for these hosts",
        ),
        (
            "bindinterface",
            set("bindinterface"),
            "kwinctl does not choose the local interface: remove it for these hosts",
        ),
        (
            "certificatefile",
            set("certificatefile"),
            "kwinctl does not log in with user certificates: use a key (IdentityFile or ssh-agent)",
        ),
        (
            "pkcs11provider",
            set("pkcs11provider"),
            "kwinctl does not use PKCS#11 tokens: load the key into ssh-agent instead",
        ),
        (
            "knownhostscommand",
            set("knownhostscommand"),
            "kwinctl checks host keys against known_hosts files only: list the keys in a known_hosts file",
        ),
    ];
    for (k, v, why) in checks {
        if let Some(v) = v {
            return Some((k, v.to_string(), why));
        }
    }
    if matches!(d.one("pubkeyauthentication"), Some("false" | "no")) {
        return Some((
            "pubkeyauthentication",
            "no".into(),
            "kwinctl logs in with public keys only: allow PubkeyAuthentication for these hosts",
        ));
    }
    None
}

/// The keywords whose values decide the connection (compared when a name is
/// not an alias and its address is resolved instead).
const DECIDING: &[&str] = &[
    "user",
    "port",
    "identityfile",
    "identitiesonly",
    "identityagent",
    "proxyjump",
    "proxycommand",
    "hostkeyalias",
    "stricthostkeychecking",
    "userknownhostsfile",
    "globalknownhostsfile",
    "certificatefile",
    "connecttimeout",
];

const DEFAULT_IDS: [&str; 7] = [
    "~/.ssh/id_rsa",
    "~/.ssh/id_ecdsa",
    "~/.ssh/id_ecdsa_sk",
    "~/.ssh/id_ed25519",
    "~/.ssh/id_ed25519_sk",
    "~/.ssh/id_xmss",
    "~/.ssh/id_dsa",
];

/// A name no ssh_config block is written for (RFC 2606 `.invalid`).
const NOBODY: &str = "kwinctl-no-such-host.invalid";

/// Most jump hosts in one chain (OpenSSH has no limit; a loop would have
/// none either).
const MAX_HOPS: usize = 8;

type DumpCell = Arc<tokio::sync::OnceCell<Result<Dump, String>>>;

/// Resolves hosts through OpenSSH, each distinct question asked once.
pub struct Resolver {
    ssh: Option<OpenSsh>,
    scan: Scan,
    me: LocalUser,
    dumps: Mutex<HashMap<(String, Overrides), DumpCell>>,
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
            OpenSsh::new(&scan)?
        };
        if ssh.is_none() && !scan.roots.is_empty() {
            let files: Vec<String> = scan.roots.iter().map(|p| p.display().to_string()).collect();
            return Err(format!(
                "ssh config {} cannot be read as OpenSSH reads it: no `ssh` binary on PATH (kwinctl resolves hosts with `ssh -G`); \
                 install the OpenSSH client, or pass --ssh-config none to use no ssh config",
                files.join(", ")
            ));
        }
        Ok(Resolver {
            ssh,
            scan,
            me,
            dumps: Mutex::new(HashMap::new()),
        })
    }

    /// What OpenSSH says about `name` (asked once per question).
    async fn dump(&self, name: &str, o: &Overrides) -> Result<Dump, String> {
        let cell = self
            .dumps
            .lock()
            .unwrap()
            .entry((name.to_ascii_lowercase(), o.clone()))
            .or_default()
            .clone();
        cell.get_or_init(|| async {
            match &self.ssh {
                Some(s) => s.dump(name, o).await,
                None => Ok(self.builtin(name, o)),
            }
        })
        .await
        .clone()
    }

    /// OpenSSH's answer when there is no config and no `ssh` binary.
    fn builtin(&self, name: &str, o: &Overrides) -> Dump {
        let mut m: HashMap<String, Vec<String>> = HashMap::new();
        let mut put = |k: &str, v: String| m.entry(k.into()).or_default().push(v);
        put("hostname", name.to_ascii_lowercase());
        put("user", o.user.clone().unwrap_or_else(|| "root".into()));
        put("port", o.port.unwrap_or(22).to_string());
        if let Some(i) = &o.identity {
            put("identityfile", i.display().to_string());
        } else {
            for i in DEFAULT_IDS {
                put("identityfile", i.into());
            }
        }
        let home = self.me.home.join(".ssh");
        put(
            "userknownhostsfile",
            match &o.known_hosts {
                Some(k) => k.display().to_string(),
                None => format!(
                    "{} {}",
                    home.join("known_hosts").display(),
                    home.join("known_hosts2").display()
                ),
            },
        );
        put(
            "globalknownhostsfile",
            "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2".into(),
        );
        put("stricthostkeychecking", "ask".into());
        put("identitiesonly", "no".into());
        put("hashknownhosts", "no".into());
        put("connecttimeout", "none".into());
        Dump(m)
    }

    /// The endpoint for `name` with `o`; `via`: `None` to follow the
    /// config's ProxyJump, `Some(v)` to go through `v` instead.
    fn endpoint<'a>(
        &'a self,
        name: &'a str,
        o: &'a Overrides,
        via: Option<Option<Arc<Endpoint>>>,
        depth: usize,
    ) -> BoxFuture<'a, Result<Arc<Endpoint>, String>> {
        Box::pin(async move {
            let d = self.dump(name, o).await?;
            self.build(name, &d, via, depth).await
        })
    }

    async fn build(
        &self,
        name: &str,
        d: &Dump,
        via: Option<Option<Arc<Endpoint>>>,
        depth: usize,
    ) -> Result<Arc<Endpoint>, String> {
        if depth > MAX_HOPS {
            return Err(format!(
                "ProxyJump chain to {name} is longer than {MAX_HOPS} hops (does it loop?)"
            ));
        }
        if let Some((k, v, why)) = refused(d) {
            return Err(format!(
                "{name}: ssh config {k} {} ({}): {why}",
                echo(&v),
                self.scan.where_set(k)
            ));
        }
        let host = d.one("hostname").unwrap_or(name).to_string();
        let port = d
            .one("port")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("{name}: ssh -G gave no port"))?;
        let user = d.one("user").unwrap_or("root").to_string();
        let via = match via {
            Some(v) => v,
            None => self.jumps(name, d.one("proxyjump"), depth).await?,
        };
        let raw_ids: Vec<&str> = d.all("identityfile").iter().map(String::as_str).collect();
        let default_identities = raw_ids == DEFAULT_IDS;
        let mut e = Endpoint {
            name: name.to_string(),
            host,
            port,
            user,
            identities: Vec::new(),
            default_identities,
            identities_only: matches!(d.one("identitiesonly"), Some("yes" | "true")),
            agent: match d.one("identityagent") {
                None => Agent::Env,
                Some(a) if a.eq_ignore_ascii_case("none") => Agent::None,
                Some("SSH_AUTH_SOCK") => Agent::Env,
                Some(a) if a.starts_with('$') => {
                    let var = a.trim_start_matches('$').trim_matches(['{', '}']);
                    match std::env::var_os(var) {
                        Some(p) => Agent::Socket(PathBuf::from(p)),
                        None => Agent::None,
                    }
                }
                Some(a) => Agent::Socket(self.me.tilde(a)),
            },
            user_known_hosts: files(d.one("userknownhostsfile"), &self.me),
            global_known_hosts: files(d.one("globalknownhostsfile"), &self.me),
            host_key_alias: d.one("hostkeyalias").map(str::to_string),
            strict: match d.one("stricthostkeychecking") {
                Some("accept-new") => Strict::AcceptNew,
                Some("false" | "no" | "off") => Strict::No,
                _ => Strict::Yes,
            },
            hash_known_hosts: matches!(d.one("hashknownhosts"), Some("yes" | "true")),
            connect_timeout: d
                .one("connecttimeout")
                .and_then(|t| t.parse::<u64>().ok())
                .map(Duration::from_secs),
            family: Family::from_ssh(d.one("addressfamily")),
            via,
        };
        e.identities = raw_ids
            .iter()
            .map(|i| self.me.tilde(&expand_tokens(i, &e, &self.me)))
            .collect();
        Ok(Arc::new(e))
    }

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

/// A `*KnownHostsFile` value: space-separated paths (`none`: no file).
fn files(v: Option<&str>, me: &LocalUser) -> Vec<PathBuf> {
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
        let scan = Scan::read(&ConfigSource::None, &me).unwrap();
        let Some(ssh) = OpenSsh::new(&scan).unwrap() else {
            panic!("the OpenSSH client (ssh) is needed for this test");
        };
        let with = |ssh| Resolver {
            ssh,
            scan: Scan::default(),
            me: me.clone(),
            dumps: Mutex::new(HashMap::new()),
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
