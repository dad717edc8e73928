//! `ratp_blocked(blocked, acquired)`: blocked seconds per unit acquired, `WT / RA` (method.md section 3; 000 eq. 7, 001 eq. 10).

use culprit_core::ratp;
use datafusion::logical_expr::ScalarUDF;

use super::float_scalar::FloatScalar;

pub fn udf() -> ScalarUDF {
    FloatScalar::udf("ratp_blocked", 2, |a| ratp::ratp_blocked(a[0], a[1]))
}
