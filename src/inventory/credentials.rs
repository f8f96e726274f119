//! What connecting needs from the operator's machine: key files and
//! password sources, checked before anything is contacted (and by `check`,
//! as warnings unless `--strict`).

use std::path::Path;

use crate::localfile::Kind;

use super::{Connection, Host, Inventory, InventoryError, PasswordSource, Pos, Problem, WinRmAuth};

impl Inventory {
    /// Check what connecting needs from the operator's machine (key files,
    /// password variables), before anything is contacted.
    pub fn check_credentials(&self, hosts: &[&Host]) -> Result<(), InventoryError> {
        let mut problems = Vec::new();
        for h in hosts {
            let bastion = match &h.connection {
                Connection::Ssh(s) => s.bastion.as_ref(),
                Connection::WinRm(w) => w.bastion.as_ref(),
            };
            if let Some(b) = bastion {
                problems.extend(unreadable(
                    b.pos,
                    &h.name,
                    ("bastion identity file", Kind::Identity),
                    b.identity.as_deref(),
                    "point bastion.identity at a readable key, or remove it to use ssh-agent and ssh_config",
                ));
                problems.extend(unfit_known_hosts(
                    b.pos,
                    &h.name,
                    "bastion.known_hosts",
                    b.known_hosts.as_deref(),
                ));
            }
            match &h.connection {
                Connection::Ssh(s) => {
                    problems.extend(unreadable(
                        h.pos,
                        &h.name,
                        ("identity file", Kind::Identity),
                        s.identity.as_deref(),
                        "point ssh.identity at a readable private key, or remove it to use ssh-agent",
                    ));
                    problems.extend(unfit_known_hosts(
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
                        h.pos,
                        &h.name,
                        ("the Kerberos keytab", Kind::Keytab),
                        w.keytab.as_deref(),
                        "point winrm.keytab at a readable keytab (klist -k FILE lists its principals)",
                    ))
                }
                Connection::WinRm(w) => {
                    problems.extend(unreadable(
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

/// The problem of a file the inventory names for `host` (as `what`, of
/// `kind`) that cannot be read: missing, not a regular file, or over the
/// kind's bound (see `localfile`); none when it is fine, or when no file is
/// named. Only opened, never waited on.
fn unreadable(
    pos: Pos,
    host: &str,
    (what, kind): (&str, Kind),
    file: Option<&Path>,
    hint: &str,
) -> Option<Problem> {
    let file = file?;
    let e = crate::localfile::check(file, kind).err()?;
    Some(Problem {
        pos,
        message: format!("host {host}: {what} {} cannot be read: {e}", file.display()),
        hint: hint.into(),
    })
}

/// A known_hosts file the inventory names (`key`) may be missing (kwinctl
/// creates it when it learns a key), but one that is there must be a
/// regular file within the bound.
fn unfit_known_hosts(pos: Pos, host: &str, key: &str, file: Option<&Path>) -> Option<Problem> {
    let file = file?;
    match crate::localfile::check(file, Kind::KnownHosts) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Some(Problem {
            pos,
            message: format!("host {host}: {key} {} cannot be read: {e}", file.display()),
            hint: format!(
                "point {key} at a known_hosts file (a regular file, or a path where kwinctl may create one)"
            ),
        }),
        _ => None,
    }
}
