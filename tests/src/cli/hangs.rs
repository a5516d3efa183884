//! (being ported from scripts/test-cli.sh)

use super::CaseFn;

pub fn cases_shim() -> Vec<CaseFn> {
    Vec::new()
}
pub fn cases_faults() -> Vec<CaseFn> {
    Vec::new()
}
