//! The dashboard's HTML: one page shell, tables, escaping, and what every
//! page shares (sign-out, action buttons, notices). Every value from storage
//! or a request passes through [`escape`] (or a helper that calls it) before
//! it reaches a page.

use worker::{js_sys, Headers, Response, Result};

use super::encode;

/// Text made safe for an element or a quoted attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An optional text, escaped; a dash when absent.
pub fn text(value: Option<&str>) -> String {
    value.map_or_else(|| "–".into(), escape)
}

/// The furthest a JavaScript date reaches from the epoch, in ms: past it
/// `toISOString` throws.
const DATE_MAX_MS: i64 = 8_640_000_000_000_000;

/// Milliseconds since the epoch as an ISO time; a dash when absent, the
/// number itself when no date can hold it.
pub fn time(ms: Option<i64>) -> String {
    match ms {
        Some(ms) if ms.unsigned_abs() > DATE_MAX_MS as u64 => format!("{ms} ms"),
        Some(ms) => js_sys::Date::new(&(ms as f64).into())
            .to_iso_string()
            .as_string()
            .unwrap_or_default(),
        None => "–".into(),
    }
}

/// A cell of (already escaped) HTML.
pub fn td(html: String) -> String {
    format!("<td>{html}</td>")
}

/// A right-aligned number cell.
pub fn num(value: i64) -> String {
    format!(r#"<td class="n">{value}</td>"#)
}

/// A cell of escaped text in `<code>`.
pub fn code(value: &str) -> String {
    td(format!("<code>{}</code>", escape(value)))
}

/// A cell of escaped text styled as an error.
pub fn bad(value: Option<&str>) -> String {
    td(format!(r#"<span class="bad">{}</span>"#, text(value)))
}

/// A table of `rows` (each a row's cells); "None." when there are none.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        return r#"<p class="muted">None.</p>"#.into();
    }
    let head: String = headers.iter().map(|h| format!("<th>{h}</th>")).collect();
    let body: String = rows
        .iter()
        .map(|row| format!("<tr>{}</tr>", row.join("")))
        .collect();
    format!("<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
}

/// A whole page: `title` and `body` are HTML, already escaped.
pub fn page(status: u16, title: &str, body: &str) -> Result<Response> {
    let html = format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{title} · webhooks</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem; color: #1d2330; }}
h1 {{ font-size: 1.4rem; }} h2 {{ font-size: 1.1rem; margin-top: 2rem; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ text-align: left; padding: .35rem .6rem; border-bottom: 1px solid #e3e6ec; vertical-align: top; }}
th {{ background: #f4f6f9; font-weight: 600; }} td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
code {{ font-size: .92em; }} .bad {{ color: #b3261e; }} .ok {{ color: #1b7f3b; }} .muted {{ color: #687083; }}
form.login {{ max-width: 22rem; }} form.logout {{ float: right; }} form.actions {{ display: inline-block; margin-right: .5rem; }}
form.find {{ display: flex; flex-wrap: wrap; gap: .5rem; align-items: center; margin: 1rem 0; }} form.find input {{ width: auto; }} form.find input[name=q] {{ flex: 1 1 16rem; }}
.notice {{ background: #eef4ff; padding: .5rem .8rem; }} input {{ font: inherit; padding: .4rem; width: 100%; box-sizing: border-box; }}
button {{ font: inherit; padding: .4rem 1rem; margin-top: .5rem; }}
</style></head><body>
<h1>{title}</h1>
{body}
</body></html>"#
    );
    let headers = Headers::new();
    headers.set("content-type", "text/html; charset=utf-8")?;
    headers.set("cache-control", "no-store")?;
    Ok(Response::ok(html)?
        .with_status(status)
        .with_headers(headers))
}

/// Payloads longer than this are shown collapsed.
const PAYLOAD_OPEN_MAX_BYTES: usize = 16 * 1024;

/// Nesting deeper than this is shown as sent, not indented: indentation
/// grows with depth on every line, and a small body nested thousands deep
/// would make a page of gigabytes.
const INDENT_MAX_DEPTH: usize = 32;

/// Indentation may add at most this much to a payload; past it, the rest
/// is shown as sent. Depth alone does not bound it: a wide body nested 31
/// deep would gain 62 bytes a line on hundreds of thousands of lines.
const INDENT_MAX_EXTRA_BYTES: usize = 256 * 1024;

/// A stored payload for reading: indented when it is JSON, escaped, and
/// collapsed past 16 KiB. Re-indented character by character, not parsed
/// and re-encoded, so every value (a 20-digit number, an escape) reads as
/// it was sent.
pub fn payload(body: &str) -> String {
    let is_json = serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok();
    let indented = is_json.then(|| indent_json(body)).flatten();
    let shown = indented.as_deref().unwrap_or(body);
    let open = if body.len() <= PAYLOAD_OPEN_MAX_BYTES {
        " open"
    } else {
        ""
    };
    format!(
        r#"<details{open}><summary>{} bytes{}</summary><pre>{}</pre></details>"#,
        body.len(),
        if is_json { ", JSON" } else { "" },
        escape(shown)
    )
}

/// Valid JSON, two spaces an indent, its tokens untouched, up to
/// [`INDENT_MAX_EXTRA_BYTES`] longer than sent and the rest as sent;
/// `None` when it nests deeper than [`INDENT_MAX_DEPTH`].
fn indent_json(json: &str) -> Option<String> {
    let mut out = String::with_capacity(json.len() * 2);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut chars = json.char_indices().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some((at, c)) = chars.next() {
        if out.len() > at + INDENT_MAX_EXTRA_BYTES {
            out.push_str(&json[at..]);
            break;
        }
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.peek().is_some_and(|(_, c)| c.is_ascii_whitespace()) {
                    chars.next();
                }
                if let Some((_, close @ ('}' | ']'))) = chars.peek().copied() {
                    chars.next();
                    out.push(close);
                } else {
                    depth += 1;
                    if depth > INDENT_MAX_DEPTH {
                        return None;
                    }
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    Some(out)
}

/// The sign-out button on every signed-in page.
pub(super) const LOGOUT: &str = r#"<form class="logout" method="post" action="/admin/logout"><button type="submit">Sign out</button></form>"#;

/// `/admin/events/{source}/{id}`, encoded.
pub(super) fn event_path(source: &str, id: &str) -> String {
    format!("/admin/events/{}/{}", encode(source), encode(id))
}

/// A button that posts an action, with the session's form token (see
/// `dashboard`: a post without it is refused).
pub(super) fn action_button(path: &str, label: &str, forms: &str) -> String {
    format!(
        r#"<form class="actions" method="post" action="{}"><input type="hidden" name="form_token" value="{}"><button type="submit">{label}</button></form>"#,
        escape(path),
        escape(forms)
    )
}

/// The outcome of the action just taken, if any.
pub(super) fn notice_html(notice: Option<&str>) -> String {
    notice.map_or(String::new(), |n| {
        format!(r#"<p class="notice"><strong>{}</strong></p>"#, escape(n))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_indented_with_every_token_as_sent() {
        let sent = r#"{"id":"evt_1","n":12345678901234567890,"s":"a, \"b\": {c}","e":{},"l":[1, [ ] ,{"k":null}]}"#;
        assert_eq!(
            indent_json(sent).unwrap(),
            "{\n  \"id\": \"evt_1\",\n  \"n\": 12345678901234567890,\n  \"s\": \"a, \\\"b\\\": {c}\",\n  \"e\": {},\n  \"l\": [\n    1,\n    [],\n    {\n      \"k\": null\n    }\n  ]\n}"
        );
    }

    #[test]
    fn a_payload_is_escaped_and_collapsed_when_large() {
        let small = payload(r#"{"x":"<script>"}"#);
        assert!(small.starts_with("<details open>") && small.contains(", JSON"));
        assert!(small.contains("&lt;script&gt;") && !small.contains("<script>"));
        let text = payload("a=1&b=<2>");
        assert!(!text.contains("JSON") && text.contains("a=1&amp;b=&lt;2&gt;"));
        let large = payload(&format!(r#"{{"pad":"{}"}}"#, "x".repeat(20_000)));
        assert!(large.starts_with("<details><summary>"));
    }

    #[test]
    fn deep_nesting_is_shown_as_sent_not_indented() {
        let deep = format!("{}{}", "[".repeat(5_000), "]".repeat(5_000));
        assert_eq!(indent_json(&deep), None);
        let shown = payload(&deep);
        assert!(shown.len() < 20_000 && shown.contains(&"[".repeat(5_000)));
        let nested = format!("{}1{}", "[".repeat(32), "]".repeat(32));
        assert!(indent_json(&nested).is_some(), "32 deep is indented");
    }

    #[test]
    fn indentation_adds_a_bounded_number_of_bytes_however_wide_and_deep() {
        // 31 deep, then about 500,000 numbers: each would get its own line
        // of 62 spaces, some 35 MB.
        let wide = format!(
            "{}{}0{}",
            "[".repeat(31),
            "0,".repeat(500_000),
            "]".repeat(31)
        );
        let indented = indent_json(&wide).unwrap();
        assert!(indented.len() <= wide.len() + INDENT_MAX_EXTRA_BYTES + 128);
        assert!(
            indented.ends_with(&format!("0,0{}", "]".repeat(31))),
            "the rest as sent"
        );
        assert!(payload(&wide).len() < 2 * 1024 * 1024);
    }

    #[test]
    fn markup_in_values_is_escaped() {
        assert_eq!(
            escape(r#"<img src=x onerror="alert('1')">&"#),
            "&lt;img src=x onerror=&quot;alert(&#39;1&#39;)&quot;&gt;&amp;"
        );
        assert_eq!(text(None), "–");
        assert_eq!(code("<b>"), "<td><code>&lt;b&gt;</code></td>");
    }
}
