//! What a winrm-rs error means for the operator: each error turned into
//! one that says what to fix, and the retry of a request whose NTLM
//! session the server dropped.

use winrm_rs::WinrmError;

use crate::inventory::{Host, WinRmAuth, WinRmSettings};
use crate::transport::TransportError;

/// An error and all its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// A winrm-rs error with its causes. Its Http variant keeps its cause to
/// itself, so reqwest's chain is read directly.
pub(super) fn text_of(e: &WinrmError) -> String {
    match e {
        WinrmError::Http(re) => format!("WinRM HTTP error: {}", chain(re)),
        _ => chain(e),
    }
}

/// winrm-rs's report of a 401 on a connection it had authenticated (the
/// server no longer holds the NTLM session for it). The request was not
/// resent by winrm-rs, as it cannot know whether it ran.
fn session_lost(e: &WinrmError) -> bool {
    matches!(e, WinrmError::Ntlm(_) | WinrmError::AuthFailed(_))
        && e.to_string().contains("on an authenticated connection")
}

/// Tries of a request that is safe to repeat when the session was lost: the
/// retry goes on a newly authenticated connection, so a second loss in a
/// row is the server's doing and is reported. (winrm-rs 2.0.1 could send a
/// handshake's last leg on another TCP connection, which called for more
/// tries; the vendored fix keeps it on one: docs/vendor.md.)
const SAFE_TRIES: usize = 2;

/// Run `op` (safe to repeat) again while winrm-rs reports a lost session,
/// [`SAFE_TRIES`] times at most.
pub(super) async fn retry_lost<T, F, Fut>(mut op: F) -> Result<T, WinrmError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, WinrmError>>,
{
    let mut tries = 1;
    loop {
        match op().await {
            Err(e) if session_lost(&e) && tries < SAFE_TRIES => tries += 1,
            r => return r,
        }
    }
}

/// Whether winrm-rs's authentication error says the server answered the
/// NTLM negotiate (which carries no password) with a status other than the
/// 401 challenge: a server error, not a wrong password (winrm-rs 2.0.1
/// src/auth/ntlm.rs: "expected 401 for NTLM negotiate, got {status}").
fn refused_before_credentials(msg: &str) -> bool {
    msg.split_once("expected 401 for NTLM negotiate, got ")
        .is_some_and(|(_, got)| !got.starts_with("401"))
}

/// Turn a winrm-rs error into one that says what to fix.
pub(super) fn explain(host: &Host, w: &WinRmSettings, e: &WinrmError) -> TransportError {
    let addr = format!("{}:{}", host.reach(), w.port);
    let text = text_of(e);
    if let WinrmError::Http(re) = e
        && re.is_timeout()
    {
        return TransportError::Connect {
            addr,
            msg: format!("no answer within the timeout: {text}"),
        };
    }
    if w.auth == WinRmAuth::Kerberos
        && let Some(k) = crate::transport::kerberos::explain(host, w, &text)
    {
        return k;
    }
    let lower = text.to_ascii_lowercase();
    // TLS first: winrm-rs reports a refused pin as an authentication error.
    match e {
        // The connection that carried the NTLM challenge was closed (the
        // vendored fix, docs/vendor.md): an NTLM matter, not a TLS one
        // (its words name the handshake), over HTTP as over HTTPS.
        WinrmError::AuthFailed(m) if m.contains("carried the NTLM challenge") => {
            TransportError::Setup(format!(
                "{}: the WinRM endpoint at {addr}: {text}: something between kwinctl and the \
                 listener (a proxy, a load balancer) closes connections, or the listener is not \
                 Windows's; connect to the listener itself, or use winrm.auth: kerberos",
                host.name
            ))
        }
        _ if lower.contains("certificate")
            || lower.contains("tls")
            || lower.contains("handshake") =>
        {
            // the certificate it presented, to pin (not through a bastion:
            // only the tunnel reaches the listener there)
            let mismatch = lower.contains("not valid for name");
            let seen = if w.tls && w.bastion.is_none() && !mismatch {
                let at = std::net::SocketAddr::new(host.reach().into(), w.port);
                crate::transport::presented::cert_sha256(at, std::time::Duration::from_secs(5))
            } else {
                None
            };
            let named = match crate::transport::kerberos::url_name(host, w) {
                (n, true) => format!("{n} (winrm.spn's name)"),
                (n, false) => format!("{n} (the host's address)"),
            };
            let msg = match seen {
                // a certificate the CA vouches for, of another name
                _ if mismatch => format!(
                    "TLS: {text}: the listener's certificate does not name {named}, the name kwinctl \
                     connects to: give the listener a certificate for that name, or set winrm.spn to \
                     HTTP/<a name the certificate carries> (Kerberos), or pin the certificate with \
                     winrm.cert_sha256"
                ),
                Some(fp) => format!(
                    "TLS: {text}: the listener presented a certificate with SHA-256 {fp}. If that is the \
                     certificate of the host's WinRM listener (compare it out of band), pin it: add `cert_sha256: \"{fp}\"` under winrm: of host {} (inventory line {}), \
                     or give its CA with winrm.ca_file",
                    host.name, host.pos.line
                ),
                None => format!(
                    "TLS: {text}: give the listener's CA with winrm.ca_file or pin its certificate with winrm.cert_sha256"
                ),
            };
            // a refused certificate stays refused; a handshake cut short
            // (a listener still starting) may not
            if lower.contains("certificate") {
                TransportError::Certificate { addr, msg }
            } else {
                TransportError::Connect { addr, msg }
            }
        }
        // The server answered the first NTLM step with something other
        // than its challenge (winrm-rs says "expected 401 for NTLM
        // negotiate, got 500 ..."): no password was tried yet.
        WinrmError::AuthFailed(m) if refused_before_credentials(m) => {
            TransportError::Setup(format!(
                "{}: the WinRM endpoint at {addr} answered the authentication's first step (before any \
             password was sent) with {text}: it is not a working WinRM listener, or something in \
             front of it (a proxy, a load balancer) answers instead; check the service on the host \
             (winrm enumerate winrm/config/listener) and winrm.port / winrm.tls",
                host.name
            ))
        }
        // A 401 to the NTLM negotiate without a challenge: the host does
        // not take NTLM at all (no password was sent yet).
        WinrmError::AuthFailed(m)
            if w.auth == WinRmAuth::Ntlm && m.contains("missing Negotiate prefix in challenge") =>
        {
            TransportError::Auth {
                user: w.user.clone(),
                host: host.name.clone(),
                msg: format!(
                    "{text}: the host answered NTLM's first message (before any password was sent) \
                     with no challenge: it refuses NTLM, as the domain policy \"Network security: \
                     Restrict NTLM: Incoming NTLM traffic\" does. Use winrm.auth: kerberos (see \
                     docs/windows-kerberos.md)"
                ),
            }
        }
        WinrmError::AuthFailed(_) | WinrmError::Ntlm(_) => TransportError::Auth {
            user: w.user.clone(),
            host: host.name.clone(),
            msg: format!(
                "{text}: check winrm.user and the password (winrm.password_env / password_file), and winrm.auth ({})",
                match w.auth {
                    WinRmAuth::Ntlm => "ntlm",
                    WinRmAuth::Basic => "basic",
                    WinRmAuth::Kerberos => "kerberos",
                }
            ),
        },
        _ if lower.contains("connection refused") || lower.contains("connect") => {
            TransportError::Connect {
                addr,
                msg: format!(
                    "{text}: is a WinRM listener running on port {} ({})? (winrm quickconfig; or set winrm.port / winrm.tls)",
                    w.port,
                    if w.tls { "HTTPS" } else { "HTTP" }
                ),
            }
        }
        _ => TransportError::Lost {
            host: host.name.clone(),
            msg: text,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_error_before_any_password_is_not_called_a_bad_password() {
        let inv = crate::inventory::Inventory::parse(
            std::path::Path::new("i.yaml"),
            "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  \
             api_server: http://198.18.1.2:8080\n  kubernetes_version: \"1.16.15\"\n\
             hosts:\n  - name: w1\n    os: windows\n    address: 198.18.1.4\n    \
             winrm:\n      user: Administrator\n      password_env: KW_TEST_PW\n",
        )
        .unwrap();
        let h = &inv.hosts[0];
        let crate::inventory::Connection::WinRm(w) = &h.connection else {
            panic!("winrm host")
        };
        for status in ["500 Internal Server Error", "200 OK"] {
            let e =
                WinrmError::AuthFailed(format!("expected 401 for NTLM negotiate, got {status}"));
            let t = explain(h, w, &e);
            assert!(!matches!(t, TransportError::Auth { .. }), "{t}");
            let t = t.to_string();
            assert!(t.contains(status) && !t.contains("check winrm.user"), "{t}");
        }
        // a refused password is still one
        let e = WinrmError::AuthFailed("NTLM authentication rejected (401)".into());
        assert!(matches!(explain(h, w, &e), TransportError::Auth { .. }));
        // the challenge's connection closed (plain HTTP here): said as
        // such, never as TLS (issue 38)
        let e = WinrmError::AuthFailed(
            "the server closed the connection that carried the NTLM challenge; NTLM binds its \
             handshake to one connection, so it cannot be completed"
                .into(),
        );
        let t = explain(h, w, &e).to_string();
        assert!(!t.contains("TLS") && !t.contains("ca_file"), "{t}");
        assert!(t.contains("closes connections"), "{t}");
        // no challenge at all: the host refuses NTLM (Restrict NTLM)
        let e = WinrmError::AuthFailed("missing Negotiate prefix in challenge".into());
        let t = explain(h, w, &e).to_string();
        assert!(
            t.contains("it refuses NTLM") && t.contains("winrm.auth: kerberos"),
            "{t}"
        );
    }
}
