//! The local lab from Rust tests: `Lab::up(n)` runs `lab/lab.sh up` in a
//! fresh temp folder; dropping the `Lab` (also when the test panics) runs
//! `lab/lab.sh down` and removes the folder. Labs of concurrent tests get
//! different ids, bridges and subnets.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/lab/lab.sh");

#[derive(Debug, Clone)]
pub struct LabHost {
    pub name: String,
    pub ip: Ipv4Addr,
    pub netns: String,
}

pub struct Lab {
    dir: PathBuf,
    inventory: PathBuf,
    hosts: Vec<LabHost>,
}

/// Lab tests need root and `ip netns`. Without them they fail loudly, unless
/// `KWINCTL_SKIP_LAB=1` is set: then this returns false and the test returns
/// early (for developers without root; CI always runs them).
pub fn require_root() -> bool {
    if std::env::var("KWINCTL_SKIP_LAB").as_deref() == Ok("1") {
        eprintln!("KWINCTL_SKIP_LAB=1: skipping a lab test");
        return false;
    }
    let uid = Command::new("id").arg("-u").output().expect("id -u");
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "lab tests need root (network namespaces, sshd): run `sudo scripts/test.sh`, or set KWINCTL_SKIP_LAB=1 to skip them"
    );
    true
}

fn run(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let id = child.id();
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.expect("wait"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &id.to_string()]).status();
            panic!(
                "{cmd:?} did not finish within {limit:?} (started {:?} ago)",
                start.elapsed()
            );
        }
    }
}

pub(crate) fn lab_sh(args: &[&str]) -> Output {
    lab_sh_within(args, Duration::from_secs(120))
}

fn lab_sh_within(args: &[&str], limit: Duration) -> Output {
    run(
        Command::new("bash")
            .arg(SCRIPT)
            .args(args)
            .env("KWINCTL_LAB_OWNER", std::process::id().to_string()),
        limit,
    )
}

pub(crate) fn check(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "lab.sh {what} failed ({:?}):\n{}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Lab {
    pub fn up(linux: usize) -> Lab {
        Lab::up_mixed(linux, 0)
    }

    /// `linux` Linux hosts (h1..) and `windows` simulated Windows hosts
    /// (win1..: a WinRM server from winsim/ in its own namespace).
    pub fn up_mixed(linux: usize, windows: usize) -> Lab {
        Lab::up_with(linux, windows, 0)
    }

    /// Also `systemd` Linux hosts (sd1..) that boot a real systemd: Debian
    /// containers on the lab bridge (see "systemd hosts" in `lab/lab.sh`).
    /// The first one builds the cached Debian root if `scripts/setup.sh` has
    /// not (about a minute).
    pub fn up_with(linux: usize, windows: usize, systemd: usize) -> Lab {
        Lab::up_env(linux, windows, systemd, &[])
    }

    /// `linux` Linux hosts and one simulated Windows host per entry of
    /// `builds` ("2019", "2022", "2025" or "10.0.NNNNN": win1 the first),
    /// their Containers feature `containers` ("Available", "InstallPending"
    /// or "Installed"; None: winsim's default, Available). Passed to
    /// lab.sh as KWINCTL_LAB_WIN_BUILDS and KWINCTL_LAB_CONTAINERS.
    pub fn up_windows_builds(linux: usize, builds: &[&str], containers: Option<&str>) -> Lab {
        Lab::up_windows_builds_env(linux, builds, containers, &[])
    }

    /// As [`Lab::up_windows_builds`], with more of lab.sh's environment
    /// (e.g. KWINCTL_LAB_K8S, KWINCTL_LAB_CONTAINERD).
    pub fn up_windows_builds_env(
        linux: usize,
        builds: &[&str],
        containers: Option<&str>,
        more: &[(&str, &str)],
    ) -> Lab {
        let b = builds.join(",");
        let mut env = vec![("KWINCTL_LAB_WIN_BUILDS", b.as_str())];
        if let Some(c) = containers {
            env.push(("KWINCTL_LAB_CONTAINERS", c));
        }
        env.extend_from_slice(more);
        Lab::up_env(linux, builds.len(), 0, &env)
    }

    /// `linux` Linux hosts and `windows` simulated Windows hosts running
    /// Kubernetes `k8s` (KWINCTL_LAB_K8S: the fake binaries' release).
    pub fn up_release(linux: usize, windows: usize, k8s: &str) -> Lab {
        Lab::up_env(linux, windows, 0, &[("KWINCTL_LAB_K8S", k8s)])
    }

    /// A lab on the l2bridge profile as `lab.sh up` writes it (the one
    /// writer of lab inventories): `linux` Linux hosts and one simulated
    /// Windows host per entry of `builds` (see [`Lab::up_windows_builds`]),
    /// Kubernetes `k8s` (from 1.24), containerd `containerd`, and with
    /// `runner` kube-log-runner.exe from that release, named in
    /// cluster.log_runner_version (KWINCTL_LAB_K8S, KWINCTL_LAB_CONTAINERD,
    /// KWINCTL_LAB_LOG_RUNNER).
    pub fn up_l2bridge(
        linux: usize,
        builds: &[&str],
        containers: Option<&str>,
        k8s: &str,
        containerd: &str,
        runner: Option<&str>,
    ) -> Lab {
        let mut env = vec![
            ("KWINCTL_LAB_K8S", k8s),
            ("KWINCTL_LAB_CONTAINERD", containerd),
        ];
        if let Some(r) = runner {
            env.push(("KWINCTL_LAB_LOG_RUNNER", r));
        }
        Lab::up_windows_builds_env(linux, builds, containers, &env)
    }

    fn up_env(linux: usize, windows: usize, systemd: usize, env: &[(&str, &str)]) -> Lab {
        let dir = tempfile::Builder::new()
            .prefix("kwinctl-lab-")
            .tempdir()
            .expect("temp dir")
            .keep();
        let dir_s = dir.to_string_lossy().into_owned();
        let (l, w, s) = (linux.to_string(), windows.to_string(), systemd.to_string());
        let mut args = vec!["up", &dir_s, "--linux", &l];
        if windows > 0 {
            args.extend(["--windows", &w]);
        }
        if systemd > 0 {
            args.extend(["--systemd", &s]);
        }
        let mut cmd = Command::new("bash");
        cmd.arg(SCRIPT)
            .args(&args)
            .env("KWINCTL_LAB_OWNER", std::process::id().to_string());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = run(&mut cmd, Duration::from_secs(300));
        if !o.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            check(&o, "up");
        }
        let tsv = std::fs::read_to_string(dir.join("hosts.tsv")).expect("hosts.tsv");
        let hosts = tsv
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                LabHost {
                    name: f[0].to_string(),
                    ip: f[1].parse().expect("host ip"),
                    netns: f[2].to_string(),
                }
            })
            .collect();
        Lab {
            inventory: dir.join("inventory.yaml"),
            dir,
            hosts,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn inventory(&self) -> &Path {
        &self.inventory
    }
    pub fn hosts(&self) -> &[LabHost] {
        &self.hosts
    }
    /// The inventory path as a string, for command lines.
    /// The lab inventory's cluster block without the Windows-only keys
    /// (kubernetes_version, containerd_version, log_runner_version,
    /// kubeconfig): what a Linux-only inventory of
    /// the lab's hosts starts with (an old kwinctl, which knew neither,
    /// reads it too: `KWINCTL_TEST_BIN`).
    pub fn linux_cluster_block(&self) -> String {
        let base = std::fs::read_to_string(&self.inventory).unwrap();
        base.split("defaults:")
            .next()
            .unwrap()
            .lines()
            .filter(|l| {
                let t = l.trim_start();
                ![
                    "kubernetes_version:",
                    "containerd_version:",
                    "log_runner_version:",
                    "kubeconfig:",
                ]
                .iter()
                .any(|k| t.starts_with(k))
            })
            .map(|l| format!("{l}\n"))
            .collect()
    }
    pub fn inv(&self) -> String {
        self.inventory.to_string_lossy().into_owned()
    }
    pub fn host(&self, name: &str) -> &LabHost {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no lab host {name}"))
    }
    pub fn ip(&self, name: &str) -> String {
        self.host(name).ip.to_string()
    }
    /// Make a host never answer from this machine (frames to it go to a MAC
    /// nobody has) until the guard is dropped.
    pub fn blackhole(&self, name: &str) -> Blackhole {
        let env = std::fs::read_to_string(self.dir.join("lab.env")).expect("lab.env");
        let bridge = env
            .lines()
            .find_map(|l| l.strip_prefix("BRIDGE="))
            .expect("BRIDGE")
            .to_string();
        let ip = self.ip(name);
        let st = Command::new("ip")
            .args([
                "neigh",
                "replace",
                &ip,
                "lladdr",
                "02:00:00:00:00:99",
                "dev",
                &bridge,
                "nud",
                "permanent",
            ])
            .status()
            .expect("ip neigh");
        assert!(st.success(), "ip neigh replace failed");
        Blackhole { ip, bridge }
    }

    /// Tear the lab down now (also done on drop; `down` is idempotent).
    pub fn down(&self) -> Output {
        lab_sh(&["down", &self.dir_s()])
    }

    pub(crate) fn dir_s(&self) -> String {
        self.dir.to_string_lossy().into_owned()
    }

    /// `sh -c cmd` inside a host (its netns, its /etc/kwinctl).
    pub fn exec(&self, host: &str, cmd: &str) -> Output {
        run(
            Command::new("bash")
                .arg(SCRIPT)
                .args(["exec", &self.dir_s(), host, "sh", "-c", cmd]),
            Duration::from_secs(60),
        )
    }

    /// `ip -4 route show` inside a host.
    pub fn routes(&self, host: &str) -> String {
        let o = self.exec(host, "ip -4 route show");
        check(&o, "exec ip route");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Put an executable `name` with `script` in a host's /usr/local/bin
    /// (first in the PATH of kwinctl's scripts): a fault to inject.
    pub fn fake_command(&self, host: &str, name: &str, script: &str) {
        let p = self
            .dir
            .join("hosts")
            .join(host)
            .join("usr-local-bin")
            .join(name);
        std::fs::write(&p, script).expect("fake command");
        let st = Command::new("chmod")
            .arg("0755")
            .arg(&p)
            .status()
            .expect("chmod");
        assert!(st.success());
    }

    /// Run `script` on a simulated Windows host over WinRM, as `up` does
    /// (one connection, closed after); an error in words.
    pub fn run_windows(
        &self,
        host: &str,
        script: &str,
    ) -> Result<kwinctl::transport::Output, String> {
        let inv = kwinctl::inventory::Inventory::load(&self.inventory).unwrap();
        let h = inv.host(host).unwrap().clone();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let opts = kwinctl::transport::ConnectOptions::new(
                Duration::from_secs(20),
                false,
                kwinctl::transport::Routes::default(),
            );
            let mut s =
                kwinctl::transport::connect(&h, kwinctl::transport::Interpreter::PowerShell, &opts)
                    .await
                    .map_err(|e| e.to_string())?;
            let out = s.run(script).await.map_err(|e| e.to_string());
            s.close().await;
            out
        })
    }

    pub fn reboot(&self, host: &str) {
        check(&lab_sh(&["reboot", &self.dir_s(), host]), "reboot");
    }
    /// A real reboot of a systemd host (sdJ) whose network comes up late on
    /// the next boot, with nothing waiting for it: `Late::Address(s)`, its
    /// address appears `s` seconds after the network is "online";
    /// `Late::Subnet(s)`, the lab machine reaches it (SSH works) but the
    /// other hosts are on no connected network for `s` seconds.
    pub fn reboot_late(&self, host: &str, late: Late) {
        let (opt, secs) = match late {
            Late::Address(s) => ("--late-address", s),
            Late::Subnet(s) => ("--late-subnet", s),
        };
        let secs = secs.to_string();
        check(
            &lab_sh_within(
                &["reboot", &self.dir_s(), host, opt, &secs],
                Duration::from_secs(180),
            ),
            "reboot",
        );
    }
    /// A simulated Windows reboot; `drop_hns` also loses the HNS network.
    pub fn reboot_windows(&self, host: &str, drop_hns: bool) {
        let mut args = vec!["reboot", self.dir.to_str().unwrap(), host];
        if drop_hns {
            args.push("--drop-hns");
        }
        check(&lab_sh(&args), "reboot");
    }
    /// A "pod" at `addr` (with its prefix) on a simulated Windows host's
    /// transparent network, its default route via `gateway`: its own
    /// namespace behind the network's bridge, so traffic to and from it is
    /// forwarded by the host (`lab.sh pod`).
    pub fn pod(&self, host: &str, addr: &str, gateway: &str) {
        check(&lab_sh(&["pod", &self.dir_s(), host, addr, gateway]), "pod");
    }
    /// `ping` from the pod `lab.pod` made on `host`.
    pub fn ping_from_pod(&self, host: &str, ip: &str) -> bool {
        let env = std::fs::read_to_string(self.dir.join("lab.env")).expect("lab.env");
        let id = env
            .lines()
            .find_map(|l| l.strip_prefix("LAB_ID="))
            .expect("LAB_ID");
        let j = host.strip_prefix("win").expect("a Windows host");
        run(
            Command::new("ip").args([
                "netns",
                "exec",
                &format!("kwl{id}w{j}p"),
                "ping",
                "-n",
                "-c",
                "1",
                "-W",
                "2",
                ip,
            ]),
            Duration::from_secs(10),
        )
        .status
        .success()
    }
    /// The simulated Windows host's state file.
    pub fn win_state(&self, host: &str) -> PathBuf {
        self.dir.join("hosts").join(host).join("state.json")
    }
    /// A simulated Windows host's state file, parsed.
    pub fn win_state_json(&self, host: &str) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(self.win_state(host)).expect("state file"))
            .expect("state JSON")
    }
    /// A download the lab serves to its simulated Windows hosts (a file
    /// in DIR/dl listed in DIR/dl/SHA256SUMS, e.g.
    /// "containerd-1.7.20-windows-amd64.tar.gz",
    /// "cni-plugins-windows-amd64-v1.6.2.tgz"): its URL and SHA-256.
    pub fn download(&self, name: &str) -> (String, String) {
        let sums = std::fs::read_to_string(self.dir.join("dl").join("SHA256SUMS"))
            .expect("DIR/dl/SHA256SUMS (a lab with Windows hosts)");
        let sha = sums
            .lines()
            .find_map(|l| {
                let (sha, file) = l.split_once("  ")?;
                (file == name).then(|| sha.to_string())
            })
            .unwrap_or_else(|| panic!("{name} is not in DIR/dl/SHA256SUMS:\n{sums}"));
        (format!("https://dl.lab.invalid/{name}"), sha)
    }
    /// SHA-256 of the simulated Windows host's HTTPS certificate.
    pub fn cert_sha256(&self, host: &str) -> String {
        std::fs::read_to_string(self.dir.join("hosts").join(host).join("cert.sha256"))
            .expect("cert.sha256")
            .trim()
            .to_string()
    }
    pub fn winrm_password(&self) -> String {
        std::fs::read_to_string(self.dir.join("winrm-password"))
            .expect("winrm-password")
            .trim()
            .to_string()
    }
    /// Move Linux host `host` to `addr` on the lab's /24 (`lab.sh
    /// readdress`): the old address is gone, its sshd listens on the new
    /// one. The inventory is not changed.
    pub fn readdress(&mut self, host: &str, addr: &str) {
        check(
            &lab_sh(&["readdress", &self.dir_s(), host, addr]),
            "readdress",
        );
        let h = self
            .hosts
            .iter_mut()
            .find(|h| h.name == host)
            .unwrap_or_else(|| panic!("no lab host {host}"));
        h.ip = addr.parse().expect("address");
    }
    /// The lab's /24 as its first three octets ("198.18.7").
    pub fn net3(&self) -> String {
        let ip = self.hosts[0].ip.octets();
        format!("{}.{}.{}", ip[0], ip[1], ip[2])
    }
    pub fn rekey(&self, host: &str) {
        check(&lab_sh(&["rekey", &self.dir_s(), host]), "rekey");
    }
    pub fn stop_sshd(&self, host: &str) {
        check(&lab_sh(&["stop-sshd", &self.dir_s(), host]), "stop-sshd");
    }
    pub fn start_sshd(&self, host: &str) {
        check(&lab_sh(&["start-sshd", &self.dir_s(), host]), "start-sshd");
    }
    /// A login user besides root on `host` (uid 4242, only in that host's
    /// namespace) with real sudo: `nopasswd` for /bin/sh, or `password`.
    pub fn user(&self, host: &str, user: &str, sudo: &str) {
        check(&lab_sh(&["user", &self.dir_s(), host, user, sudo]), "user");
    }
}

// ---- pods as the nodes' kubelets would start them (lab.sh kpod, issue 24)
impl Lab {
    /// A pod `ns`/`name` on `host` as its kubelet would start it (dnsPolicy
    /// ClusterFirst): on a simulated Windows host winsim decides its IP and
    /// DNS from what kwinctl wrote (winsim/pods.py), on a Linux host the
    /// lab's stand-in CNI does. The decision, with the pod's `netns` and
    /// `address` when it has one (`lab.sh kpod`).
    pub fn kpod(&self, host: &str, ns: &str, name: &str) -> serde_json::Value {
        let o = lab_sh(&["kpod", &self.dir_s(), host, ns, name]);
        check(&o, "kpod");
        serde_json::from_slice(&o.stdout).expect("kpod JSON")
    }
    /// Delete a pod made by [`Lab::kpod`].
    pub fn kpod_del(&self, host: &str, ns: &str, name: &str) {
        check(
            &lab_sh(&["kpod-del", &self.dir_s(), host, ns, name]),
            "kpod-del",
        );
    }
    /// Whether a TCP connection from `pod` (a [`Lab::kpod`] decision) to
    /// `ip`:`port` opens within 5 s (every pod listens on 8080).
    pub fn pod_connects(&self, pod: &serde_json::Value, ip: &str, port: u16) -> bool {
        let netns = pod["netns"]
            .as_str()
            .unwrap_or_else(|| panic!("the pod has no network namespace: {pod}"));
        let o = run(
            Command::new("ip").args([
                "netns",
                "exec",
                netns,
                "timeout",
                "5",
                "bash",
                "-c",
                &format!("exec 3<>/dev/tcp/{ip}/{port}"),
            ]),
            Duration::from_secs(20),
        );
        o.status.success()
    }
    /// lab/kubectl-standin as `host`'s kubectl, modelling CoreDNS at
    /// `dns_ip` for `domain` (`lab.sh kubectl`).
    pub fn install_kubectl(&self, host: &str, dns_ip: &str, domain: &str) {
        self.install_kubectl_ready_after(host, dns_ip, domain, 0);
    }
    /// The stand-in, whose Windows nodes turn Ready `secs` seconds after
    /// their kubelet's service started (`lab.sh kubectl … --ready-after`).
    pub fn install_kubectl_ready_after(&self, host: &str, dns_ip: &str, domain: &str, secs: u32) {
        let secs = secs.to_string();
        check(
            &lab_sh(&[
                "kubectl",
                &self.dir_s(),
                host,
                "--dns-ip",
                dns_ip,
                "--domain",
                domain,
                "--ready-after",
                &secs,
            ]),
            "kubectl",
        );
    }
    /// The stand-in, whose API server reports release `server`
    /// (`lab.sh kubectl … --server-version`).
    pub fn install_kubectl_server(&self, host: &str, dns_ip: &str, domain: &str, server: &str) {
        self.install_kubectl_server_ready_after(host, dns_ip, domain, server, 0);
    }
    /// Both: API server release `server`, Windows nodes Ready `secs`
    /// seconds after their kubelet's service started.
    pub fn install_kubectl_server_ready_after(
        &self,
        host: &str,
        dns_ip: &str,
        domain: &str,
        server: &str,
        secs: u32,
    ) {
        check(
            &lab_sh(&[
                "kubectl",
                &self.dir_s(),
                host,
                "--dns-ip",
                dns_ip,
                "--domain",
                domain,
                "--server-version",
                server,
                "--ready-after",
                &secs.to_string(),
            ]),
            "kubectl",
        );
    }
    /// Each host's pod CIDR as kwinctl's state file records it.
    pub fn pod_cidr(&self, host: &str) -> ipnet::Ipv4Net {
        let st: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(self.dir.join("inventory.kwinctl-state.json"))
                .expect("kwinctl's state file (after `up`)"),
        )
        .expect("state JSON");
        st["pod_cidrs"][host]
            .as_str()
            .unwrap_or_else(|| panic!("no pod CIDR for {host} in {st}"))
            .parse()
            .expect("a CIDR")
    }
}

// ---- hosts behind other hosts (bastion tests) and extra sshds
impl Lab {
    /// A host reachable only through `via` (a lab host or another hidden
    /// host): `kind` is "linux" (its own sshd, key in the lab's known_hosts)
    /// or "windows" (winsim). Torn down with the lab.
    pub fn hidden(&self, name: &str, via: &str, kind: &str) -> LabHost {
        check(
            &lab_sh(&["hidden", &self.dir_s(), name, via, kind]),
            "hidden",
        );
        let tsv = std::fs::read_to_string(self.dir.join("hidden.tsv")).expect("hidden.tsv");
        let f: Vec<&str> = tsv
            .lines()
            .find(|l| l.split('\t').next() == Some(name))
            .expect("hidden host listed")
            .split('\t')
            .collect();
        LabHost {
            name: f[0].to_string(),
            ip: f[1].parse().expect("ip"),
            netns: f[2].to_string(),
        }
    }
    /// One more sshd in `host` on `port` with its own host key, certified
    /// by `ca` when given; returns its folder (host key, sshd.log).
    pub fn sshd_port(&self, host: &str, port: u16, ca: Option<&Path>) -> PathBuf {
        let port_s = port.to_string();
        let mut args = vec!["sshd-port".to_string(), self.dir_s(), host.into(), port_s];
        if let Some(ca) = ca {
            args.push(ca.to_string_lossy().into_owned());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        check(&lab_sh(&args), "sshd-port");
        self.dir
            .join("hosts")
            .join(host)
            .join(format!("sshd-{port}"))
    }
    /// A host's sshd log (lab and hidden hosts).
    pub fn sshd_log(&self, host: &str) -> String {
        std::fs::read_to_string(self.dir.join("hosts").join(host).join("sshd.log"))
            .unwrap_or_default()
    }
}

// ---- simulated Windows hosts over SSH (issue 30)
impl Lab {
    /// Make simulated Windows host `host` reachable over OpenSSH (`lab.sh
    /// win-ssh`): its own sshd whose sessions run the command as Windows'
    /// OpenSSH server with DefaultShell `shell` ("cmd", Windows' default,
    /// or "powershell") would (winsim/sshsession.py); its inventory entry
    /// switches from `winrm:` to `ssh:`.
    pub fn win_ssh(&self, host: &str, shell: &str) {
        check(&lab_sh(&["win-ssh", &self.dir_s(), host, shell]), "win-ssh");
    }
    /// What the host's SSH sessions saw, one JSON object per session: the
    /// command sshd got, the command lines built from it, the outcome.
    pub fn win_ssh_sessions(&self, host: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.join("hosts").join(host).join("ssh-session.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

/// How a systemd host's network comes up late on its next boot.
#[derive(Debug, Clone, Copy)]
pub enum Late {
    Address(u32),
    Subnet(u32),
}

/// Undoes [`Lab::blackhole`], also when the test fails.
pub struct Blackhole {
    ip: String,
    bridge: String,
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["neigh", "del", &self.ip, "dev", &self.bridge])
            .status();
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let o = lab_sh(&["down", &self.dir_s()]);
        if !o.status.success() {
            eprintln!("lab.sh down failed: {}", String::from_utf8_lossy(&o.stderr));
        }
        // KWINCTL_KEEP_LAB=1 keeps the folder (logs, run records) to look at.
        if std::env::var_os("KWINCTL_KEEP_LAB").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("lab folder kept: {}", self.dir.display());
        }
    }
}
