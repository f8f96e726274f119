//! The text rules Ansible's INI inventory plugin inherits from Python
//! (docs/research/ansible-import.md#ini-text): `str.splitlines()` for the
//! lines, `str.strip()` for their ends, and `shlex.split(line,
//! comments=True)` (POSIX mode) for a host line's words. Written out here
//! because Rust's `lines()`, `trim()` and the `shlex` crate each draw a
//! line, a blank or a comment differently, and the importer must read what
//! `ansible-inventory` reads.

/// Python's `str.isspace()` for one character: Unicode's White_Space and
/// the four ASCII separators `\x1c`..`\x1f`.
pub(super) fn space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// Python's `str.strip()`.
pub(super) fn strip(s: &str) -> &str {
    s.trim_matches(space)
}

/// Python's `str.splitlines()`: `\n`, `\r`, `\r\n`, `\v`, `\f`, `\x1c`,
/// `\x1d`, `\x1e`, `\x85`, U+2028 and U+2029 each end a line.
pub(super) fn lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = text.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        let ends = matches!(
            c,
            '\n' | '\r'
                | '\x0b'
                | '\x0c'
                | '\x1c'
                | '\x1d'
                | '\x1e'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        );
        if !ends {
            continue;
        }
        out.push(&text[start..i]);
        let mut next = i + c.len_utf8();
        if c == '\r' && it.peek().is_some_and(|(_, n)| *n == '\n') {
            it.next();
            next += 1;
        }
        start = next;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Why a line cannot be split (Python's `ValueError` messages).
pub(super) const NO_CLOSING_QUOTE: &str = "No closing quotation";
pub(super) const NO_ESCAPED_CHAR: &str = "No escaped character";

#[derive(Clone, Copy, PartialEq)]
enum St {
    Between,
    Word,
    Quote(char),
    /// After a backslash; where to go back to.
    Escape(Option<char>),
}

/// Python's `shlex.split(s, comments=True)`: words split on space, tab, CR
/// and LF only; `'...'` keeps everything, `"..."` lets a backslash escape
/// only `"` and `\` (before any other character the backslash stays); a
/// backslash outside quotes escapes any character; `#` anywhere outside
/// quotes, even inside a word, ends the line (the word before it is kept);
/// `''` is an empty word.
pub(super) fn split(s: &str) -> Result<Vec<String>, &'static str> {
    let blank = |c: char| matches!(c, ' ' | '\t' | '\r' | '\n');
    let mut out = Vec::new();
    let mut tok = String::new();
    let mut quoted = false;
    let mut st = St::Between;
    fn emit(out: &mut Vec<String>, tok: &mut String, quoted: &mut bool) {
        if !tok.is_empty() || *quoted {
            out.push(std::mem::take(tok));
        }
        *quoted = false;
    }
    for c in s.chars() {
        st = match st {
            St::Between | St::Word if blank(c) => {
                emit(&mut out, &mut tok, &mut quoted);
                St::Between
            }
            St::Between | St::Word if c == '#' => {
                emit(&mut out, &mut tok, &mut quoted);
                return Ok(out);
            }
            St::Between | St::Word if c == '\\' => St::Escape(None),
            St::Between | St::Word if c == '\'' || c == '"' => {
                quoted = true;
                St::Quote(c)
            }
            St::Between | St::Word => {
                tok.push(c);
                St::Word
            }
            St::Quote(q) if c == q => St::Word,
            St::Quote('"') if c == '\\' => St::Escape(Some('"')),
            St::Quote(q) => {
                tok.push(c);
                St::Quote(q)
            }
            St::Escape(back) => {
                if let Some(q) = back
                    && c != '\\'
                    && c != q
                {
                    tok.push('\\');
                }
                tok.push(c);
                match back {
                    Some(q) => St::Quote(q),
                    None => St::Word,
                }
            }
        };
    }
    match st {
        St::Quote(_) => Err(NO_CLOSING_QUOTE),
        St::Escape(_) => Err(NO_ESCAPED_CHAR),
        _ => {
            emit(&mut out, &mut tok, &mut quoted);
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_as_pythons_shlex_with_comments() {
        let s = |t: &str| split(t).unwrap();
        assert_eq!(s("web1 a=b  # note"), ["web1", "a=b"]);
        // a # inside a word ends the line too (shlex checks commenters
        // before word characters)
        assert_eq!(s("web1 a=b#c d=e"), ["web1", "a=b"]);
        assert_eq!(s("web1 'a=b#c' d=\"x y\""), ["web1", "a=b#c", "d=x y"]);
        assert_eq!(s("w ;x"), ["w", ";x"]);
        assert_eq!(s("w a=\"\\$x\\\"\""), ["w", "a=\\$x\""]);
        assert_eq!(s("w a=\\#b"), ["w", "a=#b"]);
        assert_eq!(s("w a='' b="), ["w", "a=", "b="]);
        assert_eq!(s("w ''"), ["w", ""]);
        assert_eq!(s("w\u{a0}a=b"), ["w\u{a0}a=b"]);
        assert_eq!(split("w 'a"), Err(NO_CLOSING_QUOTE));
        assert_eq!(split("w a\\"), Err(NO_ESCAPED_CHAR));
    }

    #[test]
    fn lines_and_blanks_as_pythons_str() {
        assert_eq!(
            lines("a\r\nb\rc\x0bd\ne\u{2028}f\n"),
            ["a", "b", "c", "d", "e", "f"]
        );
        assert_eq!(lines("a\n\nb"), ["a", "", "b"]);
        assert_eq!(strip("\x1f\u{a0} a \t"), "a");
    }
}
