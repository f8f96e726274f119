//! Where and as whom kwinctl connects to each host (`resolve` decides it
//! before anything is contacted): the endpoint, its jump hosts, and how it
//! is shown.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::sshconf::LocalUser;
use crate::text::echo;

/// Where ssh-agent is (`IdentityAgent`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Agent {
    /// `$SSH_AUTH_SOCK`.
    Env,
    None,
    Socket(PathBuf),
}

/// `StrictHostKeyChecking`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strict {
    /// `yes`, or `ask` (nobody to ask): only known keys.
    Yes,
    /// `accept-new`: record keys of hosts not yet known.
    AcceptNew,
    /// `no` / `off`: OpenSSH also records new keys; a changed key is still
    /// refused by kwinctl (OpenSSH would connect with restrictions).
    No,
}

/// `AddressFamily`: which of a name's addresses OpenSSH would connect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Family {
    #[default]
    Any,
    Inet,
    Inet6,
}

impl Family {
    pub fn from_ssh(v: Option<&str>) -> Family {
        match v {
            Some("inet") => Family::Inet,
            Some("inet6") => Family::Inet6,
            _ => Family::Any,
        }
    }

    /// As ssh_config spells it.
    pub fn name(self) -> &'static str {
        match self {
            Family::Any => "any",
            Family::Inet => "inet",
            Family::Inet6 => "inet6",
        }
    }

    /// The addresses of `addrs` this family allows, in order.
    pub fn pick(self, addrs: impl IntoIterator<Item = SocketAddr>) -> Vec<SocketAddr> {
        addrs
            .into_iter()
            .filter(|a| match self {
                Family::Any => true,
                Family::Inet => a.is_ipv4(),
                Family::Inet6 => a.is_ipv6(),
            })
            .collect()
    }
}

/// One SSH server on the way to a host (or the host itself).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The name OpenSSH resolved (inventory name, address or jump host).
    pub name: String,
    /// Where to connect (`HostName`).
    pub host: String,
    pub port: u16,
    pub user: String,
    /// Key files, tokens expanded, in OpenSSH's order.
    pub identities: Vec<PathBuf>,
    /// Whether `identities` are OpenSSH's defaults (missing ones are not
    /// worth a word).
    pub default_identities: bool,
    pub identities_only: bool,
    pub agent: Agent,
    pub user_known_hosts: Vec<PathBuf>,
    pub global_known_hosts: Vec<PathBuf>,
    pub host_key_alias: Option<String>,
    pub strict: Strict,
    pub hash_known_hosts: bool,
    pub connect_timeout: Option<Duration>,
    pub family: Family,
    /// `HostKeyAlgorithms` as OpenSSH resolved it (`None`: not applied).
    pub host_key_algorithms: Option<Vec<String>>,
    /// Whether the config sets `HostKeyAlgorithms` (then its order is
    /// kept, else known key types go first, as OpenSSH orders its default).
    pub host_key_algorithms_set: bool,
    /// `CASignatureAlgorithms` as OpenSSH resolved it (`None`: not applied).
    pub ca_signature_algorithms: Option<Vec<String>>,
    /// `RevokedHostKeys`, tokens expanded (`None`: no file).
    pub revoked_host_keys: Option<PathBuf>,
    /// The jump host this one is reached through.
    pub via: Option<Arc<Endpoint>>,
}

impl Endpoint {
    /// `user@host:port`.
    pub fn addr(&self) -> String {
        format!("{}@{}", self.user, self.host_port())
    }

    /// `host:port` (`[host]:port` for an IPv6 address).
    pub fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The jump hosts, first hop first.
    pub fn hops(&self) -> Vec<&Endpoint> {
        let mut v = Vec::new();
        let mut cur = self.via.as_deref();
        while let Some(e) = cur {
            v.push(e);
            cur = e.via.as_deref();
        }
        v.reverse();
        v
    }

    /// `user@host:port`, and ` via hop, hop` when jump hosts are in front.
    pub fn describe(&self) -> String {
        let hops = self.hops();
        if hops.is_empty() {
            return self.addr();
        }
        let hs: Vec<String> = hops.iter().map(|h| h.addr()).collect();
        format!("{} via {}", self.addr(), hs.join(" -> "))
    }

    /// The name OpenSSH looks the host key up by: `HostKeyAlias`, else the
    /// host, as `[host]:port` when the port is not 22.
    pub fn known_hosts_name(&self) -> String {
        match &self.host_key_alias {
            Some(a) => a.clone(),
            None if self.port == 22 => self.host.clone(),
            None => format!("[{}]:{}", self.host, self.port),
        }
    }

    /// The name a host certificate's principals must hold.
    pub fn principal_name(&self) -> &str {
        self.host_key_alias.as_deref().unwrap_or(&self.host)
    }
}

/// How each host is reached: its SSH endpoint, or for WinRM the jump host
/// in front of it (if any).
#[derive(Debug, Clone)]
pub enum Route {
    Ssh(Arc<Endpoint>),
    WinRm {
        addr: String,
        via: Option<Arc<Endpoint>>,
    },
}

impl Route {
    pub fn describe(&self) -> String {
        match self {
            Route::Ssh(e) => format!("ssh {}", e.describe()),
            Route::WinRm { addr, via: None } => format!("winrm {addr}"),
            Route::WinRm { addr, via: Some(v) } => {
                let mut hs: Vec<String> = v.hops().iter().map(|h| h.addr()).collect();
                hs.push(v.addr());
                format!("winrm {addr} via {}", hs.join(" -> "))
            }
        }
    }
}

/// The routes of every host of a run, by host name (lower case).
#[derive(Debug, Clone, Default)]
pub struct Routes(pub HashMap<String, Route>);

impl Routes {
    pub fn get(&self, host: &str) -> Option<&Route> {
        self.0.get(&host.to_ascii_lowercase())
    }
}

/// One jump host of a `ProxyJump` list: `[user@]host[:port]` or an ssh URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JumpSpec {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
}

pub fn parse_jumps(s: &str) -> Result<Vec<JumpSpec>, String> {
    s.split(',')
        .map(|one| {
            let one = one.trim();
            let rest = one.strip_prefix("ssh://").unwrap_or(one);
            let (user, hp) = match rest.rsplit_once('@') {
                Some((u, hp)) => (Some(u.to_string()), hp),
                None => (None, rest),
            };
            let (host, port) = if let Some(h) = hp.strip_prefix('[') {
                let (h, p) = h
                    .split_once(']')
                    .ok_or_else(|| format!("ProxyJump {}: unclosed [", echo(one)))?;
                (h.to_string(), p.strip_prefix(':'))
            } else {
                match hp.rsplit_once(':') {
                    Some((h, p)) => (h.to_string(), Some(p)),
                    None => (hp.to_string(), None),
                }
            };
            let port = port
                .map(|p| {
                    p.parse::<u16>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| format!("ProxyJump {}: bad port {}", echo(one), echo(p)))
                })
                .transpose()?;
            if host.is_empty() || host.starts_with('-') {
                return Err(format!("ProxyJump {}: no host", echo(one)));
            }
            Ok(JumpSpec { user, host, port })
        })
        .collect()
}

/// OpenSSH's `%` tokens and `${VAR}` in an IdentityFile (ssh_config(5)
/// TOKENS: `%%`, `%C`, `%d`, `%h`, `%i`, `%k`, `%L`, `%l`, `%n`, `%p`, `%r`,
/// `%u`). `ssh -G` prints IdentityFile unexpanded. What OpenSSH would not
/// expand (an unset `${VAR}`, an unknown token, `%j` which 9.2 does not
/// know) is an error, as ssh stops there (docs/research/openssh-trust.md).
pub fn expand_tokens(s: &str, e: &Endpoint, me: &LocalUser) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '%' => match chars.next() {
                Some('%') => out.push('%'),
                Some('d') => out.push_str(&me.home.to_string_lossy()),
                Some('h') => out.push_str(&e.host),
                Some('i') => out.push_str(&me.uid.to_string()),
                Some('k') => out.push_str(e.host_key_alias.as_deref().unwrap_or(&e.name)),
                Some('L') => out.push_str(me.hostname.split('.').next().unwrap_or("")),
                Some('l') => out.push_str(&me.hostname),
                Some('n') => out.push_str(&e.name),
                Some('p') => out.push_str(&e.port.to_string()),
                Some('r') => out.push_str(&e.user),
                Some('u') => out.push_str(&me.name),
                Some('C') => {
                    use sha1::Digest;
                    let h = sha1::Sha1::digest(
                        format!("{}{}{}{}", me.hostname, e.host, e.port, e.user).as_bytes(),
                    );
                    out.push_str(&h.iter().map(|b| format!("{b:02x}")).collect::<String>());
                }
                Some(o) => return Err(format!("{}: unknown token %{o}", echo(s))),
                None => return Err(format!("{}: a lone % at the end", echo(s))),
            },
            '$' if chars.peek() == Some(&'{') => {
                chars.next();
                let var: String = chars.by_ref().take_while(|c| *c != '}').collect();
                match std::env::var(&var) {
                    Ok(v) => out.push_str(&v),
                    Err(_) => {
                        return Err(format!(
                            "{}: the environment variable {var} is not set",
                            echo(s)
                        ));
                    }
                }
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jump_specs_as_openssh_reads_them() {
        let j = parse_jumps("ops@b:2222,c, ssh://u@[fe80::1]:22").unwrap();
        assert_eq!(
            j[0],
            JumpSpec {
                user: Some("ops".into()),
                host: "b".into(),
                port: Some(2222)
            }
        );
        assert_eq!(j[1].host, "c");
        assert_eq!((j[2].host.as_str(), j[2].port), ("fe80::1", Some(22)));
        assert!(parse_jumps("b:0").is_err());
        assert!(parse_jumps("-oProxyCommand=x").is_err());
    }

    fn ep(host: &str, port: u16, alias: Option<&str>) -> Endpoint {
        Endpoint {
            name: "n1".into(),
            host: host.into(),
            port,
            user: "ops".into(),
            identities: vec![],
            default_identities: false,
            identities_only: false,
            agent: Agent::Env,
            user_known_hosts: vec![],
            global_known_hosts: vec![],
            host_key_alias: alias.map(str::to_string),
            strict: Strict::Yes,
            hash_known_hosts: false,
            connect_timeout: None,
            family: Family::Any,
            host_key_algorithms: None,
            host_key_algorithms_set: false,
            ca_signature_algorithms: None,
            revoked_host_keys: None,
            via: None,
        }
    }

    #[test]
    fn known_hosts_names_as_openssh_looks_them_up() {
        assert_eq!(ep("10.0.0.1", 22, None).known_hosts_name(), "10.0.0.1");
        assert_eq!(
            ep("10.0.0.1", 2222, None).known_hosts_name(),
            "[10.0.0.1]:2222"
        );
        assert_eq!(ep("10.0.0.1", 2222, Some("web")).known_hosts_name(), "web");
    }

    #[test]
    fn tokens_in_identity_files() {
        let me = LocalUser {
            name: "alice".into(),
            uid: 1000,
            home: "/home/alice".into(),
            hostname: "ws.example".into(),
        };
        let e = ep("10.0.0.1", 2222, None);
        assert_eq!(
            expand_tokens("%d/.ssh/%h-%p-%r-%n-%u-%i-%L-%%", &e, &me).unwrap(),
            "/home/alice/.ssh/10.0.0.1-2222-ops-n1-alice-1000-ws-%"
        );
        // what ssh stops at, kwinctl refuses (no other key path)
        for bad in ["/k/%j", "/k/%Z", "/k/${KWINCTL_TEST_SURELY_UNSET}", "/k/%"] {
            assert!(expand_tokens(bad, &e, &me).is_err(), "{bad}");
        }
    }

    #[test]
    fn address_family_picks_as_openssh() {
        let v4: SocketAddr = "198.18.1.2:22".parse().unwrap();
        let v6: SocketAddr = "[fd00::2]:22".parse().unwrap();
        assert_eq!(Family::from_ssh(Some("any")).pick([v6, v4]), [v6, v4]);
        assert_eq!(Family::from_ssh(Some("inet")).pick([v6, v4]), [v4]);
        assert_eq!(Family::from_ssh(Some("inet6")).pick([v6, v4]), [v6]);
        assert!(Family::Inet6.pick([v4]).is_empty());
    }

    #[test]
    fn chains_describe_first_hop_first() {
        let a = Arc::new(ep("a", 22, None));
        let mut b = ep("b", 22, None);
        b.via = Some(a);
        let mut t = ep("t", 2222, None);
        t.via = Some(Arc::new(b));
        assert_eq!(t.describe(), "ops@t:2222 via ops@a:22 -> ops@b:22");
    }
}
