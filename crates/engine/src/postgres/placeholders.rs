//! SQLite's numbered placeholders (`?1`) as Postgres's (`$1`), found by a
//! tokenizer that knows where Postgres reads text rather than SQL: quoted
//! strings and identifiers, comments and dollar-quoted bodies. An effect's
//! SQL is written once, for both stores; a `?1` inside a string literal or a
//! comment must stay what it is, and a bare `?` is Postgres's JSON operator.

/// `sql` with each `?N` that Postgres would read as SQL written `$N`.
/// Everything else is copied as it is, so the text keeps its length.
pub(crate) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut copied = 0;
    for (token, at, _) in tokens(sql) {
        if token == Token::Placeholder {
            out.push_str(&sql[copied..at]);
            out.push('$');
            copied = at + 1;
        }
    }
    out.push_str(&sql[copied..]);
    out
}

/// The highest `N` of the `?N` Postgres would read (0 for none): how many
/// values the statement must be bound with.
pub(crate) fn highest(sql: &str) -> usize {
    let digits = |at: usize| number_after(sql, at).unwrap_or(usize::MAX);
    tokens(sql)
        .filter(|(token, _, _)| *token == Token::Placeholder)
        .map(|(_, at, _)| digits(at))
        .max()
        .unwrap_or(0)
}

/// Which of `count` values the SQL uses (`?1` or `$1` is the first).
pub(crate) fn used(sql: &str, count: usize) -> Vec<bool> {
    let mut used = vec![false; count];
    for (token, at, _) in tokens(sql) {
        if !matches!(token, Token::Placeholder | Token::Numbered) {
            continue;
        }
        let n = number_after(sql, at).unwrap_or(0);
        if let Some(slot) = n.checked_sub(1).and_then(|i| used.get_mut(i)) {
            *slot = true;
        }
    }
    used
}

/// The number of the placeholder whose `?` or `$` is at `at`; `None` past
/// `usize`.
fn number_after(sql: &str, at: usize) -> Option<usize> {
    let run = sql[at + 1..].bytes().take_while(u8::is_ascii_digit).count();
    sql[at + 1..at + 1 + run].parse().ok()
}

/// Where the SQL itself ends: past its last byte that is neither white
/// space nor a comment. What follows it is kept after anything appended.
pub(crate) fn code_end(sql: &str) -> usize {
    tokens(sql)
        .filter(|(token, _, _)| !matches!(token, Token::Space | Token::Comment))
        .map(|(_, _, end)| end)
        .last()
        .unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// SQL, a quoted string or identifier, a dollar-quoted body.
    Code,
    /// A `?` followed by a digit (the digits are the next tokens).
    Placeholder,
    /// A `$` followed by a digit: Postgres's own placeholder.
    Numbered,
    Comment,
    Space,
}

/// Each token of `sql` as Postgres reads it: its kind, start and end.
fn tokens(sql: &str) -> impl Iterator<Item = (Token, usize, usize)> + '_ {
    let bytes = sql.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = at;
        let (token, end) = match *bytes.get(at)? {
            b'\'' => (
                Token::Code,
                quoted_end(bytes, at, b'\'', escape_string(bytes, at)),
            ),
            b'"' => (Token::Code, quoted_end(bytes, at, b'"', false)),
            b'-' if bytes.get(at + 1) == Some(&b'-') => (Token::Comment, line_end(bytes, at)),
            b'/' if bytes.get(at + 1) == Some(&b'*') => (Token::Comment, comment_end(bytes, at)),
            b'$' if numbered_at(bytes, at) => (Token::Numbered, at + 1),
            b'$' => (Token::Code, dollar_end(bytes, at).unwrap_or(at + 1)),
            b'?' if bytes.get(at + 1).is_some_and(u8::is_ascii_digit) => {
                (Token::Placeholder, at + 1)
            }
            b if b.is_ascii_whitespace() => (Token::Space, at + 1),
            _ => (Token::Code, at + 1),
        };
        at = end;
        Some((token, start, end))
    })
}

/// Whether `$N` starts at `at`: a `$` before a digit, not inside a word.
fn numbered_at(bytes: &[u8], at: usize) -> bool {
    let in_word = at > 0 && word_byte(bytes[at - 1]);
    !in_word && bytes.get(at + 1).is_some_and(u8::is_ascii_digit)
}

/// Whether a letter or digit of an identifier (or a non-ASCII byte, which
/// Postgres allows in one): a `$` or `E` after one is part of a word.
fn word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'$' || byte >= 0x80
}

/// Whether the quote at `at` opens an escape string (`E'…'`), where a
/// backslash escapes the next character, a quote among them.
fn escape_string(bytes: &[u8], at: usize) -> bool {
    at >= 1 && bytes[at - 1].eq_ignore_ascii_case(&b'e') && (at < 2 || !word_byte(bytes[at - 2]))
}

/// Past the quote that closes the one at `at` (a doubled quote is one
/// inside the text); the end of `bytes` if none does.
fn quoted_end(bytes: &[u8], at: usize, quote: u8, backslashes: bool) -> usize {
    let mut i = at + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if backslashes => i += 2,
            b if b == quote && bytes.get(i + 1) == Some(&quote) => i += 2,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Past the newline that ends the `--` comment at `at`.
fn line_end(bytes: &[u8], at: usize) -> usize {
    bytes[at..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |n| at + n + 1)
}

/// Past the `*/` that closes the `/*` at `at`: Postgres nests them.
fn comment_end(bytes: &[u8], at: usize) -> usize {
    let (mut depth, mut i) = (0usize, at);
    while i + 1 < bytes.len() {
        match (bytes[i], bytes[i + 1]) {
            (b'/', b'*') => (depth, i) = (depth + 1, i + 2),
            (b'*', b'/') if depth == 1 => return i + 2,
            (b'*', b'/') => (depth, i) = (depth - 1, i + 2),
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Past the tag that closes the dollar-quoted body opened at `at`
/// (`$$…$$`, `$tag$…$tag$`); `None` where no such body opens there (`$1`,
/// a `$` inside a word).
fn dollar_end(bytes: &[u8], at: usize) -> Option<usize> {
    if at > 0 && word_byte(bytes[at - 1]) {
        return None;
    }
    let rest = &bytes[at + 1..];
    let tag_len = rest.iter().position(|&b| b == b'$')?;
    let tag = &rest[..tag_len];
    let starts = tag.first().is_none_or(|&b| !b.is_ascii_digit());
    if !starts || !tag.iter().all(|&b| word_byte(b) && b != b'$') {
        return None;
    }
    let open = &bytes[at..at + tag_len + 2];
    let body = at + open.len();
    Some(
        bytes[body..]
            .windows(open.len())
            .position(|w| w == open)
            .map_or(bytes.len(), |n| body + n + open.len()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn placeholders_are_numbered_outside_quotes_only() {
        assert_eq!(
            numbered("UPDATE t SET a = ?1, b = '?2', \"c?3\" = ?10 WHERE d = ?2"),
            "UPDATE t SET a = $1, b = '?2', \"c?3\" = $10 WHERE d = $2"
        );
        assert_eq!(numbered("SELECT 'it''s ?1', ?1"), "SELECT 'it''s ?1', $1");
        assert_eq!(numbered("SELECT \"a\"\"?1\", ?1"), "SELECT \"a\"\"?1\", $1");
    }

    #[test]
    fn a_comment_holds_no_placeholder_whatever_it_quotes() {
        assert_eq!(
            numbered("SELECT ?1 -- it's ?2\n, ?3"),
            "SELECT $1 -- it's ?2\n, $3"
        );
        assert_eq!(numbered("SELECT ?1 -- ?2"), "SELECT $1 -- ?2");
        assert_eq!(
            numbered("SELECT /* it's /* ?1 */ ?2 */ ?3"),
            "SELECT /* it's /* ?1 */ ?2 */ $3"
        );
        assert_eq!(numbered("SELECT 1 - -?1"), "SELECT 1 - -$1");
    }

    #[test]
    fn a_dollar_quoted_body_is_text() {
        assert_eq!(
            numbered("SELECT $$it's ?1$$, $f$ $$ ?2 $f$, ?3"),
            "SELECT $$it's ?1$$, $f$ $$ ?2 $f$, $3"
        );
        // `$1` and a `$` inside a word open nothing.
        assert_eq!(numbered("SELECT a$b, ?1, '$'"), "SELECT a$b, $1, '$'");
        assert_eq!(numbered("SELECT $1$ ?1"), "SELECT $1$ $1");
    }

    #[test]
    fn an_escape_string_escapes_its_quote_with_a_backslash() {
        assert_eq!(
            numbered(r"SELECT E'it\'s ?1', ?2"),
            r"SELECT E'it\'s ?1', $2"
        );
        // Not an escape string: `e` ends a word.
        assert_eq!(numbered(r"SELECT name'\' ?1"), r"SELECT name'\' $1");
    }

    #[test]
    fn a_bare_question_mark_is_left_for_postgres() {
        // Postgres's JSON operators: `?`, `?|`, `?&`.
        assert_eq!(
            numbered("SELECT data ? 'k', data ?| ?1"),
            "SELECT data ? 'k', data ?| $1"
        );
        assert_eq!(numbered("SELECT ??1, ?"), "SELECT ?$1, ?");
    }

    #[test]
    fn the_highest_placeholder_and_the_end_of_the_code_are_found_past_text() {
        assert_eq!(highest("SELECT ?2, ?10, '?99' -- ?50"), 10);
        assert_eq!(highest("SELECT 1"), 0);
        assert_eq!(
            code_end("SELECT 1; -- it's\n  /* ?1 */ \n"),
            "SELECT 1;".len()
        );
        assert_eq!(code_end("SELECT '--'"), "SELECT '--'".len());
        assert_eq!(code_end(" -- all comment"), 0);
        assert_eq!(used("SELECT ?1, ?3, '?2'", 3), [true, false, true]);
        assert_eq!(used("SELECT $2", 2), [false, true]);
        assert_eq!(used("DELETE FROM t", 1), [false]);
        assert_eq!(used("SELECT a$1 FROM t", 1), [false]);
    }

    #[test]
    fn unterminated_text_runs_to_the_end() {
        for sql in ["SELECT '?1", "SELECT \"?1", "SELECT /* ?1", "SELECT $x$ ?1"] {
            assert_eq!(numbered(sql), sql);
        }
    }

    /// A piece of SQL and what Postgres is sent for it. Text pieces hold
    /// what would be SQL outside them: `?1`, quotes, comment marks, `$$`.
    fn piece() -> impl Strategy<Value = (String, String)> {
        let same = |s: String| (s.clone(), s);
        let tricky = "\\?[0-9]|'|\"|--|/\\*|\\*/|\\$\\$|\\$a\\$|\\\\";
        let text = |except: &str| {
            let pattern = format!("({tricky}|[^{except}]){{0,12}}");
            proptest::string::string_regex(&pattern).unwrap()
        };
        prop_oneof![
            "[a-zé_][a-z0-9é_€]{0,8}|[(),=<>*+]|\\?[|&]?".prop_map(same),
            text("'").prop_map(move |s| same(format!(
                "E'{}'",
                s.replace('\\', "\\\\").replace('\'', "\\'")
            ))),
            (1..1000u32).prop_map(|n| (format!("?{n}"), format!("${n}"))),
            text("'").prop_map(move |s| same(format!("'{}'", s.replace('\'', "''")))),
            text("\"").prop_map(move |s| same(format!("\"{}\"", s.replace('"', "\"\"")))),
            text("\n").prop_map(move |s| same(format!("--{}\n", s.replace('\n', " ")))),
            text("*/").prop_map(move |s| same(format!("/*{}*/", s.replace(['*', '/'], "")))),
            ("[a-z_]{0,3}", text("$")).prop_map(move |(tag, s)| {
                same(format!("${tag}${}${tag}$", s.replace('$', "")))
            }),
        ]
    }

    proptest! {
        /// SQL made of words, placeholders, strings, identifiers, comments
        /// and dollar-quoted bodies (which hold `?1`, quotes and comment
        /// marks of their own) is sent with exactly its placeholders changed.
        #[test]
        fn only_the_placeholders_change(pieces in prop::collection::vec(piece(), 0..24)) {
            let sql: Vec<&str> = pieces.iter().map(|(sql, _)| sql.as_str()).collect();
            let sent: Vec<&str> = pieces.iter().map(|(_, sent)| sent.as_str()).collect();
            prop_assert_eq!(numbered(&sql.join(" ")), sent.join(" "));
        }

        /// Whatever the text, the tokenizer ends, keeps its length, and
        /// changes nothing but a `?` before a digit into a `$`.
        #[test]
        fn any_text_keeps_its_length_and_only_question_marks_change(sql in any::<String>()) {
            let out = numbered(&sql);
            prop_assert_eq!(out.len(), sql.len());
            for (i, (a, b)) in sql.bytes().zip(out.bytes()).enumerate() {
                if a != b {
                    prop_assert!(a == b'?' && b == b'$', "byte {}", i);
                    prop_assert!(sql.as_bytes().get(i + 1).is_some_and(u8::is_ascii_digit));
                }
            }
        }
    }
}
