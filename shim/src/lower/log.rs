//! Diagnostics of the shim (every layer) through `tracing`, filtered by the variable the `mpicr` command uses,
//! `MPICR_LOG` (`EnvFilter` directives, e.g. `MPICR_LOG=agent=debug,renew=debug,lower=debug`).
//! Targets: `agent` (the checkpoint protocol as this rank runs it: phases, failures), `renew`
//! (release and renewal of the lower half), `lower` (loading and releasing a generation of the
//! real library).
//!
//! The shim runs inside the user's program: without `MPICR_LOG` nothing is installed and its
//! output is exactly what it always was (its fatal messages are plain stderr lines, whatever the
//! filter). With it, a subscriber writes one line per event to stderr; it never panics (a
//! malformed directive is skipped, a failed write is dropped).

use std::sync::Once;

/// The filter variable (shared with the `mpicr` command).
pub const LOG_ENV: &str = "MPICR_LOG";

/// The filter directives for a value of `MPICR_LOG`; `None` when it asks for nothing.
pub fn directives(log: Option<&str>) -> Option<String> {
    let l = log.map(str::trim).filter(|l| !l.is_empty())?;
    // Warnings stay on unless the directives say otherwise (a later directive wins).
    Some(format!("warn,{l}"))
}

/// Installs the shim's subscriber once, if `MPICR_LOG` asks for diagnostics. Cheap after the
/// first call.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Some(d) = directives(std::env::var(LOG_ENV).ok().as_deref()) else { return };
        let filter = tracing_subscriber::EnvFilter::builder().parse_lossy(d);
        let sub = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).with_target(true).with_env_filter(filter).finish();
        // Another copy of the shim in this process may have installed one: that one stays.
        let _ = tracing::subscriber::set_global_default(sub);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_from_the_variable() {
        assert_eq!(directives(None), None);
        assert_eq!(directives(Some("  ")), None);
        assert_eq!(directives(Some("agent=debug")).as_deref(), Some("warn,agent=debug"));
        assert!(tracing_subscriber::EnvFilter::builder().parse(directives(Some("agent=debug,renew=trace,lower=debug")).unwrap()).is_ok());
    }
}
