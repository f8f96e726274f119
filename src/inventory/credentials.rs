//! What connecting needs from the operator's machine: key files and
//! password sources, checked before anything is contacted (and by `check`,
//! as warnings unless `--strict`).

use std::collections::HashMap;
use std::io::{Error, ErrorKind};
use std::path::{Path, PathBuf};

use crate::localfile::Kind;

use super::{Connection, Host, Inventory, InventoryError, PasswordSource, Pos, Problem, WinRmAuth};

impl Inventory {
    /// Check what connecting needs from the operator's machine (key files,
    /// password variables), before anything is contacted.
    pub fn check_credentials(&self, hosts: &[&Host]) -> Result<(), InventoryError> {
        let mut problems = Vec::new();
        let mut files = Checked::default();
        for h in hosts {
            let bastion = match &h.connection {
                Connection::Ssh(s) => s.bastion.as_ref(),
                Connection::WinRm(w) => w.bastion.as_ref(),
            };
            if let Some(b) = bastion {
                problems.extend(unreadable(
                    &mut files,
                    b.pos,
                    &h.name,
                    ("bastion identity file", Kind::Identity),
                    b.identity.as_deref(),
                    "point bastion.identity at a readable key, or remove it to use ssh-agent and ssh_config",
                ));
                problems.extend(unfit_known_hosts(
                    &mut files,
                    b.pos,
                    &h.name,
                    "bastion.known_hosts",
                    b.known_hosts.as_deref(),
                ));
            }
            match &h.connection {
                Connection::Ssh(s) => {
                    problems.extend(unreadable(
                        &mut files,
                        h.pos,
                        &h.name,
                        ("identity file", Kind::Identity),
                        s.identity.as_deref(),
                        "point ssh.identity at a readable private key, or remove it to use ssh-agent",
                    ));
                    problems.extend(unfit_known_hosts(
                        &mut files,
                        h.pos,
                        &h.name,
                        "ssh.known_hosts",
                        s.known_hosts.as_deref(),
                    ));
                }
                // no password: a ticket (checked when connecting), or the
                // keys of a keytab
                Connection::WinRm(w) if w.auth == WinRmAuth::Kerberos => {
                    problems.extend(unreadable(
                        &mut files,
                        h.pos,
                        &h.name,
                        ("the Kerberos keytab", Kind::Keytab),
                        w.keytab.as_deref(),
                        "point winrm.keytab at a readable keytab (klist -k FILE lists its principals)",
                    ))
                }
                Connection::WinRm(w) => {
                    problems.extend(unreadable(
                        &mut files,
                        h.pos,
                        &h.name,
                        ("CA file", Kind::CaFile),
                        w.ca_file.as_deref(),
                        "point winrm.ca_file at the listener's CA certificate (PEM), or pin the certificate with winrm.cert_sha256",
                    ));
                    if let Err(e) = w.password.read() {
                        problems.push(Problem {
                            pos: h.pos,
                            message: format!("host {}: {e}", h.name),
                            hint: match &w.password {
                                PasswordSource::Env(var) => {
                                    format!("export {var}=... before running kwinctl")
                                }
                                PasswordSource::File(_) => {
                                    "point winrm.password_file at a readable regular file holding the password on one line".into()
                                }
                            },
                        });
                    }
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(InventoryError {
                file: self.path.clone(),
                problems,
            })
        }
    }
}

/// Each file checked once however many hosts name it (every host of a
/// cluster usually names the same key and known_hosts); each host still
/// gets its own problem.
#[derive(Default)]
struct Checked(HashMap<(PathBuf, Kind), Result<(), (ErrorKind, String)>>);

impl Checked {
    fn check(&mut self, file: &Path, kind: Kind) -> Result<(), Error> {
        self.0
            .entry((file.to_path_buf(), kind))
            .or_insert_with(|| {
                crate::localfile::check(file, kind).map_err(|e| (e.kind(), e.to_string()))
            })
            .clone()
            .map_err(|(k, m)| Error::new(k, m))
    }
}

/// The problem of a file the inventory names for `host` (as `what`, of
/// `kind`) that cannot be read: missing, not a regular file, or over the
/// kind's bound (see `localfile`); none when it is fine, or when no file is
/// named. Only opened, never waited on.
fn unreadable(
    files: &mut Checked,
    pos: Pos,
    host: &str,
    (what, kind): (&str, Kind),
    file: Option<&Path>,
    hint: &str,
) -> Option<Problem> {
    let file = file?;
    let e = files.check(file, kind).err()?;
    Some(Problem {
        pos,
        message: format!("host {host}: {what} {} cannot be read: {e}", file.display()),
        hint: hint.into(),
    })
}

/// A known_hosts file the inventory names (`key`) may be missing (kwinctl
/// creates it when it learns a key), but one that is there must be a
/// regular file within the bound.
fn unfit_known_hosts(
    files: &mut Checked,
    pos: Pos,
    host: &str,
    key: &str,
    file: Option<&Path>,
) -> Option<Problem> {
    let file = file?;
    match files.check(file, Kind::KnownHosts) {
        Err(e) if e.kind() != ErrorKind::NotFound => Some(Problem {
            pos,
            message: format!("host {host}: {key} {} cannot be read: {e}", file.display()),
            hint: format!(
                "point {key} at a known_hosts file (a regular file, or a path where kwinctl may create one)"
            ),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_many_hosts_name_is_checked_once_and_each_host_is_told() {
        // the tests' usual cluster, with hosts of this test's own
        let good = crate::inventory::tests::GOOD;
        let cluster = &good[..good.find("hosts:\n").unwrap()];
        let inv = Inventory::parse(
            Path::new("inv.yaml"),
            &format!(
                "{cluster}hosts:
  - {{ name: a, os: linux, role: control-plane, address: 10.0.0.10, ssh: {{ identity: /nonexistent/id }} }}
  - {{ name: b, os: linux, address: 10.0.0.11, ssh: {{ identity: /nonexistent/id }} }}
  - {{ name: c, os: linux, address: 10.0.0.12 }}
"
            ),
        )
        .unwrap();
        let e = inv
            .check_credentials(&inv.hosts.iter().collect::<Vec<_>>())
            .expect_err("a key file that is not there");
        let said: Vec<&str> = e.problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(said.len(), 2, "{said:?}");
        for (p, host) in e.problems.iter().zip(["a", "b"]) {
            assert!(
                p.message.starts_with(&format!(
                    "host {host}: identity file /nonexistent/id cannot be read: "
                )),
                "{p:?}"
            );
            assert_eq!(p.pos.line, if host == "a" { 8 } else { 9 }, "{p:?}");
        }
        // the second host's problem is the first one's, word for word
        assert_eq!(
            said[0].strip_prefix("host a"),
            said[1].strip_prefix("host b")
        );

        // what the cache hands back is what a fresh check says
        let mut files = Checked::default();
        let fresh =
            crate::localfile::check(Path::new("/nonexistent/id"), Kind::Identity).unwrap_err();
        for _ in 0..2 {
            let again = files
                .check(Path::new("/nonexistent/id"), Kind::Identity)
                .unwrap_err();
            assert_eq!(
                (again.kind(), again.to_string()),
                (fresh.kind(), fresh.to_string())
            );
        }
        assert_eq!(files.0.len(), 1);
    }
}
