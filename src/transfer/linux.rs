//! The Linux side of a push: POSIX sh with coreutils (`stat -c`,
//! `sha256sum`, `truncate`) that reports what the host holds, and that
//! appends stdin to `<sha256>.part` and renames it `<sha256>` once its
//! SHA-256 is right.
//!
//! The hash is OpenSSL's (`openssl dgst -sha256`) where the host has the
//! `openssl` command, coreutils' `sha256sum` otherwise: the two give the
//! same digest, and OpenSSL's uses the CPU's SHA extensions where
//! coreutils' does not (about five times less CPU per byte on the lab's
//! machine; docs/research/push.md#the-hash-on-a-linux-host). An answer
//! from OpenSSL that is not a digest falls back to `sha256sum`, so a
//! broken `openssl` never makes a good file look bad.

use super::Local;

/// Where pushed files are kept on a Linux host, each named by its SHA-256.
pub const DIR: &str = "/var/lib/kwinctl/push";

/// `kw_sha FILE`: the file's SHA-256 in lowercase hex, by OpenSSL when
/// it answers with a digest, else by `sha256sum`.
const SHA: &str = "kw_sha() {\n  h=\"\"\n  if command -v openssl >/dev/null 2>&1; then h=$(openssl dgst -sha256 -r < \"$1\" 2>/dev/null | cut -d' ' -f1); fi\n  case $h in *[!0-9a-f]*) h= ;; esac\n  [ ${#h} -eq 64 ] || h=$(sha256sum < \"$1\" | cut -d' ' -f1)\n  echo \"$h\"\n}\n";

/// Asks, per file, `KWP <sha256> done | none | part LEN SHA256`.
pub fn ask(files: &[&Local]) -> String {
    let mut s = format!(
        "d={DIR}\n{SHA}kw_pushed() {{\n  if [ -f \"$d/$1\" ] && [ \"$(stat -c %s \"$d/$1\")\" = \"$2\" ]; then echo \"KWP $1 done\"\n  elif [ -f \"$d/$1.part\" ]; then echo \"KWP $1 part $(stat -c %s \"$d/$1.part\") $(kw_sha \"$d/$1.part\")\"\n  else echo \"KWP $1 none\"; fi\n}}\n"
    );
    for f in files {
        s.push_str(&format!("kw_pushed {} {}\n", f.sha256, f.size));
    }
    s
}

/// Receives one file from `offset` on: stdin appended as it comes.
pub fn receive(f: &Local, offset: u64) -> String {
    let (sha, size) = (&f.sha256, f.size);
    format!(
        "set -e\nd={DIR}\n{SHA}p=\"$d/{sha}.part\"\nmkdir -p \"$d\"\ntouch \"$p\"\n\
         [ \"$(stat -c %s \"$p\")\" -ge {offset} ] || {{ echo \"KWP {sha} short $(stat -c %s \"$p\")\"; exit 3; }}\n\
         truncate -s {offset} \"$p\"\ncat >> \"$p\"\n\
         [ \"$(stat -c %s \"$p\")\" = {size} ] || {{ echo \"KWP {sha} short $(stat -c %s \"$p\")\"; exit 3; }}\n\
         h=$(kw_sha \"$p\")\n\
         [ \"$h\" = {sha} ] || {{ rm -f \"$p\"; echo \"KWP {sha} bad $h\"; exit 4; }}\n\
         mv -f \"$p\" \"$d/{sha}\"\necho 'KWP {sha} ok'\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a script with /bin/sh, `path` first in PATH when given.
    fn run_sh(script: String, stdin: &[u8], path: Option<&std::path::Path>) -> String {
        use std::io::Write;
        let mut c = std::process::Command::new("/bin/sh");
        c.args(["-c", &script]);
        if let Some(p) = path {
            let old = std::env::var("PATH").unwrap_or_default();
            c.env("PATH", format!("{}:{old}", p.display()));
        }
        let mut c = c
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(stdin).unwrap();
        String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap()
    }

    /// An `openssl` that answers something other than a digest (broken,
    /// or another program of that name) does not make a good file bad:
    /// the hash falls back to sha256sum; a wrong file is still refused.
    #[test]
    fn a_broken_openssl_falls_back_to_sha256sum() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let fake = bin.join("openssl");
        std::fs::write(&fake, "#!/bin/sh\necho 'Error: sha256 is not here'\n").unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bytes = vec![7u8; 100_000];
        let src = dir.path().join("f");
        std::fs::write(&src, &bytes).unwrap();
        let f = Local::of(&src).unwrap();
        let root = dir.path().join("push");
        let fix = |s: String| s.replace(DIR, root.to_str().unwrap());
        let out = run_sh(fix(receive(&f, 0)), &bytes, Some(&bin));
        assert!(out.contains(&format!("KWP {} ok", f.sha256)), "{out}");
        let mut wrong = bytes.clone();
        wrong[5] = 8;
        std::fs::remove_file(root.join(&f.sha256)).unwrap();
        let out = run_sh(fix(receive(&f, 0)), &wrong, Some(&bin));
        assert!(out.contains(&format!("KWP {} bad", f.sha256)), "{out}");
    }

    /// The scripts run by a real sh over a real folder: a part resumed,
    /// the whole hashed, then reported done.
    #[test]
    fn receive_and_ask_with_sh() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 7) as u8).collect();
        let src = dir.path().join("f");
        std::fs::write(&src, &bytes).unwrap();
        let f = Local::of(&src).unwrap();
        let root = dir.path().join("push");
        let fix = |s: String| s.replace(DIR, root.to_str().unwrap());
        let run = |script: String, stdin: &[u8]| run_sh(script, stdin, None);
        assert!(run(fix(ask(&[&f])), b"").contains(&format!("KWP {} none", f.sha256)));
        // an interrupted first run: 70000 bytes arrived
        let out = run(fix(receive(&f, 0)), &bytes[..70_000]);
        assert!(out.contains("short 70000"), "{out}");
        let held = run(fix(ask(&[&f])), b"");
        assert_eq!(
            super::super::parse_held(&held, &f.sha256),
            Some(super::super::Held::Part {
                len: 70_000,
                sha256: crate::hash::sha256_bytes(&bytes[..70_000])
            })
        );
        let out = run(fix(receive(&f, 70_000)), &bytes[70_000..]);
        assert!(out.contains(&format!("KWP {} ok", f.sha256)), "{out}");
        assert_eq!(std::fs::read(root.join(&f.sha256)).unwrap(), bytes);
        assert!(run(fix(ask(&[&f])), b"").contains(&format!("KWP {} done", f.sha256)));
    }
}
