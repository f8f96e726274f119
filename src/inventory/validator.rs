//! The validator's state and the checks every part of the inventory uses:
//! a problem at a position, an optional key's parse, a path, a network.
//! The parts (`validate`, `groups`, `linux`, `bastion`, `kubeconfig`)
//! extend it with `impl Validator` blocks of their own.

use std::path::PathBuf;

use ipnet::Ipv4Net;
use serde_saphyr::Spanned;

use super::*;
use crate::text::echo;

pub(super) struct Validator {
    pub(super) base: PathBuf,
    pub(super) problems: Vec<Problem>,
}

impl Validator {
    /// An optional cluster key `(name, value)` parsed by `parse`; a value
    /// it does not take is a problem ("NAME VALUE is not WHAT", `hint`) and
    /// clears `ok`.
    pub(super) fn optional<T>(
        &mut self,
        (key, v): (&str, Option<&Spanned<String>>),
        parse: impl Fn(&str) -> Option<T>,
        what: &str,
        hint: &str,
        ok: &mut bool,
    ) -> Option<T> {
        let v = v?;
        let parsed = parse(&v.value);
        if parsed.is_none() {
            self.problem(
                v.into(),
                format!("{key} {} is not {what}", echo(&v.value)),
                hint,
            );
            *ok = false;
        }
        parsed
    }

    pub(super) fn problem(
        &mut self,
        pos: Pos,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        let message = message.into();
        // a setting of `defaults` or a group is checked once per host that
        // takes it: said once
        if self
            .problems
            .iter()
            .any(|p| p.pos == pos && p.message == message)
        {
            return;
        }
        self.problems.push(Problem {
            pos,
            message,
            hint: hint.into(),
        });
    }

    pub(super) fn path(&self, s: &str) -> PathBuf {
        expand_path(&self.base, s)
    }

    pub(super) fn net(&mut self, s: &Spanned<String>, what: &str) -> Option<Ipv4Net> {
        match s.value.trim().parse::<Ipv4Net>() {
            Ok(n) if n.network() != n.addr() => {
                self.problem(
                    s.into(),
                    format!("{what} {} has host bits set", s.value),
                    format!("write it as {}", n.trunc()),
                );
                None
            }
            Ok(n) => Some(n),
            Err(_) => {
                self.problem(
                    s.into(),
                    format!("{what} {} is not an IPv4 CIDR", echo(&s.value)),
                    "write it as address/prefix, e.g. 192.168.0.0/16",
                );
                None
            }
        }
    }
}

/// A DNS domain as RFC 1123 labels: letters, digits and `-`, 1 to 63 each,
/// not starting or ending with `-`, at most 253 in all.
pub(super) fn dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}
