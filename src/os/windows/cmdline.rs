//! Windows command lines: a service's ImagePath and the wrapper's
//! `Start-Process -ArgumentList` are one string that the program splits
//! itself. Go programs (kubelet, kube-proxy) split it with the rules of
//! `CommandLineToArgvW` (Go's `syscall.commandLineToArgv` follows them), so
//! kwinctl quotes each argument for those rules:
//!
//! - an argument with no space, tab, newline or `"` goes as is (and so does
//!   a `--flag=` with an empty value);
//! - otherwise it is wrapped in `"`; inside, `"` becomes `\"`, and the
//!   backslashes *before* a `"` (or before the closing quote) are doubled —
//!   elsewhere backslashes are literal (Microsoft, "Parsing C++ command-line
//!   arguments": "2n backslashes followed by a quotation mark produce n
//!   backslashes followed by begin/end quote"; D. Deley / Old New Thing
//!   "Everyone quotes command line arguments the wrong way").

/// Quote one argument so that `CommandLineToArgvW` gives it back unchanged.
pub fn quote(s: &str) -> String {
    if !s.is_empty() && !s.contains([' ', '\t', '\n', '\u{b}', '"']) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut backslashes = 0usize;
    for c in s.chars() {
        match c {
            '\\' => backslashes += 1,
            '"' => {
                out.extend(std::iter::repeat_n('\\', 2 * backslashes + 1));
                out.push('"');
                backslashes = 0;
            }
            _ => {
                out.extend(std::iter::repeat_n('\\', backslashes));
                out.push(c);
                backslashes = 0;
            }
        }
    }
    out.extend(std::iter::repeat_n('\\', 2 * backslashes));
    out.push('"');
    out
}

/// A command line of quoted arguments.
pub fn join<S: AsRef<str>>(args: &[S]) -> String {
    args.iter()
        .map(|a| quote(a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Split a command line as `CommandLineToArgvW` does for the arguments after
/// the program name (the rules since 2008: `""` inside quotes is a literal
/// quote). The inverse of [`join`]; the simulator (`winsim.py`,
/// `split_command_line`) does the same.
pub fn split(line: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        if chars.peek().is_none() {
            return args;
        }
        let mut arg = String::new();
        let mut quoted = false;
        while let Some(&c) = chars.peek() {
            if !quoted && (c == ' ' || c == '\t') {
                break;
            }
            chars.next();
            match c {
                '\\' => {
                    let mut n = 1;
                    while chars.peek() == Some(&'\\') {
                        chars.next();
                        n += 1;
                    }
                    if chars.peek() == Some(&'"') {
                        arg.extend(std::iter::repeat_n('\\', n / 2));
                        if n % 2 == 1 {
                            chars.next();
                            arg.push('"');
                        }
                    } else {
                        arg.extend(std::iter::repeat_n('\\', n));
                    }
                }
                '"' => {
                    if quoted && chars.peek() == Some(&'"') {
                        chars.next();
                        arg.push('"');
                    } else {
                        quoted = !quoted;
                    }
                }
                _ => arg.push(c),
            }
        }
        args.push(arg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quoting_follows_command_line_to_argv() {
        assert_eq!(quote(r"C:\k\kubelet.exe"), r"C:\k\kubelet.exe");
        assert_eq!(quote("--resolv-conf="), "--resolv-conf=");
        assert_eq!(quote(""), "\"\"");
        assert_eq!(
            quote("INTERFACE=vEthernet (KubeProxySwitch)"),
            "\"INTERFACE=vEthernet (KubeProxySwitch)\""
        );
        // the defect the old quoting had: a trailing backslash escaped the
        // closing quote, so the argument ran on into the next one
        assert_eq!(quote(r"C:\Program Files\k\"), r#""C:\Program Files\k\\""#);
        assert_eq!(quote(r#"a\"b"#), r#""a\\\"b""#);
        assert_eq!(
            split(r#"a "b c" "C:\Program Files\k\\" d\\e "x\"y" """#),
            ["a", "b c", r"C:\Program Files\k\", r"d\\e", "x\"y", ""]
        );
    }

    proptest! {
        #[test]
        fn split_gives_back_what_join_quoted(args in proptest::collection::vec("[ a-z\\\\\"\t=-]{0,8}", 0..6)) {
            prop_assert_eq!(split(&join(&args)), args);
        }
    }
}
