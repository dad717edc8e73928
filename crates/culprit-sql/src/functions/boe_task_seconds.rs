//! `boe_task_seconds(b, t_load, theta_dfsr, theta_dw, theta_map, n_cores,
//! alpha_m, delta)`: the bottleneck-oriented time of a map task that reads
//! `b` bytes, computes on them and writes `alpha_m * b`, with `delta` tasks
//! per node (method.md section 11; 003 §4.1, eq. 1-3). NULL where an
//! argument is NULL, negative or not finite.

use culprit_core::method::estimate::boe_task_seconds;
use datafusion::logical_expr::ScalarUDF;

use super::float_scalar::FloatScalar;

pub fn udf() -> ScalarUDF {
    FloatScalar::udf("boe_task_seconds", 8, |a| {
        boe_task_seconds(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]).ok()
    })
}
