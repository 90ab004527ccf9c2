//! Settings that are tables: `[vars.SOURCES]`, `[vars.DESTINATIONS]`. Read
//! as the object wrangler.toml makes, or as a string holding the same JSON
//! (a `.dev.vars` line, or a secret: a destination URL may carry
//! credentials that have no place in wrangler.toml).

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use worker::wasm_bindgen::JsValue;
use worker::{js_sys, Env};

use super::ConfigError;

/// A table's entries in the order written, values unread: each is checked
/// by the code that knows its shape, with an error naming it.
pub type Entries = Vec<(String, Box<RawValue>)>;

/// The table `name`; `None` when it is unset.
pub fn table(env: &Env, name: &str) -> Result<Option<Entries>, ConfigError> {
    let value = js_sys::Reflect::get(env, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED);
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    let json = if value.is_object() {
        js_sys::JSON::stringify(&value)
            .ok()
            .and_then(|s| s.as_string())
    } else {
        value.as_string()
    };
    json.as_deref().and_then(parse).map(Some).ok_or_else(|| {
        ConfigError(format!(
            "{name} must be a table ([vars.{name}] in wrangler.toml) or its JSON"
        ))
    })
}

/// A decoding error without the values it quotes (`invalid type: string
/// "…"`): a setting's value may be a secret pasted in the wrong place.
pub fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for (i, part) in message.split('"').enumerate() {
        out.push_str(if i % 2 == 1 { "…" } else { part });
    }
    out
}

/// Whether `var` is a variable's name, upper-case as Cloudflare's are
/// written (A-Z, 0-9, `_`): where a setting names one, anything else is
/// likely the secret itself, pasted in its place.
pub fn is_variable_name(var: &str) -> bool {
    var.bytes().next().is_some_and(|b| b.is_ascii_uppercase())
        && var
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn parse(json: &str) -> Option<Entries> {
    serde_json::from_str::<Table>(json)
        .ok()
        .map(|table| table.0)
}

/// A JSON object as [`Entries`]: a map type would cost more wasm.
struct Table(Entries);

impl<'de> Deserialize<'de> for Table {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Collect;
        impl<'de> Visitor<'de> for Collect {
            type Value = Table;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Table, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Table(entries))
            }
        }
        deserializer.deserialize_map(Collect)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_reads_in_order_with_values_unread() {
        let entries = parse(r#"{"b":{"x":1},"a":{"y":[2]}}"#).unwrap();
        let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(entries[1].1.get(), r#"{"y":[2]}"#);
        assert!(parse("[1]").is_none());
        assert!(parse("not json").is_none());
    }
}
