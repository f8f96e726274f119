//! kwinctl's stdout: every command's results (tables, scripts, JSON
//! events, pictures) are written through [`Stdout`], which remembers the
//! first write that failed — a full disk (`>/dev/full`), a reader that went
//! away (`| head`, EPIPE) — so the command exits 4 instead of 0 over output
//! that was lost (docs/cli.md, exit codes). A failed write does not stop a
//! run that is changing hosts: it ends as it would, then says so.

use std::io::Write;
use std::sync::Mutex;

static FAILED: Mutex<Option<String>> = Mutex::new(None);

/// The process's stdout, written and flushed whole at each call.
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut out = std::io::stdout().lock();
        match out.write_all(buf).and_then(|()| out.flush()) {
            Ok(()) => Ok(buf.len()),
            Err(e) => {
                note(&e);
                Err(e)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().lock().flush().inspect_err(note)
    }
}

fn note(e: &std::io::Error) {
    let mut f = FAILED.lock().unwrap_or_else(|p| p.into_inner());
    if f.is_none() {
        *f = Some(if e.kind() == std::io::ErrorKind::BrokenPipe {
            "its reader closed it before the output ended".to_string()
        } else {
            e.to_string()
        });
    }
}

/// Write `bytes` whole to stdout; Err when they did not all arrive.
pub fn write_all(bytes: &[u8]) -> std::io::Result<()> {
    Stdout.write_all(bytes)
}

/// Why some output did not reach stdout, if it did not.
pub fn failed() -> Option<String> {
    FAILED.lock().unwrap_or_else(|p| p.into_inner()).clone()
}
