//! Where `ferry` logs and in what form: standard error, filtered by `RUST_LOG`, colour only on a
//! terminal; under systemd (which sets `JOURNAL_STREAM` when standard error goes to the
//! journal) with no timestamp, since the journal stamps each line itself, and with the kernel's
//! `<N>` priority prefix, so `journalctl -p warning` finds Ferry's warnings. launchd and other
//! managers that write standard error to a file get the usual timestamped lines.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Installs the process's logger (default level: info for `serve`, warnings otherwise, so a
/// command's own output stays clean).
pub fn init(serving: bool) {
    let default = if serving { "info" } else { "warn" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let to_journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(!to_journal && std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = if to_journal {
        builder
            .event_format(JournalPriority(
                tracing_subscriber::fmt::format().without_time(),
            ))
            .try_init()
    } else {
        builder.try_init()
    };
}

/// Prefixes each line with its syslog priority, the form systemd's journal reads from a
/// service's standard error (`sd-daemon(3)`).
struct JournalPriority<F>(F);

fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

impl<S, N, F> FormatEvent<S, N> for JournalPriority<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", priority(*event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn journal_lines_carry_their_priority_and_no_timestamp() {
        let captured = Captured::default();
        let sink = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .event_format(JournalPriority(
                tracing_subscriber::fmt::format().without_time(),
            ))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(peer = "laptop", "route down");
            tracing::info!("serving");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("<4> WARN"), "{}", lines[0]);
        assert!(lines[0].contains("route down") && lines[0].contains("peer=\"laptop\""));
        assert!(lines[1].starts_with("<6> INFO"), "{}", lines[1]);
        assert!(
            !text.contains("Z "),
            "no timestamp: the journal stamps lines itself: {text}"
        );
    }
}
