//! The command line: parse it, run the command, exit with its code (see
//! `kwinctl::error` for the codes).

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use kwinctl::cmd::{self, Common};
use kwinctl::error::{EXIT_CODES, Exit};

/// Each command's examples (its `--help`, and the man page's EXAMPLES).
const EX_INIT: &str = "Examples:
  kwinctl init --control-plane 10.0.0.10 --linux 10.0.0.20 --windows 10.0.0.30 10.0.0.31 -o cluster.yaml
  kwinctl init --control-plane 10.0.0.10 --windows 10.0.0.30 --kubernetes-version 1.34.2 > cluster.yaml
  kwinctl init -o cluster.yaml          (on a terminal: asks for the addresses)";
const EX_CHECK: &str = "Examples:
  kwinctl check -i cluster.yaml
  kwinctl check -i cluster.yaml --strict     (also fail on an unset password variable)
  kwinctl check -i cluster.yaml --output json | jq '.hosts[].pod_cidr'";
const EX_RENDER: &str = "Examples:
  kwinctl render -i cluster.yaml --host win1
  kwinctl render -i cluster.yaml --limit linux";
const EX_PLAN: &str = "Examples:
  kwinctl plan -i cluster.yaml
  kwinctl plan -i cluster.yaml --limit 'win*'
  kwinctl plan -i cluster.yaml --reset       (what `reset` would remove)";
const EX_UP: &str = "Examples:
  kwinctl up -i cluster.yaml --accept-new-host-keys     (first run: trust the hosts' SSH keys)
  kwinctl up -i cluster.yaml --only-failed
  kwinctl up -i cluster.yaml --limit win3 --with-peer-routes --parallel 1";
const EX_VERIFY: &str = "Examples:
  kwinctl verify -i cluster.yaml
  kwinctl verify -i cluster.yaml --reach 4 --output json
  kwinctl verify -i cluster.yaml --pods      (test pods: IP, pod to pod, DNS)";
const EX_RESET: &str = "Examples:
  kwinctl reset -i cluster.yaml --limit win2
  kwinctl reset -i cluster.yaml --yes        (no terminal: no question)";
const EX_IMPORT: &str = "Examples:
  kwinctl import ansible hosts.ini -o cluster.yaml
  ansible-inventory -i hosts.yml --list > inv.json && kwinctl import ansible inv.json -o cluster.yaml";
const EX_GRAPH: &str = "Examples:
  kwinctl graph -i cluster.yaml > cluster.mmd
  kwinctl graph -i cluster.yaml --format dot | dot -Tsvg -o cluster.svg";
const EX_MAN: &str = "Examples:
  kwinctl man | man -l -
  kwinctl man --dir /usr/local/share/man/man1";
use kwinctl::events::{Event, Line};
use kwinctl::mode::Mode;
use kwinctl::report::Format;

#[derive(Parser)]
#[command(
    name = "kwinctl",
    version = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("KWINCTL_GIT_COMMIT"), ")"),
    about = "Bootstrap Kubernetes clusters whose workers are Windows Server and Linux hosts",
    long_about = "kwinctl reads an inventory, assigns each node a pod CIDR, and converges every host \
                  over SSH (or WinRM): routes to every other node's pod CIDR, IP forwarding, and on \
                  Windows the HNS network, switch and services. `up` converges, `verify` checks.",
    after_help = concat!(
        "Start here: kwinctl init > cluster.yaml, fill in its FILL-IN values, then kwinctl check, \
         plan, up and verify with -i cluster.yaml (docs/first-cluster.md).\n\n",
        kwinctl::exit_codes!()
    )
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a commented inventory to start from (l2bridge, containerd, the
    /// newest Kubernetes release kwinctl knows, Windows Server 2022), from
    /// flags or by questions on a terminal.
    #[command(after_help = EX_INIT)]
    Init(cmd::init::InitArgs),
    /// Offline: validate the inventory and print the pod CIDR plan. Contacts nothing.
    #[command(after_help = EX_CHECK)]
    Check {
        #[command(flatten)]
        common: Common,
        /// Also fail (exit 2) on what only `plan`/`up` need: an unset WinRM
        /// password variable, an unreadable password or key file (without
        /// it they are warnings).
        #[arg(long)]
        strict: bool,
    },
    /// Offline: print the script each host would get on a fresh machine.
    #[command(after_help = EX_RENDER)]
    Render {
        #[command(flatten)]
        common: Common,
        /// Only this host.
        #[arg(long)]
        host: Option<String>,
    },
    /// Offline: draw the nodes (OS, address, pod CIDR) and the routes between
    /// them as Mermaid or Graphviz dot, coloured by the last `verify`.
    #[command(after_help = EX_GRAPH)]
    Graph(cmd::graph::GraphArgs),
    /// Connect, gather facts and print each host's actions. Changes nothing.
    #[command(after_help = EX_PLAN)]
    Plan {
        #[command(flatten)]
        common: Common,
        /// Show what `reset` would remove instead.
        #[arg(long)]
        reset: bool,
    },
    /// Converge every host, then verify.
    #[command(after_help = EX_UP)]
    Up(Common),
    /// Read-only health sweep; exit 1 if anything is off.
    #[command(after_help = EX_VERIFY)]
    Verify {
        #[command(flatten)]
        common: Common,
        /// Also start one test pod per selected node through the control
        /// plane's kubectl and check what it gets: an IP in its node's pod
        /// CIDR, TCP to pods on other nodes, the cluster DNS (then the pods
        /// are deleted). Needs kubectl on the control plane.
        #[arg(long)]
        pods: bool,
    },
    /// Undo what `up` created on the hosts. On a terminal it shows what it
    /// would remove and asks; otherwise it needs --yes.
    #[command(after_help = EX_RESET)]
    Reset {
        #[command(flatten)]
        common: Common,
        /// Do not ask (required without a terminal).
        #[arg(short = 'y', long)]
        yes: bool,
    },
    /// Break the cluster lock at once (a run that held it is gone): says
    /// whose it is; on a terminal it asks, otherwise it needs --yes. A lock
    /// whose run died also clears by itself when its lease runs out.
    Unlock {
        #[command(flatten)]
        common: Common,
        /// Do not ask (required without a terminal).
        #[arg(short = 'y', long)]
        yes: bool,
    },
    /// Write a kwinctl inventory from another tool's (Ansible: INI, YAML, or
    /// `ansible-inventory --list`).
    Import {
        #[command(subcommand)]
        from: ImportFrom,
    },
    /// Print a shell completion script, e.g. `kwinctl completions bash >
    /// /etc/bash_completion.d/kwinctl` (see docs/cli.md).
    Completions {
        /// The shell the script is for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a JSON Schema: of `--output json`'s lines, or of the
    /// inventory (also in the repository: schema/*.schema.json).
    Schema {
        /// Which schema.
        #[arg(value_enum)]
        what: SchemaKind,
    },
    /// Print the man page (kwinctl.1), or with --dir write one page per
    /// command there: `kwinctl man --dir /usr/local/share/man/man1`.
    #[command(after_help = EX_MAN)]
    Man {
        /// Write kwinctl.1 and kwinctl-COMMAND.1 into this folder.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum ImportFrom {
    /// An Ansible inventory: INI, YAML, or the JSON of `ansible-inventory
    /// --list`. Hosts, groups (children flattened) and connection variables
    /// are mapped, each with a comment naming its line; what cannot be
    /// mapped is refused (exit 2) with its position; passwords are never
    /// copied; the cluster: section is left for you to fill in.
    #[command(after_help = EX_IMPORT)]
    Ansible {
        /// The Ansible inventory file.
        inventory: std::path::PathBuf,
        /// Write here (never over an existing file) instead of stdout.
        #[arg(short = 'o', long = "out", value_name = "FILE")]
        out: Option<std::path::PathBuf>,
        /// Deprecated: `-o/--out FILE` (`--output` is the output format
        /// elsewhere).
        #[arg(
            long = "output",
            value_name = "FILE",
            hide = true,
            conflicts_with = "out"
        )]
        output_file: Option<std::path::PathBuf>,
        /// Look up host names (ansible_host, or the host's name when it is
        /// not an address) once, now, and write the address found (refused
        /// when a name has no or several IPv4 addresses).
        #[arg(long)]
        resolve: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum SchemaKind {
    /// One line of `--output json`.
    Events,
    /// The inventory file.
    Inventory,
}

/// `completions` and `man`: what they print is generated from the command
/// line's own definition, so it never lags behind it.
fn generated(command: &Command) -> Option<std::io::Result<()>> {
    use std::io::Write;
    let mut cli = Cli::command();
    // written whole at the end: clap_complete panics on a closed pipe
    let mut out = Vec::new();
    match command {
        Command::Completions { shell } => {
            clap_complete::generate(*shell, &mut cli, "kwinctl", &mut out);
        }
        Command::Man { dir: None } => {
            if let Err(e) = man_page(cli, &mut out) {
                return Some(Err(e));
            }
        }
        Command::Schema {
            what: SchemaKind::Events,
        } => out.extend_from_slice(kwinctl::events::schema().as_bytes()),
        Command::Schema {
            what: SchemaKind::Inventory,
        } => out.extend_from_slice(kwinctl::inventory::schema().as_bytes()),
        Command::Man { dir: Some(dir) } => {
            return Some(
                std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(cli, dir)),
            );
        }
        _ => return None,
    }
    Some(std::io::stdout().lock().write_all(&out))
}

/// The man page: clap's sections (name, synopsis, description, options,
/// commands), then EXAMPLES, EXIT STATUS, ENVIRONMENT and FILES, then the
/// version.
fn man_page(cli: clap::Command, out: &mut Vec<u8>) -> std::io::Result<()> {
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
        EX_INIT, EX_CHECK, EX_PLAN, EX_UP, EX_VERIFY, EX_RESET, EX_RENDER, EX_IMPORT, EX_GRAPH,
        EX_MAN,
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

/// Whether the command line asks for `--output json` (read before clap
/// understood it, for usage errors).
fn json_asked(args: impl Iterator<Item = String>) -> bool {
    let args: Vec<String> = args.collect();
    args.iter().any(|a| a == "--output=json")
        || args
            .windows(2)
            .any(|w| w[0] == "--output" && w[1] == "json")
}

/// The `error` event on stdout (see `kwinctl::events`).
fn json_error(command: &str, exit: Exit, error: &str) {
    use std::io::Write;
    let line = Line::new(Event::Error {
        command,
        exit: exit.code(),
        error: error.to_string(),
    });
    let _ = writeln!(
        std::io::stdout().lock(),
        "{}",
        kwinctl::text::safe_json(&line.to_json())
    );
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // a usage error is bad input: JSON too when JSON was asked for
            if e.use_stderr() && json_asked(std::env::args()) {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default();
                json_error(
                    "kwinctl",
                    Exit::BadInput,
                    first.strip_prefix("error: ").unwrap_or(first),
                );
            }
            e.exit()
        }
    };
    let (name, json) = match &cli.command {
        Command::Check { common: c, .. } => ("check", c.output == Format::Json),
        Command::Render { common, .. } => ("render", common.output == Format::Json),
        Command::Plan { common: c, .. } => (Mode::Plan.name(), c.output == Format::Json),
        Command::Up(c) => (Mode::Up.name(), c.output == Format::Json),
        Command::Verify { common: c, .. } => (Mode::Verify.name(), c.output == Format::Json),
        Command::Reset { common: c, .. } => (Mode::Reset.name(), c.output == Format::Json),
        Command::Unlock { common: c, .. } => ("unlock", c.output == Format::Json),
        // no JSON output: errors are text (every command is named, so a new
        // one must say whether it has JSON events)
        Command::Init(_)
        | Command::Graph(_)
        | Command::Import { .. }
        | Command::Completions { .. }
        | Command::Schema { .. }
        | Command::Man { .. } => ("kwinctl", false),
    };
    if let Some(done) = generated(&cli.command) {
        return match done {
            Ok(()) => ExitCode::SUCCESS,
            // a closed pipe (`kwinctl man | head`) is no failure
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                kwinctl::report::err_line(&format!("error: {e}"));
                ExitCode::from(1)
            }
        };
    }
    let result = match cli.command {
        Command::Init(a) => cmd::init(&a),
        Command::Graph(g) => cmd::graph(&g),
        Command::Check { common, strict } => cmd::check(&common, strict),
        Command::Render { common, host } => cmd::render(&common, host.as_deref()),
        Command::Plan {
            common,
            reset: false,
        } => cmd::remote(&common, Mode::Plan),
        Command::Plan {
            common,
            reset: true,
        } => cmd::remote(&common, Mode::PlanReset),
        Command::Up(c) => cmd::remote(&c, Mode::Up),
        Command::Verify { common, pods } => cmd::verify(&common, pods),
        Command::Reset { common, yes } => cmd::reset(&common, yes),
        Command::Unlock { common, yes } => cmd::unlock(&common, yes),
        Command::Import {
            from:
                ImportFrom::Ansible {
                    inventory,
                    out,
                    output_file,
                    resolve,
                },
        } => {
            if output_file.is_some() {
                kwinctl::report::err_line(
                    "warning: `kwinctl import --output FILE` is deprecated: use -o/--out FILE \
                     (--output names the output format in the other commands)",
                );
            }
            kwinctl::import::ansible(&inventory, out.or(output_file).as_deref(), resolve)
        }
        Command::Completions { .. } | Command::Man { .. } | Command::Schema { .. } => {
            unreachable!("generated above")
        }
    };
    let exit = match result {
        Ok(exit) => exit,
        Err(e) => {
            kwinctl::report::err_line(&format!("error: {e}"));
            if json {
                json_error(name, e.exit, &e.to_string());
            }
            e.exit
        }
    };
    ExitCode::from(u8::try_from(exit.code()).unwrap_or(1))
}
