//! `kwinctl import ansible` without hosts: Ansible inventories in INI, YAML
//! and `ansible-inventory --list` JSON (tests/ansible/; the .list.json files
//! are what ansible-core 2.19's `ansible-inventory -i FILE --list` printed
//! for the INI and YAML files beside them) become kwinctl inventories that
//! `check` accepts once the cluster: section is filled in; passwords are
//! never copied; what cannot be mapped is refused with its position.

use crate::common;

use std::path::{Path, PathBuf};

use common::{kwinctl, kwinctl_env, text, write};

fn rendered(inv: &Path, limit: &str) -> Vec<String> {
    common::rendered(inv.to_str().unwrap(), &[limit])
}

fn fixture(name: &str) -> String {
    format!("{}/tests/ansible/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Import `from` into `dir/inv.yaml`; its stdout and stderr.
pub(crate) fn import(from: &str, dir: &Path) -> (PathBuf, String) {
    let out = dir.join("inv.yaml");
    let o = kwinctl(&["import", "ansible", from, "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    (out, text(&o))
}

/// `kwinctl import ansible ARGS` refused (exit 2): its stderr.
pub(crate) fn refused(args: &[&str]) -> String {
    let o = kwinctl(&[&["import", "ansible"][..], args].concat());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fill in the placeholders as an operator would (a Windows-capable
/// release that needs no kubeconfig over http).
pub(crate) fn fill(inv: &Path) -> String {
    let s = std::fs::read_to_string(inv).unwrap();
    let s = s
        .replace("name: FILL-IN", "name: imported")
        .replace("cluster_cidr: FILL-IN", "cluster_cidr: 10.244.0.0/16")
        .replace("service_cidr: FILL-IN", "service_cidr: 10.96.0.0/12")
        .replace("api_server: FILL-IN", "api_server: http://10.0.0.10:8080")
        .replace(
            "kubernetes_version: FILL-IN",
            "kubernetes_version: \"1.7.16\"",
        );
    write(inv, &s);
    s
}

fn check_json(inv: &Path) -> serde_json::Value {
    let o = kwinctl(&["check", "-i", inv.to_str().unwrap(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn an_ini_inventory_becomes_one_check_accepts_once_filled_in() {
    for file in ["hosts.ini", "hosts.ini.list.json"] {
        let dir = tempfile::tempdir().unwrap();
        let (inv, said) = import(&fixture(file), dir.path());
        let s = std::fs::read_to_string(&inv).unwrap();
        // no password reaches the file or the terminal
        for secret in ["group-secret-not-copied", "host-secret-not-copied"] {
            assert!(!s.contains(secret) && !said.contains(secret), "{s}\n{said}");
        }
        assert!(
            s.contains("password_env: \"KWINCTL_WINRM_PASSWORD_WIN2\""),
            "{s}"
        );
        assert!(
            s.contains("role: control-plane  # in Ansible group kube_control_plane"),
            "{s}"
        );
        if file == "hosts.ini" {
            assert!(
                said.contains("export KWINCTL_WINRM_PASSWORD_WINDOWS=..."),
                "{said}"
            );
            // where each host came from
            assert!(
                s.contains(&format!("# lin03: from {}:12", fixture(file))),
                "{s}"
            );
            assert!(
                s.contains("# not used by kwinctl: ansible_host_key_checking (line 15), http_port (line 10)"),
                "{s}"
            );
        }
        // check refuses the placeholders, each at its line
        let o = kwinctl(&["check", "-i", inv.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("{}:", inv.display())), "{err}");
        assert!(err.contains(":9: cluster.name is still FILL-IN"), "{err}");
        assert_eq!(err.matches("is still FILL-IN").count(), 5, "{err}");
        fill(&inv);
        let v = check_json(&inv);
        let hosts: Vec<&str> = v["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["host"].as_str().unwrap())
            .collect();
        assert_eq!(hosts.len(), 6, "{v}");
        for h in ["cp1", "lin01", "lin02", "lin03", "win1", "win2"] {
            assert!(hosts.contains(&h), "{h}: {v}");
        }
        // Ansible's groups and children survive as --limit targets
        assert_eq!(
            rendered(&inv, "workers:!windows"),
            ["lin01", "lin02", "lin03"],
            "{file}"
        );
        assert_eq!(rendered(&inv, "windows"), ["win1", "win2"], "{file}");
    }
}

#[test]
fn a_yaml_inventory_keeps_ansibles_precedence_between_nested_groups() {
    for file in ["hosts.yaml", "hosts.yaml.list.json"] {
        let dir = tempfile::tempdir().unwrap();
        let (inv, said) = import(&fixture(file), dir.path());
        let s = fill(&inv);
        assert!(
            !s.contains("ANSIBLE_VAULT") && !said.contains("6162636465666768"),
            "{s}"
        );
        let v = check_json(&inv);
        assert_eq!(v["hosts"].as_array().unwrap().len(), 5, "{file}: {v}");
        // `ansible-inventory --host` says web1 uses port 2222 (web, a child
        // of prod, beats prod's 22) and db1 22: kwinctl's layers give the same
        let o = kwinctl_env(
            &["render", "-i", inv.to_str().unwrap(), "--output", "json"],
            &[
                ("KWINCTL_WINRM_PASSWORD_WINDOWS", "x"),
                ("KWINCTL_WINRM_PASSWORD_WIN1", "x"),
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let web1 = s
            .split("- name: web1")
            .nth(1)
            .unwrap()
            .split("- name:")
            .next()
            .unwrap();
        let db1 = s
            .split("- name: db1")
            .nth(1)
            .unwrap()
            .split("- name:")
            .next()
            .unwrap();
        if file == "hosts.yaml" {
            assert!(
                web1.contains(
                    "port: 2222  # ansible_port, line 18: groups prod, web set it differently"
                ),
                "{web1}"
            );
            assert!(
                !db1.contains("port:"),
                "db1 takes prod's 22 from its group: {db1}"
            );
            assert!(
                s.contains("  prod:  # Ansible group prod, line 12\n    ssh:\n      port: 22"),
                "{s}"
            );
        } else {
            // --list has merged group vars into every host
            assert!(web1.contains("port: 2222"), "{web1}");
            assert!(db1.contains("port: 22"), "{db1}");
        }
        assert_eq!(rendered(&inv, "prod:!db"), ["web1", "web2"], "{file}");
    }
}

#[test]
fn what_cannot_be_mapped_is_refused_with_its_position_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("inv.yaml");
    let f = fixture("refused.ini");
    let err = refused(&[&f, "-o", out.to_str().unwrap()]);
    assert!(!out.exists());
    for want in [
        ":3:26: ansible_ssh_common_args",
        ":4:26: ansible_become_password",
        ":5:4: ansible_host (host line of [linux]): \"l3.example.invalid\" is a name",
        ":6:26: ansible_connection (host line of [linux]): connection \"docker\"",
        // not a variable of Ansible's psrp plugin (ansible_psrp_ca_cert is)
        ":13:1: ansible_psrp_ca_path ([win:vars]): kwinctl does not know",
        // Kerberos maps, but Ansible would kinit with this password
        ":15:1: ansible_password ([win:vars]): with Kerberos, Ansible runs kinit",
        ":16:1: ansible_user ([win:vars]): a Jinja template",
    ] {
        assert!(
            err.contains(&format!("{f}{want}")),
            "want {want} in:\n{err}"
        );
    }
    assert!(!err.contains("secret-sudo"), "{err}");
    assert_eq!(err.matches("    fix: ").count(), 7, "{err}");
}

#[test]
fn names_are_resolved_only_when_asked_and_nothing_is_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("hosts");
    write(&src, "[web]\nlocalhost\n");
    let err = refused(&[src.to_str().unwrap()]);
    assert!(err.contains("--resolve"), "{err}");
    let o = kwinctl(&["import", "ansible", src.to_str().unwrap(), "--resolve"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("address: 127.0.0.1  # the host's name: localhost resolved here at import"),
        "{s}"
    );
    let out = dir.path().join("kept.yaml");
    write(&out, "mine\n");
    refused(&[
        src.to_str().unwrap(),
        "--resolve",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine\n");
}

/// Ansible's documented ways to trust a WinRM listener: a CA file
/// (`ansible_psrp_ca_cert`, `ansible_winrm_ca_trust_path`) is copied; an
/// unchecked certificate (`..._cert_validation=ignore`, in every Windows
/// example of Ansible's docs) becomes a commented pin to fill in, not a
/// refusal.
#[test]
fn a_ca_file_is_kept_and_an_unchecked_certificate_becomes_a_pin_to_fill_in() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("hosts");
    write(
        &src,
        "[win]\nw1 ansible_host=198.18.0.5\nw2 ansible_host=198.18.0.6 ansible_psrp_cert_validation=ignore\n\
         [win:vars]\nansible_connection=psrp\nansible_user=Administrator\nansible_psrp_ca_cert=/etc/pki/winrm-ca.pem\n",
    );
    let (inv, said) = import(src.to_str().unwrap(), dir.path());
    assert!(
        said.contains("`kwinctl verify -i INVENTORY` prints each listener's SHA-256"),
        "{said}"
    );
    let s = std::fs::read_to_string(&inv).unwrap();
    assert!(
        s.contains("ca_file: \"/etc/pki/winrm-ca.pem\"  # ansible_psrp_ca_cert, line 7"),
        "{s}"
    );
    let w2 = s.split("- name: w2").nth(1).unwrap();
    assert!(
        w2.contains("# cert_sha256: FILL-IN  # ansible_psrp_cert_validation, line 3"),
        "{w2}"
    );
    fill(&inv);
    check_json(&inv);
}

/// Two hosts at one address (Ansible reaches both there; `--list` output
/// of a group-wide ansible_host looks like this) are refused at the import,
/// with the second host's line, not left for `check` to find in the
/// written file.
#[test]
fn two_hosts_at_one_address_are_refused_at_the_second() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("hosts");
    write(
        &src,
        "[web]\na ansible_host=198.18.0.7\nb ansible_host=198.18.0.7\n",
    );
    let err = refused(&[src.to_str().unwrap()]);
    assert!(
        err.contains(&format!(
            "{}:3:1: host b (ansible_host, line 3): its address 198.18.0.7 is host a's too",
            src.display()
        )),
        "{err}"
    );
}

/// A vault-encrypted inventory is refused as such at 1:1, not read as INI
/// host names made of ciphertext; an inventory without hosts points at its
/// first line, not at 0:0.
#[test]
fn a_vault_file_and_an_empty_inventory_are_refused_for_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("hosts");
    write(
        &src,
        "$ANSIBLE_VAULT;1.1;AES256\n6162636465666768696a6b6c6d6e6f70\n3132333435363738\n",
    );
    let err = refused(&[src.to_str().unwrap()]);
    assert!(
        err.contains(&format!(
            "{}:1:1: an Ansible Vault-encrypted file",
            src.display()
        )),
        "{err}"
    );
    assert!(!err.contains("6162636465666768"), "{err}");
    write(&src, "# nothing here yet\n\n[web]\n");
    let err = refused(&[src.to_str().unwrap()]);
    assert!(
        err.contains(&format!(
            "{}:3:1: the inventory has no hosts",
            src.display()
        )),
        "{err}"
    );
}

#[test]
fn kerberos_maps_and_what_ansible_does_beyond_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("hosts");
    write(
        &src,
        "[win]\nw1 ansible_host=198.18.0.5 ansible_winrm_kerberos_hostname_override=w1.corp.example\n\
         [win:vars]\nansible_connection=winrm\nansible_winrm_transport=kerberos\nansible_winrm_scheme=https\n\
         ansible_user=kwinctl@CORP.EXAMPLE\nansible_winrm_kinit_mode=manual\n",
    );
    let (inv, _) = import(src.to_str().unwrap(), dir.path());
    let s = std::fs::read_to_string(&inv).unwrap();
    for want in [
        "auth: \"kerberos\"  # ansible_winrm_transport, line 5",
        "spn: \"HTTP/w1.corp.example\"  # ansible_winrm_kerberos_hostname_override, line 2",
        "# not used by kwinctl: ansible_winrm_kinit_mode (line 8)",
    ] {
        assert!(s.contains(want), "want {want} in:\n{s}");
    }
    fill(&inv);
    check_json(&inv);

    // Ansible's own kinit with the password (its default with one), and a
    // ticket delegated to the host: refused where they are written
    write(
        &src,
        "[win]\nw1 ansible_host=198.18.0.5\n[win:vars]\nansible_connection=winrm\n\
         ansible_winrm_transport=kerberos\nansible_user=kwinctl@CORP.EXAMPLE\nansible_password=not-copied\n\
         ansible_winrm_kerberos_delegation=true\n",
    );
    let out = dir.path().join("refused.yaml");
    let err = refused(&[src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let f = src.display();
    for want in [
        format!("{f}:7:1: ansible_password ([win:vars]): with Kerberos, Ansible runs kinit"),
        format!(
            "{f}:8:1: ansible_winrm_kerberos_delegation ([win:vars]): kwinctl does not delegate"
        ),
    ] {
        assert!(err.contains(&want), "want {want} in:\n{err}");
    }
    assert!(!err.contains("not-copied"), "{err}");
    // psrp gets its ticket with the password it is given
    write(
        &src,
        "[win]\nw1 ansible_host=198.18.0.5\n[win:vars]\nansible_connection=psrp\n\
         ansible_psrp_auth=kerberos\nansible_user=kwinctl@CORP.EXAMPLE\nansible_password=not-copied\n",
    );
    let err = refused(&[src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let want =
        format!("{f}:7:1: ansible_password ([win:vars]): with Kerberos, Ansible's psrp connection");
    assert!(err.contains(&want), "want {want} in:\n{err}");
}

/// Ansible variables no connection reads (`ansible_uuid`, every
/// `ansible_*_interpreter`, facts) and Ansible's host key checking switch
/// are left aside with ONE note naming each once, however many hosts and
/// groups set them; kwinctl's own host key checking is not weakened, and a
/// connection variable it cannot map is still refused.
#[test]
fn variables_no_connection_reads_are_left_aside_with_one_note() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("hosts");
    write(
        &src,
        "[linux]\n\
         l1 ansible_host=198.18.0.5 ansible_uuid=4c4c4544 ansible_ruby_interpreter=/usr/bin/ruby\n\
         l2 ansible_host=198.18.0.6 ansible_uuid=5d5d ansible_ruby_interpreter=/usr/bin/ruby\n\
         l3 ansible_host=198.18.0.7 ansible_distribution=Debian ansible_default_ipv4=\"{'address': '198.18.0.7'}\"\n\
         [linux:vars]\nansible_ssh_host_key_checking=False\nansible_python_interpreter=/usr/bin/python3\n",
    );
    let (inv, said) = import(src.to_str().unwrap(), dir.path());
    let notes: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("note: left aside"))
        .collect();
    assert_eq!(notes.len(), 1, "{said}");
    for k in [
        "ansible_default_ipv4",
        "ansible_distribution",
        "ansible_python_interpreter",
        "ansible_ruby_interpreter",
        "ansible_ssh_host_key_checking",
        "ansible_uuid",
    ] {
        assert_eq!(notes[0].matches(k).count(), 1, "{k} once: {}", notes[0]);
    }
    assert!(
        notes[0].contains(
            "; ansible_ssh_host_key_checking not taken: kwinctl checks every SSH host key against its own known hosts"
        ),
        "{}",
        notes[0]
    );
    let s = std::fs::read_to_string(&inv).unwrap();
    assert!(
        !s.contains("host_key") || s.contains("# not used by kwinctl"),
        "{s}"
    );
    fill(&inv);
    let v = check_json(&inv);
    assert_eq!(v["hosts"].as_array().unwrap().len(), 3, "{v}");

    // what does change connecting is still refused, where it is written
    write(
        &src,
        "[linux]\nl1 ansible_host=198.18.0.5 ansible_uuid=1 ansible_ssh_extra_args=-oProxyJump=j\n\
         [win]\nw1 ansible_host=198.18.0.6 ansible_connection=winrm ansible_winrm_proxy=http://p:3128\n",
    );
    let err = refused(&[src.to_str().unwrap()]);
    let f = src.display();
    for want in [
        format!("{f}:2:43: ansible_ssh_extra_args"),
        format!("{f}:4:53: ansible_winrm_proxy (host line of [win]): kwinctl does not know"),
    ] {
        assert!(err.contains(&want), "want {want} in:\n{err}");
    }
    assert!(!err.contains("ansible_uuid"), "{err}");
}

/// A key given twice in one YAML mapping (a host, a group, a variable)
/// keeps its last value, as Ansible's loader does, with a warning naming
/// both lines at the later one (where Ansible's warning points).
#[test]
fn a_duplicate_yaml_key_takes_the_last_value_with_a_warning_naming_both_lines() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("hosts.yaml");
    write(
        &src,
        "all:\n  children:\n    web:\n      hosts:\n        w1:\n          ansible_host: 198.18.0.5\n          \
         ansible_user: first\n        w1:\n          ansible_host: 198.18.0.6\n          ansible_port: 22\n          \
         ansible_port: 2222\n",
    );
    let (inv, said) = import(src.to_str().unwrap(), dir.path());
    let f = src.display();
    for want in [
        format!(
            "warning: {f}:8:9: the key \"w1\" is given twice in one mapping, at lines 5 and 8: Ansible \
             takes the last (line 8) and ignores the one at line 5"
        ),
        format!(
            "warning: {f}:11:11: the key \"ansible_port\" is given twice in one mapping, at lines 10 and 11"
        ),
    ] {
        assert!(said.contains(&want), "want {want} in:\n{said}");
    }
    let s = std::fs::read_to_string(&inv).unwrap();
    let w1 = s.split("- name: w1").nth(1).unwrap();
    assert!(w1.contains("address: 198.18.0.6"), "{w1}");
    assert!(w1.contains("port: 2222  # ansible_port, line 11"), "{w1}");
    assert!(
        !w1.contains("first"),
        "the first w1's user is Ansible's no more: {w1}"
    );
}

/// A WinRM listener over plain http has no certificate: Ansible's
/// `..._cert_validation=ignore` there asks for no pin, and the import
/// gives no pinning advice (it lists the variable as not used).
#[test]
fn an_http_listener_gets_no_certificate_pin_to_fill_in() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("hosts");
    write(
        &src,
        "[win]\nw1 ansible_host=198.18.0.5\nw2 ansible_host=198.18.0.6 ansible_port=5986\n\
         [win:vars]\nansible_connection=winrm\nansible_port=5985\nansible_winrm_transport=ntlm\n\
         ansible_winrm_server_cert_validation=ignore\nansible_user=Administrator\n",
    );
    let (inv, said) = import(src.to_str().unwrap(), dir.path());
    let s = std::fs::read_to_string(&inv).unwrap();
    let w1 = s
        .split("- name: w1")
        .nth(1)
        .unwrap()
        .split("- name:")
        .next()
        .unwrap();
    assert!(!w1.contains("cert_sha256"), "{w1}");
    assert!(
        w1.contains("# not used by kwinctl: ansible_winrm_server_cert_validation (line 8)"),
        "{w1}"
    );
    // w2's https listener does have a certificate to pin (the group's line)
    assert!(s.contains("# cert_sha256: FILL-IN"), "{s}");
    assert!(said.contains("pin the WinRM certificates"), "{said}");
    // with http alone, no advice at all
    write(
        &src,
        &std::fs::read_to_string(&src)
            .unwrap()
            .replace(" ansible_port=5986", ""),
    );
    let dir2 = tempfile::tempdir().unwrap();
    let (inv, said) = import(src.to_str().unwrap(), dir2.path());
    let s = std::fs::read_to_string(&inv).unwrap();
    assert!(
        !s.contains("cert_sha256") && !said.contains("pin"),
        "{s}\n{said}"
    );
    fill(&inv);
    check_json(&inv);
}
