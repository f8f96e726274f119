//! Which `ansible_*` variables concern connecting to a host, by a rule
//! rather than case by case (docs/research/ansible-import.md#connection-variables):
//! a variable is a connection variable when ansible-core's connection
//! plugins (ssh, paramiko_ssh, winrm, psrp), its become plugins (sudo, su,
//! runas) or its play context (`MAGIC_VARIABLE_MAPPING`) read it, or when
//! its name is in one of those plugins' own namespaces (`ansible_ssh_*`,
//! `ansible_winrm_*`, whose unknown names winrm.py hands to pywinrm,
//! `ansible_psrp_*`, `ansible_paramiko_*`, `ansible_become*`, ...). `vars.rs`
//! maps a connection variable, refuses it, or (this file's `HARMLESS`)
//! knows it changes nothing kwinctl does. Every other `ansible_*` variable
//! (`ansible_python_interpreter` and every `ansible_*_interpreter`,
//! `ansible_uuid`, gathered facts) is read by modules or playbooks, never
//! when connecting: the import leaves it aside and names it in one note.

/// The variables ansible-core's connection and become plugins list in
/// their DOCUMENTATION `vars:`, and the play context's
/// `MAGIC_VARIABLE_MAPPING` (constants.py), outside the namespaces below.
const CONNECTION_VARS: &[&str] = &[
    "ansible_connection",
    "ansible_host",
    "ansible_port",
    "ansible_user",
    "ansible_password",
    "ansible_private_key_file",
    "ansible_host_key_checking",
    "ansible_pipelining",
    "ansible_timeout",
    "ansible_control_path",
    "ansible_control_path_dir",
    "ansible_shell_type",
    "ansible_shell_executable",
    "ansible_module_compression",
    "ansible_network_os",
    "ansible_connection_user",
    "ansible_docker_extra_args",
];

/// Namespaces of ansible-core's connection and become plugins: every
/// variable named so is theirs (`sshpass` is ssh.py's password prompt,
/// `scp`/`sftp` its file transfer).
const CONNECTION_PREFIXES: &[&str] = &[
    "ansible_ssh_",
    "ansible_sshpass_",
    "ansible_scp_",
    "ansible_sftp_",
    "ansible_paramiko_",
    "ansible_winrm_",
    "ansible_psrp_",
    "ansible_become",
    "ansible_sudo_",
    "ansible_su_",
    "ansible_runas_",
];

/// Connection variables that change nothing kwinctl does: timeouts and
/// retries (kwinctl has its own), Ansible's pipelining, multiplexing and
/// module transfer, WinRM message encryption (kwinctl encrypts NTLM and
/// Kerberos messages always), `become: true` (kwinctl runs its scripts as
/// root anyway), and host key checking (kwinctl checks every SSH host key
/// against its own known hosts, whatever Ansible was told: docs/ssh-trust.md).
const HARMLESS: &[&str] = &[
    "ansible_become",
    "ansible_pipelining",
    "ansible_ssh_pipelining",
    "ansible_ssh_retries",
    "ansible_timeout",
    "ansible_ssh_timeout",
    "ansible_control_path",
    "ansible_control_path_dir",
    "ansible_ssh_use_tty",
    "ansible_ssh_transfer_method",
    "ansible_sftp_batch_mode",
    "ansible_module_compression",
    "ansible_shell_executable",
    "ansible_winrm_message_encryption",
    "ansible_winrm_operation_timeout_sec",
    "ansible_winrm_read_timeout_sec",
    "ansible_winrm_connection_timeout",
    "ansible_winrm_kinit_mode",
    "ansible_winrm_kinit_cmd",
    "ansible_psrp_message_encryption",
    "ansible_psrp_operation_timeout",
    "ansible_psrp_read_timeout",
    "ansible_psrp_connection_timeout",
    "ansible_psrp_connection_backoff",
    "ansible_psrp_reconnection_backoff",
    "ansible_psrp_reconnection_retries",
    "ansible_winrm_service",
    "ansible_psrp_negotiate_service",
    "ansible_winrm_kerberos_delegation",
    "ansible_psrp_negotiate_delegate",
];

/// Ansible's switches for checking SSH host keys: never taken.
pub(super) const HOST_KEY_CHECKING: &[&str] = &[
    "ansible_host_key_checking",
    "ansible_ssh_host_key_checking",
    "ansible_paramiko_host_key_checking",
];

/// Whether Ansible reads the variable to connect to a host.
pub(super) fn connection(key: &str) -> bool {
    CONNECTION_VARS.contains(&key) || CONNECTION_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// A connection variable kwinctl can leave aside.
pub(super) fn harmless(key: &str) -> bool {
    HARMLESS.contains(&key) || HOST_KEY_CHECKING.contains(&key)
}

/// An Ansible variable that no connection reads (left aside, named in the
/// import's note).
pub(super) fn not_connection(key: &str) -> bool {
    key.starts_with("ansible_") && !connection(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_sorts_variables_by_what_reads_them() {
        for k in [
            "ansible_uuid",
            "ansible_python_interpreter",
            "ansible_ruby_interpreter",
            "ansible_perl_interpreter",
            "ansible_facts",
            "ansible_distribution",
            "ansible_default_ipv4",
            "ansible_remote_tmp",
        ] {
            assert!(not_connection(k), "{k}");
        }
        for k in [
            "ansible_ssh_host_key_checking",
            "ansible_host_key_checking",
            "ansible_ssh_common_args",
            "ansible_winrm_proxy",
            "ansible_psrp_proxy",
            "ansible_become_exe",
            "ansible_sudo_pass",
            "ansible_paramiko_proxy_command",
            "ansible_network_os",
        ] {
            assert!(connection(k), "{k}");
        }
        assert!(harmless("ansible_ssh_host_key_checking"));
        assert!(!harmless("ansible_winrm_proxy") && !harmless("ansible_ssh_common_args"));
        assert!(!not_connection("http_port"), "not an Ansible variable");
    }
}
