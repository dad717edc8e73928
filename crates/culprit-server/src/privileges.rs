//! What each role may do, told the way PostgreSQL tells it: the
//! `has_*_privilege` functions, `pg_class.relacl` and `pg_roles`. The
//! rules are the gate's (`policy.rs`), read back:
//! - everyone (`PUBLIC`) reads every relation: `SELECT`;
//! - `write` users also `INSERT` into and `TRUNCATE` user tables (kept in
//!   the store) and `CREATE` in schema `public`;
//! - nobody writes telemetry (it changes only through `culprit ingest`),
//!   the scheduler's schemas, or grants anything (`WITH GRANT OPTION` is
//!   never held);
//! - every relation is owned by the role `culprit` (oid 10, PostgreSQL's
//!   bootstrap role), which no user logs in as unless the users file names
//!   it.
//!
//! A relation given by oid (not by name) is known to be readable only:
//! `has_table_privilege(oid, 'INSERT')` answers false.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::CatalogProviderList;
use datafusion::common::{Result, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{
    ColumnarValue, ScalarUDF, Signature, SimpleScalarUDF, TypeSignature, Volatility,
};
use datafusion::prelude::SessionContext;

use crate::auth::{Role, Users};
use crate::sqlstate::{self, Coded};

/// The role that owns every relation.
pub const OWNER: &str = "culprit";
/// Its oid (`pg_class.relowner`, `pg_roles.oid`).
pub const OWNER_OID: i32 = 10;
/// The oid of the first user of the users file (by name); PostgreSQL's
/// first normal object id.
const FIRST_USER_OID: i32 = 16384;

/// A role of the server: the owner, then the users file's, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRow {
    pub oid: i32,
    pub name: String,
    /// `None` for the owner (no login of its own).
    pub role: Option<Role>,
}

/// The roles `pg_roles` lists.
pub fn roles(users: Option<&Users>) -> Vec<RoleRow> {
    let mut out = vec![RoleRow {
        oid: OWNER_OID,
        name: OWNER.to_string(),
        role: None,
    }];
    if let Some(users) = users {
        let mut named = users.names_and_roles();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        out.extend(
            named
                .into_iter()
                .filter(|(n, _)| n != OWNER)
                .enumerate()
                .map(|(i, (name, role))| RoleRow {
                    oid: FIRST_USER_OID + i as i32,
                    name,
                    role: Some(role),
                }),
        );
        // A user named like the owner logs in as it, with its file's role.
        if let Some(role) = users.role(OWNER) {
            out[0].role = Some(role);
        }
    }
    out
}

/// What a relation is, for its privileges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// A table of the store that users create (`CREATE TABLE`).
    User,
    /// Telemetry, culprit's views, the catalogs, the scheduler's tables, or
    /// one known only by oid: read-only for everyone.
    ReadOnly,
}

/// A relation of schema `schema` named `name` that exists.
pub fn relation(schema: &str, name: &str) -> Relation {
    let culprits = name.parse::<culprit_core::Table>().is_ok()
        || culprit_sql::VIEWS.iter().any(|(v, _)| *v == name);
    if schema == "public" && !culprits {
        Relation::User
    } else {
        Relation::ReadOnly
    }
}

/// `pg_class.relacl` of a relation: `SELECT` for `PUBLIC`; `INSERT` and
/// `TRUNCATE` for each `write` user on user tables.
pub fn acl(relation: Relation, roles: &[RoleRow]) -> Vec<String> {
    let mut out = vec![format!("=r/{OWNER}")];
    if relation == Relation::User {
        out.extend(
            roles
                .iter()
                .filter(|r| r.role == Some(Role::Write))
                .map(|r| format!("{}=aD/{OWNER}", r.name)),
        );
    }
    out
}

fn unrecognized(p: &str) -> DataFusionError {
    DataFusionError::External(Box::new(Coded::new(
        sqlstate::INVALID_PARAMETER_VALUE,
        format!("unrecognized privilege type: \"{p}\""),
    )))
}

/// Whether any of `privileges` (PostgreSQL's list: comma-separated, any
/// case, each maybe `WITH GRANT OPTION`) is held, by `held`, which answers
/// for one lower-case privilege name (`None`: not a privilege of this kind).
fn any_of(privileges: &str, held: impl Fn(&str) -> Option<bool>) -> Result<bool> {
    let mut any = false;
    for p in privileges.split(',') {
        let p = p.trim().to_ascii_lowercase();
        let (name, grant) = match p.strip_suffix("with grant option") {
            Some(rest) => (rest.trim_end(), true),
            None => (p.as_str(), false),
        };
        let ok = held(name).ok_or_else(|| unrecognized(p.trim()))?;
        any |= ok && !grant;
    }
    Ok(any)
}

/// Table (and column) privileges.
pub fn on_table(role: Role, relation: Relation, privileges: &str) -> Result<bool> {
    any_of(privileges, |p| match p {
        "select" => Some(true),
        "insert" | "truncate" => Some(role == Role::Write && relation == Relation::User),
        "update" | "delete" | "references" | "trigger" | "maintain" => Some(false),
        _ => None,
    })
}

/// Column privileges: those of the table that make sense for a column.
fn on_column(role: Role, relation: Relation, privileges: &str) -> Result<bool> {
    any_of(privileges, |p| match p {
        "select" => Some(true),
        "insert" => Some(role == Role::Write && relation == Relation::User),
        "update" | "references" => Some(false),
        _ => None,
    })
}

/// Schema privileges: `USAGE` of every schema, `CREATE` in `public` for
/// `write` users.
pub fn on_schema(role: Role, schema: &str, privileges: &str) -> Result<bool> {
    any_of(privileges, |p| match p {
        "usage" => Some(true),
        "create" => Some(role == Role::Write && schema == "public"),
        _ => None,
    })
}

/// Database privileges: everyone connects; nobody creates schemas there
/// through this privilege or makes temporary tables (DataFusion has none).
pub fn on_database(privileges: &str) -> Result<bool> {
    any_of(privileges, |p| match p {
        "connect" => Some(true),
        "create" | "temporary" | "temp" => Some(false),
        _ => None,
    })
}

/// The names and roles the functions read: the session's user, the users
/// file, and the session's catalogs (for relations and schemas by name).
#[derive(Clone)]
pub struct Context {
    pub user: String,
    pub users: Option<Arc<Users>>,
    pub catalogs: Arc<dyn CatalogProviderList>,
}

impl Context {
    /// The role of user `name` (`read` on a server without users; the
    /// owner's role is `read` unless the users file names it).
    fn role_of(&self, name: &str) -> Result<Role> {
        match &self.users {
            None => Ok(Role::Read),
            Some(users) => match users.role(name) {
                Some(role) => Ok(role),
                None if name == OWNER || name.eq_ignore_ascii_case("public") => Ok(Role::Read),
                None => Err(DataFusionError::External(Box::new(Coded::new(
                    sqlstate::UNDEFINED_OBJECT,
                    format!("role \"{name}\" does not exist"),
                )))),
            },
        }
    }

    fn schema_exists(&self, schema: &str) -> bool {
        self.catalogs
            .catalog("datafusion")
            .is_some_and(|c| c.schema(schema).is_some())
    }

    /// A relation by name (`name`, `schema.name`, quoted or not) or by oid
    /// (digits); a name that is no relation is an error (42P01).
    fn relation(&self, text: &str) -> Result<Relation> {
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(Relation::ReadOnly);
        }
        let parts = identifiers(text);
        let (schemas, name): (Vec<&str>, &str) = match parts.as_slice() {
            [name] => (vec!["public", "pg_catalog"], name),
            [schema, name] => (vec![schema.as_str()], name),
            _ => return Err(no_relation(text)),
        };
        let catalog = self.catalogs.catalog("datafusion");
        for schema in schemas {
            if catalog
                .as_ref()
                .and_then(|c| c.schema(schema))
                .is_some_and(|s| s.table_exist(name))
            {
                return Ok(relation(schema, name));
            }
        }
        Err(no_relation(text))
    }
}

fn no_relation(text: &str) -> DataFusionError {
    DataFusionError::External(Box::new(Coded::new(
        sqlstate::UNDEFINED_TABLE,
        format!("relation \"{text}\" does not exist"),
    )))
}

/// The identifiers of a dotted name: quoted ones as written, others in
/// lower case (PostgreSQL folds them).
fn identifiers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = text.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                current.push('"');
            }
            '"' => quoted = !quoted,
            '.' if !quoted => out.push(std::mem::take(&mut current)),
            c if quoted => current.push(c),
            c => current.extend(c.to_lowercase()),
        }
    }
    out.push(current);
    out
}

/// The kind of object a privilege function asks about.
#[derive(Clone, Copy)]
enum Object {
    Table,
    AnyColumn,
    Column,
    Schema,
    Database,
}

impl Object {
    /// The argument counts without and with the leading user.
    fn arities(self) -> [usize; 2] {
        match self {
            Object::Column => [3, 4],
            _ => [2, 3],
        }
    }
}

fn answer(cx: &Context, object: Object, user: Option<&str>, args: &[&str]) -> Result<bool> {
    let role = cx.role_of(user.unwrap_or(&cx.user))?;
    let privileges = args[args.len() - 1];
    match object {
        Object::Table | Object::AnyColumn => on_table(role, cx.relation(args[0])?, privileges),
        Object::Column => on_column(role, cx.relation(args[0])?, privileges),
        Object::Schema => {
            let schema = identifiers(args[0]).join(".");
            if !args[0].bytes().all(|b| b.is_ascii_digit()) && !cx.schema_exists(&schema) {
                return Err(DataFusionError::External(Box::new(Coded::new(
                    sqlstate::INVALID_SCHEMA_NAME,
                    format!("schema \"{schema}\" does not exist"),
                ))));
            }
            on_schema(role, &schema, privileges)
        }
        Object::Database => on_database(privileges),
    }
}

/// Registers the session's `has_table_privilege`,
/// `has_any_column_privilege`, `has_column_privilege`,
/// `has_schema_privilege` and `has_database_privilege`, each with and
/// without the leading user argument (a name or an oid; by oid, the
/// session's user).
pub fn register(ctx: &SessionContext, cx: Context) {
    for (name, object) in [
        ("has_table_privilege", Object::Table),
        ("has_any_column_privilege", Object::AnyColumn),
        ("has_column_privilege", Object::Column),
        ("has_schema_privilege", Object::Schema),
        ("has_database_privilege", Object::Database),
    ] {
        let cx = cx.clone();
        let [short, long] = object.arities();
        let f = move |args: &[ColumnarValue]| -> Result<ColumnarValue> {
            let scalar = args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
            let rows = args
                .iter()
                .find_map(|a| match a {
                    ColumnarValue::Array(a) => Some(a.len()),
                    _ => None,
                })
                .unwrap_or(1);
            let texts = args
                .iter()
                .map(|a| {
                    let a = a.to_array(rows)?;
                    Ok(datafusion::arrow::compute::cast(&a, &DataType::Utf8)?)
                })
                .collect::<Result<Vec<ArrayRef>>>()?;
            let texts: Vec<_> = texts
                .iter()
                .map(|a| datafusion::arrow::array::AsArray::as_string::<i32>(a.as_ref()))
                .collect();
            let mut out = Vec::with_capacity(rows);
            for i in 0..rows {
                if texts.iter().any(|t| t.is_null(i)) {
                    out.push(None);
                    continue;
                }
                let values: Vec<&str> = texts.iter().map(|t| t.value(i)).collect();
                let (user, rest) = if values.len() == long {
                    let u = values[0];
                    // A user by oid: the session's own.
                    let u = (!u.bytes().all(|b| b.is_ascii_digit())).then_some(u);
                    (u, &values[1..])
                } else {
                    (None, &values[..])
                };
                out.push(Some(answer(&cx, object, user, rest)?));
            }
            let out: ArrayRef = Arc::new(BooleanArray::from(out));
            Ok(if scalar {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            } else {
                ColumnarValue::Array(out)
            })
        };
        ctx.register_udf(ScalarUDF::from(SimpleScalarUDF::new_with_signature(
            name,
            Signature::one_of(
                vec![TypeSignature::Any(short), TypeSignature::Any(long)],
                Volatility::Stable,
            ),
            DataType::Boolean,
            Arc::new(f),
        )));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privilege_lists_follow_postgresql() {
        let user = Relation::User;
        assert!(on_table(Role::Read, user, "SELECT").unwrap());
        assert!(!on_table(Role::Read, user, "INSERT").unwrap());
        assert!(on_table(Role::Read, user, "insert, select").unwrap());
        assert!(on_table(Role::Write, user, "INSERT").unwrap());
        assert!(!on_table(Role::Write, Relation::ReadOnly, "INSERT").unwrap());
        assert!(!on_table(Role::Write, user, "SELECT WITH GRANT OPTION").unwrap());
        assert!(!on_table(Role::Write, user, "UPDATE,DELETE").unwrap());
        assert!(on_table(Role::Read, user, "FLY").is_err());
        assert!(on_schema(Role::Write, "public", "CREATE").unwrap());
        assert!(!on_schema(Role::Read, "public", "CREATE").unwrap());
        assert!(on_schema(Role::Read, "pg_catalog", "USAGE").unwrap());
        assert!(on_database("CONNECT").unwrap());
        assert!(!on_database("TEMP").unwrap());
    }

    #[test]
    fn names_fold_unless_quoted() {
        assert_eq!(identifiers("Public.Tasks"), vec!["public", "tasks"]);
        assert_eq!(identifiers("\"My\"\"T\".x"), vec!["My\"T", "x"]);
    }

    #[test]
    fn telemetry_and_views_are_read_only() {
        assert_eq!(relation("public", "tasks"), Relation::ReadOnly);
        assert_eq!(relation("public", "task_windows"), Relation::ReadOnly);
        assert_eq!(relation("public", "hosts_of_mine"), Relation::User);
        assert_eq!(relation("pg_catalog", "pg_class"), Relation::ReadOnly);
        let roles = vec![
            RoleRow {
                oid: OWNER_OID,
                name: OWNER.into(),
                role: None,
            },
            RoleRow {
                oid: 16384,
                name: "ann".into(),
                role: Some(Role::Write),
            },
            RoleRow {
                oid: 16385,
                name: "bob".into(),
                role: Some(Role::Read),
            },
        ];
        assert_eq!(acl(Relation::ReadOnly, &roles), vec!["=r/culprit"]);
        assert_eq!(
            acl(Relation::User, &roles),
            vec!["=r/culprit", "ann=aD/culprit"]
        );
    }
}
