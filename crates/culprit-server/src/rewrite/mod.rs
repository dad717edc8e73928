//! Catalog queries of real clients that DataFusion cannot plan as written,
//! rewritten on their parsed tree into queries with the same answer over
//! culprit's catalog: one file per client, naming the client, the query
//! and why each rewrite is exact there. Only statements that read
//! `pg_catalog` or `information_schema` are touched; user queries over
//! culprit's tables keep DataFusion's own semantics.
//!
//! The rules add to datafusion-postgres's own (which already turn
//! correlated subqueries at the top of a projection into NULL); these reach
//! into `CASE` branches, `ARRAY(subquery)`, functions in `FROM`, and `user`.
//! All run in one walk of the tree, each expression after its parts.

mod ast;
mod column_names;
pub mod grafana;
mod pgcli;
mod pgjdbc;
mod psql;
mod psqlodbc;
mod sqlalchemy;

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Query, Statement, VisitMut, VisitorMut};

/// The rules of every client, in one walk; `changed` once any applied.
struct Rules {
    changed: bool,
}

impl VisitorMut for Rules {
    type Break = ();

    /// culprit's own catalog tables (`catalog.rs`) are found unqualified,
    /// as PostgreSQL finds them on its path: `pg_stat_activity`.
    /// `information_schema.views` is culprit's (DataFusion's lists every
    /// table as a view): `pg_catalog.culprit_information_schema_views`.
    fn pre_visit_relation(
        &mut self,
        r: &mut datafusion::sql::sqlparser::ast::ObjectName,
    ) -> ControlFlow<()> {
        use datafusion::sql::sqlparser::ast::{Ident, ObjectName, ObjectNamePart};
        if let [ObjectNamePart::Identifier(s), ObjectNamePart::Identifier(t)] = r.0.as_slice() {
            if s.value.eq_ignore_ascii_case("information_schema")
                && t.value.eq_ignore_ascii_case("views")
            {
                *r = ObjectName(vec![
                    ObjectNamePart::Identifier(Ident::new("pg_catalog")),
                    ObjectNamePart::Identifier(Ident::new(
                        crate::catalog::INFORMATION_SCHEMA_VIEWS,
                    )),
                ]);
                self.changed = true;
            }
        }
        if let [ObjectNamePart::Identifier(t)] = r.0.as_slice() {
            if t.value.eq_ignore_ascii_case("pg_stat_activity") {
                *r = ObjectName(vec![
                    ObjectNamePart::Identifier(Ident::new("pg_catalog")),
                    ObjectNamePart::Identifier(t.clone()),
                ]);
                self.changed = true;
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        sqlalchemy::keep_function_names(q);
        self.changed |= pgcli::keep_names(q)
            | grafana::rewrite_query(q)
            | pgjdbc::unique_names(q)
            | psqlodbc::series_in_projection(q);
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        // The rules match disjoint expressions: at most one applies.
        self.changed |= psql::rewrite_expr(e)
            || pgcli::rewrite_expr(e)
            || grafana::rewrite_expr(e)
            || sqlalchemy::rewrite_expr(e)
            || sqlalchemy::like_escape(e)
            || sqlalchemy::generate_subscripts(e)
            || sqlalchemy::view_definition(e)
            || sqlalchemy::table_is_visible(e)
            || pgjdbc::rewrite_expr(e)
            || pgjdbc::field_access(e);
        ControlFlow::Continue(())
    }
}

pub use column_names::postgres_names;

/// A catalog statement rewritten for DataFusion; `None` when there is
/// nothing to change.
pub fn catalog_query(stmt: &Statement) -> Option<Statement> {
    if !ast::reads_catalog(stmt) {
        return None;
    }
    let mut rewritten = stmt.clone();
    let mut rules = Rules { changed: false };
    let _ = VisitMut::visit(&mut rewritten, &mut rules);
    rules.changed.then_some(rewritten)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn one(sql: &str) -> Statement {
        Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0)
    }

    fn rw(sql: &str) -> String {
        catalog_query(&one(sql)).map_or("unchanged".into(), |s| s.to_string())
    }

    #[test]
    fn user_queries_are_untouched() {
        assert_eq!(
            rw("SELECT user, (SELECT max(x) FROM t WHERE t.a = q.a) FROM queries q"),
            "unchanged"
        );
    }

    #[test]
    fn subqueries_over_empty_tables_are_null() {
        assert_eq!(
            rw("SELECT CASE WHEN a.atthasdef THEN (SELECT d.adbin FROM pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid) ELSE NULL END FROM pg_catalog.pg_attribute a"),
            "SELECT CASE WHEN a.atthasdef THEN NULL ELSE NULL END FROM pg_catalog.pg_attribute a"
        );
    }

    #[test]
    fn removed_subqueries_keep_their_parameters() {
        assert_eq!(
            rw("SELECT CASE WHEN a.attidentity <> $1 THEN (SELECT json_build_object($2::VARCHAR, s.seqstart) FROM pg_catalog.pg_sequence s WHERE a.attidentity <> $3) END FROM pg_catalog.pg_attribute a"),
            "SELECT CASE WHEN a.attidentity <> $1 THEN CASE WHEN $2::VARCHAR IS NULL OR $3 IS NULL THEN NULL END END FROM pg_catalog.pg_attribute a"
        );
    }

    #[test]
    fn other_catalog_subqueries_are_aggregated() {
        assert_eq!(
            rw("SELECT CASE WHEN (SELECT t.typcollation FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid) <> 0 THEN 1 END FROM pg_catalog.pg_attribute a"),
            "SELECT CASE WHEN (SELECT max(t.typcollation) FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid) <> 0 THEN 1 END FROM pg_catalog.pg_attribute a"
        );
    }

    #[test]
    fn set_returning_series_in_a_projection() {
        assert_eq!(
            rw("SELECT c.conname, generate_series(array_lower(conkey, 1), array_upper(conkey, 1)) AS i FROM pg_catalog.pg_constraint c"),
            "SELECT c.conname, unnest(generate_series(CASE WHEN cardinality(conkey) > 0 THEN 1 END, array_upper(conkey, 1))) AS i FROM pg_catalog.pg_constraint c"
        );
    }

    #[test]
    fn functions_in_from_and_user() {
        assert_eq!(
            rw("SELECT n FROM pg_catalog.pg_namespace WHERE n IN (SELECT CASE WHEN s[i] = '\"$user\"' THEN user ELSE s[i] END FROM generate_series(1, 2) AS i, string_to_array(current_setting('search_path'), ',') s)"),
            "SELECT n FROM pg_catalog.pg_namespace WHERE n IN (SELECT CASE WHEN s[i] = '\"$user\"' THEN session_user() ELSE s[i] END FROM generate_series(1, 2) AS i (i), (SELECT string_to_array(current_setting('search_path'), ',') AS s) s)"
        );
    }

    #[test]
    fn reloptions_and_array_of_unnest() {
        assert_eq!(
            rw("SELECT pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x from pg_catalog.unnest(tc.reloptions) x), ', ') FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)"),
            "SELECT NULL FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)"
        );
    }

    #[test]
    fn array_lower_of_a_list() {
        assert_eq!(
            rw("SELECT array_lower(c.x, 1), array_lower(c.x, 2) FROM pg_catalog.pg_class c"),
            "SELECT CASE WHEN cardinality(c.x) > 0 THEN 1 END, array_lower(c.x, 2) FROM pg_catalog.pg_class c"
        );
    }

    #[test]
    fn pgjdbc_regproc_comparison() {
        assert_eq!(
            rw("SELECT typinput = (SELECT max(oid) FROM pg_catalog.pg_proc WHERE proname = 'pg_catalog.array_in') AS is_array FROM pg_catalog.pg_type"),
            "SELECT (CAST(typinput AS TEXT) = regexp_replace('pg_catalog.array_in', '^pg_catalog\\.', '') OR coalesce(CAST(typinput AS TEXT) = CAST((SELECT max(oid) FROM pg_catalog.pg_proc WHERE proname = 'pg_catalog.array_in') AS TEXT), false)) AS is_array FROM pg_catalog.pg_type"
        );
        assert_eq!(
            rw("SELECT NULL AS a, n.nspname, NULL, NULL, NULL FROM pg_catalog.pg_namespace n"),
            "SELECT NULL AS a, n.nspname, NULL, NULL AS NULL_2, NULL AS NULL_3 FROM pg_catalog.pg_namespace n"
        );
        assert_eq!(
            rw("SELECT (information_schema._pg_expandarray(i.indkey)).n, (i.keys).x FROM pg_catalog.pg_index i"),
            "SELECT get_field(information_schema._pg_expandarray(i.indkey), 'n'), get_field(i.keys, 'x') FROM pg_catalog.pg_index i"
        );
    }

    #[test]
    fn sqlalchemy_generate_subscripts() {
        assert_eq!(
            rw("SELECT unnest(i.indkey) AS attnum, generate_subscripts(i.indkey, 1) AS ord, generate_subscripts(i.indkey, $2) FROM pg_catalog.pg_index i"),
            "SELECT unnest(i.indkey) AS attnum, unnest(range(1, CAST(cardinality(i.indkey) AS BIGINT) + 1)) AS ord, unnest(range(1, CAST(cardinality(i.indkey) AS BIGINT) + 1 + 0 * CAST($2 AS BIGINT))) FROM pg_catalog.pg_index i"
        );
    }

    #[test]
    fn pgcli_function_arrays() {
        assert_eq!(
            rw("SELECT p.proargnames, prorettype::regtype::text FROM pg_catalog.pg_proc p"),
            "SELECT culprit_text_array(p.proargnames) AS proargnames, culprit_regtype_name(CAST(prorettype AS TEXT)) FROM pg_catalog.pg_proc p"
        );
    }

    /// pgjdbc's `getFunctionColumns` reads `proallargtypes` as an array of
    /// longs; pgcli casts it to type names.
    #[test]
    fn pgjdbc_all_argument_types() {
        assert_eq!(
            rw("SELECT p.proargmodes, p.proallargtypes, p.oid FROM pg_catalog.pg_proc p"),
            "SELECT culprit_text_array(p.proargmodes) AS proargmodes, culprit_oid_array(p.proallargtypes) AS proallargtypes, p.oid FROM pg_catalog.pg_proc p"
        );
        assert_eq!(
            rw("SELECT p.proallargtypes::regtype[] FROM pg_catalog.pg_proc p"),
            "SELECT culprit_regtype_names(p.proallargtypes) FROM pg_catalog.pg_proc p"
        );
    }
}
