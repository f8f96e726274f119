//! The command line: parse it, run the command, exit with its code (see
//! `kwinctl::error` for the codes).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use kwinctl::cmd::{self, Common};
use kwinctl::error::EXIT_CODES;
use kwinctl::mode::Mode;

#[derive(Parser)]
#[command(
    name = "kwinctl",
    version,
    about = "Bootstrap Kubernetes clusters whose workers are Windows Server and Linux hosts",
    long_about = "kwinctl reads an inventory, assigns each node a pod CIDR, and converges every host \
                  over SSH (or WinRM): routes to every other node's pod CIDR, IP forwarding, and on \
                  Windows the HNS network, switch and services. `up` converges, `verify` checks.",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Offline: validate the inventory and print the pod CIDR plan. Contacts nothing.
    Check(Common),
    /// Offline: print the script each host would get on a fresh machine.
    Render {
        #[command(flatten)]
        common: Common,
        /// Only this host.
        #[arg(long)]
        host: Option<String>,
    },
    /// Connect, gather facts and print each host's actions. Changes nothing.
    Plan(Common),
    /// Converge every host, then verify.
    Up(Common),
    /// Read-only health sweep; exit 1 if anything is off.
    Verify(Common),
    /// Undo what `up` created on the hosts.
    Reset(Common),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(c) => cmd::check(&c),
        Command::Render { common, host } => cmd::render(&common, host.as_deref()),
        Command::Plan(c) => cmd::remote(&c, Mode::Plan),
        Command::Up(c) => cmd::remote(&c, Mode::Up),
        Command::Verify(c) => cmd::remote(&c, Mode::Verify),
        Command::Reset(c) => cmd::remote(&c, Mode::Reset),
    };
    let exit = match result {
        Ok(exit) => exit,
        Err(e) => {
            kwinctl::report::err_line(&format!("error: {e}"));
            e.exit
        }
    };
    ExitCode::from(u8::try_from(exit.code()).unwrap_or(1))
}
