//! The local API: HTTP/1.1 on loopback for this machine's apps (SPEC 5).
//!
//! Every request must carry the bearer token from the state directory; without it the answer
//! is `401 unauthorized` and nothing else happens. The exceptions are the status page's (see
//! [`ui`]): its static assets, and a session traded once for a code that `ferry ui` mints with
//! the token, which reads the status routes and, unless read-only, calls the four admin routes
//! of the page's actions ([`ui_sessions`]). Requests from other web pages are refused: a
//! foreign `Origin` always, and a `Host` that is a name other than `localhost` unless the
//! request carries the token; a session's action also needs its own `Origin` and a JSON body.
//! Record calls also name their app in `X-Ferry-App`. Errors are JSON with a code, a sentence
//! a person can act on, and the request id when there is one.

mod admin;
mod calls;
pub mod connections;
mod drain;
mod error;
mod headers;
mod listen;
mod records;
mod ui;
pub mod ui_sessions;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRef, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tower_service::Service;
use tracing::warn;

use crate::gateway::Gateway;
pub use admin::{parse_trust_request, trusted_peer};
pub use calls::call_answer;
use connections::{Connections, Ticket};
pub use error::ApiError;

/// Listens for apps on `addr`.
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    listen::bind(addr)
}

/// Serves the API on `listener` until the gateway stops. `file_limit` is the process's limit on
/// open files (see [`crate::platform::raise_file_limit`]), which the connection bound stays
/// below.
pub async fn serve(gateway: Arc<Gateway>, listener: TcpListener, file_limit: Option<u64>) {
    let limits = gateway.config().local_api.clone();
    let bound = connections::bound(limits.max_connections, file_limit);
    if bound < limits.max_connections {
        warn!(
            file_limit,
            bound,
            "the open-file limit holds the local API to fewer connections than local_api.max_connections ({}); raise the limit (LimitNOFILE in the systemd unit, `ulimit -n`)",
            limits.max_connections
        );
    }
    let connections = Arc::new(Connections::new(bound));
    // Made once and cloned per connection (an `Arc` each): served as a plain `Router`, axum
    // rebuilds its table of routes for every connection (35 MiB at the peak in heaptrack for
    // the overload benchmark's 2,048 connections to one gateway; an idle connection 30 KiB
    // resident instead of 15).
    let edge = Edge::new(gateway.clone(), connections.clone());
    listen::run(
        listener,
        edge,
        connections,
        limits.header_timeout(),
        gateway.lifecycle().stopping(),
    )
    .await;
}

/// The largest body an admin call takes (a trust request with its routes is well under it).
const ADMIN_BODY_LIMIT: usize = 64 * 1024;

/// What the handlers reach through `State`: the gateway, or the status page's sessions.
#[derive(Clone)]
struct ApiState {
    gateway: Arc<Gateway>,
    sessions: ui::SharedUiSessions,
    connections: Arc<Connections>,
}

impl FromRef<ApiState> for Arc<Gateway> {
    fn from_ref(state: &ApiState) -> Self {
        state.gateway.clone()
    }
}

impl FromRef<ApiState> for Arc<Connections> {
    fn from_ref(state: &ApiState) -> Self {
        state.connections.clone()
    }
}

impl FromRef<ApiState> for ui::SharedUiSessions {
    fn from_ref(state: &ApiState) -> Self {
        state.sessions.clone()
    }
}

/// The routes, each handler given what it takes of `state`.
fn router(state: ApiState) -> Router {
    // Values are read by the handlers with the configured value limit, so an oversized value
    // gets Ferry's own 400 rather than a bare 413.
    let records = Router::new()
        .route(
            "/v1/vaults/{vault}/records/{*key}",
            get(records::get_record)
                .put(records::put_record)
                .delete(records::delete_record),
        )
        .route("/v1/vaults/{vault}/records", get(records::list_records))
        .route("/v1/vaults/{vault}/changes", get(records::changes))
        .layer(DefaultBodyLimit::disable());
    let admin = Router::new()
        .route("/v1/calls/{id}", get(calls::settle))
        .route("/v1/calls", get(calls::list))
        .route("/v1/tickets", get(calls::tickets))
        .route("/v1/admin/tickets/rotate", post(calls::rotate))
        .route("/v1/status", get(admin::status))
        .route("/v1/peers", get(admin::peers))
        .route("/v1/routes", get(admin::routes))
        .route("/v1/vaults", get(admin::vaults))
        .route("/v1/doctor", get(admin::doctor))
        .route("/metrics", get(admin::metrics))
        .route("/v1/admin/trust", post(admin::trust))
        .route("/v1/admin/untrust", post(admin::untrust))
        .route("/v1/admin/vaults", post(admin::create_vault))
        .route("/v1/admin/vaults/follow", post(admin::follow_vault))
        .route("/v1/admin/vaults/unfollow", post(admin::unfollow_vault))
        .route("/v1/admin/stop", post(admin::stop))
        .route("/v1/admin/ui-code", post(ui::mint_code))
        .route("/v1/ui/session", post(ui::trade_code))
        .route("/ui", get(ui::index))
        .route("/ui/app.js", get(ui::script))
        .route("/ui/app.css", get(ui::style))
        .layer(DefaultBodyLimit::max(ADMIN_BODY_LIMIT));
    records
        .merge(admin)
        .fallback(error::unknown_route)
        .with_state(state)
}

/// What every request meets before its route, outermost first: the rest of a body the route
/// left unread is read before the answer goes ([`drain`]), errors that are not Ferry's JSON
/// become it ([`error::json_errors`]), and the refusals ([`access`]).
///
/// A service around the whole router rather than axum middleware: a layer on the router wraps
/// every route and, on every request, clones and boxes the service under it. Three layers cost
/// about 3 us of CPU per cache hit (`docs/history/performance-log.md`, "Reads"). The one
/// `from_fn` layer left after that did the same on a smaller scale; this service measured about
/// 0.6 us less per cache hit, within the runs' noise (the same log, "A plain put decided
/// without its record").
#[derive(Clone)]
struct Edge {
    routes: Router,
    state: ApiState,
}

impl Edge {
    fn new(gateway: Arc<Gateway>, connections: Arc<Connections>) -> Self {
        let state = ApiState {
            gateway,
            sessions: ui::SharedUiSessions::default(),
            connections,
        };
        Self {
            routes: router(state.clone()),
            state,
        }
    }

    /// The service for one connection, which holds its place (`ticket`) until it closes.
    fn on_connection(self, ticket: Ticket) -> OnConnection {
        OnConnection { edge: self, ticket }
    }
}

/// The edge on one connection: hyper's service. Who may call is decided as the request head
/// arrives, so a request that shows the token proves its connection ([`connections`]) before
/// anything else happens.
struct OnConnection {
    edge: Edge,
    ticket: Ticket,
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for OnConnection {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let request = request.map(Body::new);
        let state = &self.edge.state;
        let refused = match access(&state.gateway, &state.sessions, &request) {
            Ok(access) => {
                if access != Access::Public {
                    self.ticket.prove();
                }
                None
            }
            Err(refused) => Some(refused.into_response()),
        };
        let routes = self.edge.routes.clone();
        Box::pin(async move { Ok(answer(routes, request, refused).await) })
    }
}

/// The answer to `request`: `refused`, or the route's.
async fn answer(mut routes: Router, request: Request, refused: Option<Response>) -> Response {
    // Outermost, so even early refusals wait for the body they left unread.
    drain::unread_bodies(request, |request| async move {
        let response = match refused {
            Some(refused) => refused,
            None => match routed(&mut routes, request).await {
                Ok(response) => response,
                Err(never) => match never {},
            },
        };
        error::json_errors(response).await
    })
    .await
}

/// The router's answer (it is always ready, and never fails: errors are responses).
async fn routed(routes: &mut Router, request: Request) -> Result<Response, Infallible> {
    std::future::poll_fn(|cx| Service::<Request>::poll_ready(routes, cx)).await?;
    routes.call(request).await
}

/// How a request that may go on was let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// It showed the token.
    Token,
    /// It showed a status page's session (minted with the token).
    Session,
    /// A route open to all (the page's assets, the code trade).
    Public,
}

/// Who may call what: other web pages are kept out first (see [`ui`]), then the token opens
/// everything and a status page's session its routes ([`ui_sessions::admit`]); new calls are
/// refused once the gateway is stopping. `Err`: the refusal to answer with.
fn access(
    gateway: &Gateway,
    sessions: &ui::SharedUiSessions,
    request: &Request,
) -> Result<Access, ApiError> {
    let headers = request.headers();
    // A browser running another site's page always says so in `Origin`; apps send none.
    if !ui::origin_allowed(headers) {
        return Err(ui::forbidden("requests from other web pages are refused"));
    }
    let method = request.method();
    let path = request.uri().path();
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let with_token = presented
        .is_some_and(|bearer| constant_time_eq(bearer.as_bytes(), gateway.token().as_bytes()));
    let access = if with_token {
        Access::Token
    } else {
        // What a browser may reach without the token (the page, the code trade, a session's
        // reads) answers only under an IP or `localhost`: a page of another site whose name was
        // made to point here says its own name. Apps hold the token, so whatever host name they
        // dial by (a container's service name, say) is theirs to use.
        if !ui::host_allowed(headers) {
            return Err(ui::forbidden(
                "without the token this API answers only to an IP address or `localhost` as its host (a web page that renamed itself to this machine is refused)",
            ));
        }
        if ui::is_public(method, path) {
            Access::Public
        } else {
            let route = ui_sessions::session_route(method, path);
            // A closed route never looks the session up (nor keeps it alive).
            let kind = presented
                .filter(|_| route != ui_sessions::SessionRoute::Closed)
                .and_then(|bearer| {
                    sessions
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .touch(bearer, ferry_peer::clock::now())
                })
                .ok_or_else(ApiError::unauthorized)?;
            match ui_sessions::admit(kind, route, headers) {
                Ok(()) => Access::Session,
                Err(ui_sessions::SessionRefusal::Closed) => return Err(ApiError::unauthorized()),
                Err(refusal) => return Err(ui::forbidden(&refusal.to_string())),
            }
        }
    };
    if gateway.is_stopping() {
        return Err(ApiError::stopping());
    }
    Ok(access)
}

/// Compares without an early exit, so response timing does not reveal how much of a guessed
/// token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
