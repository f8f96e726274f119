//! A Windows node's own client certificate: the kubelet's
//! `kubelet-client-current.pem` in its certificate directory
//! (docs/research/bootstrap.md#bt-kubelet), as the probe reads it, and
//! `verify`'s checks of it (issue 35, item 5).
//!
//! A node that joined with TLS bootstrapping is `system:node:<node name>`
//! by its certificate's CN (docs/research/bootstrap.md#bt-node): a node
//! holding another node's certificate acts as that node, which the Node
//! authorizer and NodeRestriction then allow. A node without the file
//! (the shared identity of `cluster.kubeconfig`) has nothing to check here.

use std::time::{Duration, SystemTime};

use serde::Deserialize;

use super::issuer::{self, Anchor};
use crate::verify::Check;

/// The kubelet's certificate directory (`--cert-dir`) on a Windows node.
pub const CERT_DIR: &str = r"C:\k\pki";
/// The certificate the kubelet uses, in [`CERT_DIR`] (the file store's
/// name for the newest one).
pub const CURRENT: &str = r"C:\k\pki\kubelet-client-current.pem";
/// How long a certificate must still be valid for `verify` to pass, by
/// default (`windows.cert_margin_days`).
pub const MARGIN: Duration = days(crate::inventory::DEFAULT_CERT_MARGIN_DAYS);

/// `n` days.
pub const fn days(n: u32) -> Duration {
    Duration::from_secs(n as u64 * 24 * 3600)
}
/// The name of verify's check.
pub const CHECK: &str = "kubelet client certificate";

/// What the probe read of [`CURRENT`] when the file exists: the
/// certificate's subject and issuer as .NET prints them (`CN=…, O=…`), its
/// expiry (RFC 3339, UTC) and the certificate itself (base64 DER of the
/// file's first CERTIFICATE block, never the key beside it; empty when
/// longer than [`super::issuer::MAX_B64`]); all empty when the file holds
/// no certificate that parses.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, PartialEq, Eq)]
pub struct ClientCert {
    #[serde(default)]
    pub subject: String,
    #[serde(default)]
    pub issuer: String,
    #[serde(default)]
    pub not_after: String,
    #[serde(default)]
    pub der: String,
}

impl ClientCert {
    /// The subject's common name.
    pub fn common_name(&self) -> Option<&str> {
        self.subject
            .split(',')
            .map(str::trim)
            .find_map(|rdn| rdn.strip_prefix("CN="))
    }
}

/// The user a node's certificate makes it: `system:node:<name>`.
pub fn user_of(node_name: &str) -> String {
    format!("system:node:{node_name}")
}

/// Why a node in bootstrap mode must join (again): its kubelet has no
/// client certificate, one kwinctl cannot read, one for another node, or
/// one that has expired, or one the run's cluster CA `anchor` did not sign
/// (`None`: its own, still valid; the kubelet renews it before it expires,
/// with `--rotate-certificates`).
pub fn needs_join(
    cert: Option<&ClientCert>,
    node_name: &str,
    anchor: Option<&Anchor>,
    now: SystemTime,
) -> Option<String> {
    let Some(cert) = cert else {
        return Some(format!("its kubelet has no client certificate ({CURRENT})"));
    };
    let want = user_of(node_name);
    match cert.common_name() {
        None => return Some(format!("{CURRENT} holds no certificate kwinctl can read")),
        Some(cn) if cn != want => {
            return Some(format!(
                "its kubelet's client certificate is for {}, not {want}",
                crate::text::sanitize(cn)
            ));
        }
        _ => {}
    }
    match humantime::parse_rfc3339_weak(cert.not_after.trim_end_matches('Z')) {
        Ok(t) if t > now => anchor.and_then(|a| issuer::judge(&cert.der, a, now)),
        Ok(_) => Some("its kubelet's client certificate has expired".into()),
        Err(_) => Some(format!("the expiry of {CURRENT} cannot be read")),
    }
}

/// verify's check of a node's certificate, when it has one: for
/// `system:node:<node_name>`, valid for at least `margin` after `now`, and
/// signed by the run's cluster CA `anchor` (when the cluster has one).
/// `host` names the host in the finding.
pub fn check(
    host: &str,
    node_name: &str,
    cert: Option<&ClientCert>,
    anchor: Option<&Anchor>,
    now: SystemTime,
    margin: Duration,
) -> Option<Check> {
    let cert = cert?;
    let want = user_of(node_name);
    let fail = |detail: String| {
        Some(Check {
            name: CHECK.into(),
            pass: false,
            detail,
        })
    };
    let Some(cn) = cert.common_name() else {
        return fail(format!(
            "{host}: {CURRENT} holds no certificate kwinctl can read; delete it and run `kwinctl up` to join the node again"
        ));
    };
    if cn != want {
        return fail(format!(
            "{host}: its kubelet's client certificate is for {}, not {want}: the node acts as another node; delete {CURRENT} and run `kwinctl up` to join it as itself",
            crate::text::sanitize(cn)
        ));
    }
    let Ok(not_after) = humantime::parse_rfc3339_weak(cert.not_after.trim_end_matches('Z')) else {
        return fail(format!(
            "{host}: the expiry of {CURRENT} cannot be read ({:?})",
            crate::text::sanitize(&cert.not_after)
        ));
    };
    if not_after < now + margin {
        let days = not_after
            .duration_since(now)
            .map(|d| d.as_secs() / 86400)
            .unwrap_or(0);
        let when = if not_after <= now {
            "has expired".to_string()
        } else {
            format!("expires in {days} days")
        };
        return fail(format!(
            "{host}: its kubelet's client certificate {when} (verify wants {} days left, windows.cert_margin_days); check that client certificate rotation is on, or delete {CURRENT} and run `kwinctl up` to join the node again",
            margin.as_secs() / 86400
        ));
    }
    if let Some(why) = anchor.and_then(|a| issuer::judge(&cert.der, a, now)) {
        return fail(format!(
            "{host}: {why}: the node holds another cluster's identity; delete {CURRENT} and run `kwinctl up` to join it to this cluster"
        ));
    }
    Some(Check {
        name: CHECK.into(),
        pass: true,
        detail: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str, not_after: &str) -> ClientCert {
        ClientCert {
            subject: format!("CN={cn}, O=system:nodes"),
            issuer: "CN=kubernetes".into(),
            not_after: not_after.into(),
            der: String::new(),
        }
    }

    fn at(t: &str) -> SystemTime {
        humantime::parse_rfc3339(t).unwrap()
    }

    #[test]
    fn a_node_without_its_own_certificate_has_no_check() {
        assert_eq!(
            check("win1", "win1", None, None, SystemTime::now(), MARGIN),
            None
        );
    }

    #[test]
    fn a_certificate_for_the_node_valid_beyond_the_margin_passes() {
        let c = cert("system:node:win1", "2027-11-29T05:30:00.0000000Z");
        let now = at("2026-11-29T00:00:00Z");
        let got = check("WIN1", "win1", Some(&c), None, now, MARGIN).unwrap();
        assert!(got.pass, "{got:?}");
    }

    #[test]
    fn another_nodes_certificate_fails_naming_both() {
        let c = cert("system:node:win2", "2027-11-29T05:30:00.0000000Z");
        let now = at("2026-11-29T00:00:00Z");
        let got = check("win1", "win1", Some(&c), None, now, MARGIN).unwrap();
        assert!(!got.pass);
        assert!(
            got.detail.starts_with("win1: ")
                && got
                    .detail
                    .contains("system:node:win2, not system:node:win1"),
            "{}",
            got.detail
        );
    }

    #[test]
    fn a_certificate_expiring_within_the_margin_fails() {
        let c = cert("system:node:win1", "2026-12-09T00:00:00.0000000Z");
        let now = at("2026-11-29T00:00:00Z");
        let got = check("win1", "win1", Some(&c), None, now, MARGIN).unwrap();
        assert!(!got.pass);
        assert!(got.detail.contains("expires in 10 days"), "{}", got.detail);
        let got = check(
            "win1",
            "win1",
            Some(&c),
            None,
            now,
            Duration::from_secs(86400),
        )
        .unwrap();
        assert!(got.pass, "{got:?}");
        let got = check(
            "win1",
            "win1",
            Some(&c),
            None,
            at("2027-01-01T00:00:00Z"),
            MARGIN,
        )
        .unwrap();
        assert!(got.detail.contains("has expired"), "{}", got.detail);
    }

    #[test]
    fn who_must_join() {
        let now = at("2026-11-29T00:00:00Z");
        let own = cert("system:node:win1", "2027-11-29T05:30:00.0000000Z");
        assert_eq!(needs_join(Some(&own), "win1", None, now), None);
        // within verify's margin, but the kubelet renews it: no join
        let soon = cert("system:node:win1", "2026-12-01T00:00:00.0000000Z");
        assert_eq!(needs_join(Some(&soon), "win1", None, now), None);
        assert!(
            needs_join(None, "win1", None, now)
                .unwrap()
                .contains("no client certificate")
        );
        let other = cert("system:node:win2", "2027-11-29T05:30:00.0000000Z");
        assert!(
            needs_join(Some(&other), "win1", None, now)
                .unwrap()
                .contains("system:node:win2")
        );
        let old = cert("system:node:win1", "2026-11-01T00:00:00.0000000Z");
        assert!(
            needs_join(Some(&old), "win1", None, now)
                .unwrap()
                .contains("expired")
        );
        assert!(needs_join(Some(&ClientCert::default()), "win1", None, now).is_some());
    }

    #[test]
    fn a_certificate_another_ca_signed_fails_and_joins_again() {
        // (issuer.rs's tests check the signature itself)
        let c = ClientCert {
            der: "AAAA".into(),
            ..cert("system:node:win1", "2037-01-01T00:00:00.0000000Z")
        };
        let ca: Anchor = Ok(crate::join::ca::Ca {
            pem: "no certificate".into(),
            hash: "sha256:aa".into(),
        });
        let now = at("2027-06-01T00:00:00Z");
        let got = check("WIN1", "win1", Some(&c), Some(&ca), now, MARGIN).unwrap();
        assert!(!got.pass);
        assert!(
            got.detail.starts_with("WIN1: ")
                && got
                    .detail
                    .contains("not signed by the cluster CA sha256:aa"),
            "{}",
            got.detail
        );
        let why = needs_join(Some(&c), "win1", Some(&ca), now).unwrap();
        assert!(why.contains("not signed"), "{why}");
        // without a CA to check against (shared identity), no such finding
        assert!(needs_join(Some(&c), "win1", None, now).is_none());
    }

    #[test]
    fn an_unreadable_certificate_fails() {
        let got = check(
            "win1",
            "win1",
            Some(&ClientCert::default()),
            None,
            SystemTime::now(),
            MARGIN,
        )
        .unwrap();
        assert!(!got.pass);
        assert!(got.detail.contains("no certificate"), "{}", got.detail);
    }
}
