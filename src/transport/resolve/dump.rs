//! What OpenSSH answers for a name (`ssh -G`, one run per distinct set of
//! config lines when it can), and the directives kwinctl refuses to follow.

use crate::transport::sshconf::{Dump, Overrides};
use std::collections::HashMap;
use std::sync::Arc;

use super::Resolver;

pub(super) fn refused(d: &Dump) -> Option<(&'static str, String, &'static str)> {
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
    if matches!(
        d.one("nohostauthenticationforlocalhost"),
        Some("yes" | "true")
    ) {
        return Some((
            "nohostauthenticationforlocalhost",
            "yes".into(),
            "kwinctl checks every host key, localhost's too: remove NoHostAuthenticationForLocalhost and list the key in known_hosts",
        ));
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
pub(super) const DECIDING: &[&str] = &[
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

pub(super) const DEFAULT_IDS: [&str; 7] = [
    "~/.ssh/id_rsa",
    "~/.ssh/id_ecdsa",
    "~/.ssh/id_ecdsa_sk",
    "~/.ssh/id_ed25519",
    "~/.ssh/id_ed25519_sk",
    "~/.ssh/id_xmss",
    "~/.ssh/id_dsa",
];

pub(super) const DEFAULT_CA_SIG_ALGS: [&str; 8] = [
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "rsa-sha2-512",
    "rsa-sha2-256",
];

pub(super) const DEFAULT_HOST_KEY_ALGS: [&str; 16] = [
    "ssh-ed25519-cert-v01@openssh.com",
    "ecdsa-sha2-nistp256-cert-v01@openssh.com",
    "ecdsa-sha2-nistp384-cert-v01@openssh.com",
    "ecdsa-sha2-nistp521-cert-v01@openssh.com",
    "sk-ssh-ed25519-cert-v01@openssh.com",
    "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com",
    "rsa-sha2-512-cert-v01@openssh.com",
    "rsa-sha2-256-cert-v01@openssh.com",
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "rsa-sha2-512",
    "rsa-sha2-256",
];

/// A name no ssh_config block is written for (RFC 2606 `.invalid`).
pub(super) const NOBODY: &str = "kwinctl-no-such-host.invalid";

/// Most jump hosts in one chain (OpenSSH has no limit; a loop would have
/// none either).
pub(super) const MAX_HOPS: usize = 8;

/// Shared, not copied: every host asks for the no-name answer, and a
/// class of names shares one.
pub(super) type DumpCell = Arc<tokio::sync::OnceCell<Result<Arc<Dump>, String>>>;

/// The name an answer was asked for, and the answer.
pub(super) type Shared = (String, DumpCell);

/// Characters a `Host` pattern may hold for the shared answers (anything
/// else: every name is asked on its own).
pub(super) fn plain_pattern(p: &str) -> bool {
    p.chars()
        .all(|c| c.is_ascii_alphanumeric() || ".-_*?!:".contains(c))
}

/// A `Host` line's patterns against a name as given (ssh lower-cases it
/// only after reading the config), as OpenSSH's readconf matches them: `*`
/// and `?`, case-sensitive, a matching negated pattern stops the line.
pub(super) fn host_line_matches(patterns: &[String], name: &str) -> bool {
    let mut hit = false;
    for p in patterns {
        if let Some(n) = p.strip_prefix('!') {
            if wildmatch::WildMatch::new(n).matches(name) {
                return false;
            }
        } else if wildmatch::WildMatch::new(p).matches(name) {
            hit = true;
        }
    }
    hit
}

impl Resolver {
    pub(super) async fn shared(
        &self,
        name: &str,
        o: &Overrides,
    ) -> Option<Result<Arc<Dump>, String>> {
        let (hosts, ssh) = (self.hosts.as_ref()?, self.ssh.as_ref()?);
        let lname = name.to_ascii_lowercase();
        let matching: std::collections::HashSet<usize> = hosts
            .iter()
            .filter(|(_, ps)| host_line_matches(ps, name))
            .map(|(i, _)| *i)
            .collect();
        let active: Vec<usize> = (0..self.scan.lines.len())
            .filter(|i| {
                self.scan.lines[*i]
                    .cond
                    .iter()
                    .all(|c| matching.contains(c))
            })
            .collect();
        let first = |k: &str| {
            active
                .iter()
                .map(|i| &self.scan.lines[*i])
                .find(|l| l.keyword == k)
                .and_then(|l| l.args.first())
        };
        let hostname = first("hostname").map_or_else(|| lname.clone(), |h| h.to_ascii_lowercase());
        let user = match (&o.user, first("user")) {
            (Some(u), _) | (None, Some(u)) => u.clone(),
            (None, None) => self.me.name.clone(),
        };
        let port = match (o.port, first("port")) {
            (Some(p), _) => p,
            (None, Some(p)) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
            (None, None) => 22,
        };
        let sig: Vec<usize> = active
            .iter()
            .copied()
            .filter(|i| {
                !matches!(
                    self.scan.lines[*i].keyword.as_str(),
                    "host" | "hostname" | "user" | "port"
                )
            })
            .collect();
        let (rep, cell) = self
            .classes
            .lock()
            .unwrap()
            .entry((sig, o.clone()))
            .or_insert_with(|| (name.to_string(), DumpCell::default()))
            .clone();
        let d = cell
            .get_or_init(|| async { ssh.dump(&rep, o).await.map(Arc::new) })
            .await
            .clone();
        if rep == name {
            return Some(d);
        }
        // ssh refuses a ProxyJump naming the host itself: ask for this name
        if let Ok(d) = &d
            && let Some(j) = d
                .one("proxyjump")
                .filter(|j| !j.eq_ignore_ascii_case("none"))
            && (j.to_ascii_lowercase().contains(&lname)
                || j.to_ascii_lowercase().contains(&hostname))
        {
            return None;
        }
        Some(d.map(|d| {
            let mut d = Dump::clone(&d);
            d.0.insert("host".into(), vec![name.to_string()]);
            d.0.insert("hostname".into(), vec![hostname]);
            d.0.insert("user".into(), vec![user]);
            d.0.insert("port".into(), vec![port.to_string()]);
            Arc::new(d)
        }))
    }

    /// What OpenSSH says about `name`, with kwinctl's default user (root)
    /// applied as `ssh -l root` would apply it when the config sets no user
    /// of its own: then `Match user root` and `%r` see root, and a `User`
    /// of the config (first pass or `Match final`) wins over it.
    pub(super) async fn dump(&self, name: &str, o: &Overrides) -> Result<Arc<Dump>, String> {
        if o.user.is_some() || self.me.name == "root" || self.ssh.is_none() {
            return self.dump_as(name, o).await;
        }
        let as_root = Overrides {
            user: Some("root".into()),
            ..o.clone()
        };
        if !self.scan.sets("user") {
            return self.dump_as(name, &as_root).await;
        }
        let d = self.dump_as(name, o).await?;
        // the local user's name back: the config set no user for it,
        // unless a `User` line says that very name (or builds it)
        let own = self.scan.lines.iter().any(|l| {
            l.keyword == "user"
                && l.args
                    .first()
                    .is_some_and(|u| u == &self.me.name || u.contains('%'))
        });
        if d.one("user") == Some(self.me.name.as_str()) && !own {
            return self.dump_as(name, &as_root).await;
        }
        Ok(d)
    }

    /// What OpenSSH says about `name` (asked once per question).
    pub(super) async fn dump_as(&self, name: &str, o: &Overrides) -> Result<Arc<Dump>, String> {
        if let Some(d) = self.shared(name, o).await {
            return d;
        }
        let cell = self
            .dumps
            .lock()
            .unwrap()
            .entry((name.to_ascii_lowercase(), o.clone()))
            .or_default()
            .clone();
        cell.get_or_init(|| async {
            match &self.ssh {
                Some(s) => s.dump(name, o).await.map(Arc::new),
                None => Ok(Arc::new(self.builtin(name, o))),
            }
        })
        .await
        .clone()
    }

    /// OpenSSH's answer when there is no config and no `ssh` binary.
    pub(super) fn builtin(&self, name: &str, o: &Overrides) -> Dump {
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
        // OpenSSH 9.2's defaults (myproposal.h KEX_DEFAULT_PK_ALG and
        // SSH_ALLOWED_CA_SIGALGS; `builtin_is_what_ssh_g_says_without_a_config`
        // compares them with the installed ssh)
        put("hostkeyalgorithms", DEFAULT_HOST_KEY_ALGS.join(","));
        put("casignaturealgorithms", DEFAULT_CA_SIG_ALGS.join(","));
        Dump(m)
    }
}
