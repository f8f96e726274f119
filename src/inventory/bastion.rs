//! `ssh.bastion` / `winrm.bastion`: the rules for a jump host's settings.

use std::net::Ipv4Addr;

use serde_saphyr::Spanned;

use super::raw::RawBastion;
use super::validator::Validator;
use super::{Bastion, Pos};
use crate::text::echo;

impl Validator {
    /// A bastion's settings; problems are collected (the host still
    /// validates, so every problem of the file is reported at once).
    pub(super) fn bastion(&mut self, b: &Spanned<RawBastion>) -> Option<Bastion> {
        let r = &b.value;
        let a = r.address.value.trim();
        let name_ok = !a.is_empty()
            && a.len() <= 253
            && !a.starts_with(['-', '.'])
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
        if a.parse::<Ipv4Addr>().is_err() && !name_ok {
            self.problem(
                (&r.address).into(),
                format!(
                    "bastion address {} is neither an IPv4 address nor a host name",
                    echo(a)
                ),
                "give the jump host's address, e.g. 10.0.0.5, or a name ssh_config or DNS resolves",
            );
            return None;
        }
        if let Some(p) = &r.port
            && p.value == 0
        {
            self.problem(
                p.into(),
                "bastion port 0 is not a port",
                "give 1-65535 (22 if unsure)",
            );
            return None;
        }
        Some(Bastion {
            address: a.to_string(),
            user: r.user.clone(),
            port: r.port.as_ref().map(|p| p.value),
            identity: r.identity.as_ref().map(|s| self.path(&s.value)),
            known_hosts: r.known_hosts.as_ref().map(|s| self.path(&s.value)),
            pos: Pos::from(b),
        })
    }
}
