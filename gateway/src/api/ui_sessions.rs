//! Who may look at the status page: one-time codes and read-only sessions (issue 17).
//!
//! The page runs in a browser, which must never hold the local token (a page could leak it,
//! and it would sit in history if it were in a URL). So `ferry ui`, which can read the token,
//! mints a **code** (`POST /v1/admin/ui-code`) and opens the page with the code in the URL's
//! fragment, which browsers never send to a server. The page trades it once
//! (`POST /v1/ui/session`) for a **session**: a bearer of its own, kept in the tab's
//! `sessionStorage` (which no other origin, including another port, can read). A session reads
//! the status routes and nothing else: no writes, no admin actions, no record values.
//!
//! A code works once, within [`CODE_LIFETIME`]; a session lapses after [`SESSION_IDLE`]
//! unused, and all of them with the gateway (they are kept in memory only).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a minted code may wait to be traded.
pub const CODE_LIFETIME: Duration = Duration::from_secs(60);
/// How long a session lasts without being used.
pub const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
/// At most this many codes and sessions are kept; the oldest go first.
const MAX_KEPT: usize = 64;

/// The routes a session may `GET`: what the status page shows.
pub const SESSION_READS: &[&str] = &[
    "/v1/status",
    "/v1/peers",
    "/v1/routes",
    "/v1/vaults",
    "/v1/calls",
];

/// Codes not yet traded and sessions alive, each with the instant it lapses.
#[derive(Debug, Default)]
pub struct UiSessions {
    codes: HashMap<String, Instant>,
    sessions: HashMap<String, Instant>,
}

impl UiSessions {
    /// Keeps `code` (fresh randomness from the caller) as tradeable until `now` plus the code
    /// lifetime.
    pub fn add_code(&mut self, code: String, now: Instant) {
        Self::forget_lapsed(&mut self.codes, now);
        Self::make_room(&mut self.codes);
        self.codes.insert(code, now + CODE_LIFETIME);
    }

    /// Trades `code` for `session` (fresh randomness from the caller): `false`, and nothing
    /// kept, if the code is unknown, used or lapsed.
    pub fn trade(&mut self, code: &str, session: String, now: Instant) -> bool {
        match self.codes.remove(code) {
            Some(lapses) if now < lapses => {
                Self::forget_lapsed(&mut self.sessions, now);
                Self::make_room(&mut self.sessions);
                self.sessions.insert(session, now + SESSION_IDLE);
                true
            }
            _ => false,
        }
    }

    /// Whether `session` is alive; using it keeps it alive.
    pub fn touch(&mut self, session: &str, now: Instant) -> bool {
        match self.sessions.get_mut(session) {
            Some(lapses) if now < *lapses => {
                *lapses = now + SESSION_IDLE;
                true
            }
            Some(_) => {
                self.sessions.remove(session);
                false
            }
            None => false,
        }
    }

    fn forget_lapsed(kept: &mut HashMap<String, Instant>, now: Instant) {
        kept.retain(|_, lapses| now < *lapses);
    }

    /// Bounds what a loop of `ferry ui` (or anything holding the token) can make us keep.
    fn make_room(kept: &mut HashMap<String, Instant>) {
        while kept.len() >= MAX_KEPT {
            let Some(oldest) = kept
                .iter()
                .min_by_key(|(_, lapses)| **lapses)
                .map(|(key, _)| key.clone())
            else {
                return;
            };
            kept.remove(&oldest);
        }
    }
}

/// Whether a session may send `method` to `path`.
pub fn session_may(method: &axum::http::Method, path: &str) -> bool {
    method == axum::http::Method::GET && SESSION_READS.contains(&path)
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn a_code_trades_once_and_only_while_fresh() {
        let mut ui = UiSessions::default();
        let t0 = Instant::now();
        ui.add_code("c1".into(), t0);
        assert!(!ui.trade("c2", "s0".into(), t0), "an unknown code");
        assert!(ui.trade("c1", "s1".into(), t0 + Duration::from_secs(59)));
        assert!(
            !ui.trade("c1", "s2".into(), t0 + Duration::from_secs(59)),
            "used"
        );
        ui.add_code("c3".into(), t0);
        assert!(!ui.trade("c3", "s3".into(), t0 + CODE_LIFETIME), "lapsed");
        assert!(ui.touch("s1", t0 + Duration::from_secs(60)));
        assert!(
            !ui.touch("s2", t0) && !ui.touch("s3", t0),
            "refused trades made nothing"
        );
    }

    #[test]
    fn a_session_lapses_when_idle_and_use_keeps_it() {
        let mut ui = UiSessions::default();
        let t0 = Instant::now();
        ui.add_code("c".into(), t0);
        assert!(ui.trade("c", "s".into(), t0));
        let used = t0 + SESSION_IDLE - Duration::from_secs(1);
        assert!(ui.touch("s", used));
        assert!(ui.touch("s", used + SESSION_IDLE - Duration::from_secs(1)));
        assert!(!ui.touch("s", used + 2 * SESSION_IDLE));
        assert!(!ui.touch("s", t0), "a lapsed session is forgotten");
    }

    #[test]
    fn what_is_kept_is_bounded() {
        let mut ui = UiSessions::default();
        let t0 = Instant::now();
        for n in 0..1000u32 {
            ui.add_code(format!("c{n}"), t0 + Duration::from_millis(u64::from(n)));
        }
        assert!(ui.codes.len() <= MAX_KEPT);
        assert!(
            ui.trade("c999", "s".into(), t0 + Duration::from_secs(1)),
            "the newest is kept"
        );
        assert!(
            !ui.trade("c0", "s0".into(), t0 + Duration::from_secs(1)),
            "the oldest went"
        );
    }

    #[test]
    fn a_session_reads_the_status_routes_and_nothing_else() {
        use axum::http::Method;
        assert!(session_may(&Method::GET, "/v1/routes"));
        for (method, path) in [
            (Method::POST, "/v1/admin/stop"),
            (Method::GET, "/v1/vaults/notes/records/k"),
            (Method::GET, "/v1/tickets"),
            (Method::GET, "/metrics"),
            (Method::POST, "/v1/status"),
            (Method::GET, "/v1/calls/0190"),
        ] {
            assert!(!session_may(&method, path), "{method} {path}");
        }
    }
}
