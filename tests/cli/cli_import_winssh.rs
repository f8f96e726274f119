//! `kwinctl import ansible` for Windows hosts over SSH (issue 30): Ansible's
//! `ansible_connection: ssh` with `ansible_shell_type: powershell` or `cmd`
//! (Ansible's "Windows SSH" guide) becomes an `ssh:` block with the user,
//! port and key Ansible would use; what kwinctl cannot honour on such a
//! host (another shell, Ansible's runas) is refused with its position.

use crate::common;

use super::cli_import::{fill, import, refused};
use common::{kwinctl, text, write};
use kwinctl::inventory::{Connection, Inventory, Os};

const WINDOWS_SSH: &str = "\
all:
  children:
    linux:
      hosts:
        cp1: { ansible_host: 10.0.0.10, kwinctl_role: control-plane }
    windows_ssh:
      vars:
        ansible_connection: ssh
        ansible_shell_type: powershell
        ansible_user: Administrator
        ansible_ssh_private_key_file: keys/win_ed25519
      hosts:
        win1: { ansible_host: 10.0.0.21 }
        win2: { ansible_host: 10.0.0.22, ansible_shell_type: cmd, ansible_port: 2222 }
    windows_winrm:
      hosts:
        win3: { ansible_host: 10.0.0.23, ansible_connection: winrm, ansible_user: Administrator }
";

#[test]
fn windows_hosts_over_ssh_import_as_ssh_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let from = dir.path().join("hosts.yml");
    write(&from, WINDOWS_SSH);
    let (inv, said) = import(from.to_str().unwrap(), dir.path());
    assert!(said.contains("3 Windows"), "{said}");
    fill(&inv);
    let o = kwinctl(&["check", "-i", inv.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let loaded = Inventory::load(&inv).unwrap();
    // ssh -i takes a relative key file from where Ansible runs: here
    let key = std::env::current_dir().unwrap().join("keys/win_ed25519");
    for (name, port) in [("win1", None), ("win2", Some(2222))] {
        let h = loaded.host(name).unwrap();
        assert_eq!(h.os, Os::Windows, "{name}");
        let Connection::Ssh(s) = &h.connection else {
            panic!("{name} is not reached over SSH: {:?}", h.connection)
        };
        assert_eq!(s.user.as_deref(), Some("Administrator"), "{name}");
        assert_eq!(s.port, port, "{name}");
        assert_eq!(s.identity.as_deref(), Some(key.as_path()), "{name}");
    }
    assert!(matches!(
        loaded.host("win3").unwrap().connection,
        Connection::WinRm(_)
    ));
}

#[test]
fn what_windows_over_ssh_cannot_honour_is_refused_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let from = dir.path().join("hosts.ini");
    write(
        &from,
        "[win]\n\
         w1 ansible_host=10.0.0.21\n\
         w3 ansible_host=10.0.0.23 ansible_shell_type=sh kwinctl_os=windows\n\
         \n\
         [win:vars]\n\
         ansible_connection=ssh\n\
         ansible_shell_type=powershell\n\
         ansible_become_method=runas\n\
         \n\
         [other]\n\
         l1 ansible_host=10.0.0.31 ansible_shell_type=cmd kwinctl_os=linux\n\
         x2 ansible_host=10.0.0.22 ansible_shell_type=pwsh\n",
    );
    let out = dir.path().join("inv.yaml");
    let err = refused(&[from.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(!out.exists(), "an inventory was written");
    let f = from.display();
    for (at, what) in [
        ("3:", "a Windows host with a POSIX shell"),
        ("8:", "it does not switch users (Ansible's runas)"),
        ("11:", "a Linux host with a Windows shell"),
        ("12:", "not a shell plugin of Ansible's"),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("{f}:{at}")) && l.contains(what)),
            "{at} {what}:\n{err}"
        );
    }
}
