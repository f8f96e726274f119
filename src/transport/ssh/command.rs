//! The remote commands an SSH session runs: the one that reads a script
//! from stdin, a short script inside the exec request, and a file
//! transfer's receiving script (`src/transfer/`).

use crate::transport::{Interpreter, Output, encoded_bootstrap};

/// The remote command that reads a script from stdin: POSIX sh (under
/// `sudo -n` when not root), or PowerShell (OpenSSH on Windows Server) with
/// the same stdin bootstrap as WinRM.
pub fn remote_command(interpreter: Interpreter, user: &str) -> String {
    match interpreter {
        Interpreter::Sh if user == "root" => "/bin/sh -s".into(),
        Interpreter::Sh => "sudo -n /bin/sh -s".into(),
        Interpreter::PowerShell => format!(
            "powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -EncodedCommand {}",
            encoded_bootstrap()
        ),
    }
}

/// The longest script sent inside the exec request itself. RFC 4253 6.1:
/// every implementation must process packets with a payload of 32768 bytes;
/// the command, its quoting and the request's fields stay below that.
pub const INLINE_MAX: usize = 30 * 1024;

/// The command that runs `script` with no stdin, when it may travel in the
/// exec request: as root, POSIX sh, a script of at most [`INLINE_MAX`]
/// bytes. OpenSSH's sshd opens a session channel with a window of 0 and
/// opens it only once the exec request is handled (serverloop.c
/// server_request_session: "window size 0" for the larval channel;
/// session.c session_set_fds then sets CHAN_SES_WINDOW_DEFAULT and a
/// WINDOW_ADJUST goes out), so a script on stdin waits a round trip for
/// the window; in the command it does not. Not under sudo: sudo logs each
/// command line (its I/O log and syslog's COMMAND=), which would fill the
/// host's auth log with whole scripts. Linux scripts hold no secret (the
/// only secrets, the Windows kubeconfig and passwords, never go to a Linux
/// host), so the command line, visible in the host's process list while
/// the script runs, shows nothing that the run record does not.
pub fn inline_command(command: &str, script: &str) -> Option<String> {
    (command == "/bin/sh -s" && script.len() <= INLINE_MAX && !script.contains('\0'))
        .then(|| format!("/bin/sh -c '{}'", script.replace('\'', r"'\''")))
}

/// sudo(8) with `-n` prints this and exits 1 when it would have to ask for
/// a password (sudo 1.9.13, Debian 12: seen by the lab test
/// `a_sudo_that_needs_a_password_is_named_with_the_fix`, real sudo on a lab
/// host; sudo's `-n`: "If a password is required for the command to run,
/// sudo will display an error message and exit").
pub fn sudo_wants_password(command: &str, out: &Output) -> bool {
    command.starts_with("sudo -n ")
        && out.exit == Some(1)
        && out.stdout.trim().is_empty()
        && (out.stderr.contains("sudo: a password is required")
            || out.stderr.contains("sudo: a terminal is required"))
}

/// The command that runs a transfer's `script` with stdin left to it:
/// PowerShell's `-EncodedCommand` on Windows, `sh -c` (under `sudo -n`
/// when not root) elsewhere.
pub fn stream_command(command: &str, script: &str) -> String {
    if command.starts_with("powershell.exe ") {
        return crate::transport::powershell_command_line(script);
    }
    let quoted = format!("'{}'", script.replace('\'', r"'\''"));
    match command.strip_suffix("/bin/sh -s") {
        Some(prefix) => format!("{prefix}/bin/sh -c {quoted}"),
        None => format!("/bin/sh -c {quoted}"),
    }
}
