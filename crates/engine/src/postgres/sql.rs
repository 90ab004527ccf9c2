//! The engine's statements as Postgres runs them: SQLite's `?1` becomes
//! `$1`, and each value is sent with its type, so that every statement is a
//! one-shot typed query (one round trip, no prepared statement: Hyperdrive
//! runs them without pinning a connection).

use tokio_postgres::types::{ToSql, Type};

use crate::d1::Value;

/// `sql` with each `?N` outside quotes written `$N`. An effect's SQL is
/// written once, for both stores; only the placeholders differ.
pub(crate) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push('$');
                continue;
            }
            None => {}
        }
        out.push(c);
    }
    out
}

/// A NULL of a type Postgres infers from where it is used.
static NULL: Option<String> = None;

/// Each value with the type it is sent as: text, bigint, double, or a NULL
/// whose type Postgres infers (`unknown`).
pub(crate) fn typed(params: &[Value]) -> Vec<(&(dyn ToSql + Sync), Type)> {
    params
        .iter()
        .map(|value| -> (&(dyn ToSql + Sync), Type) {
            match value {
                Value::Text(text) => (text, Type::TEXT),
                Value::Int(n) => (n, Type::INT8),
                Value::Real(n) => (n, Type::FLOAT8),
                Value::Null => (&NULL, Type::UNKNOWN),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_outside_quotes_only() {
        assert_eq!(
            numbered("UPDATE t SET a = ?1, b = '?2', \"c?3\" = ?10 WHERE d = ?2"),
            "UPDATE t SET a = $1, b = '?2', \"c?3\" = $10 WHERE d = $2"
        );
        assert_eq!(numbered("SELECT 'it''s ?1', ?1"), "SELECT 'it''s ?1', $1");
        // A bare `?` is not SQLite's numbered form: left for Postgres to refuse.
        assert_eq!(numbered("SELECT ?"), "SELECT ?");
    }

    #[test]
    fn each_value_goes_with_its_type() {
        let values = [
            Value::Text("a".into()),
            Value::Int(1),
            Value::Real(0.5),
            Value::Null,
        ];
        let types: Vec<Type> = typed(&values).into_iter().map(|(_, t)| t).collect();
        assert_eq!(types, [Type::TEXT, Type::INT8, Type::FLOAT8, Type::UNKNOWN]);
    }
}
