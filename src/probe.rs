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
        "the host printed more than kwinctl reads ({limit} bytes; {dropped} more were dropped, \
         and kwinctl stopped reading): {cause}; kwinctl manages hosts whose probe fits in {limit} bytes"
    )]
    TooLarge {
        limit: usize,
        dropped: usize,
        /// What the kept output says the bulk of it is.
        cause: String,
    },
}

/// What most of a probe's oversized output (`kept`, the part read) is, in
/// words: what printed before the probe began (a login script), its
/// routes, or one huge line.
pub fn too_large_cause(kept: &str) -> String {
    let start = kept
        .find("KWF probe ")
        .or_else(|| kept.find("KWINCTL-FACTS "))
        .unwrap_or(kept.len());
    if start * 2 >= kept.len() {
        return format!(
            "{} bytes came before the probe began: something the login runs (~/.bashrc, \
             ~/.profile, /etc/profile, /etc/bash.bashrc) prints to stdout; make it print only on \
             a terminal",
            start
        );
    }
    let longest = kept[start..]
        .lines()
        .max_by_key(|l| l.len())
        .unwrap_or_default();
    let what: String = longest.split(' ').take(2).collect::<Vec<_>>().join(" ");
    if longest.len() < 1024 || longest.len() * 2 < kept.len() - start {
        return "the probe's facts as a whole are that large (very many routes, or something \
                on the host printing while the probe ran)"
            .into();
    }
    match what.as_str() {
        "KWF routes" => {
            "most of it is the host's main routing table (`ip -4 route show table main \
                         | wc -l` on it)"
                .into()
        }
        "KWF pod_cidr" => "most of it is the node's record, /etc/kwinctl/pod-cidr, which is no \
                           longer a pod CIDR: reset the node or fix the file"
            .into(),
        _ if what.starts_with("KWINCTL-FACTS") => "most of it is the host's facts: its routes or \
                                                   networks are very many"
            .into(),
        _ => format!(
            "most of it is one line of {} bytes starting {}",
            longest.len(),
            crate::text::echo(&crate::text::clip(longest, 40))
        ),
    }
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
    fn oversized_output_names_what_made_it_large() {
        let junk = "x".repeat(1000);
        let c = too_large_cause(&format!("{junk}\nKWF probe linux 2\nKWF hostname h\n"));
        assert!(
            c.contains("before the probe began") && c.contains(".bashrc"),
            "{c}"
        );
        let routes = format!("KWF probe linux 2\nKWF routes [{}]\n", "{},".repeat(500));
        assert!(too_large_cause(&routes).contains("routing table"));
        let rec = format!("KWF probe linux 2\nKWF pod_cidr {}\n", "9".repeat(5000));
        let c = too_large_cause(&rec);
        assert!(
            c.contains("/etc/kwinctl/pod-cidr") && !c.contains("routing"),
            "{c}"
        );
        let other = format!("KWF probe linux 2\nKWF hostname {}\n", "h".repeat(5000));
        assert!(
            too_large_cause(&other).contains("one line of"),
            "{}",
            too_large_cause(&other)
        );
    }

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
