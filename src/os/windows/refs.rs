//! How kwinctl compares what a Windows host reports: image references and
//! Windows version strings.

/// An image reference as kwinctl compares them: lower case, `:latest`
/// where it names no tag or digest (Docker's and containerd's default).
pub fn normalise_image(s: &str) -> String {
    let s = s.trim().to_ascii_lowercase();
    let last = s.rsplit('/').next().unwrap_or(&s);
    if last.contains(':') || last.contains('@') {
        s
    } else {
        format!("{s}:latest")
    }
}

/// (major, minor, build) of a Windows version string.
pub fn parse_build(s: &str) -> Option<(u32, u32, u32)> {
    let mut it = s.trim().split('.').map(|p| p.parse::<u32>());
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(a)), Some(Ok(b)), Some(Ok(c))) => Some((a, b, c)),
        _ => None,
    }
}
