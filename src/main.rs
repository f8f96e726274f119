//! The command line: parse it, run the command, exit with its code (see
//! `kwinctl::error` for the codes).

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use kwinctl::cmd::man::*;
use kwinctl::cmd::{self, Common};
use kwinctl::error::Exit;
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
    /// Take the SHA-256 of the inventory's downloads from their publishers'
    /// checksum files again (after a version bump): shows the change,
    /// writes it with --write. path: entries are never touched.
    #[command(after_help = kwinctl::checksums::cli::EX_CHECKSUMS)]
    Checksums(kwinctl::checksums::cli::ChecksumsArgs),
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
    Some(kwinctl::stdout::Stdout.write_all(&out))
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
        kwinctl::stdout::Stdout,
        "{}",
        kwinctl::text::safe_json(&line.to_json())
    );
}

/// Whether stdout (descriptor 1) was closed when the process started
/// (`kwinctl … >&-`). Rust's runtime opens /dev/null on a closed standard
/// descriptor before `main`, after which a lost output cannot be told from
/// `>/dev/null`; so this is looked at before the runtime, by the function
/// below, which the loader runs as the C library's initialisers are run.
static STDOUT_CLOSED_AT_START: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

extern "C" fn note_a_closed_stdout() {
    // the link /proc/self/fd/1 exists exactly while descriptor 1 is open
    let proc = std::path::Path::new("/proc/self/fd");
    if proc.is_dir() && std::fs::symlink_metadata(proc.join("1")).is_err() {
        STDOUT_CLOSED_AT_START.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

// SAFETY: a pointer to a function taking and returning nothing, placed
// where the loader runs initialisers; the function touches only an atomic
// and /proc (no state of Rust's runtime, which is not set up yet).
#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_A_CLOSED_STDOUT: extern "C" fn() = note_a_closed_stdout;

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
        | Command::Checksums(_)
        | Command::Graph(_)
        | Command::Import { .. }
        | Command::Completions { .. }
        | Command::Schema { .. }
        | Command::Man { .. } => ("kwinctl", false),
    };
    if STDOUT_CLOSED_AT_START.load(std::sync::atomic::Ordering::SeqCst) {
        kwinctl::report::err_line(
            "error: stdout is closed: kwinctl writes its results there, and they would be lost; \
             nothing was done (give it a stdout: `>/dev/null` throws the results away)",
        );
        return ExitCode::from(u8::try_from(Exit::Internal.code()).unwrap_or(4));
    }
    if let Some(done) = generated(&cli.command) {
        return match done {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                let why = kwinctl::stdout::failed().unwrap_or_else(|| e.to_string());
                kwinctl::report::err_line(&format!("error: {why}"));
                ExitCode::from(u8::try_from(Exit::Internal.code()).unwrap_or(4))
            }
        };
    }
    let result = match cli.command {
        Command::Init(a) => cmd::init(&a),
        Command::Checksums(a) => kwinctl::checksums::cli::run(&a),
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
    let mut exit = match result {
        Ok(exit) => exit,
        Err(e) => {
            kwinctl::report::err_line(&format!("error: {e}"));
            if json {
                json_error(name, e.exit, &e.to_string());
            }
            e.exit
        }
    };
    // output that did not arrive: never exit 0 over it (a failure's own
    // exit code stays)
    if let Some(why) = kwinctl::stdout::failed()
        && exit == Exit::Ok
    {
        kwinctl::report::err_line(&format!(
            "error: cannot write the output to stdout: {why}; what was written is incomplete"
        ));
        exit = Exit::Internal;
    }
    ExitCode::from(u8::try_from(exit.code()).unwrap_or(1))
}
