//! Typed facts parsed from a probe's output, per OS.
//!
//! The Windows probe prints one line `KWINCTL-FACTS {json}` (PowerShell's
//! ConvertTo-Json). The Linux probe prints `KWF <key> <value>` lines from
//! `KWF probe linux 2` to `KWF end` with the values raw (the routes as
//! `ip -j` prints them): escaping them into JSON on the host took a `tr`
//! process per value, and every process there costs the host 2-3 ms on
//! every run. Anything else on stdout (motd, shell noise) is ignored. Facts
//! that are not what the probe promises fail the host with a message; they
//! never panic.

mod linux;
pub mod windows;

pub use linux::*;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// The route protocol number kwinctl marks its Linux routes with
/// (`ip route ... proto 198`), so that it only ever removes its own.
pub const ROUTE_PROTO: u8 = 198;
pub const FACTS_MARKER: &str = "KWINCTL-FACTS ";

#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    #[error("the probe printed no facts (no `KWINCTL-FACTS` line); stderr: {0}")]
    Missing(String),
    #[error("the probe's facts are not valid: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Ok,
    NoAnswer,
    /// The host has no `ping` to test with.
    NoPing,
}

/// Find the facts line in a probe's stdout.
pub fn facts_json<'a>(stdout: &'a str, stderr: &str) -> Result<&'a str, FactsError> {
    stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(FACTS_MARKER))
        .ok_or_else(|| FactsError::Missing(crate::report::clip(stderr.trim(), 400)))
}

/// Parse the probe's `"<ip> ok|fail|noping"` entries.
pub fn parse_reach(entries: &[String]) -> Result<BTreeMap<Ipv4Addr, Reach>, FactsError> {
    let mut reach = BTreeMap::new();
    for r in entries {
        let mut it = r.split_whitespace();
        let (Some(ip), Some(res)) = (it.next(), it.next()) else {
            return Err(FactsError::Invalid(format!("reach entry {r:?}")));
        };
        let ip = ip
            .parse::<Ipv4Addr>()
            .map_err(|_| FactsError::Invalid(format!("reach entry {r:?}")))?;
        let res = match res {
            "ok" => Reach::Ok,
            "fail" => Reach::NoAnswer,
            "noping" => Reach::NoPing,
            _ => return Err(FactsError::Invalid(format!("reach entry {r:?}"))),
        };
        reach.insert(ip, res);
    }
    Ok(reach)
}
