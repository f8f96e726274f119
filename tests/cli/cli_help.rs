//! Help that teaches: the shared options grouped under headings, every
//! option described, examples for each command, `-o` always an output file,
//! and a man page with examples, exit status, environment and files.

use crate::common;

use common::{kwinctl, text};

const COMMANDS: [&str; 8] = [
    "init", "check", "render", "plan", "up", "verify", "reset", "graph",
];

fn help(args: &[&str]) -> String {
    let mut a = args.to_vec();
    a.push("-h");
    let o = kwinctl(&a);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Option lines (`  -x, --long <V>  description`) without a description.
fn undescribed(h: &str) -> Vec<String> {
    h.lines()
        .filter(|l| {
            let t = l.trim_start();
            (t.starts_with("--") || (t.starts_with('-') && t.get(2..4) == Some(", ")))
                && l.starts_with("  ")
        })
        .filter(|l| {
            // the flag, then two spaces or more, then words
            let t = l.trim_start();
            match t.find("  ") {
                Some(i) => t[i..].trim().is_empty(),
                None => true,
            }
        })
        .map(String::from)
        .collect()
}

#[test]
fn every_command_has_examples_headings_and_described_options() {
    for c in COMMANDS {
        let h = help(&[c]);
        let examples = h
            .split("Examples:")
            .nth(1)
            .unwrap_or_else(|| panic!("{c}: no examples\n{h}"));
        let n = examples
            .lines()
            .filter(|l| l.trim_start().starts_with("kwinctl "))
            .count();
        assert!(n >= 2, "{c}: {n} examples\n{h}");
        assert_eq!(undescribed(&h), Vec::<String>::new(), "{c}\n{h}");
    }
    for c in ["plan", "up", "verify", "reset", "check"] {
        let h = help(&[c]);
        for heading in ["Which hosts:", "Connecting:", "Output:"] {
            assert!(h.contains(heading), "{c} lacks {heading}\n{h}");
        }
        // the shared options sit under their heading, not among the command's own
        let own = h.split("Which hosts:").next().unwrap();
        assert!(
            !own.contains("--timeout") && !own.contains("--parallel"),
            "{c}\n{h}"
        );
        assert!(
            h.contains("--output <FORMAT>  How the results are printed"),
            "{h}"
        );
    }
    let h = help(&["import", "ansible"]);
    assert!(h.contains("-o, --out <FILE>"), "{h}");
    assert!(h.contains("Examples:"), "{h}");
    assert_eq!(undescribed(&h), Vec::<String>::new(), "{h}");
    let top = help(&[]);
    assert!(top.contains("kwinctl init"), "{top}");
}

#[test]
fn o_is_the_output_file_everywhere_and_import_output_file_is_deprecated() {
    let dir = tempfile::tempdir().unwrap();
    let ini = dir.path().join("hosts.ini");
    std::fs::write(&ini, "[linux]\nl1 ansible_host=10.0.0.2\n").unwrap();
    let new = dir.path().join("new.yaml");
    let o = kwinctl(&[
        "import",
        "ansible",
        ini.to_str().unwrap(),
        "-o",
        new.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(new.is_file());
    assert!(!text(&o).contains("deprecated"), "{}", text(&o));
    let old = dir.path().join("old.yaml");
    let o = kwinctl(&[
        "import",
        "ansible",
        ini.to_str().unwrap(),
        "--output",
        old.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(old.is_file());
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("warning: `kwinctl import --output FILE` is deprecated: use -o/--out FILE"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(&old).unwrap(),
        std::fs::read_to_string(&new).unwrap()
    );
    // init's -o is a file too
    let f = dir.path().join("init.yaml");
    let o = kwinctl(&[
        "init",
        "--offline",
        "--control-plane",
        "10.0.0.1",
        "--windows",
        "10.0.0.3",
        "-o",
        f.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(f.is_file());
}

#[test]
fn the_man_page_has_examples_exit_status_environment_and_files() {
    let o = kwinctl(&["man"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let page = String::from_utf8_lossy(&o.stdout);
    for want in [
        ".SH EXAMPLES",
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH FILES",
        "kwinctl init \\-\\-control\\-plane",
        "KWINCTL_SSH_PASSPHRASE",
        "STEM.kwinctl\\-state.json",
        "3 another kwinctl run holds the lock",
        "\\-\\-inventory",
        "graph",
    ] {
        assert!(page.contains(want), "{want}\n{page}");
    }
    assert!(page.lines().count() > 150, "{}", page.lines().count());
}
