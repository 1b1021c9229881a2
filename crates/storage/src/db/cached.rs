//! Statements kept prepared on their connection although diesel would not
//! keep them ([`cached`]).
//!
//! diesel caches a prepared statement only when its text cannot vary from
//! call to call: every `UPDATE`, every `sql_query` and every statement with
//! a SQL literal is prepared again on each execution, unnamed. On an
//! `AsyncPgConnection` that costs a round trip (Parse and Describe, answered,
//! then Bind and Execute) and a plan per call, and diesel-async holds the
//! connection's statement cache while it waits for the answer, so every
//! statement pipelined behind it waits too: a batch of five such statements
//! sent "in one round trip" takes six. A statement whose text is fixed is
//! safe to keep: the cache is keyed by the SQL text and the bind types, so a
//! statement that did vary would only take more entries.
//!
//! [`cached`] marks one: its first execution on a connection prepares it
//! under a name, later ones only bind and execute (one round trip, pipelined
//! for real) and use PostgreSQL's plan cache. With
//! `BC_DB_PREPARED_STATEMENTS=off` the connection caches nothing and this
//! changes nothing.

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, BoxedSqlQuery, Query, QueryFragment, QueryId, SqlQuery};
use diesel::result::QueryResult;
use diesel::serialize::ToSql;
use diesel::sql_types::HasSqlType;

/// A statement of fixed text, kept prepared on its connection (see the
/// module).
#[derive(Debug, Clone, Copy)]
pub struct Cached<Q>(Q);

/// Marks `query` (whose SQL text must not vary between calls: its values
/// are bound) to be kept prepared on its connection.
pub fn cached<Q>(query: Q) -> Cached<Q> {
    Cached(query)
}

/// `diesel::sql_query(text)` kept prepared; `text` must be fixed, every
/// value bound with [`Cached::bind`].
pub fn cached_sql<'f>(text: impl Into<String>) -> Cached<BoxedSqlQuery<'f, Pg, SqlQuery>> {
    Cached(diesel::sql_query(text).into_boxed())
}

impl<'f> Cached<BoxedSqlQuery<'f, Pg, SqlQuery>> {
    /// Binds the next value, as `SqlQuery::bind` does.
    pub fn bind<ST, V>(self, value: V) -> Self
    where
        Pg: HasSqlType<ST>,
        V: ToSql<ST, Pg> + Send + 'f,
        ST: Send + 'f,
    {
        Cached(self.0.bind::<ST, V>(value))
    }
}

impl<Q: QueryFragment<Pg>> QueryFragment<Pg> for Cached<Q> {
    fn walk_ast<'b>(&'b self, pass: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        self.0.walk_ast(pass)
    }

    fn is_safe_to_cache_prepared(&self, _backend: &Pg) -> QueryResult<bool> {
        Ok(true)
    }
}

impl<Q> QueryId for Cached<Q> {
    type QueryId = ();
    // Keyed by its SQL text and bind types, never by a type.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q: Query> Query for Cached<Q> {
    type SqlType = Q::SqlType;
}
