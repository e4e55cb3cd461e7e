//! The SQL dialect the store writes for SQLite: sea-query's `SqliteQueryBuilder` with one change, a
//! `LIMIT` written into the text (`LIMIT 8`) instead of bound (`LIMIT ?`).
//!
//! Why: SQLite (3.51, bundled) compiles a bound `LIMIT` into the statement's program as a
//! constant and marks the parameter, so that binding it again expires the program
//! (`computeLimitRegisters` calls `sqlite3ExprIsInteger` with the parser). The driver clears a
//! cached statement's bindings after every run, so each run of a statement with `LIMIT ?` compiled
//! it again: the claim, every paged list. With the limit in the text, each distinct limit is one
//! statement in the driver's cache, compiled once. A limit is a `u64` the store chose, never text
//! from outside, so writing it in the SQL opens nothing.
//!
//! Everything else is `SqliteQueryBuilder`'s: each of its overrides is forwarded to it. The two
//! that build nested statements (`prepare_query_statement`, `prepare_union_statement`) are written
//! out here with `self`, so that a subquery's `LIMIT` (the claim's candidates) is written the same
//! way; the tests hold the output to `SqliteQueryBuilder`'s, limit aside.

use sea_query::{
    BinOper, EscapeBuilder, ExplainStatement, Expr, LockClause, Oper, OperLeftAssocDecider,
    OrderExpr, PrecedenceDecider, QueryBuilder, Quote, QuotedBuilder, SelectInto, SelectStatement,
    SqlWriter, SqlWriterValues, SqliteQueryBuilder, SubQueryOper, SubQueryStatement,
    TableRefBuilder, UnionType, Value, WithClause,
};
use std::fmt::Write;

/// `SqliteQueryBuilder`, with limits written into the text. See the module's header.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SqliteSql;

impl QueryBuilder for SqliteSql {
    fn prepare_select_limit_offset(&self, select: &SelectStatement, sql: &mut impl SqlWriter) {
        // `SelectStatement` keeps its limit private; the statement is asked for it through the
        // default writer, which binds it, and the bound value is written here instead. (The
        // writers are strings in memory, whose writes cannot fail; sea-query's own builders
        // unwrap them.)
        let mut probe = SqlWriterValues::new("?", false);
        SqliteQueryBuilder.prepare_select_limit_offset(select, &mut probe);
        let (text, values) = probe.into_parts();
        let mut rest = text.as_str();
        for value in values.0 {
            let Some(at) = rest.find('?') else { break };
            let clause = &rest[..at];
            let _ = sql.write_str(clause);
            match value {
                Value::BigUnsigned(Some(limit)) if clause.trim_end().ends_with("LIMIT") => {
                    let _ = write!(sql, "{limit}");
                }
                value => sql.push_param(value, self),
            }
            rest = &rest[at + 1..];
        }
        let _ = sql.write_str(rest);
    }

    fn prepare_query_statement(&self, query: &SubQueryStatement, sql: &mut impl SqlWriter) {
        match query {
            SubQueryStatement::SelectStatement(stmt) => self.prepare_select_statement(stmt, sql),
            SubQueryStatement::InsertStatement(stmt) => self.prepare_insert_statement(stmt, sql),
            SubQueryStatement::UpdateStatement(stmt) => self.prepare_update_statement(stmt, sql),
            SubQueryStatement::DeleteStatement(stmt) => self.prepare_delete_statement(stmt, sql),
            SubQueryStatement::WithStatement(stmt) => self.prepare_with_query(stmt, sql),
        }
    }

    fn prepare_union_statement(
        &self,
        union_type: UnionType,
        select_statement: &SelectStatement,
        sql: &mut impl SqlWriter,
    ) {
        let _ = sql.write_str(match union_type {
            UnionType::Intersect => " INTERSECT ",
            UnionType::Distinct => " UNION ",
            UnionType::Except => " EXCEPT ",
            UnionType::All => " UNION ALL ",
            // A kind this file does not know yet: sea-query's own, limit bound.
            other => {
                return SqliteQueryBuilder.prepare_union_statement(other, select_statement, sql);
            }
        });
        self.prepare_select_statement(select_statement, sql);
    }

    fn prepare_value(&self, value: Value, sql: &mut impl SqlWriter) {
        sql.push_param(value, self);
    }

    // Forwarded as they are.

    fn prepare_select_lock(&self, lock: &LockClause, sql: &mut impl SqlWriter) {
        SqliteQueryBuilder.prepare_select_lock(lock, sql);
    }

    fn prepare_select_into(&self, into: &SelectInto, sql: &mut impl SqlWriter) {
        SqliteQueryBuilder.prepare_select_into(into, sql);
    }

    fn prepare_sub_query_oper(&self, oper: &SubQueryOper, sql: &mut impl SqlWriter) {
        SqliteQueryBuilder.prepare_sub_query_oper(oper, sql);
    }

    fn prepare_bin_oper(&self, bin_oper: &BinOper, sql: &mut impl SqlWriter) {
        SqliteQueryBuilder.prepare_bin_oper(bin_oper, sql);
    }

    fn prepare_explain_statement(&self, explain: &ExplainStatement, sql: &mut impl SqlWriter) {
        SqliteQueryBuilder.prepare_explain_statement(explain, sql);
    }

    fn prepare_with_clause_recursive_options(&self, with: &WithClause, sql: &mut impl SqlWriter) {
        SqliteQueryBuilder.prepare_with_clause_recursive_options(with, sql);
    }

    fn prepare_order_expr(&self, order_expr: &OrderExpr, sql: &mut impl SqlWriter) {
        SqliteQueryBuilder.prepare_order_expr(order_expr, sql);
    }

    fn greatest_function(&self) -> &str {
        SqliteQueryBuilder.greatest_function()
    }

    fn least_function(&self) -> &str {
        SqliteQueryBuilder.least_function()
    }

    fn char_length_function(&self) -> &str {
        SqliteQueryBuilder.char_length_function()
    }

    fn insert_default_values(&self, rows: u32, sql: &mut impl SqlWriter) {
        SqliteQueryBuilder.insert_default_values(rows, sql);
    }
}

impl QuotedBuilder for SqliteSql {
    fn quote(&self) -> Quote {
        SqliteQueryBuilder.quote()
    }
}

impl EscapeBuilder for SqliteSql {
    fn write_escaped(&self, buffer: &mut impl Write, string: &str) {
        SqliteQueryBuilder.write_escaped(buffer, string);
    }

    fn unescape_string(&self, string: &str) -> String {
        SqliteQueryBuilder.unescape_string(string)
    }
}

impl TableRefBuilder for SqliteSql {}

impl PrecedenceDecider for SqliteSql {
    fn inner_expr_well_known_greater_precedence(&self, inner: &Expr, outer_oper: &Oper) -> bool {
        SqliteQueryBuilder.inner_expr_well_known_greater_precedence(inner, outer_oper)
    }
}

impl OperLeftAssocDecider for SqliteSql {
    fn well_known_left_associative(&self, op: &BinOper) -> bool {
        SqliteQueryBuilder.well_known_left_associative(op)
    }
}

/// SQLite's plan of `stmt` as `store` (an SQLite store) builds it (`EXPLAIN QUERY PLAN`), a step
/// a line: for the tests that hold a statement's plan.
#[cfg(test)]
pub(crate) async fn query_plan(
    store: &crate::Store,
    stmt: &impl sea_query_sqlx::SqlxBinder,
) -> Vec<String> {
    let crate::exec::Pool::Sqlite(pool, _) = &store.pool else {
        unreachable!("the plans are SQLite's");
    };
    let (sql, values) = stmt.build_sqlx(SqliteSql);
    let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as_with(
        sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")),
        values,
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| panic!("the plan of {sql}: {e}"));
    rows.into_iter().map(|(.., step)| step).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_query::{
        Alias, Cond, ExprTrait, Func, NullOrdering, OnConflict, Order, Query, SelectStatement,
        UpdateStatement,
    };

    /// What `SqliteQueryBuilder` writes, with each bound `LIMIT` written into the text: the
    /// output `SqliteSql` must give.
    fn expected(sql: &str, values: Vec<Value>) -> (String, Vec<Value>) {
        let mut out = String::new();
        let mut kept = Vec::new();
        let mut values = values.into_iter();
        let mut rest = sql;
        while let Some(at) = rest.find('?') {
            out.push_str(&rest[..at]);
            let value = values.next().unwrap();
            match value {
                Value::BigUnsigned(Some(n)) if rest[..at].ends_with("LIMIT ") => {
                    out.push_str(&n.to_string())
                }
                other => {
                    out.push('?');
                    kept.push(other);
                }
            }
            rest = &rest[at + 1..];
        }
        out.push_str(rest);
        assert!(values.next().is_none());
        (out, kept)
    }

    fn select_both(stmt: &SelectStatement) -> ((String, Vec<Value>), (String, Vec<Value>)) {
        let (ours, ours_values) = stmt.build(SqliteSql);
        let (theirs, theirs_values) = stmt.build(SqliteQueryBuilder);
        ((ours, ours_values.0), expected(&theirs, theirs_values.0))
    }

    fn update_both(stmt: &UpdateStatement) -> ((String, Vec<Value>), (String, Vec<Value>)) {
        let (ours, ours_values) = stmt.build(SqliteSql);
        let (theirs, theirs_values) = stmt.build(SqliteQueryBuilder);
        ((ours, ours_values.0), expected(&theirs, theirs_values.0))
    }

    #[test]
    fn a_limit_is_written_into_the_text_and_an_offset_stays_bound() {
        let stmt = Query::select()
            .column(Alias::new("id"))
            .from(Alias::new("tasks"))
            .and_where(Expr::col(Alias::new("state")).eq("queued"))
            .limit(8)
            .offset(40)
            .to_owned();
        let (sql, values) = stmt.build(SqliteSql);
        assert_eq!(
            sql,
            r#"SELECT "id" FROM "tasks" WHERE "state" = ? LIMIT 8 OFFSET ?"#
        );
        assert_eq!(values.0, vec![Value::from("queued"), Value::from(40u64)]);
    }

    #[test]
    fn the_claims_shape_writes_the_subquerys_limit_and_keeps_every_other_value_in_order() {
        let candidates = Query::select()
            .column(Alias::new("id"))
            .from(Alias::new("tasks"))
            .and_where(Expr::col(Alias::new("queue")).is_in(["a", "b"]))
            .and_where(Expr::col(Alias::new("run_after")).lte(5))
            .order_by(Alias::new("priority"), Order::Desc)
            .limit(3)
            .to_owned();
        let stmt = Query::update()
            .table(Alias::new("tasks"))
            .value(Alias::new("owner"), "w")
            .value(Alias::new("epoch"), Expr::col(Alias::new("epoch")).add(1))
            .and_where(Expr::col(Alias::new("id")).in_subquery(candidates))
            .and_where(Expr::col(Alias::new("note")).ne("it's"))
            .returning(Query::returning().columns([Alias::new("id")]))
            .to_owned();
        let (ours, theirs) = update_both(&stmt);
        assert_eq!(ours, theirs);
        assert!(ours.0.contains("LIMIT 3)"), "{}", ours.0);
        assert_eq!(
            ours.1,
            vec![
                Value::from("w"),
                Value::from(1i32),
                Value::from("a"),
                Value::from("b"),
                Value::from(5i32),
                Value::from("it's"),
            ]
        );
    }

    #[test]
    fn everything_but_the_limit_reads_as_sqlites_own_builder_writes_it() {
        let inner = Query::select()
            .expr(Expr::val(1))
            .from(Alias::new("events"))
            .and_where(Expr::col(Alias::new("task_id")).equals((Alias::new("t"), Alias::new("id"))))
            .limit(1)
            .to_owned();
        let other = Query::select()
            .column(Alias::new("id"))
            .from(Alias::new("archive"))
            .limit(2)
            .to_owned();
        let stmt = Query::select()
            .column((Alias::new("t"), Alias::new("id")))
            .expr(Func::greatest([
                Expr::col(Alias::new("a")),
                Expr::col(Alias::new("b")),
            ]))
            .expr(Func::char_length(Expr::col(Alias::new("title"))))
            .from_as(Alias::new("tasks"), Alias::new("t"))
            .cond_where(
                Cond::any()
                    .add(Expr::exists(inner))
                    .add(Expr::col(Alias::new("title")).like("50%'s"))
                    .add(
                        Expr::col(Alias::new("a"))
                            .add(Expr::col(Alias::new("b")))
                            .mul(2)
                            .gt(Expr::col(Alias::new("c")).sub(1).sub(1)),
                    ),
            )
            .order_by_with_nulls(Alias::new("finished_at"), Order::Desc, NullOrdering::Last)
            .union(sea_query::UnionType::All, other)
            .limit(10)
            .lock(sea_query::LockType::Update)
            .to_owned();
        let (ours, theirs) = select_both(&stmt);
        assert_eq!(ours, theirs);
        assert!(ours.0.contains("LIMIT 1)"), "{}", ours.0);
        assert!(ours.0.contains("LIMIT 2"), "{}", ours.0);
        assert!(ours.0.trim_end().ends_with("LIMIT 10"), "{}", ours.0);

        let insert = Query::insert()
            .into_table(Alias::new("tasks"))
            .columns([Alias::new("id"), Alias::new("title")])
            .values_panic([Expr::val(1), Expr::val("x")])
            .on_conflict(
                OnConflict::column(Alias::new("id"))
                    .update_column(Alias::new("title"))
                    .to_owned(),
            )
            .to_owned();
        assert_eq!(insert.build(SqliteSql), insert.build(SqliteQueryBuilder));
        let delete = Query::delete()
            .from_table(Alias::new("tasks"))
            .and_where(
                Expr::col(Alias::new("id")).in_subquery(
                    Query::select()
                        .column(Alias::new("id"))
                        .from(Alias::new("old"))
                        .to_owned(),
                ),
            )
            .to_owned();
        assert_eq!(delete.build(SqliteSql), delete.build(SqliteQueryBuilder));
    }
}
