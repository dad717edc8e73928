//! `estimate(query [, 'option=value' ...])`: the query's time on an idle
//! cluster by the bottleneck-oriented estimation of method.md section 11
//! (003 §4-6), stage by stage and as a whole (the row whose `stage_id` is
//! NULL), beside the observed time: `slowdown = observed / estimated` is
//! known without any earlier run of the query.
//!
//! Options (default: from the data): `theta_disk_read`, `theta_disk_write`,
//! `theta_network` (bytes per second per node), `theta_cpu` (CPU-seconds per
//! second per core), `n_cores`, `slots_per_host`, `hosts`, `t_load` (seconds
//! per task), `skew=on|off` (003 §6's refinement, default on).

use culprit_core::method::estimate::EstimateOptions;
use culprit_engine::Snapshot;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;

use super::args::{bad_arg, Args};
use super::rows::{schema, Cell, Out, Ty};
use super::table_function::{Rows, TableFunction};
use crate::error::in_function;

pub struct Estimate {
    query: String,
    opts: EstimateOptions,
}

impl TableFunction for Estimate {
    const NAME: &'static str = "estimate";
    const SIGNATURE: &'static str =
        "estimate(query [, 'theta_disk_read=B/s'] [, 'theta_disk_write=B/s'] \
         [, 'theta_network=B/s'] [, 'theta_cpu=x'] [, 'n_cores=n'] [, 'slots_per_host=n'] \
         [, 'hosts=n'] [, 't_load=s'] [, 'skew=on|off'])";
    const NEEDS_WINDOWS: bool = true;

    fn schema() -> SchemaRef {
        schema(&[
            ("query_id", Ty::Text),
            ("stage_id", Ty::Text),
            ("tasks", Ty::Int),
            ("waves", Ty::Int),
            ("tasks_per_node", Ty::Float),
            ("task_seconds", Ty::Float),
            ("bottleneck", Ty::Text),
            ("skew_seconds", Ty::Float),
            ("start_seconds", Ty::Float),
            ("end_seconds", Ty::Float),
            ("estimated_seconds", Ty::Float),
            ("observed_seconds", Ty::Float),
            ("slowdown", Ty::Float),
            ("theta_disk_read", Ty::Float),
            ("theta_disk_write", Ty::Float),
            ("theta_network", Ty::Float),
            ("hosts", Ty::Int),
            ("slots_per_host", Ty::Int),
            ("n_cores", Ty::Float),
            ("t_load", Ty::Float),
        ])
    }

    fn plan(args: &Args) -> Result<Self> {
        args.max_positional(1, Self::SIGNATURE)?;
        let query = args.required_query(Self::SIGNATURE)?;
        let mut opts = EstimateOptions::default();
        for (k, v) in &args.options {
            match k.as_str() {
                "theta_disk_read" => opts.theta_disk_read = Some(args.option_number(k, v)?),
                "theta_disk_write" => opts.theta_disk_write = Some(args.option_number(k, v)?),
                "theta_network" => opts.theta_network = Some(args.option_number(k, v)?),
                "theta_cpu" => opts.theta_cpu = Some(args.option_number(k, v)?),
                "n_cores" => opts.n_cores = Some(args.option_number(k, v)?),
                "t_load" => opts.t_load = Some(args.option_number(k, v)?),
                "slots_per_host" => {
                    opts.slots_per_host = Some(args.count(k, args.option_number(k, v)?)?)
                }
                "hosts" => opts.hosts = Some(args.count(k, args.option_number(k, v)?)?),
                "skew" => {
                    opts.skew = match v.to_ascii_lowercase().as_str() {
                        "on" | "true" => true,
                        "off" | "false" => false,
                        _ => return bad_arg!(Self::NAME, "skew must be 'on' or 'off', got '{v}'"),
                    }
                }
                _ => return bad_arg!(Self::NAME, "unknown option '{k}'"),
            }
        }
        Ok(Estimate { query, opts })
    }

    fn compute(&self, snapshot: &Snapshot) -> Result<Rows> {
        let e = snapshot
            .estimate(&self.query, &self.opts)
            .map_err(in_function(Self::NAME))?;
        let mut out = Out::new(Self::schema(), e.stages.len() + 1);
        let common = |out: &mut Out| {
            out.push(Cell::F(e.thetas.disk_read));
            out.push(Cell::F(e.thetas.disk_write));
            out.push(Cell::F(e.thetas.network));
            out.push(Cell::I(Some(e.hosts as i64)));
            out.push(Cell::I(Some(e.slots_per_host as i64)));
            out.push(Cell::F(Some(e.n_cores)));
            out.push(Cell::F(Some(e.t_load)));
        };
        for s in &e.stages {
            out.push(Cell::S(Some(&e.query)));
            out.push(Cell::S(Some(&s.stage)));
            out.push(Cell::I(Some(s.tasks as i64)));
            out.push(Cell::I(Some(s.waves as i64)));
            out.push(Cell::F(Some(s.delta)));
            out.push(Cell::F(Some(s.task_seconds)));
            out.push(Cell::S(s.bottleneck.map(|b| b.as_str())));
            out.push(Cell::F(Some(s.skew_seconds)));
            out.push(Cell::F(Some(s.start_seconds)));
            out.push(Cell::F(Some(s.end_seconds)));
            out.push(Cell::F(Some(s.stage_seconds)));
            out.push(Cell::F(Some(s.observed_seconds)));
            out.push(Cell::F(
                (s.stage_seconds > 0.0).then(|| s.observed_seconds / s.stage_seconds),
            ));
            common(&mut out);
        }
        // The query as a whole.
        let tasks: usize = e.stages.iter().map(|s| s.tasks).sum();
        out.push(Cell::S(Some(&e.query)));
        out.push(Cell::S(None));
        out.push(Cell::I(Some(tasks as i64)));
        out.push(Cell::I(None));
        out.push(Cell::F(None));
        out.push(Cell::F(None));
        out.push(Cell::S(None));
        out.push(Cell::F(None));
        out.push(Cell::F(Some(0.0)));
        out.push(Cell::F(Some(e.estimated_seconds)));
        out.push(Cell::F(Some(e.estimated_seconds)));
        out.push(Cell::F(Some(e.observed_seconds)));
        out.push(Cell::F(e.slowdown));
        common(&mut out);
        out.finish().map(Rows::one)
    }
}
