//! Embeds every template under `src/os/<os>/templates/` into the binary, by
//! convention: `src/os/windows/templates/add_route.ps1.j2` is the template
//! `windows/add_route.ps1`. A new template file needs no registration.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/os");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut found = Vec::new();
    for os in std::fs::read_dir(&root).expect("src/os") {
        let os = os.expect("src/os entry").path();
        let dir = os.join("templates");
        if !dir.is_dir() {
            continue;
        }
        println!("cargo:rerun-if-changed={}", dir.display());
        for f in std::fs::read_dir(&dir).expect("templates dir") {
            let f = f.expect("template entry").path();
            let name = f.file_name().expect("name").to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".j2") else {
                continue;
            };
            let os_name = os.file_name().expect("os").to_string_lossy().into_owned();
            found.push((format!("{os_name}/{stem}"), f.display().to_string()));
        }
    }
    found.sort();
    let mut out = String::from(
        "/// Every template, embedded: (name, source).\npub const TEMPLATES: &[(&str, &str)] = &[\n",
    );
    for (name, path) in &found {
        writeln!(out, "    ({name:?}, include_str!({path:?})),").expect("write");
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("templates.rs");
    std::fs::write(dest, out).expect("write templates.rs");
}
