//! The examples every command's `--help` shows, and the man page that
//! carries them with the options, exit status, environment and files.

use crate::error::EXIT_CODES;

/// Each command's examples (its `--help`, and the man page's EXAMPLES).
pub const EX_INIT: &str = "Examples:
  kwinctl init --control-plane 10.0.0.10 --linux 10.0.0.20 --windows 10.0.0.30 10.0.0.31 -o cluster.yaml
  kwinctl init --control-plane 10.0.0.10 --windows 10.0.0.30 --kubernetes-version 1.34.2 > cluster.yaml
  kwinctl init -o cluster.yaml          (on a terminal: asks for the addresses)";
pub const EX_CHECK: &str = "Examples:
  kwinctl check -i cluster.yaml
  kwinctl check -i cluster.yaml --strict     (also fail on an unset password variable)
  kwinctl check -i cluster.yaml --output json | jq '.hosts[].pod_cidr'";
pub const EX_RENDER: &str = "Examples:
  kwinctl render -i cluster.yaml --host win1
  kwinctl render -i cluster.yaml --limit linux";
pub const EX_PLAN: &str = "Examples:
  kwinctl plan -i cluster.yaml
  kwinctl plan -i cluster.yaml --limit 'win*'
  kwinctl plan -i cluster.yaml --reset       (what `reset` would remove)";
pub const EX_UP: &str = "Examples:
  kwinctl up -i cluster.yaml --accept-new-host-keys     (first run: trust the hosts' SSH keys)
  kwinctl up -i cluster.yaml --only-failed
  kwinctl up -i cluster.yaml --limit win3 --with-peer-routes --parallel 1";
pub const EX_VERIFY: &str = "Examples:
  kwinctl verify -i cluster.yaml
  kwinctl verify -i cluster.yaml --reach 4 --output json
  kwinctl verify -i cluster.yaml --pods      (test pods: IP, pod to pod, DNS)";
pub const EX_RESET: &str = "Examples:
  kwinctl reset -i cluster.yaml --limit win2
  kwinctl reset -i cluster.yaml --yes        (no terminal: no question)";
pub const EX_IMPORT: &str = "Examples:
  kwinctl import ansible hosts.ini -o cluster.yaml
  ansible-inventory -i hosts.yml --list > inv.json && kwinctl import ansible inv.json -o cluster.yaml";
pub const EX_GRAPH: &str = "Examples:
  kwinctl graph -i cluster.yaml > cluster.mmd
  kwinctl graph -i cluster.yaml --format dot | dot -Tsvg -o cluster.svg";
pub const EX_MAN: &str = "Examples:
  kwinctl man | man -l -
  kwinctl man --dir /usr/local/share/man/man1";

/// The man page: clap's sections (name, synopsis, description, options,
/// commands), then EXAMPLES, EXIT STATUS, ENVIRONMENT and FILES, then the
/// version.
pub fn man_page(cli: clap::Command, out: &mut Vec<u8>) -> std::io::Result<()> {
    use roff::{Roff, bold, roman};
    let man = clap_mangen::Man::new(cli.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    man.render_subcommands_section(out)?;
    let mut r = Roff::new();
    // each command's options, so that one page says everything
    r.control("SH", ["COMMAND OPTIONS"]);
    let mut subs: Vec<(String, &clap::Command)> = Vec::new();
    for c in cli.get_subcommands() {
        if c.has_subcommands() {
            subs.extend(
                c.get_subcommands()
                    .map(|s| (format!("{} {}", c.get_name(), s.get_name()), s)),
            );
        } else {
            subs.push((c.get_name().to_string(), c));
        }
    }
    for (name, c) in subs {
        let title = format!("kwinctl {name}");
        r.control("SS", [title.as_str()]);
        if let Some(about) = c.get_about() {
            r.text([roman(about.to_string())]);
        }
        for a in c.get_arguments().filter(|a| !a.is_hide_set()) {
            let value = a
                .get_value_names()
                .map(|v| format!(" <{}>", v.join(" ")))
                .unwrap_or_default();
            let takes = a.get_num_args().is_none_or(|n| n.takes_values());
            let value = if takes && a.get_long().is_some() {
                value
            } else {
                String::new()
            };
            let flags = match (a.get_short(), a.get_long()) {
                (Some(s), Some(l)) => format!("-{s}, --{l}{value}"),
                (None, Some(l)) => format!("--{l}{value}"),
                (Some(s), None) => format!("-{s}{value}"),
                (None, None) => format!("<{}>", a.get_id()),
            };
            r.control("TP", [] as [&str; 0]);
            r.text([bold(flags)]);
            let mut help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            let defaults: Vec<String> = a
                .get_default_values()
                .iter()
                .map(|d| d.to_string_lossy().into_owned())
                .collect();
            if !defaults.is_empty() {
                help.push_str(&format!(" [default: {}]", defaults.join(", ")));
            }
            r.text([roman(help)]);
        }
    }
    r.control("SH", ["EXAMPLES"]);
    for ex in [
        EX_INIT,
        EX_CHECK,
        EX_PLAN,
        EX_UP,
        EX_VERIFY,
        EX_RESET,
        EX_RENDER,
        EX_IMPORT,
        EX_GRAPH,
        EX_MAN,
        crate::checksums::cli::EX_CHECKSUMS,
    ] {
        for line in ex.lines().skip(1) {
            r.control("TP", [] as [&str; 0]);
            r.text([bold(line.trim())]);
        }
    }
    r.control("SH", ["EXIT STATUS"]);
    for part in EXIT_CODES
        .trim_start_matches("Exit codes: ")
        .trim_end_matches('.')
        .split("; ")
    {
        r.control("TP", [] as [&str; 0]);
        r.text([roman(part)]);
    }
    r.control("SH", ["ENVIRONMENT"]);
    for (var, what) in [
        (
            "KWINCTL_SSH_CONFIG",
            "the OpenSSH client config to read, as --ssh-config (none: no config)",
        ),
        (
            "KWINCTL_SSH_PASSPHRASE",
            "the passphrase of an encrypted SSH identity file",
        ),
        (
            "KWINCTL_WINRM_PASSWORD (or the inventory's winrm.password_env)",
            "the WinRM password; check warns when it is unset, check --strict fails",
        ),
        ("NO_COLOR", "no colours on a terminal"),
    ] {
        r.control("TP", [] as [&str; 0]);
        r.text([bold(var)]);
        r.text([roman(what)]);
    }
    r.control("SH", ["FILES"]);
    for (file, what) in [
        (
            "STEM.yaml",
            "the inventory (-i); kwinctl init writes one to start from. kwinctl keeps its files \
             beside it, named after it without its extension (STEM):",
        ),
        (
            "STEM.kwinctl-state.json",
            "beside it: each host's pod CIDR and where it was; keep it with the inventory",
        ),
        (
            "STEM.kwinctl-runs/",
            "one record per run (what was done, on which host, and the protocol steps); graph \
             colours by the last verify's",
        ),
        (
            "STEM.kwinctl-last-up.json, STEM.kwinctl-last-reset.json",
            "what the last up (reset) left to do: --only-failed reads it",
        ),
        (
            "STEM.kwinctl.lock",
            "held while up or reset runs: one operator at a time per inventory",
        ),
        (
            "/etc/kwinctl/ (Linux), C:\\k\\kwinctl\\ (Windows)",
            "on the hosts: the node's pod CIDR record and its boot script",
        ),
    ] {
        r.control("TP", [] as [&str; 0]);
        r.text([bold(file)]);
        r.text([roman(what)]);
    }
    r.to_writer(out)?;
    man.render_version_section(out)
}
