//! The WinRM settings of a host reached over Ansible's `winrm` or `psrp`
//! connection, with those plugins' defaults.

use std::collections::BTreeMap;

use super::setting::{Scalar, Setting};
use super::vars::{Problems, at, text};
use super::{Layer, Val, Var};

/// The WinRM port, scheme and authentication Ansible would use for a host
/// reached over `winrm` or `psrp`, from its merged variables, with Ansible's
/// defaults (winrm.py: port 5986, then http on 5985 and https elsewhere when
/// no scheme is set, and Basic when no transport is set; psrp.py: https on
/// 5986 when neither protocol nor port is set, the one from the other
/// otherwise, and `negotiate`): docs/research/ansible-import.md. Basic over
/// plain HTTP is refused (kwinctl never sends a password in clear).
pub(super) fn winrm_truth(vars: &BTreeMap<String, (Var, Layer)>, p: &mut Problems) -> Vec<Setting> {
    let get = |k: &str| vars.get(k).map(|(v, _)| v);
    let conn = get("ansible_connection");
    let psrp = conn.is_some_and(|c| matches!(&c.value, Val::Text(t) if t.ends_with("psrp")));
    let (port_keys, scheme_key, auth_key) = if psrp {
        (
            ["ansible_port", "ansible_psrp_port"],
            "ansible_psrp_protocol",
            "ansible_psrp_auth",
        )
    } else {
        (
            ["ansible_port", "ansible_winrm_port"],
            "ansible_winrm_scheme",
            "ansible_winrm_transport",
        )
    };
    let port_var = port_keys.iter().find_map(|k| get(k));
    let port = port_var.and_then(|v| text(v, &mut Problems::default())?.parse::<u16>().ok());
    let scheme_var = get(scheme_key);
    let scheme = scheme_var.and_then(|v| text(v, &mut Problems::default()));
    let why = |v: Option<&Var>, default: &str| match v {
        Some(v) => at(v),
        None => format!("Ansible's default {default}"),
    };
    let (tls, port, why_tls, why_port) = match (scheme, port) {
        (Some(s), Some(n)) => (s == "https", n, why(scheme_var, ""), why(port_var, "")),
        (Some(s), None) => {
            let tls = s == "https";
            // winrm.py keeps its 5986 whatever the scheme; psrp.py follows it
            let n = if psrp && !tls { 5985 } else { 5986 };
            let d = if psrp {
                "port for this protocol (psrp)"
            } else {
                "port 5986 (winrm), whatever the scheme"
            };
            (tls, n, why(scheme_var, ""), why(None, d))
        }
        (None, Some(n)) => (
            n != 5985,
            n,
            why(None, "scheme: http on port 5985, https on any other"),
            why(port_var, ""),
        ),
        (None, None) => (
            true,
            5986,
            why(None, "scheme https"),
            why(None, "port 5986"),
        ),
    };
    let auth_var = get(auth_key);
    let auth = auth_var.and_then(|v| text(v, &mut Problems::default()));
    let (auth, why_auth) = match auth.map(|a| a.to_ascii_lowercase()) {
        Some(a) => (
            match a.as_str() {
                "basic" => "basic",
                "kerberos" => "kerberos",
                _ => "ntlm",
            },
            why(auth_var, ""),
        ),
        None if psrp => ("ntlm", why(None, "auth negotiate (psrp): NTLM here")),
        None => (
            "basic",
            why(
                None,
                "transport without ansible_winrm_transport: ssl or plaintext, both Basic",
            ),
        ),
    };
    if auth == "basic" && !tls {
        let (v, what) = match (auth_var, conn) {
            (Some(v), _) => (v, "Basic authentication over plain HTTP"),
            (None, Some(c)) => (
                c,
                "no ansible_winrm_transport over http: Ansible would use plaintext, Basic authentication in clear",
            ),
            (None, None) => return Vec::new(),
        };
        p.refuse(
            v,
            format!("{what}: kwinctl never sends a password in clear"),
            "set ansible_winrm_transport=ntlm, or use https (ansible_winrm_scheme=https, port 5986)",
        );
    }
    if auth == "kerberos" {
        kerberos(vars, psrp, p);
    }
    vec![
        Setting {
            key: "winrm.tls",
            value: Scalar::Bool(tls),
            why: why_tls,
        },
        Setting {
            key: "winrm.port",
            value: Scalar::Int(port),
            why: why_port,
        },
        Setting {
            key: "winrm.auth",
            value: Scalar::Str(auth.into()),
            why: why_auth,
        },
    ]
}

/// Whether Ansible reaches a `winrm` or `psrp` host over https (by
/// `winrm_truth`'s rules).
pub(super) fn https(vars: &BTreeMap<String, (Var, Layer)>) -> bool {
    winrm_truth(vars, &mut Problems::default())
        .iter()
        .any(|s| s.key == "winrm.tls" && s.value == Scalar::Bool(true))
}

/// What Ansible does with Kerberos that kwinctl does not: refused, each
/// with its fix (docs/research/kerberos.md). winrm.py runs `kinit` with the
/// host's password when `ansible_winrm_kinit_mode` is `managed`, its
/// default when a password is set, and psrp gets a ticket with the
/// password it is given; kwinctl uses the operator's ticket or a keytab
/// and never a password. Delegating the ticket to the host (winrm
/// `kerberos_delegation`, psrp `negotiate_delegate`) is not done either.
fn kerberos(vars: &BTreeMap<String, (Var, Layer)>, psrp: bool, p: &mut Problems) {
    let get = |k: &str| vars.get(k).map(|(v, _)| v);
    let yes = |v: &Var| {
        text(v, &mut Problems::default())
            .is_some_and(|t| matches!(t.to_ascii_lowercase().as_str(), "true" | "yes" | "1" | "on"))
    };
    let password = [
        "ansible_password",
        "ansible_winrm_pass",
        "ansible_winrm_password",
    ]
    .iter()
    .find_map(|k| get(k));
    let mode = get("ansible_winrm_kinit_mode");
    let manual = mode
        .and_then(|v| text(v, &mut Problems::default()))
        .is_some_and(|m| m == "manual");
    if psrp {
        // pypsrp hands the password to pyspnego, which gets a ticket with
        // it rather than from the credential cache
        if let Some(v) = password {
            p.refuse(
                v,
                "with Kerberos, Ansible's psrp connection gets a ticket with the host's password; \
                 kwinctl never copies a password: it uses the ticket in your credential cache, or \
                 a keytab (winrm.keytab)",
                "remove the password, import again, and run `kinit USER@REALM` before kwinctl",
            );
        }
    } else if !manual {
        // managed: said so, or Ansible's default with a password
        if let Some(v) = mode.or(password) {
            p.refuse(
                v,
                "with Kerberos, Ansible runs kinit with the host's password (kinit mode managed, its \
                 default when a password is set); kwinctl never runs kinit nor copies a password: it \
                 uses the ticket in your credential cache, or a keytab (winrm.keytab)",
                "remove the password (or set ansible_winrm_kinit_mode=manual), import again, and run \
                 `kinit USER@REALM` before kwinctl",
            );
        }
    }
    for k in [
        "ansible_winrm_kerberos_delegation",
        "ansible_psrp_negotiate_delegate",
    ] {
        if let Some(v) = get(k).filter(|v| yes(v)) {
            p.refuse(
                v,
                "kwinctl does not delegate (forward) the Kerberos ticket to the host: its scripts \
                 need no second hop",
                "remove it (or set it false)",
            );
        }
    }
}
