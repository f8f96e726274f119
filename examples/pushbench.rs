//! The push benchmark's driver (`bench/push.py` runs it; not part of the
//! product): push one local file to each named host of an inventory, all
//! hosts at once, with the function `kwinctl up` pushes with
//! (`kwinctl::transfer::push`) over sessions opened as `up` opens them
//! (`kwinctl::transport::connect`, the same runtime settings). Prints one
//! JSON line per host: what was sent and how long each phase took.
//!
//!   pushbench INVENTORY HOST=FILE [HOST=FILE ...]
//!
//! The hosts must not hold the file yet (the benchmark removes what an
//! earlier run left), or nothing is sent.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kwinctl::inventory::{Inventory, Os};
use kwinctl::transfer::{self, Local, Target};
use kwinctl::transport::{self, ConfigSource, ConnectOptions, Interpreter};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: pushbench INVENTORY HOST=FILE [HOST=FILE ...]");
        std::process::exit(2);
    }
    let inv = Inventory::load(Path::new(&args[0])).unwrap_or_else(|e| {
        eprintln!("pushbench: {e}");
        std::process::exit(2)
    });
    let mut jobs: Vec<(kwinctl::inventory::Host, PathBuf)> = Vec::new();
    for a in &args[1..] {
        let Some((name, file)) = a.split_once('=') else {
            eprintln!("pushbench: {a}: give HOST=FILE");
            std::process::exit(2);
        };
        let Some(h) = inv.host(name) else {
            eprintln!("pushbench: {name} is not in the inventory");
            std::process::exit(2);
        };
        jobs.push((h.clone(), PathBuf::from(file)));
    }
    let hosts: Vec<&kwinctl::inventory::Host> = jobs.iter().map(|(h, _)| h).collect();
    let routes = transport::resolve(&hosts, &ConfigSource::None).unwrap_or_else(|e| {
        eprintln!("pushbench: {e}");
        std::process::exit(2)
    });
    let opts = Arc::new(ConnectOptions::new(Duration::from_secs(60), false, routes));
    // as `kwinctl up` builds its runtime (cmd/remote.rs)
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(4)
        .build()
        .expect("a runtime");
    let failed = rt.block_on(async {
        // each distinct file hashed once, as `up` does (one `Local` per path)
        let t0 = Instant::now();
        let mut hashing = Vec::new();
        for (_, file) in &jobs {
            if !hashing.iter().any(|(p, _)| p == file) {
                let p = file.clone();
                hashing.push((
                    file.clone(),
                    tokio::task::spawn_blocking(move || Local::of(&p)),
                ));
            }
        }
        let mut locals = Vec::new();
        for (p, t) in hashing {
            match t.await.expect("a hashing task") {
                Ok(l) => locals.push((p, Arc::new(l))),
                Err(e) => {
                    eprintln!("pushbench: {}: {e}", p.display());
                    return true;
                }
            }
        }
        let hashed = t0.elapsed().as_secs_f64();
        let mut tasks = Vec::new();
        for (h, file) in jobs {
            let opts = opts.clone();
            let f = locals.iter().find(|(p, _)| *p == file).unwrap().1.clone();
            tasks.push(tokio::spawn(async move { one(h, f, hashed, opts).await }));
        }
        let mut failed = false;
        for t in tasks {
            match t.await.expect("a task") {
                Ok(line) => println!("{line}"),
                Err(e) => {
                    eprintln!("pushbench: {e}");
                    failed = true;
                }
            }
        }
        failed
    });
    std::process::exit(i32::from(failed));
}

async fn one(
    h: kwinctl::inventory::Host,
    f: Arc<Local>,
    hashed: f64,
    opts: Arc<ConnectOptions>,
) -> Result<serde_json::Value, String> {
    let t0 = Instant::now();
    let (interpreter, target) = match h.os {
        Os::Windows => (Interpreter::PowerShell, Target::Windows),
        _ => (Interpreter::Sh, Target::Linux),
    };
    let mut s = transport::connect(&h, interpreter, &opts)
        .await
        .map_err(|e| format!("{}: {e}", h.name))?;
    let connected = t0.elapsed();
    let pushed = transfer::push(&mut s, target, std::slice::from_ref(&*f))
        .await
        .map_err(|e| format!("{}: {e}", h.name))?;
    let done = t0.elapsed();
    let sent: u64 = pushed.iter().map(|p| p.sent).sum();
    if sent != f.size {
        return Err(format!(
            "{}: sent {sent} of {} bytes (did the host hold the file already?)",
            h.name, f.size
        ));
    }
    Ok(serde_json::json!({
        "host": h.name,
        "sha256": f.sha256,
        "bytes": sent,
        "hash_s": hashed,
        "connect_s": connected.as_secs_f64(),
        "push_s": (done - connected).as_secs_f64(),
    }))
}
