//! What connecting needs from the operator's machine: key files and
//! password sources, checked before anything is contacted (and by `check`,
//! as warnings unless `--strict`).

use super::{Connection, Host, Inventory, InventoryError, PasswordSource, Problem, WinRmAuth};

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
            if let Some(b) = bastion
                && let Some(id) = &b.identity
                && let Err(e) = std::fs::File::open(id)
            {
                problems.push(Problem {
                    pos: b.pos,
                    message: format!(
                        "host {}: bastion identity file {} cannot be read: {e}",
                        h.name,
                        id.display()
                    ),
                    hint: "point bastion.identity at a readable key, or remove it to use ssh-agent and ssh_config".into(),
                });
            }
            match &h.connection {
                Connection::Ssh(s) => {
                    if let Some(id) = &s.identity
                        && let Err(e) = std::fs::File::open(id)
                    {
                        problems.push(Problem {
                            pos: h.pos,
                            message: format!(
                                "host {}: identity file {} cannot be read: {e}",
                                h.name,
                                id.display()
                            ),
                            hint: "point ssh.identity at a readable private key, or remove it to use ssh-agent".into(),
                        });
                    }
                }
                Connection::WinRm(w) if w.auth == WinRmAuth::Kerberos => {
                    // no password: a ticket (checked when connecting), or
                    // the keys of a keytab
                    if let Some(kt) = &w.keytab
                        && let Err(e) = std::fs::File::open(kt)
                    {
                        problems.push(Problem {
                            pos: h.pos,
                            message: format!(
                                "host {}: the Kerberos keytab {} cannot be read: {e}",
                                h.name,
                                kt.display()
                            ),
                            hint: "point winrm.keytab at a readable keytab (klist -k FILE lists its principals)"
                                .into(),
                        });
                    }
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
