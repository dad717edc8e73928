//! The wire types of oid columns, as PostgreSQL declares them.
//!
//! datafusion-postgres's catalog marks its oid columns with the oid-alias
//! kind it resolves names by (`pg_attribute.attrelid` as `regclass`,
//! `pg_class.relnamespace` as `regnamespace`, `atttypid` as `regtype`), and
//! arrow-pg reports that kind as the column's type. PostgreSQL declares
//! those columns `oid`, and clients act on the difference: pgjdbc looks up
//! every type it does not know with a query of its own, so DBeaver's table
//! and column lists (and `getTypeInfo`) failed before their first row. The
//! values are oids, so culprit reports them as `oid` (26); columns of
//! names marked with a kind (`pg_type.typinput`, `regproc` in PostgreSQL,
//! whose values print as the function's name) are reported as the text
//! they hold. The marks stay on the catalog's own columns, where the
//! catalog's comparisons of oids with names read them; only the result's
//! description changes. Every planned statement passes here
//! (`Pipeline::plan`), so Describe and the rows agree.

use std::collections::BTreeMap;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{Column, Result};
use datafusion::logical_expr::expr::{Alias, FieldMetadata};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};

/// The field metadata key of datafusion-postgres's oid-alias marks.
const OID_ALIAS_KEY: &str = "pg.oid_alias";

/// The mark a result column should carry instead of `f`'s, if any.
fn wire_kind(f: &Field) -> Option<&'static str> {
    let kind = f.metadata().get(OID_ALIAS_KEY)?;
    match f.data_type() {
        DataType::Int32 if kind == "oid" => None,
        DataType::Int32 => Some("oid"),
        // Not a kind arrow-pg knows: the column is described by its values'
        // type (text for names).
        _ => Some("none"),
    }
}

/// `plan` with its oid-alias result columns described as PostgreSQL
/// describes them; unchanged when it has none.
pub fn as_postgres(plan: LogicalPlan) -> Result<LogicalPlan> {
    let schema = plan.schema().clone();
    if !schema.fields().iter().any(|f| wire_kind(f).is_some()) {
        return Ok(plan);
    }
    let exprs: Vec<Expr> = schema
        .iter()
        .map(|(qualifier, f)| {
            let column = Expr::Column(Column::from((qualifier, f)));
            match wire_kind(f) {
                None => column,
                Some(kind) => {
                    let metadata = BTreeMap::from([(OID_ALIAS_KEY.to_string(), kind.to_string())]);
                    Expr::Alias(
                        Alias::new(column, qualifier.cloned(), f.name())
                            .with_metadata(Some(FieldMetadata::from(metadata))),
                    )
                }
            }
        })
        .collect();
    LogicalPlanBuilder::from(plan).project(exprs)?.build()
}
