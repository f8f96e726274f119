//! What every OS's probe shares: its errors and the reachability results.
//! Facts that are not what the probe promises fail the host with a message;
//! they never panic.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

#[derive(Debug, Clone, thiserror::Error)]
pub enum FactsError {
    #[error("the probe printed no facts (no `{marker}` line); stderr: {stderr}")]
    Missing {
        marker: &'static str,
        stderr: String,
    },
    #[error("the probe's facts are not valid: {0}")]
    Invalid(String),
    #[error(
        "the host printed more than kwinctl reads ({limit} bytes; {dropped} more were dropped): \
         its main routing table is probably very large (`ip -4 route show table main | wc -l` \
         on it); kwinctl manages hosts whose probe fits in {limit} bytes"
    )]
    TooLarge { limit: usize, dropped: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Ok,
    NoAnswer,
    /// The host has no `ping` to test with.
    NoPing,
}

/// Parse the probe's `"<ip> ok|fail|noping"` entries.
pub fn parse_reach<S: AsRef<str>>(entries: &[S]) -> Result<BTreeMap<Ipv4Addr, Reach>, FactsError> {
    let mut reach = BTreeMap::new();
    for r in entries {
        let r = r.as_ref();
        let bad = || FactsError::Invalid(format!("reach entry {r:?}"));
        let mut it = r.split_whitespace();
        let (Some(ip), Some(res)) = (it.next(), it.next()) else {
            return Err(bad());
        };
        let ip = ip.parse::<Ipv4Addr>().map_err(|_| bad())?;
        let res = match res {
            "ok" => Reach::Ok,
            "fail" => Reach::NoAnswer,
            "noping" => Reach::NoPing,
            _ => return Err(bad()),
        };
        reach.insert(ip, res);
    }
    Ok(reach)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reach_entries() {
        let r = parse_reach(&["10.0.0.1 ok", "10.0.0.2 fail", "10.0.0.3 noping"]).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[&"10.0.0.2".parse::<Ipv4Addr>().unwrap()], Reach::NoAnswer);
        for bad in ["10.0.0.1", "x ok", "10.0.0.1 maybe"] {
            assert!(parse_reach(&[bad]).is_err(), "{bad}");
        }
    }
}
