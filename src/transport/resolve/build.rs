//! A host's endpoint from OpenSSH's answer and the inventory's settings.

use crate::text::echo;
use crate::transport::route::{Agent, Endpoint, Family, Strict, expand_tokens};
use crate::transport::sshconf::{Dump, Overrides};
use futures::future::BoxFuture;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::Resolver;
use super::dump::*;
use super::{files, list};

impl Resolver {
    /// The endpoint for `name` with `o`; `via`: `None` to follow the
    /// config's ProxyJump, `Some(v)` to go through `v` instead.
    pub(super) fn endpoint<'a>(
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

    pub(super) async fn build(
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
                // 0: no bound of its own, as for OpenSSH
                .filter(|t| *t > 0)
                .map(Duration::from_secs),
            family: Family::from_ssh(d.one("addressfamily")),
            host_key_algorithms: list(d.one("hostkeyalgorithms")),
            host_key_algorithms_set: self.scan.sets("hostkeyalgorithms"),
            ca_signature_algorithms: list(d.one("casignaturealgorithms")),
            revoked_host_keys: None,
            via,
        };
        let expand = |what: &str, v: &str, e: &Endpoint| {
            expand_tokens(v, e, &self.me)
                .map(|x| self.me.tilde(&x))
                .map_err(|err| {
                    format!(
                        "{name}: ssh config {what} {err} ({}): OpenSSH stops there too; fix the value",
                        self.scan.where_set(&what.to_ascii_lowercase())
                    )
                })
        };
        let mut ids = Vec::new();
        for i in &raw_ids {
            ids.push(expand("IdentityFile", i, &e)?);
        }
        e.identities = ids;
        if let Some(r) = d
            .one("revokedhostkeys")
            .filter(|r| !r.eq_ignore_ascii_case("none"))
        {
            e.revoked_host_keys = Some(expand("RevokedHostKeys", r, &e)?);
        }
        // `ssh -G` prints the known_hosts paths joined by spaces: a path
        // with a space in it cannot be told apart
        for k in ["userknownhostsfile", "globalknownhostsfile"] {
            if let Some(l) =
                self.scan.lines.iter().find(|l| {
                    l.keyword == k && l.args.iter().any(|a| a.contains(char::is_whitespace))
                })
            {
                return Err(format!(
                    "{name}: ssh config {} at {}: a known_hosts path with a space, which kwinctl cannot read back from `ssh -G`; \
                     move the file to a path without spaces",
                    echo(&l.text()),
                    l.at()
                ));
            }
        }
        Ok(Arc::new(e))
    }
}
