//! culprit's functions as a catalog describes them (`pg_proc` on the
//! wire: psql's `\df`, DBeaver's function list, pgjdbc's `getFunctions`):
//! name, arguments, result. Table functions are described from their
//! [`TableFunction`] (its `SIGNATURE` and `schema()`), so the description
//! cannot drift from the code; the scalars and the aggregate are listed
//! here, and a test checks that every registered function is described.

use datafusion::arrow::datatypes::DataType;

use super::table_function::TableFunction;
use super::*;

/// What kind of function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A table function: a set of rows with named columns.
    Table,
    Scalar,
    Aggregate,
}

/// One function as a catalog shows it.
#[derive(Debug, Clone)]
pub struct Described {
    pub name: &'static str,
    pub kind: Kind,
    /// The positional arguments' names (a table function's
    /// `'name=value'` options are not among them).
    pub args: Vec<String>,
    /// The arguments as the docs write them (`victim [, from [, to]] ...`).
    pub arguments: String,
    /// The result: a table function's columns, or one unnamed value.
    pub result: Vec<(String, DataType)>,
}

/// The argument list of a `SIGNATURE` (`name(args)`), and the names of
/// its positional arguments: the bare words outside quotes, NULL aside.
fn parse_signature(signature: &str) -> (String, Vec<String>) {
    let inner = signature
        .split_once('(')
        .map(|(_, rest)| rest.strip_suffix(')').unwrap_or(rest))
        .unwrap_or("");
    let mut names = Vec::new();
    let mut quoted = false;
    let mut word = String::new();
    for c in inner.chars().chain(std::iter::once(' ')) {
        if c == '\'' {
            quoted = !quoted;
            word.clear();
            continue;
        }
        if !quoted && (c.is_ascii_alphanumeric() || c == '_') {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            if !quoted && !word.eq_ignore_ascii_case("null") && !names.contains(&word) {
                names.push(word.clone());
            }
            word.clear();
        }
    }
    (inner.to_string(), names)
}

fn table<F: TableFunction>() -> Described {
    let (arguments, args) = parse_signature(F::SIGNATURE);
    Described {
        name: F::NAME,
        kind: Kind::Table,
        args,
        arguments,
        result: F::schema()
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone()))
            .collect(),
    }
}

fn double(name: &'static str, args: &[&str], kind: Kind) -> Described {
    Described {
        name,
        kind,
        args: args.iter().map(|a| a.to_string()).collect(),
        arguments: args
            .iter()
            .map(|a| format!("{a} double precision"))
            .collect::<Vec<_>>()
            .join(", "),
        result: vec![(String::new(), DataType::Float64)],
    }
}

/// Every function [`register_all`] registers, as a catalog shows it.
pub fn described() -> Vec<Described> {
    vec![
        double("ratp", &["blocked", "computed", "acquired"], Kind::Scalar),
        double("ratp_blocked", &["blocked", "acquired"], Kind::Scalar),
        double("ratp_max", &["seconds", "acquired"], Kind::Scalar),
        double("slowdown", &["ratp", "capacity"], Kind::Scalar),
        double(
            "boe_task_seconds",
            &[
                "b",
                "t_load",
                "theta_dfsr",
                "theta_dw",
                "theta_map",
                "n_cores",
                "alpha_m",
                "delta",
            ],
            Kind::Scalar,
        ),
        double(
            "blame_beta",
            &[
                "victim_blocked",
                "victim_acquired",
                "culprit_acquired",
                "victim_run_seconds",
            ],
            Kind::Aggregate,
        ),
        table::<blame::Blame>(),
        table::<culprits::Culprits>(),
        table::<iqc_nodes::IqcNodes>(),
        table::<iqc_edges::IqcEdges>(),
        table::<hot_resources::HotResources>(),
        table::<slow_nodes::SlowNodes>(),
        table::<aggressive_queries::AggressiveQueries>(),
        table::<victims::Victims>(),
        table::<culprits_series::CulpritsSeries>(),
        table::<aggressive_queries_series::AggressiveQueriesSeries>(),
        table::<critical_path::CriticalPath>(),
        table::<stage_ratp::StageRatp>(),
        table::<what_if::WhatIf>(),
        table::<stragglers::Stragglers>(),
        table::<estimate::Estimate>(),
        table::<skewed_tasks::SkewedTasks>(),
        table::<expensive_inputs::ExpensiveInputs>(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn signatures_name_their_arguments() {
        let (text, names) =
            parse_signature("what_if(query | NULL [, resource | NULL] [, from [, to]])");
        assert_eq!(text, "query | NULL [, resource | NULL] [, from [, to]]");
        assert_eq!(names, ["query", "resource", "from", "to"]);
        let (_, names) = parse_signature(
            "culprits(victim [, from [, to]] [, 'victim_stages=...'] [, 'attribution=window|paper'])",
        );
        assert_eq!(names, ["victim", "from", "to"]);
    }

    /// Every function a session has is described, and nothing else.
    #[tokio::test]
    async fn every_registered_function_is_described() {
        let store = culprit_store::Store::open("memory://").unwrap();
        let ctx = crate::session(store).await.unwrap();
        let state = ctx.state();
        let described: BTreeSet<&str> = described().iter().map(|d| d.name).collect();
        let mut registered: BTreeSet<&str> = BTreeSet::new();
        for d in described.iter() {
            if state.table_functions().contains_key(*d)
                || state.scalar_functions().contains_key(*d)
                || state.aggregate_functions().contains_key(*d)
            {
                registered.insert(d);
            }
        }
        assert_eq!(registered, described, "described but not registered");
        // The table functions: all of them.
        for name in state.table_functions().keys() {
            if name.starts_with("pg_") || name == "generate_series" || name == "range" {
                continue;
            }
            assert!(
                described.contains(name.as_str()),
                "table function {name} is not described"
            );
        }
    }
}
