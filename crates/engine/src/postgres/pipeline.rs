//! Statements on one connection, sent in the order written and answered
//! together: one round trip for a whole transaction. tokio-postgres puts a
//! statement's messages on the connection's queue when its future is first
//! polled (`Client::send` does not wait), and Postgres answers in the order
//! it receives. So [`Pipeline::send`] polls each statement once, at once:
//! the order of the calls is the order on the wire, by construction, not by
//! how a join happens to poll its futures. Should one statement fail,
//! Postgres aborts the transaction, refuses the statements after it, and
//! answers the `COMMIT` with a rollback.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::task::noop_waker_ref;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Error, Row};

/// A statement's answer: its rows (none for a command).
pub(crate) type Answer = Result<Vec<Row>, Error>;

type Pending<'a> = Pin<Box<dyn Future<Output = Answer> + 'a>>;

/// What is sent and not yet answered, in order.
pub(crate) struct Pipeline<'a> {
    client: &'a Client,
    sent: Vec<(Pending<'a>, Option<Answer>)>,
    /// Whether a statement failed before it could be sent (a value the
    /// client could not encode, a closed connection): a `COMMIT` after it
    /// would commit the others without it.
    broken: bool,
}

/// Where a statement's answer is, in [`Pipeline::answers`]: neither `Copy`
/// nor `Clone`, so that each answer is taken once.
pub(crate) struct Sent(usize);

impl<'a> Pipeline<'a> {
    pub(crate) fn new(client: &'a Client) -> Pipeline<'a> {
        Pipeline {
            client,
            sent: Vec::new(),
            broken: false,
        }
    }

    /// Sends `sql` with typed parameters, as one unnamed statement (no
    /// prepared statement outlives it: a pooler in transaction mode may
    /// give the next transaction another server connection).
    pub(crate) fn query(
        &mut self,
        sql: &'a str,
        params: &'a [(&'a (dyn ToSql + Sync), Type)],
    ) -> Sent {
        let client = self.client;
        self.send(Box::pin(client.query_typed(sql, params)))
    }

    /// Sends a write: [`Pipeline::query`] for a statement whose rows are not
    /// read. Its result columns are never described, so no type of theirs
    /// is looked up (tokio-postgres would prepare a statement for one it
    /// does not know, after the `COMMIT`).
    pub(crate) fn execute(
        &mut self,
        sql: &'a str,
        params: &'a [(&'a (dyn ToSql + Sync), Type)],
    ) -> Sent {
        let client = self.client;
        self.send(Box::pin(async move {
            client.execute_typed(sql, params).await.map(|_| Vec::new())
        }))
    }

    /// Ends the transaction: `COMMIT`, or `ROLLBACK` if a statement before
    /// it could not be sent.
    pub(crate) fn commit(&mut self) -> Sent {
        self.simple(if self.broken { "ROLLBACK" } else { "COMMIT" })
    }

    /// Sends `sql` as a simple query (no parameters; it may hold several
    /// statements, run in order).
    pub(crate) fn simple(&mut self, sql: &'a str) -> Sent {
        let client = self.client;
        self.send(Box::pin(async move {
            client.batch_execute(sql).await.map(|()| Vec::new())
        }))
    }

    /// Polls `pending` once, which puts its messages on the connection's
    /// queue behind those sent before it.
    fn send(&mut self, mut pending: Pending<'a>) -> Sent {
        let mut cx = Context::from_waker(noop_waker_ref());
        let answered = match pending.as_mut().poll(&mut cx) {
            Poll::Ready(answer) => {
                self.broken |= answer.is_err();
                Some(answer)
            }
            Poll::Pending => None,
        };
        self.sent.push((pending, answered));
        Sent(self.sent.len() - 1)
    }

    /// Every statement's answer, in the order sent, once all have come.
    pub(crate) async fn answers(mut self) -> Answers {
        poll_fn(|cx| {
            let mut waiting = false;
            for (pending, answered) in &mut self.sent {
                if answered.is_some() {
                    continue;
                }
                match pending.as_mut().poll(cx) {
                    Poll::Ready(answer) => *answered = Some(answer),
                    Poll::Pending => waiting = true,
                }
            }
            if waiting {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
        Answers(
            self.sent
                .into_iter()
                .map(|(_, answered)| answered)
                .collect(),
        )
    }
}

/// The answers of a [`Pipeline`], each taken once.
pub(crate) struct Answers(Vec<Option<Answer>>);

impl Answers {
    /// The answer to `sent`, which is moved in: taken once.
    ///
    /// # Panics
    /// Given a `Sent` of another pipeline, whose answer this one lacks.
    pub(crate) fn take(&mut self, sent: Sent) -> Answer {
        let answer = self.0.get_mut(sent.0).and_then(Option::take);
        answer.expect("a statement sent in this pipeline")
    }
}
