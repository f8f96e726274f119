//! One variable at a time: what each of Ansible's connection variables
//! becomes in kwinctl, or why it is refused. Sources: the variables of
//! Ansible's `ssh`, `winrm` and `psrp` connection plugins (their
//! documentation pages list each `ansible_*` variable and its values).

use std::collections::BTreeMap;
use std::path::Path;

use super::known;
use super::setting::{Kinds, Scalar, Setting};
use super::{Layer, Val, Var, problem};
use crate::inventory::{Os, Problem};

pub(super) fn at(v: &Var) -> String {
    if v.file == 0 {
        format!("{}, line {}", v.key, v.pos.line)
    } else {
        format!("{}, {} line {}", v.key, v.what, v.pos.line)
    }
}

pub(super) fn env_name(layer: &Layer) -> String {
    let tail = match layer {
        Layer::All => return "KWINCTL_WINRM_PASSWORD".into(),
        Layer::Group(g) | Layer::Host(g) => g,
    };
    let clean: String = tail
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("KWINCTL_WINRM_PASSWORD_{clean}")
}

/// Collects problems once per position (a variable is mapped for each
/// layer that sees it).
#[derive(Default)]
pub(super) struct Problems(pub(super) BTreeMap<(usize, usize, usize, String), (usize, Problem)>);

impl Problems {
    pub(super) fn refuse(&mut self, v: &Var, why: impl Into<String>, hint: impl Into<String>) {
        let p = problem(
            v.pos,
            format!("{} ({}): {}", v.key, v.what, why.into()),
            hint,
        );
        self.0
            .entry((v.file, v.pos.line, v.pos.column, v.key.clone()))
            .or_insert((v.file, p));
    }
}

/// The text of a variable, or why it is not usable (refused).
pub(super) fn text<'a>(v: &'a Var, p: &mut Problems) -> Option<&'a str> {
    match &v.value {
        Val::Text(t) if t.contains("{{") || t.contains("{%") => {
            p.refuse(
                v,
                "a Jinja template: kwinctl does not evaluate templates",
                "write the value itself",
            );
            None
        }
        Val::Text(t) => Some(t.as_str()),
        Val::Vault => {
            p.refuse(
                v,
                "a vault-encrypted value: kwinctl cannot read it",
                "write the value itself (only passwords may stay encrypted)",
            );
            None
        }
        Val::Structured => {
            p.refuse(v, "a list or mapping, not a value", "write a single value");
            None
        }
        Val::Null => None,
    }
}

/// How a host with these variables is reached, and its OS.
pub(super) fn kind_of(vars: &BTreeMap<String, (Var, Layer)>, p: &mut Problems) -> (Os, Kinds) {
    let get = |k: &str| vars.get(k).map(|(v, _)| v);
    let conn = get("ansible_connection").and_then(|v| text(v, p).map(|t| (v, t)));
    let winrm = match conn {
        None | Some((_, "ssh" | "smart" | "paramiko" | "paramiko_ssh")) => false,
        Some((_, "winrm" | "psrp")) => true,
        Some((v, other)) => {
            p.refuse(
                v,
                format!("connection {other:?}: kwinctl reaches hosts over SSH or WinRM only"),
                "use ssh, winrm or psrp, or leave the host out of the import",
            );
            false
        }
    };
    let shell = get("ansible_shell_type").and_then(|v| text(v, p).map(|t| (v, shell_of(t))));
    if let Some((v, None)) = shell {
        p.refuse(
            v,
            "not a shell plugin of Ansible's that kwinctl knows (sh, csh, fish; powershell or cmd for Windows over SSH)",
            "use powershell or cmd (the host's OpenSSH DefaultShell) for a Windows host, sh or nothing for Linux",
        );
    }
    let windows_shell = matches!(shell, Some((_, Some(true))));
    let mut os = if winrm || windows_shell {
        Os::Windows
    } else {
        Os::Linux
    };
    if let Some(v) = get("kwinctl_os") {
        match text(v, p) {
            Some("linux") => os = Os::Linux,
            Some("windows") => os = Os::Windows,
            Some(o) => p.refuse(
                v,
                format!("{o:?} is not an OS kwinctl knows"),
                "use linux or windows",
            ),
            None => {}
        }
    }
    if os == Os::Linux
        && winrm
        && let Some((v, _)) = conn
    {
        p.refuse(
            v,
            "a Linux host reached over WinRM",
            "kwinctl reaches Linux hosts over SSH: remove ansible_connection or kwinctl_os",
        );
    }
    // Windows over SSH runs powershell.exe through the host's DefaultShell
    // (cmd.exe or powershell.exe, docs/research/windows-ssh.md#ws3 and
    // docs/research/windows-ssh.md#ws7); Linux, sh
    match shell {
        Some((v, Some(false))) if os == Os::Windows => p.refuse(
            v,
            "a Windows host with a POSIX shell: kwinctl runs powershell.exe through the Windows OpenSSH \
             server's DefaultShell, cmd.exe or powershell.exe",
            "use ansible_shell_type powershell or cmd, whichever the host's DefaultShell is",
        ),
        Some((v, Some(true))) if os == Os::Linux => p.refuse(
            v,
            "a Linux host with a Windows shell",
            "remove ansible_shell_type, or set kwinctl_os to windows if the host runs Windows",
        ),
        _ => {}
    }
    let kinds = Kinds {
        ssh: !winrm,
        winrm,
        linux: os == Os::Linux,
        windows: os == Os::Windows,
        // map.rs: by winrm.rs's rules
        https: false,
    };
    (os, kinds)
}

/// An `ansible_shell_type`: Some(true) a Windows shell (powershell, cmd),
/// Some(false) a POSIX one (sh, csh, fish), None none Ansible has. Plain
/// names or their collections' (ansible.builtin.cmd, ansible.posix.fish).
fn shell_of(t: &str) -> Option<bool> {
    match t.strip_prefix("ansible.builtin.").unwrap_or(t) {
        "powershell" | "cmd" => Some(true),
        "sh" => Some(false),
        _ => match t.strip_prefix("ansible.posix.").unwrap_or(t) {
            "csh" | "fish" => Some(false),
            _ => None,
        },
    }
}

/// One layer's variables as kwinctl settings, for hosts reached as `kinds`.
pub(super) fn settings(
    vars: &[&Var],
    layer: &Layer,
    kinds: Kinds,
    base: &Path,
    p: &mut Problems,
    passwords: &mut Vec<(String, String)>,
) -> Vec<Setting> {
    let mut out: Vec<Setting> = Vec::new();
    fn put(out: &mut Vec<Setting>, key: &'static str, value: Scalar, why: String) {
        out.retain(|s| s.key != key);
        out.push(Setting { key, value, why });
    }
    let host_only = matches!(layer, Layer::Host(_));
    for v in vars {
        let k = v.key.as_str();
        match k {
            "ansible_user" | "ansible_ssh_user" | "ansible_winrm_user" | "ansible_psrp_user" => {
                let Some(t) = text(v, p) else { continue };
                if kinds.ssh {
                    put(&mut out, "ssh.user", Scalar::Str(t.into()), at(v));
                }
                if kinds.winrm {
                    put(&mut out, "winrm.user", Scalar::Str(t.into()), at(v));
                }
            }
            "ansible_port" | "ansible_ssh_port" | "ansible_winrm_port" | "ansible_psrp_port" => {
                let Some(t) = text(v, p) else { continue };
                let Ok(port) = t.parse::<u16>() else {
                    p.refuse(v, format!("{t:?} is not a port"), "give a number from 1 to 65535");
                    continue;
                };
                if kinds.ssh {
                    put(&mut out, "ssh.port", Scalar::Int(port), at(v));
                }
                if kinds.winrm {
                    put(&mut out, "winrm.port", Scalar::Int(port), at(v));
                }
            }
            "ansible_ssh_private_key_file" | "ansible_private_key_file" => {
                let Some(t) = text(v, p) else { continue };
                // ssh -i takes it relative to where Ansible runs
                let path = if t.starts_with('/') || t.starts_with("~/") {
                    t.to_string()
                } else {
                    base.join(t).display().to_string()
                };
                if kinds.ssh {
                    put(&mut out, "ssh.identity", Scalar::Str(path), at(v));
                }
            }
            "ansible_password" | "ansible_ssh_pass" | "ansible_ssh_password"
            | "ansible_winrm_password" => {
                if kinds.ssh {
                    p.refuse(
                        v,
                        "an SSH password: kwinctl logs in over SSH with keys (a key file or ssh-agent) only",
                        "give the hosts a key (ansible_ssh_private_key_file) and remove the password, \
                         or set it only for WinRM hosts",
                    );
                }
                if kinds.winrm {
                    let name = env_name(layer);
                    let why = format!("{} is not copied: export {name}", at(v));
                    if !passwords.iter().any(|(n, _)| *n == name) {
                        passwords.push((name.clone(), format!("{} line {}", v.what, v.pos.line)));
                    }
                    put(&mut out, "winrm.password_env", Scalar::Str(name), why);
                }
            }
            "ansible_winrm_transport" | "ansible_psrp_auth" => {
                let Some(t) = text(v, p) else { continue };
                match t.to_ascii_lowercase().as_str() {
                    "ntlm" | "negotiate" => put(&mut out, "winrm.auth", Scalar::Str("ntlm".into()), at(v)),
                    "basic" => put(&mut out, "winrm.auth", Scalar::Str("basic".into()), at(v)),
                    "kerberos" => put(&mut out, "winrm.auth", Scalar::Str("kerberos".into()), at(v)),
                    other => p.refuse(
                        v,
                        format!("{other:?} authentication is not built into kwinctl (NTLM, Kerberos and Basic are)"),
                        "use ntlm (over https) or kerberos",
                    ),
                }
            }
            // pywinrm's kerberos_hostname_override and psrp's
            // negotiate_hostname_override: the host part of the service
            // principal, HTTP/<name>
            "ansible_winrm_kerberos_hostname_override" | "ansible_psrp_negotiate_hostname_override" => {
                let Some(t) = text(v, p) else { continue };
                put(&mut out, "winrm.spn", Scalar::Str(format!("HTTP/{t}")), at(v));
            }
            "ansible_winrm_service" | "ansible_psrp_negotiate_service"
                if text(v, p).is_some_and(|t| !t.eq_ignore_ascii_case("HTTP")) =>
            {
                p.refuse(v, "WinRM's service class is HTTP: kwinctl names HTTP/<host>", "remove it");
            }
            "ansible_winrm_service" | "ansible_psrp_negotiate_service"
            | "ansible_winrm_kerberos_delegation" | "ansible_psrp_negotiate_delegate" => {}
            "ansible_winrm_scheme" | "ansible_psrp_protocol" => match text(v, p) {
                Some("https") => put(&mut out, "winrm.tls", Scalar::Bool(true), at(v)),
                Some("http") => put(&mut out, "winrm.tls", Scalar::Bool(false), at(v)),
                Some(o) => p.refuse(v, format!("{o:?} is not http or https"), "use http or https"),
                None => {}
            },
            "ansible_winrm_server_cert_validation" | "ansible_psrp_cert_validation" => {
                match text(v, p) {
                    Some("validate") | None => {}
                    // kwinctl always checks the certificate: what Ansible
                    // skips becomes a pin for the operator to fill in
                    // (an http listener has no certificate to pin)
                    Some("ignore") if kinds.winrm && kinds.https => put(
                        &mut out,
                        "winrm.cert_sha256",
                        Scalar::Placeholder,
                        format!(
                            "{}: kwinctl always checks the listener's certificate; \
                             the first `kwinctl verify` or `up` that reaches the host prints its SHA-256 \
                             and the line to add",
                            at(v)
                        ),
                    ),
                    Some("ignore") => {}
                    Some(o) => p.refuse(
                        v,
                        format!("{o:?} is not validate or ignore"),
                        "use validate or ignore",
                    ),
                }
            }
            "ansible_winrm_ca_trust_path" | "ansible_psrp_ca_cert" | "ansible_psrp_cert_trust_path" => {
                let Some(t) = text(v, p) else { continue };
                put(&mut out, "winrm.ca_file", Scalar::Str(t.into()), at(v));
            }
            "ansible_host" | "ansible_ssh_host" | "ansible_winrm_host" | "ansible_psrp_host"
            | "kwinctl_os" | "kwinctl_role" | "ip"
                if host_only => {}
            "ansible_host" | "ansible_ssh_host" | "ansible_winrm_host" | "ansible_psrp_host" => p.refuse(
                v,
                "an address for a whole group",
                "give each host its own ansible_host",
            ),
            "kwinctl_role" | "kwinctl_os" | "ansible_connection" | "ansible_shell_type"
            | "ansible_group_priority" => {}
            // on Windows (over SSH or WinRM) the login user runs the scripts
            "ansible_become_method" | "ansible_become_user" | "ansible_become_password"
            | "ansible_become_pass"
                if kinds.windows && !kinds.linux =>
            {
                p.refuse(
                    v,
                    format!(
                        "on Windows kwinctl runs its scripts as the user it logs in as: it does not \
                         switch users (Ansible's runas), so {k} cannot be honoured"
                    ),
                    "remove it and log in as an administrator (ansible_user)",
                )
            }
            "ansible_become_method" | "ansible_become_user" => {
                let ok = if k == "ansible_become_method" { "sudo" } else { "root" };
                if text(v, p).is_some_and(|t| t != ok) {
                    p.refuse(
                        v,
                        format!("kwinctl runs scripts as root (through `sudo -n` when the user is not root): {k} must be {ok}"),
                        "remove it, or become root with sudo",
                    );
                }
            }
            "ansible_become_password" | "ansible_become_pass" | "ansible_sudo_pass"
            | "ansible_sudo_password" => p.refuse(
                v,
                "kwinctl runs `sudo -n`: it never types a sudo password",
                "give the user passwordless sudo (NOPASSWD), or log in as root",
            ),
            "ansible_ssh_common_args" | "ansible_ssh_extra_args" | "ansible_ssh_args"
            | "ansible_scp_extra_args" | "ansible_sftp_extra_args" | "ansible_ssh_executable" => {
                p.refuse(
                    v,
                    "ssh command-line options: kwinctl speaks SSH itself and cannot read them",
                    "remove them: a jump host goes in ssh.bastion (or ProxyJump in ~/.ssh/config), \
                     other files in the inventory's ssh settings",
                )
            }
            "ansible_winrm_cert_pem" | "ansible_winrm_cert_key_pem" | "ansible_psrp_certificate_pem"
            | "ansible_psrp_certificate_key_pem" => p.refuse(
                v,
                "client-certificate authentication is not built into kwinctl",
                "use ntlm with a password",
            ),
            "ansible_winrm_path" | "ansible_psrp_path"
                if text(v, p).is_some_and(|t| t != "/wsman" && t != "wsman") =>
            {
                p.refuse(v, "kwinctl uses the standard /wsman path", "remove it");
            }
            "ansible_winrm_path" | "ansible_psrp_path" => {}
            k if known::harmless(k) => {}
            // read when connecting, and neither mapped nor known harmless
            k if known::connection(k) => p.refuse(
                v,
                "kwinctl does not know this Ansible connection variable, so it cannot tell what it would change",
                "remove it if it does not change how the host is reached, then import again",
            ),
            _ => {}
        }
    }
    out
}

/// Whether `kwinctl import` leaves this variable aside (listed as not used):
/// not Ansible's nor kwinctl's, an Ansible variable no connection reads, or
/// a connection variable that changes nothing kwinctl does (known.rs).
pub(super) fn unused(v: &Var) -> bool {
    let k = v.key.as_str();
    // kubespray's `ip` is the node's address (map.rs)
    if k.starts_with("kwinctl_") || k == "ip" {
        return false;
    }
    !k.starts_with("ansible_") || known::not_connection(k) || known::harmless(k)
}

/// The connection plugin a host's `ansible_connection` names (`ssh` when
/// not set or not one of the three).
fn plugin_of(vars: &BTreeMap<String, (Var, Layer)>) -> &'static str {
    match vars.get("ansible_connection").map(|(v, _)| &v.value) {
        Some(Val::Text(t)) if t == "winrm" || t == "ansible.builtin.winrm" => "winrm",
        Some(Val::Text(t)) if t == "psrp" || t == "ansible.builtin.psrp" => "psrp",
        _ => "ssh",
    }
}

/// Each connection option reads a list of variables, and the last one of
/// the list that is set wins, from whatever layer (ansible-core's
/// `ConfigManager._loop_entries`; the lists are in each plugin's
/// DOCUMENTATION: docs/research/ansible-import.md). The others are dropped,
/// so that every later step sees only what Ansible uses.
pub(super) fn resolve_aliases(vars: &mut BTreeMap<String, (Var, Layer)>) {
    let families: &[&[&str]] = match plugin_of(vars) {
        "winrm" => &[
            &["ansible_host", "ansible_winrm_host"],
            &["ansible_user", "ansible_winrm_user"],
            &["ansible_port", "ansible_winrm_port"],
            &[
                "ansible_password",
                "ansible_winrm_pass",
                "ansible_winrm_password",
            ],
        ],
        "psrp" => &[
            &["ansible_host", "ansible_psrp_host"],
            &["ansible_user", "ansible_psrp_user"],
            &["ansible_port", "ansible_psrp_port"],
            &[
                "ansible_password",
                "ansible_psrp_pass",
                "ansible_psrp_password",
            ],
            &["ansible_psrp_cert_trust_path", "ansible_psrp_ca_cert"],
        ],
        _ => &[
            &["ansible_host", "ansible_ssh_host"],
            &["ansible_user", "ansible_ssh_user"],
            &["ansible_port", "ansible_ssh_port"],
            &["ansible_private_key_file", "ansible_ssh_private_key_file"],
            &[
                "ansible_password",
                "ansible_ssh_pass",
                "ansible_ssh_password",
            ],
        ],
    };
    for family in families {
        let winner = family.iter().rfind(|k| {
            vars.get(**k)
                .is_some_and(|(v, _)| !matches!(v.value, Val::Null))
        });
        if let Some(winner) = winner {
            for k in family.iter().filter(|k| *k != winner) {
                vars.remove(*k);
            }
        }
    }
}
