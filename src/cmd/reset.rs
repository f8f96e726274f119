//! `kwinctl reset`: asks first. On a terminal it shows what it would remove
//! (`plan --reset`) and asks; without one (a script, CI) it requires
//! `--yes`, as `terraform destroy` and `k0sctl reset` do.

use std::io::{BufRead, IsTerminal, Write};

use super::Common;
use super::remote::run;
use crate::error::{CliError, Exit};
use crate::mode::Mode;
use crate::report::{Format, err_line};

pub fn reset(c: &Common, yes: bool) -> Result<Exit, CliError> {
    if !yes {
        let asks = c.output == Format::Text
            && std::io::stdin().is_terminal()
            && std::io::stderr().is_terminal();
        if !asks {
            return Err(CliError::bad(
                "reset removes what `up` created (routes, kwinctl's files and services, Windows \
                 networks) from the hosts it selects, and nobody is at a terminal to confirm: \
                 pass --yes (see what it would remove first with `kwinctl plan --reset`)",
            ));
        }
        let (exit, pending) = run(c, Mode::PlanReset)?;
        if exit != Exit::Ok {
            err_line(
                "reset: not all hosts could be asked what they hold (above): nothing was changed",
            );
            return Ok(exit);
        }
        if pending == 0 {
            err_line("reset: nothing to remove");
            return Ok(Exit::Ok);
        }
        if !confirmed(pending) {
            err_line("reset cancelled: nothing was changed");
            return Ok(Exit::HostFailed);
        }
    }
    super::remote(c, Mode::Reset)
}

/// Asks on stderr, reads the answer from stdin: `yes` or `y` confirms.
fn confirmed(pending: usize) -> bool {
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "Remove all of the above from {pending} host{}? Type yes to continue: ",
        if pending == 1 { "" } else { "s" }
    );
    let _ = err.flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "yes" | "y")
}
