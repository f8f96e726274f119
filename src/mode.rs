//! Which remote command a run is.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Probe and diff; change nothing.
    Plan,
    /// Converge, then verify.
    Up,
    /// Probe with reachability; change nothing.
    Verify,
    /// Undo what `up` created.
    Reset,
    /// `plan --reset`: probe and show what `reset` would remove; change
    /// nothing.
    PlanReset,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plan => "plan",
            Mode::Up => "up",
            Mode::Verify => "verify",
            Mode::Reset => "reset",
            Mode::PlanReset => "plan",
        }
    }
    /// Whether the run only shows what it would do.
    pub fn previews(self) -> bool {
        matches!(self, Mode::Plan | Mode::PlanReset)
    }
    /// Whether the run is about undoing (`reset`, or its preview).
    pub fn resets(self) -> bool {
        matches!(self, Mode::Reset | Mode::PlanReset)
    }
    /// Whether the run changes hosts (and so takes the operator lock).
    pub fn changes_hosts(self) -> bool {
        matches!(self, Mode::Up | Mode::Reset)
    }
    /// Whether the run checks hosts (reachability, the control plane's view).
    pub fn checks(self) -> bool {
        matches!(self, Mode::Up | Mode::Verify)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
