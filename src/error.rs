//! How a command ends: an exit code and, when it failed as a whole, an error
//! (cargo's `CliError` shape). Every conversion is explicit: only bad input
//! exits 2.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | all good |
//! | 1 | a host failed, or `verify` found a problem, or the run lost its cluster lock |
//! | 2 | bad input (command line, inventory, state file): nothing contacted |
//! | 3 | another kwinctl run holds the inventory's lock: nothing contacted |
//! | 4 | kwinctl could not do its own work on this machine (write the state file, start its runtime) |
//! | 130 / 143 | interrupted by SIGINT (Ctrl-C) / SIGTERM |

use std::fmt;

use crate::alloc::AllocError;
use crate::inventory::InventoryError;
use crate::lock::LockError;
use crate::os::DesiredError;
use crate::state::StateError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    HostFailed,
    BadInput,
    Locked,
    Internal,
    /// By a signal, with its conventional exit code (128 + signal number).
    Signal(i32),
}

impl Exit {
    pub fn code(self) -> i32 {
        match self {
            Exit::Ok => 0,
            Exit::HostFailed => 1,
            Exit::BadInput => 2,
            Exit::Locked => 3,
            Exit::Internal => 4,
            Exit::Signal(c) => c,
        }
    }
}

/// The exit codes, for `--help`.
pub const EXIT_CODES: &str = crate::exit_codes!();

/// [`EXIT_CODES`] as a literal, for `concat!`.
#[macro_export]
macro_rules! exit_codes {
    () => {
        "Exit codes: 0 all good; 1 a host failed, verify found a problem, \
the run lost its cluster lock, or reset's question was declined; \
2 bad input (command line, inventory, state file), nothing contacted; \
3 another kwinctl run holds the lock, nothing contacted; \
4 kwinctl could not do its own work on this machine (state file, runtime); \
130 / 143 interrupted (SIGINT / SIGTERM)."
    };
}

/// A command that failed as a whole.
#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    pub error: anyhow::Error,
}

impl CliError {
    pub fn bad_input(e: impl Into<anyhow::Error>) -> CliError {
        CliError {
            exit: Exit::BadInput,
            error: e.into(),
        }
    }
    pub fn internal(e: impl Into<anyhow::Error>) -> CliError {
        CliError {
            exit: Exit::Internal,
            error: e.into(),
        }
    }
    /// Bad input described in words.
    pub fn bad(msg: impl fmt::Display) -> CliError {
        CliError::bad_input(anyhow::anyhow!("{msg}"))
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl From<InventoryError> for CliError {
    fn from(e: InventoryError) -> Self {
        CliError::bad_input(e)
    }
}

impl From<AllocError> for CliError {
    fn from(e: AllocError) -> Self {
        CliError::bad_input(e)
    }
}

impl From<DesiredError> for CliError {
    fn from(e: DesiredError) -> Self {
        CliError::bad_input(e)
    }
}

impl From<StateError> for CliError {
    fn from(e: StateError) -> Self {
        match e {
            StateError::Invalid { .. } | StateError::Read { .. } => CliError::bad_input(e),
            StateError::Write { .. } => CliError::internal(e),
        }
    }
}

impl From<LockError> for CliError {
    fn from(e: LockError) -> Self {
        match e {
            LockError::Held(_) => CliError {
                exit: Exit::Locked,
                error: e.into(),
            },
            LockError::Io(_) => CliError::internal(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bad_input_exits_2() {
        let w = CliError::from(StateError::Write {
            path: "/x".into(),
            msg: "disk full".into(),
        });
        assert_eq!(w.exit.code(), 4);
        let r = CliError::from(StateError::Invalid {
            path: "/x".into(),
            line: 1,
            column: 1,
            message: "eof".into(),
            hint: "fix it".into(),
        });
        assert_eq!(r.exit.code(), 2);
        assert_eq!(
            CliError::from(LockError::Held("held".into())).exit.code(),
            3
        );
        assert_eq!(CliError::from(LockError::Io("perm".into())).exit.code(), 4);
    }
}
