//! `kwinctl unlock`: break the cluster lock at once, when its run is known
//! to be gone and waiting for its lease to run out is not wanted. It says
//! whose lock it is; on a terminal it asks, otherwise it needs `--yes`. It
//! breaks only the lock it showed (a lock taken meanwhile by another run is
//! left alone), and counts the cluster's generation up, so every run that
//! probed the cluster before probes it again (see docs/locks.md).

use std::io::{BufRead, IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use super::{Common, load_remote};
use crate::error::{CliError, Exit};
use crate::events::{Event, Line};
use crate::report::{Format, err_line};
use crate::text::{clip, safe_json};
use crate::transport::{self, ConfigSource, ConnectOptions, Interpreter, Trace};
use crate::wire::{Held, What, read_lock};

pub fn unlock(c: &Common, yes: bool) -> Result<Exit, CliError> {
    let l = load_remote(c)?;
    super::register_secrets(&l.inv);
    let Some(host) = l
        .inv
        .hosts
        .iter()
        .filter(|h| h.keeps_lock())
        .min_by_key(|h| h.address)
    else {
        return Err(CliError::bad(
            "no Linux control-plane host in the inventory: there is no cluster lock to break",
        ));
    };
    l.inv.check_credentials(&[host])?;
    transport::kerberos::prepare(&[host]).map_err(CliError::bad)?;
    let routes = transport::resolve(&[host], &ConfigSource::from_arg(c.ssh_config.as_deref()))
        .map_err(|e| CliError::bad(format!("ssh config: {e}")))?;
    let opts = Arc::new(ConnectOptions::new(
        Duration::from_secs(c.timeout),
        c.accept_new_host_keys,
        routes,
    ));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(1)
        .build()
        .map_err(|e| CliError::internal(anyhow::anyhow!("cannot start the runtime: {e}")))?;
    let renderer = crate::os::renderer();
    let limit = Duration::from_secs(c.timeout);
    let name = host.name.clone();
    let call = |s: &mut Box<dyn crate::transport::Session>, script: String| {
        let name = name.clone();
        rt.block_on(async move {
            match tokio::time::timeout(limit, s.run(&script)).await {
                Ok(Ok(o)) => Ok(o),
                Ok(Err(e)) => Err(format!("{name}: {e}")),
                Err(_) => Err(format!(
                    "{name}: no answer within --timeout {}s",
                    limit.as_secs()
                )),
            }
        })
    };
    let reached = rt.block_on(async {
        tokio::time::timeout(
            limit,
            transport::connect_traced(host, Interpreter::Sh, &opts, &Trace::new()),
        )
        .await
    });
    let mut s = match reached {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return unreached(c, &format!("{}: {e}", host.name)),
        Err(_) => {
            return unreached(
                c,
                &format!("{}: no answer within --timeout {}s", host.name, c.timeout),
            );
        }
    };
    let shown = match call(&mut s, crate::os::lock_break_script(&renderer, None)) {
        Ok(o) => read_lock(&o.stdout).what,
        Err(e) => return unreached(c, &e),
    };
    let held = match shown {
        What::Free => {
            err_line(&format!(
                "no run holds the cluster lock on {}: nothing to break",
                host.name
            ));
            event(c, &host.name, None, false);
            return Ok(Exit::Ok);
        }
        What::Held(h) => h,
        What::Failed(why) => return failed(c, &host.name, &why),
        _ => return unreached(c, &format!("{}: the lock script said nothing", host.name)),
    };
    let whose = describe(&held);
    err_line(&format!(
        "the cluster lock on {} is held by {whose}",
        host.name
    ));
    if !yes {
        let asks = c.output == Format::Text
            && std::io::stdin().is_terminal()
            && std::io::stderr().is_terminal();
        if !asks {
            return Err(CliError::bad(format!(
                "breaking the cluster lock on {} lets another run change the cluster while the run \
                 that holds it ({whose}) may still be changing it, and nobody is at a terminal to \
                 confirm: pass --yes once you know that run is gone",
                host.name
            )));
        }
        if !confirmed() {
            err_line("unlock cancelled: the lock is left as it is");
            return Ok(Exit::HostFailed);
        }
    }
    let after = match call(
        &mut s,
        crate::os::lock_break_script(&renderer, Some(&held.run)),
    ) {
        Ok(o) => read_lock(&o.stdout).what,
        Err(e) => return unreached(c, &e),
    };
    rt.block_on(s.close());
    match after {
        What::Broke => {
            err_line(&format!(
                "broke the cluster lock on {} of {whose}",
                host.name
            ));
            event(c, &host.name, Some(&held), true);
            Ok(Exit::Ok)
        }
        What::Free => {
            err_line(&format!(
                "the cluster lock on {} was released meanwhile: nothing to break",
                host.name
            ));
            event(c, &host.name, None, false);
            Ok(Exit::Ok)
        }
        What::Held(now) => Err(CliError {
            exit: Exit::Locked,
            error: anyhow::anyhow!(
                "another run took the cluster lock on {} meanwhile ({}): it was left alone; \
                 run `kwinctl unlock` again if that run is gone too",
                host.name,
                describe(&now)
            ),
        }),
        What::Failed(why) => failed(c, &host.name, &why),
        _ => unreached(c, &format!("{}: the lock script said nothing", host.name)),
    }
}

/// The lock script on `host` could not write (a full or read-only disk).
fn failed(c: &Common, host: &str, why: &str) -> Result<Exit, CliError> {
    let why = format!(
        "{host}: {}; free space in /etc/kwinctl on {host}, or make it writable, and run again",
        crate::text::clip(why, 300)
    );
    err_line(&format!("error: {why}"));
    if c.output == Format::Json {
        let line = Line::new(Event::Error {
            command: "unlock",
            exit: Exit::HostFailed.code(),
            error: why,
        });
        let _ = writeln!(crate::stdout::Stdout, "{}", safe_json(&line.to_json()));
    }
    Ok(Exit::HostFailed)
}

/// `OWNER (run RUN), taken N s ago, its lease runs out in M s`.
fn describe(h: &Held) -> String {
    let left = h.left.parse::<i64>().unwrap_or(0);
    format!(
        "{} (run {}), taken {}s ago; {}",
        clip(&h.owner, 300),
        clip(&h.run, 100),
        clip(&h.age, 12),
        if left > 0 {
            format!("its lease runs out in {left}s unless that run renews it")
        } else {
            format!("its lease ran out {}s ago", -left)
        }
    )
}

fn unreached(c: &Common, why: &str) -> Result<Exit, CliError> {
    err_line(&format!(
        "error: cannot reach the lock host: {why}; nothing was broken"
    ));
    if c.output == Format::Json {
        let line = Line::new(Event::Error {
            command: "unlock",
            exit: Exit::HostFailed.code(),
            error: why.to_string(),
        });
        let _ = writeln!(crate::stdout::Stdout, "{}", safe_json(&line.to_json()));
    }
    Ok(Exit::HostFailed)
}

/// The `unlock` event (with `--output json`).
fn event(c: &Common, host: &str, held: Option<&Held>, broken: bool) {
    if c.output != Format::Json {
        return;
    }
    let line = Line::new(Event::Unlock {
        host,
        broken,
        holder: held.map(|h| h.owner.as_str()),
        run: held.map(|h| h.run.as_str()),
        age_seconds: held.and_then(|h| h.age.parse().ok()),
    });
    let _ = writeln!(crate::stdout::Stdout, "{}", safe_json(&line.to_json()));
}

/// Asks on stderr, reads the answer from stdin: `yes` or `y` confirms.
fn confirmed() -> bool {
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "Break it (only if that run is gone)? Type yes to continue: "
    );
    let _ = err.flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "yes" | "y")
}
