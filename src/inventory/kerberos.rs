//! The Kerberos keys of a WinRM block (`winrm.auth: kerberos`): the
//! principal (`user`), `keytab` and `spn`, checked where they are written.
//! What Kerberos needs is described in docs/windows-kerberos.md.

use serde_saphyr::Spanned;

use super::validator::Validator;
use super::{Pos, WinRmAuth};
use crate::text::echo;

/// The Kerberos keys of a WinRM block as written.
pub(super) struct KerberosRaw<'a> {
    pub user: Option<&'a Spanned<String>>,
    pub keytab: Option<&'a Spanned<String>>,
    pub spn: Option<&'a Spanned<String>>,
}

/// What a WinRM block says about Kerberos, once checked.
pub(super) struct KerberosKeys {
    pub keytab: Option<std::path::PathBuf>,
    pub spn_host: Option<String>,
}

/// Whether `s` may follow `HTTP/` in a service principal kwinctl names:
/// a host name (RFC 1123 labels; an IPv4 address is one too).
fn host_name(s: &str) -> bool {
    super::validator::dns_name(s)
}

/// A principal `name@REALM` (both parts non-empty, no spaces or control
/// characters, one `@`).
fn principal(s: &str) -> bool {
    match s.split_once('@') {
        Some((n, r)) => {
            !n.is_empty()
                && !r.is_empty()
                && !r.contains('@')
                && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        }
        None => false,
    }
}

impl Validator {
    /// Check the Kerberos keys of `w` for a host whose auth is `auth`
    /// (written at `pos`); None when a problem was recorded.
    pub(super) fn kerberos(
        &mut self,
        w: KerberosRaw<'_>,
        auth: WinRmAuth,
        host: &str,
        pos: Pos,
    ) -> Option<KerberosKeys> {
        let mut ok = true;
        if auth != WinRmAuth::Kerberos {
            for (key, v) in [("keytab", w.keytab), ("spn", w.spn)] {
                if let Some(v) = v {
                    self.problem(
                        v.into(),
                        format!("host {host}: winrm.{key} is only used with auth: kerberos"),
                        format!("set winrm.auth: kerberos, or remove winrm.{key}"),
                    );
                    ok = false;
                }
            }
            return ok.then_some(KerberosKeys {
                keytab: None,
                spn_host: None,
            });
        }
        match w.user {
            Some(u) if principal(&u.value) => {}
            Some(u) => {
                self.problem(
                    u.into(),
                    format!(
                        "host {host}: winrm.user {} is not a Kerberos principal",
                        echo(&u.value)
                    ),
                    "with auth: kerberos, write the principal as klist shows it: user@REALM (the realm is the \
                     domain in capitals, e.g. kwinctl@CORP.EXAMPLE)",
                );
                ok = false;
            }
            None => {
                self.problem(
                    pos,
                    format!("host {host}: auth: kerberos needs winrm.user, the principal kwinctl authenticates as"),
                    "add winrm.user: user@REALM (as klist shows it, e.g. kwinctl@CORP.EXAMPLE)",
                );
                ok = false;
            }
        }
        let spn_host = w.spn.and_then(|s| self.spn(s, host));
        ok &= w.spn.is_none() || spn_host.is_some();
        ok.then(|| KerberosKeys {
            keytab: w.keytab.map(|k| self.path(&k.value)),
            spn_host,
        })
    }

    /// `HTTP/<host>`: the host part, or a problem recorded.
    fn spn(&mut self, s: &Spanned<String>, host: &str) -> Option<String> {
        let v = s.value.trim();
        let name = v
            .split_once('/')
            .filter(|(class, _)| class.eq_ignore_ascii_case("HTTP"))
            .map(|(_, name)| name)
            .filter(|name| host_name(name));
        if name.is_none() {
            self.problem(
                s.into(),
                format!(
                    "host {host}: winrm.spn {} is not HTTP/<host name>",
                    echo(v)
                ),
                "write the WinRM service principal as HTTP/<the host's DNS name>, e.g. HTTP/win1.corp.example \
                 (WinRM's service class is HTTP; the realm is the principal's, not written here)",
            );
        }
        name.map(|n| n.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Connection, Inventory, InventoryError};
    use super::{host_name, principal};

    fn parse(winrm: &str) -> Result<Inventory, InventoryError> {
        Inventory::parse(
            std::path::Path::new("/inv/i.yaml"),
            &format!(
                "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  \
                 api_server: http://198.18.1.2:8080\n  kubernetes_version: \"1.16.15\"\n\
                 hosts:\n  - name: w1\n    os: windows\n    address: 198.18.1.4\n    winrm: {winrm}\n"
            ),
        )
    }

    /// The first problem: `line:column: message`.
    fn problem(winrm: &str) -> String {
        let e = parse(winrm).expect_err("a problem");
        let p = &e.problems[0];
        format!("{}:{}: {}", p.pos.line, p.pos.column, p.message)
    }

    #[test]
    fn kerberos_keys_are_checked_where_they_are_written() {
        // the host's line when the principal is missing
        let p = problem("{ auth: kerberos }");
        assert!(
            p.starts_with("8:5: host w1: auth: kerberos needs winrm.user"),
            "{p}"
        );
        let p = problem("{ auth: kerberos, user: Administrator }");
        assert!(
            p.starts_with(
                "11:36: host w1: winrm.user \"Administrator\" is not a Kerberos principal"
            ),
            "{p}"
        );
        let p = problem("{ auth: kerberos, user: k@R.EX, spn: \"host/w1\" }");
        assert!(
            p.starts_with("11:49: host w1: winrm.spn \"host/w1\" is not HTTP/<host name>"),
            "{p}"
        );
        let p = problem("{ auth: ntlm, keytab: k.keytab }");
        assert!(
            p.starts_with("11:34: host w1: winrm.keytab is only used with auth: kerberos"),
            "{p}"
        );
    }

    #[test]
    fn kerberos_needs_no_password_and_reads_its_keys() {
        let inv =
            parse("{ auth: kerberos, user: k@R.EX, spn: HTTP/w1.corp.example, keytab: k.keytab }")
                .expect("valid");
        let Connection::WinRm(w) = &inv.hosts[0].connection else {
            panic!("winrm")
        };
        assert_eq!(w.spn_host.as_deref(), Some("w1.corp.example"));
        assert_eq!(
            w.keytab.as_deref(),
            Some(std::path::Path::new("/inv/k.keytab"))
        );
        // no password is read (KWINCTL_WINRM_PASSWORD is not set here);
        // the keytab must be readable
        let hosts: Vec<_> = inv.hosts.iter().collect();
        let e = inv.check_credentials(&hosts).expect_err("no keytab file");
        assert!(
            e.to_string()
                .contains("the Kerberos keytab /inv/k.keytab cannot be read"),
            "{e}"
        );
        let inv = parse("{ auth: kerberos, user: k@R.EX }").expect("valid");
        let hosts: Vec<_> = inv.hosts.iter().collect();
        inv.check_credentials(&hosts).expect("no password needed");
    }

    #[test]
    fn principals_and_host_names() {
        assert!(principal("kwinctl@CORP.EXAMPLE"));
        for bad in ["kwinctl", "@CORP", "a@", "a@b@c", "a b@C"] {
            assert!(!principal(bad), "{bad}");
        }
        assert!(host_name("win1.corp.example") && host_name("198.18.3.2"));
        for bad in ["", "a..b", "-a", "a/b", "a@b"] {
            assert!(!host_name(bad), "{bad}");
        }
    }
}
