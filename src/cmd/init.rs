//! `kwinctl init`: a commented inventory for the profile people run today
//! (l2bridge: containerd and an HNS L2Bridge network per Windows node, the
//! newest Kubernetes release kwinctl's tables know, Windows Server 2022),
//! from flags or, on a terminal, from questions. What only the operator
//! knows is written as `FILL-IN`: `check` names each one left. The
//! downloads' SHA-256 come from their publishers' checksum files
//! (`crate::checksums`), unless `--offline`.

use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use clap::Args;

use crate::checksums::cli::SourceArgs;
use crate::error::{CliError, Exit};
use crate::inventory::{KubeVersion, Minor, PLACEHOLDER, WindowsProfile};
use crate::os::windows::k8s;

#[derive(Args, Clone, Debug, Default)]
pub struct InitArgs {
    /// The Linux control plane's address (the API server is
    /// https://ADDR:6443).
    #[arg(long, value_name = "ADDR")]
    pub control_plane: Option<Ipv4Addr>,
    /// Linux workers' addresses (repeat the flag, or give several).
    #[arg(long, value_name = "ADDR", num_args = 1..)]
    pub linux: Vec<Ipv4Addr>,
    /// Windows Server workers' addresses (repeat the flag, or give several).
    #[arg(long, value_name = "ADDR", num_args = 1..)]
    pub windows: Vec<Ipv4Addr>,
    /// The Kubernetes release (1.24 or later: the l2bridge profile).
    /// Default: the newest release kwinctl's tables know.
    #[arg(long, value_name = "X.Y.Z")]
    pub kubernetes_version: Option<String>,
    /// How kwinctl reaches the Windows hosts: WinRM over HTTPS with NTLM
    /// and a password, WinRM over HTTPS with Kerberos (domain hosts; a
    /// ticket from `kinit`), or OpenSSH (Windows Server 2019 and later).
    #[arg(long, value_enum, default_value_t = Access::Ntlm, value_name = "HOW")]
    pub windows_access: Access,
    /// The cluster's name.
    #[arg(long, default_value = "cluster", value_name = "NAME")]
    pub name: String,
    /// Write the inventory here (never over an existing file) instead of
    /// stdout.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Write the downloads' URLs on this mirror, laid out as BASE/HOST/PATH
    /// (https://dl.k8s.io/v1.34.2/… becomes BASE/dl.k8s.io/v1.34.2/…,
    /// what `wget -x` saves).
    #[arg(long, value_name = "BASE")]
    pub mirror: Option<String>,
    /// Fetch nothing: leave each download's sha256 as FILL-IN (without it,
    /// init takes them from the checksum files the publishers put beside
    /// the downloads, over HTTPS from this machine).
    #[arg(long)]
    pub offline: bool,
    #[command(flatten)]
    pub source: SourceArgs,
}

/// The release `init` writes by default (`k8s::newest_release`).
pub fn default_release() -> String {
    k8s::newest_release()
}

/// What the operator answered or gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answers {
    pub name: String,
    pub control_plane: Ipv4Addr,
    pub linux: Vec<Ipv4Addr>,
    pub windows: Vec<Ipv4Addr>,
    pub kubernetes: KubeVersion,
    pub access: Access,
    /// The mirror the downloads come from (`--mirror`), its base URL.
    pub mirror: Option<String>,
}

/// How kwinctl reaches the Windows hosts (docs/windows-kerberos.md,
/// docs/windows-ssh.md).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// WinRM over HTTPS, NTLM with a password.
    #[default]
    Ntlm,
    /// WinRM over HTTPS, Kerberos with the operator's ticket.
    Kerberos,
    /// OpenSSH with a key.
    Ssh,
}

impl Access {
    fn parse(s: &str) -> Result<Access, String> {
        <Access as clap::ValueEnum>::from_str(s, true)
            .map_err(|_| format!("{s:?} is not one of ntlm, kerberos, ssh"))
    }

    /// The `defaults:` lines for the Windows hosts.
    fn defaults(self) -> String {
        let p = PLACEHOLDER;
        match self {
            Access::Ntlm => "  # Windows hosts: WinRM over HTTPS (5986) with NTLM. The password is read
  # from this environment variable (export it before running kwinctl);
  # each host pins its listener's certificate (cert_sha256, below).
  winrm: { user: Administrator, password_env: KWINCTL_WINRM_PASSWORD, port: 5986, tls: true, auth: ntlm }
"
            .into(),
            Access::Kerberos => format!(
                "  # Windows hosts: WinRM over HTTPS (5986) with Kerberos, as the principal
  # below (user@REALM): run `kinit` for it before kwinctl, or name a keytab
  # (keytab: FILE). No password. Each host names its service principal
  # and pins its listener's certificate (below). docs/windows-kerberos.md.
  winrm: {{ auth: kerberos, user: {p}, port: 5986, tls: true }}
"
            ),
            Access::Ssh => "  # Windows hosts: OpenSSH (Windows Server 2019 and later) as an
  # administrator with a key, set on each Windows host's own entry (below).
  # docs/windows-ssh.md.
"
            .into(),
        }
    }

    /// A Windows host's own connection lines.
    fn host(self) -> String {
        let p = PLACEHOLDER;
        match self {
            Access::Ntlm => format!(
                "    # SHA-256 of this host's WinRM HTTPS certificate\n    winrm: {{ cert_sha256: {p} }}\n"
            ),
            Access::Kerberos => format!(
                "    # its DNS name (the service principal), and the SHA-256 of its WinRM\n    \
                 # HTTPS certificate\n    winrm: {{ spn: HTTP/{p}, cert_sha256: {p} }}\n"
            ),
            Access::Ssh => "    ssh: { user: Administrator }\n".into(),
        }
    }
}

fn release(s: &str) -> Result<KubeVersion, String> {
    let v = KubeVersion::parse(s)
        .filter(|v| v.patch.is_some())
        .ok_or_else(|| {
            format!(
                "{s:?} is not a Kubernetes release: give X.Y.Z, e.g. {}",
                default_release()
            )
        })?;
    let (lo, hi) = k8s::profile_range(WindowsProfile::L2Bridge);
    if v.minor < lo || hi.is_some_and(|h| v.minor > h) {
        return Err(format!(
            "kwinctl init writes the l2bridge profile, which runs Kubernetes {lo} to {}: {s} is outside it",
            hi.map(|h| h.to_string()).unwrap_or_else(|| "now".into())
        ));
    }
    Ok(v)
}

fn addresses(line: &str) -> Result<Vec<Ipv4Addr>, String> {
    line.split([' ', ','])
        .filter(|w| !w.is_empty())
        .map(|w| {
            w.parse()
                .map_err(|_| format!("{w:?} is not an IPv4 address"))
        })
        .collect()
}

/// Ask on `out`, read from `input`; an empty answer takes the default in
/// brackets. Bounded: a wrong answer is asked again, three times at most.
pub fn ask(input: &mut dyn BufRead, out: &mut dyn Write, name: &str) -> Result<Answers, String> {
    fn q<T>(
        input: &mut dyn BufRead,
        out: &mut dyn Write,
        prompt: &str,
        default: &str,
        parse: &dyn Fn(&str) -> Result<T, String>,
    ) -> Result<T, String> {
        for _ in 0..3 {
            let _ = write!(out, "{prompt}");
            if !default.is_empty() {
                let _ = write!(out, " [{default}]");
            }
            let _ = write!(out, ": ");
            let _ = out.flush();
            let mut line = String::new();
            if input.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err("no answer (end of input)".into());
            }
            let line = line.trim();
            let line = if line.is_empty() { default } else { line };
            match parse(line) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let _ = writeln!(out, "  {e}");
                }
            }
        }
        Err(format!("no valid answer to {prompt:?}"))
    }
    let control_plane = q(
        input,
        out,
        "Control plane address (a Linux host)",
        "",
        &|s| {
            s.parse::<Ipv4Addr>()
                .map_err(|_| format!("{s:?} is not an IPv4 address"))
        },
    )?;
    let linux = q(
        input,
        out,
        "Linux worker addresses (space-separated; none: empty)",
        "",
        &addresses,
    )?;
    let windows = q(
        input,
        out,
        "Windows Server 2022 worker addresses (space-separated)",
        "",
        &|s| {
            let a = addresses(s)?;
            if a.is_empty() {
                Err("give at least one: kwinctl is for clusters with Windows workers".into())
            } else {
                Ok(a)
            }
        },
    )?;
    let kubernetes = q(
        input,
        out,
        "Kubernetes release",
        &default_release(),
        &release,
    )?;
    let access = q(
        input,
        out,
        "How kwinctl reaches the Windows hosts (ntlm, kerberos, ssh)",
        "ntlm",
        &Access::parse,
    )?;
    Ok(Answers {
        name: name.to_string(),
        control_plane,
        linux,
        windows,
        kubernetes,
        access,
        mirror: None,
    })
}

fn answers_of(a: &InitArgs) -> Result<Option<Answers>, String> {
    let Some(control_plane) = a.control_plane else {
        if !a.linux.is_empty() || !a.windows.is_empty() {
            return Err("give the control plane too: --control-plane ADDR".into());
        }
        return Ok(None);
    };
    let kubernetes = release(
        a.kubernetes_version
            .as_deref()
            .unwrap_or(&default_release()),
    )?;
    Ok(Some(Answers {
        name: a.name.clone(),
        control_plane,
        linux: a.linux.clone(),
        windows: a.windows.clone(),
        kubernetes,
        access: a.windows_access,
        mirror: None,
    }))
}

/// The inventory text.
pub fn inventory(a: &Answers) -> String {
    let v = a.kubernetes;
    let m = v.minor;
    let vs = format!("{}.{}", m, v.patch.unwrap_or(0));
    let containerd = k8s::newest_containerd(m).unwrap_or("FILL-IN");
    let runner = m >= Minor::new(1, 26);
    let p = PLACEHOLDER;
    let dl = |url: String| match &a.mirror {
        Some(base) => crate::checksums::on_mirror(base, &url),
        None => url,
    };
    let kube = |bin: &str| {
        dl(format!(
            "https://dl.k8s.io/v{vs}/bin/windows/amd64/{bin}.exe"
        ))
    };
    let mut o = String::new();
    let _ = write!(
        o,
        "\
# kwinctl inventory, written by `kwinctl init` (kwinctl {kw}).
# Profile: l2bridge (containerd, an HNS L2Bridge network per Windows node,
# kube-proxy in kernelspace), Kubernetes {vs}, Windows Server 2022 workers.
#
# Replace every {p} below: `kwinctl check -i THIS_FILE` names each one
# still left, with its line. Then: kwinctl plan, kwinctl up, kwinctl verify.
# What each host needs first, and where each value comes from:
# docs/first-cluster.md.
cluster:
  name: {name}
  # The pod network; each node gets one /node_prefix block of it. It must
  # match kube-controller-manager's --cluster-cidr (kubeadm: podSubnet).
  cluster_cidr: 10.244.0.0/16
  node_prefix: 24
  # kube-apiserver's --service-cluster-ip-range (kubeadm: serviceSubnet).
  service_cidr: 10.96.0.0/12
  api_server: https://{cp}:6443
  # The release of the Windows nodes' kubelet and kube-proxy. Prefer the
  # newest patch release of {m} (https://kubernetes.io/releases/): change
  # it here and in the binaries' URLs below, then take their new SHA-256
  # with `kwinctl checksums -i THIS_FILE --write`.
  kubernetes_version: \"{vs}\"
  # containerd for the Windows nodes: a release containerd supports for
  # Kubernetes {m} (containerd RELEASES.md, \"Kubernetes Support\").
  containerd_version: \"{containerd}\"
  # Each Windows node joins with its own certificate, as `kubeadm join` does
  # (a short-lived token from the control plane's kubeadm, docs/security.md).
  identity: bootstrap
defaults:
  # Linux hosts: SSH as root, or a user with passwordless sudo. Keys come
  # from ssh-agent and ~/.ssh/config as for `ssh`; or name one:
  #   identity: ~/.ssh/id_ed25519
  ssh: {{ user: root }}
{access}  windows:
    # What kwinctl downloads onto each Windows node where it is missing,
    # checked against its SHA-256. Each project publishes a checksum file
    # beside each file (the URL with .sha256 or .sha256sum appended):
    # `kwinctl init` and `kwinctl checksums` take the values from there and
    # name the file above each one.
    binaries:
      kubelet: {{ url: \"{kubelet}\", sha256: {p} }}
      kube-proxy: {{ url: \"{proxy}\", sha256: {p} }}
",
        kw = env!("CARGO_PKG_VERSION"),
        name = a.name,
        cp = a.control_plane,
        access = a.access.defaults(),
        kubelet = kube("kubelet"),
        proxy = kube("kube-proxy"),
    );
    if runner {
        let _ = writeln!(
            o,
            "      # From 1.26 kubelet and kube-proxy write no log files themselves: kwinctl\n      \
             # runs them behind kube-log-runner, which writes C:\\k\\logs\\<name>.log.\n      \
             kube-log-runner: {{ url: \"{}\", sha256: {p} }}",
            kube("kube-log-runner")
        );
    }
    let _ = write!(
        o,
        "      containerd: {{ url: \"{}\", sha256: {p} }}
      cni-plugins: {{ url: \"{}\", sha256: {p} }}
hosts:
  - name: cp1
    os: linux
    role: control-plane
    address: {}
",
        dl(format!("https://github.com/containerd/containerd/releases/download/v{containerd}/containerd-{containerd}-windows-amd64.tar.gz")),
        dl("https://github.com/containernetworking/plugins/releases/download/v1.6.2/cni-plugins-windows-amd64-v1.6.2.tgz".into()),
        a.control_plane
    );
    for (i, addr) in a.linux.iter().enumerate() {
        let _ = write!(
            o,
            "  - name: lin{}\n    os: linux\n    address: {addr}\n",
            i + 1
        );
    }
    for (i, addr) in a.windows.iter().enumerate() {
        let _ = write!(
            o,
            "  - name: win{}\n    os: windows\n    address: {addr}\n{}",
            i + 1,
            a.access.host()
        );
    }
    o
}

fn write_out(text: &str, out: Option<&Path>) -> Result<(), CliError> {
    match out {
        Some(path) => {
            let mut open = std::fs::OpenOptions::new();
            open.write(true).create_new(true);
            // never world- or group-writable, whatever the umask (an
            // inventory decides what runs on every host)
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o644);
            let mut f = open
                .open(path)
                .map_err(|e| {
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        CliError::bad(format!(
                            "{} exists: kwinctl init does not overwrite an inventory; remove it or name another file with -o",
                            path.display()
                        ))
                    } else {
                        CliError::bad(format!("cannot write {}: {e}", path.display()))
                    }
                })?;
            f.write_all(text.as_bytes()).map_err(|e| {
                CliError::internal(anyhow::anyhow!("cannot write {}: {e}", path.display()))
            })
        }
        // a lost write is exit 4 (crate::stdout)
        None => {
            let _ = crate::stdout::write_all(text.as_bytes());
            Ok(())
        }
    }
}

pub fn init(a: &InitArgs) -> Result<Exit, CliError> {
    let mirror = a
        .mirror
        .as_deref()
        .map(crate::checksums::mirror_base)
        .transpose()
        .map_err(CliError::bad)?;
    let mut answers = match answers_of(a).map_err(CliError::bad)? {
        Some(x) => x,
        None if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() => {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "kwinctl init: a few questions (Enter takes the [default]); the inventory goes to {}",
                a.out
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "stdout".into())
            );
            ask(&mut std::io::stdin().lock(), &mut err, &a.name).map_err(CliError::bad)?
        }
        None => {
            return Err(CliError::bad(
                "give the hosts: kwinctl init --control-plane ADDR [--linux ADDR..] --windows ADDR.. \
                 (or run it on a terminal to be asked)",
            ));
        }
    };
    if !crate::inventory::valid_name(&answers.name) {
        return Err(CliError::bad(format!(
            "--name {:?}: use letters, digits, '-', '_' and '.', starting with a letter or digit",
            answers.name
        )));
    }
    let mut all = vec![answers.control_plane];
    all.extend(&answers.linux);
    all.extend(&answers.windows);
    let mut seen = std::collections::BTreeSet::new();
    if let Some(d) = all.iter().find(|x| !seen.insert(**x)) {
        return Err(CliError::bad(format!("{d} is given twice")));
    }
    // what `check` would refuse in the inventory written
    if let Some(a) = all
        .iter()
        .find(|a| !crate::inventory::routable_node_address(a))
    {
        return Err(CliError::bad(format!(
            "{}: give the node's routable unicast IPv4 address",
            crate::inventory::not_a_node_address(a)
        )));
    }
    answers.mirror = mirror;
    let mut text = inventory(&answers);
    if !a.offline {
        text = crate::checksums::cli::fill(&text, &a.source.source())?.text;
    }
    write_out(&text, a.out.as_deref())?;
    let target = a
        .out
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "the inventory".into());
    let before = match answers.access {
        Access::Ntlm => "export KWINCTL_WINRM_PASSWORD",
        Access::Kerberos => "`kinit` the principal in winrm.user",
        Access::Ssh => "put your key in each Windows host's administrators_authorized_keys",
    };
    crate::report::err_line(&format!(
        "next: replace the {PLACEHOLDER} values in {target} (`kwinctl check -i FILE` lists them), \
         {before}, then `kwinctl check`, `kwinctl plan`, `kwinctl up`"
    ));
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_take_defaults_and_ask_again_on_a_wrong_answer() {
        let mut input: &[u8] =
            b"10.0.0.10\n10.0.0.20 10.0.0.21\nnot-an-ip\n10.0.0.30\n\nwinrs\nssh\n";
        let mut out = Vec::new();
        let a = ask(&mut input, &mut out, "c").unwrap();
        assert_eq!(a.control_plane.to_string(), "10.0.0.10");
        assert_eq!(a.linux.len(), 2);
        assert_eq!(a.windows, ["10.0.0.30".parse::<Ipv4Addr>().unwrap()]);
        assert_eq!(
            a.kubernetes,
            KubeVersion::parse(&default_release()).unwrap()
        );
        assert_eq!(a.access, Access::Ssh);
        let shown = String::from_utf8(out).unwrap();
        assert!(
            shown.contains("\"not-an-ip\" is not an IPv4 address"),
            "{shown}"
        );
        assert!(
            shown.contains("\"winrs\" is not one of ntlm, kerberos, ssh"),
            "{shown}"
        );
        // end of input is an error, not a loop
        let mut none: &[u8] = b"";
        assert!(ask(&mut none, &mut Vec::new(), "c").is_err());
    }

    #[test]
    fn releases_outside_the_profile_are_refused() {
        assert!(release("1.23.4").unwrap_err().contains("l2bridge"));
        assert!(
            release("1.36").is_err(),
            "a patch release is needed for the URLs"
        );
        assert!(release("1.30.4").is_ok());
        assert!(default_release().starts_with("1."));
    }
}
