//! The dashboard's HTML: one page shell, tables, and escaping. Every value
//! from storage or a request passes through [`escape`] (or a helper that
//! calls it) before it reaches a page.

use worker::{js_sys, Headers, Response, Result};

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

/// Milliseconds since the epoch as an ISO time; a dash when absent.
pub fn time(ms: Option<i64>) -> String {
    match ms {
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

#[cfg(test)]
mod tests {
    use super::*;

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
