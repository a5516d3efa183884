//! Diagnostic output through `tracing`, filtered by one variable, `MPICR_LOG` (`EnvFilter`
//! directives: `debug`, `pmi=trace`, `keeper=debug,coordinator=debug`). Targets: `pmi` (the PMI
//! relay: every relayed message at `trace`), `keeper` (its state transitions and the messages it
//! handles, at `debug`), `coordinator` (messages from the keepers, at `debug`).
//! `MPICR_DEBUG_PMI=1` is an alias of `MPICR_LOG=pmi=trace`.
//!
//! Without either variable only warnings show, each as the bare line it always was (`mpicr[R]:
//! ...`). With them, every line carries its time, level and target. The command's own messages
//! (its one-line errors, `--verbose` progress, `checkpoint`'s report) are not diagnostics: they
//! are printed as they are, whatever the filter.

use tracing_subscriber::EnvFilter;

/// The filter variable.
pub const LOG_ENV: &str = "MPICR_LOG";
/// The older switch for PMI tracing, an alias of `pmi=trace`.
pub const DEBUG_PMI_ENV: &str = "MPICR_DEBUG_PMI";

/// The filter directives from the two variables' values; `None` when neither asks for more
/// than the default (warnings).
pub fn directives(log: Option<&str>, debug_pmi: Option<&str>) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    if let Some(l) = log.map(str::trim).filter(|l| !l.is_empty()) {
        parts.push(l);
    }
    if debug_pmi.is_some_and(|v| !v.is_empty() && v != "0") {
        parts.push("pmi=trace");
    }
    // Warnings stay on unless the directives say otherwise (a later directive wins).
    (!parts.is_empty()).then(|| format!("warn,{}", parts.join(",")))
}

/// Installs the subscriber for this process (once, before anything logs).
pub fn init() {
    let log = std::env::var(LOG_ENV).ok();
    let pmi = std::env::var(DEBUG_PMI_ENV).ok();
    let _ = tracing::subscriber::set_global_default(subscriber(directives(log.as_deref(), pmi.as_deref()), std::io::stderr));
}

/// The subscriber for `directives` (see [`directives`]), writing each line with one write.
fn subscriber<W>(directives: Option<String>, writer: W) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    let base = tracing_subscriber::fmt().with_writer(writer).with_ansi(false);
    match directives {
        None => Box::new(base.with_env_filter(EnvFilter::new("warn")).without_time().with_level(false).with_target(false).finish()),
        Some(d) => Box::new(base.with_env_filter(EnvFilter::builder().parse_lossy(d)).with_target(true).finish()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives_from_the_variables() {
        assert_eq!(directives(None, None), None);
        assert_eq!(directives(Some(" "), Some("0")), None);
        assert_eq!(directives(Some("pmi=trace"), None).as_deref(), Some("warn,pmi=trace"));
        assert_eq!(directives(None, Some("1")).as_deref(), Some("warn,pmi=trace"));
        assert_eq!(directives(Some("keeper=debug"), Some("1")).as_deref(), Some("warn,keeper=debug,pmi=trace"));
        assert!(EnvFilter::builder().parse(directives(Some("keeper=debug,coordinator=trace"), Some("1")).unwrap()).is_ok());
    }

    #[derive(Clone, Default)]
    struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn capture(d: Option<String>, f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let out = buf.clone();
        tracing::subscriber::with_default(subscriber(d, move || buf.clone()), f);
        let v = out.0.lock().unwrap().clone();
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn by_default_warnings_are_the_bare_lines_and_nothing_else_shows() {
        let out = capture(None, || {
            tracing::warn!(target: "keeper", "mpicr[3]: agent reported a failure: x");
            tracing::debug!(target: "keeper", "mpicr[3]: state running -> checkpoint");
            tracing::trace!(target: "pmi", "mpicr[3] pmi: g0 cmd=put -> cmd=put_result");
        });
        assert_eq!(out, "mpicr[3]: agent reported a failure: x\n");
    }

    #[test]
    fn pmi_trace_selects_the_relay() {
        let out = capture(directives(None, Some("1")), || {
            tracing::trace!(target: "pmi", "mpicr[0] pmi: g1 cmd=barrier_in -> cmd=barrier_out");
            tracing::debug!(target: "keeper", "mpicr[0]: state running -> checkpoint");
            tracing::warn!(target: "keeper", "mpicr[0]: could not finalize PMI with the launcher");
        });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines[0].contains("TRACE pmi: mpicr[0] pmi: g1 cmd=barrier_in -> cmd=barrier_out"), "{out}");
        assert!(lines[1].contains("WARN keeper: mpicr[0]: could not finalize PMI"), "{out}");
    }
}
