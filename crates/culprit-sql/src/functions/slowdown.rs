//! `slowdown(ratp, capacity)`: `(RATP - RATP*) / RATP*` with `RATP* = 1 / capacity` (method.md section 3; 000 eq. 4).

use culprit_core::ratp;
use datafusion::logical_expr::ScalarUDF;

use super::float_scalar::FloatScalar;

pub fn udf() -> ScalarUDF {
    FloatScalar::udf("slowdown", 2, |a| ratp::slowdown(a[0], a[1]))
}
