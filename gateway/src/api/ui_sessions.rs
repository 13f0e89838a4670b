//! Who may use the status page: one-time codes and sessions (issues 17 and 46), and what a
//! session may call.
//!
//! The page runs in a browser, which must never hold the local token (a page could leak it,
//! and it would sit in history if it were in a URL). So `ferry ui`, which can read the token,
//! mints a **code** (`POST /v1/admin/ui-code`) and opens the page with the code in the URL's
//! fragment, which browsers never send to a server. The page trades it once
//! (`POST /v1/ui/session`) for a **session**: a bearer of its own, kept in the tab's
//! `sessionStorage` (which no other origin, including another port, can read).
//!
//! A session reads the status routes ([`SESSION_READS`]) and, unless it is read-only, calls
//! the few admin routes of [`SESSION_ACTIONS`] the CLI uses to trust and untrust a peer and to
//! follow and unfollow a vault: the same routes, answers and checks, no routes of the page's
//! own. Nothing else: no record values, no writes, no other admin call (`stop`, ticket
//! rotation, minting codes). A session is read-only when its code was minted so
//! (`ferry ui --read-only`, `?read_only=true`) or the config says `[ui] read_only = true`.
//!
//! An action must come from the page itself ([`admit`]): besides what every request without
//! the token meets (no foreign `Origin`, no rebound `Host`: see [`super::ui`]), it carries the
//! session in `Authorization` and a body declared `application/json`, neither of which a form
//! or another site's page can send without a CORS preflight, which this API never grants; and
//! it carries `Origin`, which browsers send on every `POST` (same origin too). A client that
//! sends no `Origin` is not the page: scripts act with the token. Each refusal is `403`.
//!
//! A code works once, within [`CODE_LIFETIME`]; a session lapses after [`SESSION_IDLE`]
//! unused, and all of them with the gateway (they are kept in memory only).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, Method};

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

/// The routes a session that is not read-only may `POST`: the CLI's own admin routes for what
/// the page does (trust a discovered peer, untrust, follow a vault, stop following it).
pub const SESSION_ACTIONS: &[&str] = &[
    "/v1/admin/trust",
    "/v1/admin/untrust",
    "/v1/admin/vaults/follow",
    "/v1/admin/vaults/unfollow",
];

/// What a session may do, fixed when its code is minted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    /// The status routes only.
    ReadOnly,
    /// The status routes and [`SESSION_ACTIONS`].
    Acting,
}

/// What a route is to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRoute {
    /// One of [`SESSION_READS`], by `GET`.
    Read,
    /// One of [`SESSION_ACTIONS`], by `POST`.
    Action,
    /// Anything else: a session is no bearer there (`401`, as with none).
    Closed,
}

/// What `method` on `path` is to a session.
pub fn session_route(method: &Method, path: &str) -> SessionRoute {
    if method == Method::GET && SESSION_READS.contains(&path) {
        SessionRoute::Read
    } else if method == Method::POST && SESSION_ACTIONS.contains(&path) {
        SessionRoute::Action
    } else {
        SessionRoute::Closed
    }
}

/// Why a live session's request is refused; nothing was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionRefusal {
    /// Not a route of the status page: a session is no bearer there (`401`, as with none).
    #[error("a status page session is no bearer for this route")]
    Closed,
    /// The session only reads: open the page with `ferry ui` (without `--read-only`), unless
    /// the config says `[ui] read_only = true`.
    #[error("this status page is read-only (`ferry ui --read-only`, or `[ui] read_only = true` in the gateway's config); nothing was done")]
    ReadOnly,
    /// An action with no `Origin`: browsers send one on every `POST`, so this is not the page.
    #[error("a status page session acts only from the page (its `POST`s carry `Origin`); scripts use the local token; nothing was done")]
    NoOrigin,
    /// An action whose body is not declared `application/json` (what a form could send).
    #[error("a status page action takes a JSON body (`Content-Type: application/json`); nothing was done")]
    NotJson,
}

/// Whether a live session of `kind` may send this request (`headers`) to a route that is
/// `route` to it ([`session_route`]). The refusals other than [`SessionRefusal::Closed`] are
/// `403`. A foreign `Origin` and a rebound `Host` were refused before (`super::access`).
pub fn admit(
    kind: SessionKind,
    route: SessionRoute,
    headers: &HeaderMap,
) -> Result<(), SessionRefusal> {
    match route {
        SessionRoute::Closed => return Err(SessionRefusal::Closed),
        SessionRoute::Read => return Ok(()),
        SessionRoute::Action => {}
    }
    if kind == SessionKind::ReadOnly {
        return Err(SessionRefusal::ReadOnly);
    }
    if !headers.contains_key(header::ORIGIN) {
        return Err(SessionRefusal::NoOrigin);
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(SessionRefusal::NotJson);
    }
    Ok(())
}

/// Codes not yet traded and sessions alive, each with the instant it lapses and its kind.
#[derive(Debug, Default)]
pub struct UiSessions {
    codes: HashMap<String, (Instant, SessionKind)>,
    sessions: HashMap<String, (Instant, SessionKind)>,
}

impl UiSessions {
    /// Keeps `code` (fresh randomness from the caller) as tradeable, for a session of `kind`,
    /// until `now` plus the code lifetime.
    pub fn add_code(&mut self, code: String, kind: SessionKind, now: Instant) {
        Self::forget_lapsed(&mut self.codes, now);
        Self::make_room(&mut self.codes);
        self.codes.insert(code, (now + CODE_LIFETIME, kind));
    }

    /// Trades `code` for `session` (fresh randomness from the caller), of the kind the code
    /// was minted for: `None`, and nothing kept, if the code is unknown, used or lapsed.
    pub fn trade(&mut self, code: &str, session: String, now: Instant) -> Option<SessionKind> {
        match self.codes.remove(code) {
            Some((lapses, kind)) if now < lapses => {
                Self::forget_lapsed(&mut self.sessions, now);
                Self::make_room(&mut self.sessions);
                self.sessions.insert(session, (now + SESSION_IDLE, kind));
                Some(kind)
            }
            _ => None,
        }
    }

    /// The kind of `session` if it is alive; using it keeps it alive.
    pub fn touch(&mut self, session: &str, now: Instant) -> Option<SessionKind> {
        match self.sessions.get_mut(session) {
            Some((lapses, kind)) if now < *lapses => {
                *lapses = now + SESSION_IDLE;
                Some(*kind)
            }
            Some(_) => {
                self.sessions.remove(session);
                None
            }
            None => None,
        }
    }

    fn forget_lapsed(kept: &mut HashMap<String, (Instant, SessionKind)>, now: Instant) {
        kept.retain(|_, (lapses, _)| now < *lapses);
    }

    /// Bounds what a loop of `ferry ui` (or anything holding the token) can make us keep.
    fn make_room(kept: &mut HashMap<String, (Instant, SessionKind)>) {
        while kept.len() >= MAX_KEPT {
            let Some(oldest) = kept
                .iter()
                .min_by_key(|(_, (lapses, _))| *lapses)
                .map(|(key, _)| key.clone())
            else {
                return;
            };
            kept.remove(&oldest);
        }
    }
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const ACTING: SessionKind = SessionKind::Acting;

    #[test]
    fn a_code_trades_once_and_only_while_fresh() {
        let mut ui = UiSessions::default();
        let t0 = Instant::now();
        ui.add_code("c1".into(), ACTING, t0);
        assert_eq!(ui.trade("c2", "s0".into(), t0), None, "an unknown code");
        assert_eq!(
            ui.trade("c1", "s1".into(), t0 + Duration::from_secs(59)),
            Some(ACTING)
        );
        assert_eq!(
            ui.trade("c1", "s2".into(), t0 + Duration::from_secs(59)),
            None,
            "used"
        );
        ui.add_code("c3".into(), ACTING, t0);
        assert_eq!(
            ui.trade("c3", "s3".into(), t0 + CODE_LIFETIME),
            None,
            "lapsed"
        );
        assert_eq!(ui.touch("s1", t0 + Duration::from_secs(60)), Some(ACTING));
        assert!(
            ui.touch("s2", t0).is_none() && ui.touch("s3", t0).is_none(),
            "refused trades made nothing"
        );
    }

    #[test]
    fn a_session_is_of_the_kind_its_code_was_minted_for() {
        let mut ui = UiSessions::default();
        let t0 = Instant::now();
        ui.add_code("ro".into(), SessionKind::ReadOnly, t0);
        ui.add_code("rw".into(), ACTING, t0);
        assert_eq!(
            ui.trade("ro", "s-ro".into(), t0),
            Some(SessionKind::ReadOnly)
        );
        assert_eq!(ui.trade("rw", "s-rw".into(), t0), Some(ACTING));
        assert_eq!(ui.touch("s-ro", t0), Some(SessionKind::ReadOnly));
        assert_eq!(ui.touch("s-rw", t0), Some(ACTING));
    }

    #[test]
    fn a_session_lapses_when_idle_and_use_keeps_it() {
        let mut ui = UiSessions::default();
        let t0 = Instant::now();
        ui.add_code("c".into(), ACTING, t0);
        assert!(ui.trade("c", "s".into(), t0).is_some());
        let used = t0 + SESSION_IDLE - Duration::from_secs(1);
        assert!(ui.touch("s", used).is_some());
        assert!(ui
            .touch("s", used + SESSION_IDLE - Duration::from_secs(1))
            .is_some());
        assert!(ui.touch("s", used + 2 * SESSION_IDLE).is_none());
        assert!(ui.touch("s", t0).is_none(), "a lapsed session is forgotten");
    }

    #[test]
    fn what_is_kept_is_bounded() {
        let mut ui = UiSessions::default();
        let t0 = Instant::now();
        for n in 0..1000u32 {
            ui.add_code(
                format!("c{n}"),
                ACTING,
                t0 + Duration::from_millis(u64::from(n)),
            );
        }
        assert!(ui.codes.len() <= MAX_KEPT);
        assert!(
            ui.trade("c999", "s".into(), t0 + Duration::from_secs(1))
                .is_some(),
            "the newest is kept"
        );
        assert!(
            ui.trade("c0", "s0".into(), t0 + Duration::from_secs(1))
                .is_none(),
            "the oldest went"
        );
    }

    #[test]
    fn a_session_reads_the_status_routes_and_acts_on_four_and_nothing_else() {
        assert_eq!(
            session_route(&Method::GET, "/v1/routes"),
            SessionRoute::Read
        );
        for path in SESSION_READS {
            assert_eq!(
                session_route(&Method::GET, path),
                SessionRoute::Read,
                "{path}"
            );
            assert_eq!(
                session_route(&Method::POST, path),
                SessionRoute::Closed,
                "{path}"
            );
        }
        for path in [
            "/v1/admin/trust",
            "/v1/admin/untrust",
            "/v1/admin/vaults/follow",
            "/v1/admin/vaults/unfollow",
        ] {
            assert_eq!(
                session_route(&Method::POST, path),
                SessionRoute::Action,
                "{path}"
            );
            for method in [Method::GET, Method::PUT, Method::DELETE, Method::PATCH] {
                assert_eq!(
                    session_route(&method, path),
                    SessionRoute::Closed,
                    "{method} {path}"
                );
            }
        }
        for (method, path) in [
            (Method::POST, "/v1/admin/stop"),
            (Method::POST, "/v1/admin/ui-code"),
            (Method::POST, "/v1/admin/tickets/rotate"),
            (Method::POST, "/v1/admin/vaults"),
            (Method::POST, "/v1/admin/trust/"),
            (Method::POST, "/v1/admin/vaults/follow/x"),
            (Method::GET, "/v1/vaults/notes/records/k"),
            (Method::PUT, "/v1/vaults/notes/records/k"),
            (Method::DELETE, "/v1/vaults/notes/records/k"),
            (Method::GET, "/v1/vaults/notes/changes"),
            (Method::GET, "/v1/tickets"),
            (Method::GET, "/v1/doctor"),
            (Method::GET, "/metrics"),
            (Method::GET, "/v1/calls/0190"),
        ] {
            assert_eq!(
                session_route(&method, path),
                SessionRoute::Closed,
                "{method} {path}"
            );
        }
    }

    use crate::api::ui::tests::headers;

    #[test]
    fn an_action_needs_an_acting_session_the_pages_origin_and_a_json_body() {
        let page = headers(&[
            ("origin", "http://127.0.0.1:7420"),
            ("content-type", "application/json"),
        ]);
        assert_eq!(admit(ACTING, SessionRoute::Action, &page), Ok(()));
        assert_eq!(
            admit(
                ACTING,
                SessionRoute::Action,
                &headers(&[
                    ("origin", "http://127.0.0.1:7420"),
                    ("content-type", "Application/JSON; charset=utf-8"),
                ])
            ),
            Ok(())
        );
        assert_eq!(
            admit(SessionKind::ReadOnly, SessionRoute::Action, &page),
            Err(SessionRefusal::ReadOnly)
        );
        assert_eq!(
            admit(
                ACTING,
                SessionRoute::Action,
                &headers(&[("content-type", "application/json")])
            ),
            Err(SessionRefusal::NoOrigin),
            "no Origin: not the page"
        );
        for content_type in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
        ] {
            let mut sent = page.clone();
            sent.insert("content-type", HeaderValue::from_static(content_type));
            assert_eq!(
                admit(ACTING, SessionRoute::Action, &sent),
                Err(SessionRefusal::NotJson),
                "{content_type}"
            );
        }
        let mut no_type = page.clone();
        no_type.remove("content-type");
        assert_eq!(
            admit(ACTING, SessionRoute::Action, &no_type),
            Err(SessionRefusal::NotJson)
        );
        // Reads need none of it: a read-only session reads, without Origin (a same-origin GET
        // carries none). No session goes past its routes, whatever it sends.
        assert_eq!(
            admit(SessionKind::ReadOnly, SessionRoute::Read, &HeaderMap::new()),
            Ok(())
        );
        assert_eq!(
            admit(ACTING, SessionRoute::Closed, &page),
            Err(SessionRefusal::Closed)
        );
    }
}
