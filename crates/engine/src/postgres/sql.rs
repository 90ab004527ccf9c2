//! The engine's statements as Postgres runs them: SQLite's `?1` becomes
//! `$1` (see `placeholders`), and each value is sent as text of a type Postgres infers from
//! where it is used, so that every statement is a one-shot query (one round
//! trip, no prepared statement: Hyperdrive runs them without pinning a
//! connection).

use bytes::BytesMut;
use tokio_postgres::types::{to_sql_checked, Format, IsNull, ToSql, Type};

use super::placeholders::{code_end, highest, numbered, used};
use crate::d1::{shown, Statement, Value};

/// The statement as Postgres is sent it: its placeholders numbered, and a
/// row lock ([`Statement::for_update`]) with its `FOR UPDATE`, which D1's
/// batch leaves the statement out for (`store::without_row_locks`).
pub(crate) fn text(statement: &Statement) -> String {
    let sql = numbered(statement.sql);
    if !statement.for_update {
        return sql;
    }
    // Before a trailing comment, which would swallow it, and a `;`.
    let end = code_end(&sql);
    let code = sql[..end].trim_end_matches(|c: char| c == ';' || c.is_whitespace());
    format!("{code} FOR UPDATE{}", &sql[end..])
}

/// A value sent as text, its type left to Postgres to infer from where it
/// is used, as libpq sends them: the same statement binds an integer to a
/// `bigint` or a `text` column, and a string to a `timestamptz`, as it does
/// on D1.
#[derive(Debug)]
pub(crate) struct Param<'a>(&'a Value);

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
            Value::Null => return Ok(IsNull::Yes),
            Value::Text(text) => out.extend_from_slice(text.as_bytes()),
            Value::Int(n) => out.extend_from_slice(n.to_string().as_bytes()),
            // The shortest text that reads back as the same double.
            Value::Real(n) => out.extend_from_slice(n.to_string().as_bytes()),
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    fn encode_format(&self, _: &Type) -> Format {
        Format::Text
    }

    to_sql_checked!();
}

/// `values` as parameters.
pub(crate) fn params(values: &[Value]) -> Vec<Param<'_>> {
    values.iter().map(Param).collect()
}

/// The parameters as a typed query takes them, each of type `unknown`.
pub(crate) fn typed<'a>(params: &'a [Param<'a>]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params
        .iter()
        .map(|param| (param as &(dyn ToSql + Sync), Type::UNKNOWN))
        .collect()
}

/// [`typed`], for `sql`: a value it does not use goes as `text`, which
/// Postgres accepts unused (an `unknown` one it cannot type, and refuses
/// the statement), as D1 accepts it.
pub(crate) fn typed_for<'a>(
    sql: &str,
    params: &'a [Param<'a>],
) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    let used = used(sql, params.len());
    let ty = |i: usize| if used[i] { Type::UNKNOWN } else { Type::TEXT };
    let params = params.iter().enumerate();
    params
        .map(|(i, param)| (param as &(dyn ToSql + Sync), ty(i)))
        .collect()
}

/// Why a statement is not sent at all: what the client would refuse before
/// the server sees it (a pipelined `COMMIT` would then commit the rest
/// without it), fewer values than its placeholders (an app's bug, whatever
/// words the server would find for it), a write marked as a row lock.
/// Checked before the transaction's writes go.
pub(crate) fn unsendable(statement: &Statement) -> Option<String> {
    let (sql, bound) = (statement.sql, statement.params.len());
    let uses = highest(sql);
    if sql.contains('\0') {
        Some("it holds a NUL byte".into())
    } else if bound > i16::MAX as usize {
        Some(format!("it binds {bound} values, more than Postgres takes"))
    } else if uses > bound {
        let values = if bound == 1 { "value" } else { "values" };
        Some(format!("it uses ?{uses} but binds {bound} {values}"))
    } else {
        statement.misplaced_lock()
    }
}

/// The first of an effect's `writes` not to be sent, and why, naming it.
pub(crate) fn refusal(writes: &[&Statement]) -> Option<String> {
    writes.iter().enumerate().find_map(|(i, write)| {
        let why = unsendable(write)?;
        let which = format!("the effect's statement {} of {}", i + 1, writes.len());
        Some(format!("{which} is not sent: {why}: {}", shown(write.sql)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_locks_exactly_the_rows_d1_leaves_out() {
        let batch = [
            Statement::new("SELECT 1 FROM a WHERE id = ?1;\n", vec![]).for_update(),
            Statement::new("UPDATE a SET n = n + 1 WHERE id = ?1", vec![]),
            Statement::new("SELECT 'FOR UPDATE' WHERE ?1 = 1", vec![]),
            Statement::new("select 2 -- lock it\n", vec![]).for_update(),
        ];
        let d1 = crate::store::without_row_locks(&batch).unwrap();
        for statement in &batch {
            let locks = text(statement) != numbered(statement.sql);
            assert_eq!(locks, !d1.contains(statement), "{}", statement.sql);
        }
        assert_eq!(
            text(&batch[0]),
            "SELECT 1 FROM a WHERE id = $1 FOR UPDATE\n"
        );
        assert_eq!(text(&batch[2]), "SELECT 'FOR UPDATE' WHERE $1 = 1");
        // A trailing comment does not swallow the lock.
        assert_eq!(text(&batch[3]), "select 2 FOR UPDATE -- lock it\n");
    }

    #[test]
    fn each_value_goes_as_text_of_an_inferred_type() {
        let values = [
            Value::Text("a'b".into()),
            Value::Int(-9_007_199_254_740_993),
            Value::Real(0.1),
            Value::Null,
        ];
        let mut texts = Vec::new();
        for param in params(&values) {
            let mut out = BytesMut::new();
            let null = param.to_sql(&Type::UNKNOWN, &mut out).unwrap();
            assert!(matches!(param.encode_format(&Type::INT8), Format::Text));
            texts
                .push(matches!(null, IsNull::No).then(|| String::from_utf8(out.to_vec()).unwrap()));
        }
        let texts: Vec<Option<&str>> = texts.iter().map(Option::as_deref).collect();
        assert_eq!(
            texts,
            [Some("a'b"), Some("-9007199254740993"), Some("0.1"), None]
        );
        let params = params(&values);
        assert!(typed(&params).iter().all(|(_, ty)| *ty == Type::UNKNOWN));
        let sent = |sql: &'static str| unsendable(&Statement::new(sql, values.to_vec()));
        assert_eq!(sent("SELECT ?1, ?4, '?9'"), None);
        assert_eq!(sent("SELECT '\0'"), Some("it holds a NUL byte".into()));
        let five = sent("SELECT ?5");
        assert_eq!(five.as_deref(), Some("it uses ?5 but binds 4 values"));
    }
}
