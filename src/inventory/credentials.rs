//! What connecting needs from the operator's machine: key files and
//! password sources, checked before anything is contacted (and by `check`,
//! as warnings unless `--strict`).

use std::path::Path;

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
                    "bastion identity file",
                    b.identity.as_deref(),
                    "point bastion.identity at a readable key, or remove it to use ssh-agent and ssh_config",
                ));
            }
            match &h.connection {
                Connection::Ssh(s) => problems.extend(unreadable(
                    h.pos,
                    &h.name,
                    "identity file",
                    s.identity.as_deref(),
                    "point ssh.identity at a readable private key, or remove it to use ssh-agent",
                )),
                // no password: a ticket (checked when connecting), or the
                // keys of a keytab
                Connection::WinRm(w) if w.auth == WinRmAuth::Kerberos => {
                    problems.extend(unreadable(
                        h.pos,
                        &h.name,
                        "the Kerberos keytab",
                        w.keytab.as_deref(),
                        "point winrm.keytab at a readable keytab (klist -k FILE lists its principals)",
                    ))
                }
                Connection::WinRm(w) => {
                    if let Err(e) = w.password.read() {
                        problems.push(Problem {
                            pos: h.pos,
                            message: format!("host {}: {e}", h.name),
                            hint: match &w.password {
                                PasswordSource::Env(var) => {
                                    format!("export {var}=... before running kwinctl")
                                }
                                PasswordSource::File(_) => {
                                    "point winrm.password_file at a readable file".into()
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

/// The problem of a file the inventory names for `host` (as `what`) that
/// cannot be opened; none when it can, or when no file is named.
fn unreadable(
    pos: Pos,
    host: &str,
    what: &str,
    file: Option<&Path>,
    hint: &str,
) -> Option<Problem> {
    let file = file?;
    let e = std::fs::File::open(file).err()?;
    Some(Problem {
        pos,
        message: format!("host {host}: {what} {} cannot be read: {e}", file.display()),
        hint: hint.into(),
    })
}
