//! (being ported from scripts/test-cli.sh)

use super::CaseFn;

pub fn cases() -> Vec<CaseFn> {
    Vec::new()
}
