//! `ratp(blocked, computed, acquired)`: seconds per unit acquired, `(WT + CT) / RA` (method.md section 3; 001 eq. 2).

use culprit_core::ratp;
use datafusion::logical_expr::ScalarUDF;

use super::float_scalar::FloatScalar;

pub fn udf() -> ScalarUDF {
    FloatScalar::udf("ratp", 3, |a| ratp::ratp(a[0], a[1], a[2]))
}
