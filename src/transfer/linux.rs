//! The Linux side of a push: POSIX sh with coreutils (`stat -c`,
//! `sha256sum`, `truncate`) that reports what the host holds, and that
//! appends stdin to `<sha256>.part` and renames it `<sha256>` once its
//! SHA-256 is right.

use super::Local;

/// Where pushed files are kept on a Linux host, each named by its SHA-256.
pub const DIR: &str = "/var/lib/kwinctl/push";

/// Asks, per file, `KWP <sha256> done | none | part LEN SHA256`.
pub fn ask(files: &[&Local]) -> String {
    let mut s = format!(
        "d={DIR}\nkw_pushed() {{\n  if [ -f \"$d/$1\" ] && [ \"$(stat -c %s \"$d/$1\")\" = \"$2\" ]; then echo \"KWP $1 done\"\n  elif [ -f \"$d/$1.part\" ]; then echo \"KWP $1 part $(stat -c %s \"$d/$1.part\") $(sha256sum < \"$d/$1.part\" | cut -d' ' -f1)\"\n  else echo \"KWP $1 none\"; fi\n}}\n"
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
        "set -e\nd={DIR}\np=\"$d/{sha}.part\"\nmkdir -p \"$d\"\ntouch \"$p\"\n\
         [ \"$(stat -c %s \"$p\")\" -ge {offset} ] || {{ echo \"KWP {sha} short $(stat -c %s \"$p\")\"; exit 3; }}\n\
         truncate -s {offset} \"$p\"\ncat >> \"$p\"\n\
         [ \"$(stat -c %s \"$p\")\" = {size} ] || {{ echo \"KWP {sha} short $(stat -c %s \"$p\")\"; exit 3; }}\n\
         h=$(sha256sum < \"$p\" | cut -d' ' -f1)\n\
         [ \"$h\" = {sha} ] || {{ rm -f \"$p\"; echo \"KWP {sha} bad $h\"; exit 4; }}\n\
         mv -f \"$p\" \"$d/{sha}\"\necho 'KWP {sha} ok'\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let run = |script: String, stdin: &[u8]| {
            use std::io::Write;
            let mut c = std::process::Command::new("/bin/sh")
                .args(["-c", &script])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            c.stdin.take().unwrap().write_all(stdin).unwrap();
            String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap()
        };
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
