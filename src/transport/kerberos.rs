//! WinRM with Kerberos (`winrm.auth: kerberos`) through winrm-rs's own
//! Kerberos (cross-krb5 over the system's GSS-API, MIT krb5 on Linux).
//!
//! winrm-rs authenticates with the process's default initiator credential:
//! the ticket in the operator's credential cache (`kinit` beforehand,
//! `KRB5CCNAME`), or, with `winrm.keytab`, tickets kwinctl gets from that
//! keytab into a credential cache of its own in memory (MIT's client keytab,
//! `KRB5_CLIENT_KTNAME`). Before the first request kwinctl asks GSS-API
//! for that credential itself, so that a missing or expired ticket, or one
//! for another principal than `winrm.user`, is said plainly; the errors of
//! the exchange itself (clock skew, unknown service principal, unreachable
//! KDC, the host's refusal) are recognised in what winrm-rs reports and
//! explained with their fix. Facts: docs/research/kerberos.md.

use super::TransportError;
use crate::inventory::{Connection, Host, WinRmAuth, WinRmSettings};

/// What went wrong with Kerberos, as far as kwinctl can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    /// No credential cache, or one without a ticket.
    NoTicket,
    /// The ticket-granting ticket (or the service ticket) expired.
    Expired,
    /// This machine's clock and the KDC's (or the host's) differ too much.
    Skew,
    /// The KDC has no such service principal.
    UnknownService,
    /// The KDC has no such client principal (winrm.user).
    UnknownClient,
    /// No KDC of the realm answered.
    Unreachable,
    /// The host refused the ticket (HTTP 401 to the AP-REQ).
    Refused,
}

/// Which trouble an error text from GSS-API (MIT krb5's messages, through
/// cross-krb5 and winrm-rs) describes. MIT's texts: krb5
/// src/lib/krb5/error_tables/krb5_err.et and src/lib/gssapi/krb5 (see
/// docs/research/kerberos.md); winrm-rs's 401: its src/auth/kerberos.rs.
pub fn classify(text: &str) -> Option<Trouble> {
    let t = text.to_ascii_lowercase();
    let has = |any: &[&str]| any.iter().any(|s| t.contains(s));
    // order matters: a skew or an unknown server also says what it was
    // doing ("while getting credentials"), and an expired ticket is also
    // "no valid credentials"
    if has(&["clock skew too great"]) {
        Some(Trouble::Skew)
    } else if let Some(at) = t.find("not found in kerberos database") {
        // "Server HTTP/x@R not found ...", "Client 'u@R' not found ...":
        // the nearer of the two words before it says whose
        let before = &t[..at];
        match (before.rfind("server"), before.rfind("client")) {
            (Some(s), Some(c)) if c > s => Some(Trouble::UnknownClient),
            (Some(_), _) => Some(Trouble::UnknownService),
            _ => Some(Trouble::UnknownClient),
        }
    } else if has(&[
        "cannot contact any kdc",
        "cannot find kdc for realm",
        "unable to reach any kdc",
    ]) {
        Some(Trouble::Unreachable)
    } else if has(&[
        "ticket expired",
        "credential has expired",
        "credentials have expired",
    ]) {
        Some(Trouble::Expired)
    } else if has(&[
        "no kerberos credentials available",
        "no credentials cache found",
        "no credentials were supplied",
        "credentials cache file",
        // the keytab of winrm.keytab without the principal, or empty
        "no key table entry found",
        "is nonexistent or empty",
    ]) {
        Some(Trouble::NoTicket)
    } else if has(&["kerberos authentication rejected"]) {
        Some(Trouble::Refused)
    } else {
        None
    }
}

/// The host name in the WinRM URL: winrm.spn's name with Kerberos (winrm-rs
/// names the service principal after the URL, and the TLS certificate is
/// checked against it), else the address kwinctl reaches; and whether it
/// is winrm.spn's.
pub fn url_name(host: &Host, w: &WinRmSettings) -> (String, bool) {
    match (&w.spn_host, w.auth) {
        (Some(n), WinRmAuth::Kerberos) => (n.clone(), true),
        _ => (host.reach().to_string(), false),
    }
}

/// The service principal kwinctl names for a host: `HTTP/<spn host or
/// address>` (winrm-rs names `HTTP/` and the host it connects to).
pub fn spn(host: &Host, w: &WinRmSettings) -> String {
    format!("HTTP/{}", url_name(host, w).0)
}

/// The exchanges Kerberos adds to opening a WinRM connection: an AP-REQ on
/// an empty body, after an unauthenticated probe for the certificate over
/// HTTPS (winrm-rs 2.0.1 src/auth/kerberos.rs `establish`; see
/// docs/research/kerberos.md).
pub fn setup_exchanges(w: &WinRmSettings) -> u32 {
    u32::from(w.auth == WinRmAuth::Kerberos) * (1 + u32::from(w.tls))
}

/// Where the credential cache is, for messages.
fn cache_name() -> String {
    std::env::var("KRB5CCNAME").unwrap_or_else(|_| "the default credential cache".into())
}

/// The message, with its fix, for `trouble` met while reaching `host`.
pub fn advice(trouble: Trouble, host: &Host, w: &WinRmSettings, text: &str) -> String {
    let (user, spn) = (&w.user, spn(host, w));
    let fix = match trouble {
        Trouble::NoTicket if w.keytab.is_some() => format!(
            "no Kerberos ticket for {user}: the keytab {} gave none; check that it holds {user} \
             (klist -k -t FILE)",
            w.keytab
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
                .display()
        ),
        Trouble::NoTicket => format!(
            "no Kerberos ticket: {} holds none for {user}. Run `kinit {user}` before kwinctl \
             (or name a keytab with winrm.keytab)",
            cache_name()
        ),
        Trouble::Expired => format!(
            "the Kerberos ticket of {user} has expired: run `kinit {user}` again (klist shows \
             its times; `kinit -R` renews one that is still renewable)"
        ),
        Trouble::Skew => "clock skew: this machine's clock and the KDC's (a domain controller's) \
             differ by more than the realm allows (5 minutes by default). Set this machine's time \
             from the domain (chrony or ntpd against a domain controller), then `kinit` again"
            .to_string(),
        Trouble::UnknownService if w.spn_host.is_some() => format!(
            "the KDC knows no service principal {spn} (winrm.spn): check the name against the \
             host's (`setspn -L <computer>` lists its principals; HTTP/ is served by its HOST/ \
             ones), or register it (setspn -S {spn} <computer>)"
        ),
        Trouble::UnknownService => format!(
            "the KDC knows no service principal {spn}: without winrm.spn kwinctl asks for HTTP/ \
             and the host's address. Set winrm.spn: HTTP/<the host's DNS name> (its computer \
             account has HTTP/ through HOST/ for that name; `setspn -L <computer>` lists them), \
             or register this one (setspn -S {spn} <computer>)"
        ),
        Trouble::UnknownClient => format!(
            "the KDC knows no principal {user}: check winrm.user (user@REALM, the realm in \
             capitals) and the ticket (klist)"
        ),
        Trouble::Unreachable => "no KDC of the realm answered: check the realm's kdc entries in \
             krb5.conf (KRB5_CONFIG; or dns_lookup_kdc and the domain's SRV records) and that \
             port 88 of the domain controllers is reachable from this machine"
            .to_string(),
        Trouble::Refused => format!(
            "the host refused the Kerberos ticket for {spn}: its keys for {spn} may be other than \
             the KDC's (the SPN registered on another account: setspn -Q {spn}), its clock may be \
             off from the domain's by more than 5 minutes, or WinRM may not accept Kerberos \
             (winrm get winrm/config/service/auth)"
        ),
    };
    format!("{fix} ({text})")
}

/// An error from the Kerberos exchange, explained when kwinctl knows it.
pub fn explain(host: &Host, w: &WinRmSettings, text: &str) -> Option<TransportError> {
    classify(text).map(|t| TransportError::Setup(advice(t, host, w, text)))
}

/// Make the process's Kerberos environment what the inventory says: with
/// `winrm.keytab`, MIT's client keytab (`KRB5_CLIENT_KTNAME`) and a
/// credential cache in this process's memory (`KRB5CCNAME`), so that
/// tickets come from the keytab and the operator's own cache is neither
/// read nor written. The environment is the process's, so every Kerberos
/// host must agree on the keytab and the principal.
///
/// Must be called before any other thread runs (the runtime, the reporter):
/// setting the environment is only sound then.
pub fn prepare(hosts: &[&Host]) -> Result<(), String> {
    let mut chosen: Option<(&std::path::Path, &str, &str)> = None;
    // the first host that uses the credential cache (no winrm.keytab)
    let mut cached: Option<&str> = None;
    let mut users: Option<(&str, &str)> = None;
    for h in hosts {
        let Connection::WinRm(w) = &h.connection else {
            continue;
        };
        if w.auth != WinRmAuth::Kerberos {
            continue;
        }
        match users {
            Some((u, first)) if !u.eq_ignore_ascii_case(&w.user) => {
                return Err(format!(
                    "hosts {first} and {} use different Kerberos principals ({u} and {}): kwinctl \
                     authenticates as one principal per run; give them the same winrm.user",
                    h.name, w.user
                ));
            }
            None => users = Some((&w.user, &h.name)),
            _ => {}
        }
        match (chosen, &w.keytab) {
            (Some((kt, first, _)), Some(k)) if kt != k.as_path() => {
                return Err(format!(
                    "hosts {first} and {} name different Kerberos keytabs: kwinctl uses one \
                     keytab per run; give them the same winrm.keytab",
                    h.name
                ));
            }
            (None, Some(k)) if cached.is_none() => chosen = Some((k, &h.name, &w.user)),
            (None, Some(_)) => {
                return Err(format!(
                    "host {} authenticates with the credential cache and host {} with a keytab \
                     (winrm.keytab): kwinctl uses one or the other per run",
                    cached.unwrap_or_default(),
                    h.name
                ));
            }
            (None, None) => {
                cached.get_or_insert(&h.name);
            }
            (Some((_, first, _)), None) => {
                return Err(format!(
                    "host {first} authenticates with a keytab (winrm.keytab) and host {} with the \
                     credential cache: kwinctl uses one or the other per run",
                    h.name
                ));
            }
            _ => {}
        }
    }
    #[cfg(feature = "kerberos")]
    if let Some((kt, _, _)) = chosen {
        let name = format!("FILE:{}", kt.display());
        let cache = format!("MEMORY:kwinctl-{}", std::process::id());
        let set = |k: &str, v: &str| std::env::var(k).is_ok_and(|x| x == v);
        // a second run in one process (reset: plan, then reset) finds them
        // set already, and sets nothing while its first run's threads may
        // still be about
        if !(set("KRB5_CLIENT_KTNAME", &name) && set("KRB5CCNAME", &cache)) {
            // SAFETY: called before any other thread exists (see above),
            // so nothing reads the environment meanwhile.
            unsafe {
                std::env::set_var("KRB5_CLIENT_KTNAME", name);
                std::env::set_var("KRB5CCNAME", cache);
            }
        }
    }
    Ok(())
}

/// The principal of the default initiator credential, after getting
/// tickets for `user` from the client keytab when there is one (blocking:
/// GSS-API may ask the KDC). An error is GSS-API's text.
#[cfg(feature = "kerberos")]
fn default_principal(user: &str, keytab: bool) -> Result<(String, u64), String> {
    use libgssapi::credential::{Cred, CredUsage};
    use libgssapi::name::Name;
    use libgssapi::oid::{GSS_MECH_KRB5, GSS_NT_KRB5_PRINCIPAL, OidSet};
    let mut mechs = OidSet::new();
    mechs.add(GSS_MECH_KRB5).map_err(|e| e.to_string())?;
    if keytab {
        // tickets for `user` from the keytab into the memory cache
        let name =
            Name::new(user.as_bytes(), Some(GSS_NT_KRB5_PRINCIPAL)).map_err(|e| e.to_string())?;
        Cred::acquire(Some(&name), None, CredUsage::Initiate, Some(&mechs))
            .map_err(|e| e.to_string())?;
    }
    let cred =
        Cred::acquire(None, None, CredUsage::Initiate, Some(&mechs)).map_err(|e| e.to_string())?;
    let info = cred.info().map_err(|e| e.to_string())?;
    Ok((info.name.to_string(), info.lifetime.as_secs()))
}

/// Check, before the first request, that there is a ticket for
/// `winrm.user` that has not expired.
#[cfg(feature = "kerberos")]
pub async fn preflight(host: &Host, w: &WinRmSettings) -> Result<(), TransportError> {
    let (user, keytab) = (w.user.clone(), w.keytab.is_some());
    let got = tokio::task::spawn_blocking(move || default_principal(&user, keytab))
        .await
        .map_err(|e| TransportError::Setup(format!("Kerberos: {e}")))?;
    match got {
        Err(text) => Err(explain(host, w, &text)
            .unwrap_or_else(|| TransportError::Setup(format!("Kerberos: {text}")))),
        Ok((_, 0)) => Err(TransportError::Setup(advice(
            Trouble::Expired,
            host,
            w,
            "the ticket's lifetime is over",
        ))),
        Ok((principal, _)) if !principal.eq_ignore_ascii_case(&w.user) => {
            Err(TransportError::Setup(format!(
                "{}: the Kerberos ticket in {} is for {principal}, not for winrm.user {}: run \
                 `kinit {}` (or `kswitch -p {}` to pick it in a cache collection), or set \
                 winrm.user: {principal}",
                host.name,
                cache_name(),
                w.user,
                w.user,
                w.user
            )))
        }
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::{Trouble, classify};

    /// MIT krb5 1.20's texts as GSS-API reports them (major, then minor),
    /// and winrm-rs's for the host's 401.
    #[test]
    fn the_texts_of_each_trouble_are_recognised() {
        for (text, want) in [
            (
                "gssapi major error No credentials were supplied, or the credentials were unavailable or inaccessible gssapi minor error No Kerberos credentials available (default cache: KEYRING:persistent:0)",
                Trouble::NoTicket,
            ),
            (
                "Kerberos init: gssapi major error Unspecified GSS failure.  Minor code may provide more information gssapi minor error Ticket expired",
                Trouble::Expired,
            ),
            ("The referenced credential has expired", Trouble::Expired),
            (
                "No credentials were supplied, or the credentials were unavailable or inaccessible (Keytab FILE:k.keytab is nonexistent or empty)",
                Trouble::NoTicket,
            ),
            (
                "Kerberos init: gssapi major error Unspecified GSS failure. gssapi minor error Clock skew too great",
                Trouble::Skew,
            ),
            (
                "gssapi minor error Server not found in Kerberos database",
                Trouble::UnknownService,
            ),
            (
                "WinRM auth failed: Kerberos init: Unspecified GSS failure.  Minor code may provide more information (Server HTTP/198.18.1.2@KWL1.TEST not found in Kerberos database)",
                Trouble::UnknownService,
            ),
            (
                "Client 'x@R' not found in Kerberos database",
                Trouble::UnknownClient,
            ),
            (
                "gssapi minor error Cannot contact any KDC for realm 'KWL3.TEST'",
                Trouble::Unreachable,
            ),
            (
                "authentication failed: Kerberos authentication rejected",
                Trouble::Refused,
            ),
        ] {
            assert_eq!(classify(text), Some(want), "{text}");
        }
        assert_eq!(classify("connection refused"), None);
    }
}

#[cfg(test)]
mod prepare_tests {
    use std::path::Path;

    use crate::inventory::Inventory;

    fn hosts_of(yaml_hosts: &str) -> Inventory {
        let s = format!(
            "cluster:\n  name: k\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  \
             api_server: http://198.18.1.1:8080\n  kubernetes_version: \"1.10.13\"\nhosts:\n  - name: cp\n    os: linux\n    \
             address: 198.18.1.1\n    role: control-plane\n{yaml_hosts}"
        );
        Inventory::parse(Path::new("k.yaml"), &s).expect("inventory")
    }

    /// A keytab for one host and the credential cache for another cannot
    /// both serve one run, whichever comes first in the inventory.
    #[test]
    fn a_keytab_and_the_credential_cache_are_not_mixed_in_either_order() {
        let cached = "    winrm: { auth: kerberos, user: op@KWL.TEST }\n";
        let keytab =
            "    winrm: { auth: kerberos, user: op@KWL.TEST, keytab: /nonexistent/op.keytab }\n";
        for (first, second) in [(cached, keytab), (keytab, cached)] {
            let inv = hosts_of(&format!(
                "  - name: w1\n    os: windows\n    address: 198.18.1.2\n{first}  \
                 - name: w2\n    os: windows\n    address: 198.18.1.3\n{second}"
            ));
            let all: Vec<_> = inv.hosts.iter().collect();
            let e = super::prepare(&all).expect_err("mixed keytab and cache");
            assert!(e.contains("one or the other per run"), "{e}");
        }
    }
}
