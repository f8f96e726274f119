//! `ssh -G` children get no secret in their environment (issue 38):
//! kwinctl runs `ssh -G` to resolve each host as OpenSSH
//! would, and a wrapper `ssh` (or whatever `KWINCTL_SSH_BINARY` names)
//! saw the key passphrase and the WinRM passwords in its environment.

use crate::common;

#[test]
fn ssh_g_runs_without_the_passphrase_or_the_winrm_passwords() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = d.join("id");
    common::write(&key, "not read before connecting\n");
    let inv = d.join("inv.yaml");
    common::write(
        &inv,
        &format!(
            "cluster:
  name: env
  cluster_cidr: 198.19.0.0/16
  service_cidr: 198.18.240.0/20
  api_server: http://198.18.9.2:8080
  kubernetes_version: \"1.7.16\"
hosts:
  - name: a
    os: linux
    role: control-plane
    address: 198.18.9.2
    ssh: {{ identity: {} }}
  - name: w
    os: windows
    address: 198.18.9.4
    winrm: {{ tls: false, password_env: SOME_WIN_PW }}
  - name: v
    os: windows
    address: 198.18.9.5
    winrm: {{ tls: false }}
",
            key.display()
        ),
    );
    // any ssh_config makes kwinctl ask `ssh -G`
    let config = d.join("ssh_config");
    common::write(&config, "Host a\n  User root\n");
    // a `ssh` that writes down its environment, then answers as ssh would
    let env_log = d.join("env.log");
    let fake = d.join("ssh");
    common::write(
        &fake,
        &format!(
            "#!/bin/sh\nenv >> '{}'\nexec ssh \"$@\"\n",
            env_log.display()
        ),
    );
    let st = std::process::Command::new("chmod")
        .args(["0755", fake.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = common::kwinctl_env(
        &[
            "plan",
            "-i",
            inv.to_str().unwrap(),
            "--ssh-config",
            config.to_str().unwrap(),
            "--timeout",
            "1",
        ],
        &[
            ("KWINCTL_SSH_BINARY", fake.to_str().unwrap()),
            ("KWINCTL_SSH_PASSPHRASE", "pass-phrase-one-77"),
            ("KWINCTL_WINRM_PASSWORD", "winrm-password-two-88"),
            ("SOME_WIN_PW", "winrm-password-three-99"),
            ("KWINCTL_NOT_SECRET", "plain-value"),
        ],
    );
    let env = std::fs::read_to_string(&env_log)
        .unwrap_or_else(|_| panic!("ssh -G did not run: {}", common::text(&o)));
    for secret in [
        "pass-phrase-one-77",
        "winrm-password-two-88",
        "winrm-password-three-99",
    ] {
        assert!(
            !env.contains(secret),
            "{secret} in ssh -G's environment:\n{env}"
        );
    }
    // the rest of the environment is passed on (ssh_config may use it)
    assert!(env.contains("KWINCTL_NOT_SECRET=plain-value"), "{env}");
    assert!(env.contains("HOME="), "{env}");
}
