//! `ratp_max(seconds, acquired)`: `dt / RA` when blocked and computed time are not split (method.md section 3; 000 eq. 1, 001 eq. 11).

use culprit_core::ratp;
use datafusion::logical_expr::ScalarUDF;

use super::float_scalar::FloatScalar;

pub fn udf() -> ScalarUDF {
    FloatScalar::udf("ratp_max", 2, |a| ratp::ratp_max(a[0], a[1]))
}
