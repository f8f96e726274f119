//! Short blocking file work (a run record's append, a key file,
//! known_hosts) done where it costs least. On the one-thread runtime of a
//! read-only sweep (`plan`, `verify`: `runtime` in src/cmd/remote.rs) it
//! runs in place: handing it to tokio's blocking pool wakes a pool thread
//! and then the runtime's thread again, for a write of a few kilobytes.
//! On the multi-thread runtime of `up` and `reset` it goes to the blocking
//! pool, off the workers that drive the connections.

use tokio::runtime::{Handle, RuntimeFlavor};

/// `f`'s result; an error only when `f` panicked on the blocking pool.
pub async fn file_work<T, F>(f: F) -> Result<T, tokio::task::JoinError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if Handle::current().runtime_flavor() == RuntimeFlavor::CurrentThread {
        return Ok(f());
    }
    tokio::task::spawn_blocking(f).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;
    use tokio::runtime::Builder;

    #[test]
    fn in_place_on_one_thread_on_the_pool_beside_workers() {
        let one = Builder::new_current_thread().build().unwrap();
        let here = thread::current().id();
        let ran = one.block_on(file_work(|| thread::current().id())).unwrap();
        assert_eq!(ran, here, "the one-thread runtime runs it in place");

        let workers = Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let (worker, ran) = workers.block_on(async {
            tokio::spawn(async {
                let worker = thread::current().id();
                (worker, file_work(|| thread::current().id()).await.unwrap())
            })
            .await
            .unwrap()
        });
        assert_ne!(ran, worker, "not on the worker that drives the connections");
        // a panic there is the caller's error, not the worker's
        let e = workers.block_on(file_work(|| -> () { panic!("bad file") }));
        assert!(e.unwrap_err().is_panic());
    }
}
