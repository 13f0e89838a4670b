//! Ways to reach a peer and which one to try first.
//!
//! A route is a kind (`thunderbolt`, `lan`, `tailnet`) and an address. Preference is by
//! standing first (proven routes before doubtful ones, down ones last), then by kind, then by
//! measured RTT (SPEC 8, [`rank_routes`]). Route health (heartbeats, backoff, standing) builds
//! on this table; the choice itself is a plain function of the table and the time.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What kind of network a route crosses; the order is the preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RouteKind {
    Thunderbolt,
    Lan,
    Tailnet,
}

impl RouteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Thunderbolt => "thunderbolt",
            Self::Lan => "lan",
            Self::Tailnet => "tailnet",
        }
    }

    /// The kind an address most likely is when nobody said: tailnets hand out addresses from
    /// 100.64.0.0/10 (CGNAT space) and fd7a:115c:a1e0::/48; everything else is taken as LAN.
    pub fn guess(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => {
                let [a, b, ..] = v4.octets();
                if a == 100 && (64..128).contains(&b) {
                    Self::Tailnet
                } else {
                    Self::Lan
                }
            }
            IpAddr::V6(v6) => {
                let s = v6.segments();
                if s[0] == 0xfd7a && s[1] == 0x115c && s[2] == 0xa1e0 {
                    Self::Tailnet
                } else {
                    Self::Lan
                }
            }
        }
    }

    /// Kinds that fail over on a pre-send failure (SPEC 6 rule 4): local links, where a failure
    /// is cheap to detect and another way likely exists.
    pub fn fails_over(self) -> bool {
        matches!(self, Self::Thunderbolt | Self::Lan)
    }
}

impl fmt::Display for RouteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RouteKind {
    type Err = RouteParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "thunderbolt" => Ok(Self::Thunderbolt),
            "lan" => Ok(Self::Lan),
            "tailnet" => Ok(Self::Tailnet),
            other => Err(RouteParseError::UnknownKind {
                kind: other.to_string(),
            }),
        }
    }
}

/// Why a route's text (`HOST:PORT[,kind]`, as `ferry trust --addr` takes it) is not a route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteParseError {
    /// The kind after the comma is none of the three: name one of them, or leave it out to
    /// have it guessed from the address.
    #[error("unknown route kind {kind:?}; use thunderbolt, lan or tailnet")]
    UnknownKind { kind: String },
    /// The address is not a numeric IP address and a port (host names are not resolved, so a
    /// route never changes under a peer's feet): give the address itself.
    #[error("{text:?} is not HOST:PORT with a numeric IP address (e.g. 192.168.1.20:7420)")]
    BadAddress { text: String },
}

/// One way to reach a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Route {
    pub kind: RouteKind,
    pub addr: SocketAddr,
}

impl Route {
    /// Parses `HOST:PORT[,kind]` (the `--addr` form of `ferry trust`), ASCII whitespace
    /// around either part ignored (only ASCII, so the OpenAPI document's pattern is exact).
    pub fn parse(text: &str) -> Result<Self, RouteParseError> {
        let (addr_text, kind) = match text.split_once(',') {
            Some((addr, kind)) => (addr, Some(trim(kind).parse::<RouteKind>()?)),
            None => (text, None),
        };
        let addr: SocketAddr =
            trim(addr_text)
                .parse()
                .map_err(|_| RouteParseError::BadAddress {
                    text: addr_text.to_string(),
                })?;
        Ok(Self {
            kind: kind.unwrap_or_else(|| RouteKind::guess(addr.ip())),
            addr,
        })
    }
}

fn trim(part: &str) -> &str {
    part.trim_matches(|c: char| c.is_ascii_whitespace())
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{}", self.addr, self.kind)
    }
}

/// What is known about a route's health, for choosing and for `ferry routes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RouteState {
    Up,
    Down,
    Probing,
}

/// How much a route is trusted to carry the next call, best first (SPEC 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Standing {
    /// Heard within its doubt window, and steadily so for a while.
    Proven,
    /// Usable, but not proven: never heard yet, just back from silence, or quiet for two of
    /// its heartbeat intervals (about to be declared down if the silence goes on).
    Doubtful,
    /// Down: only calls that are safe to repeat try it, last.
    Down,
}

/// Orders candidate routes best first: proven, then doubtful, then down; within each, by
/// kind, then by RTT (unknown RTT last within a kind). Ties keep the caller's order, so config
/// order is respected.
pub fn rank_routes(candidates: &mut [(Route, Standing, Option<Duration>)]) {
    candidates.sort_by_key(|(route, standing, rtt)| {
        (*standing, route.kind, rtt.unwrap_or(Duration::MAX))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(text: &str) -> Route {
        Route::parse(text).expect("valid route")
    }

    #[test]
    fn kinds_are_guessed_from_tailnet_address_space() {
        assert_eq!(route("100.77.0.2:7420").kind, RouteKind::Tailnet);
        assert_eq!(route("100.128.0.2:7420").kind, RouteKind::Lan);
        assert_eq!(route("10.77.0.2:7420").kind, RouteKind::Lan);
        assert_eq!(
            route("10.77.0.2:7420,thunderbolt").kind,
            RouteKind::Thunderbolt
        );
        assert_eq!(
            Route::parse("host:7420"),
            Err(RouteParseError::BadAddress {
                text: "host:7420".into()
            })
        );
        assert_eq!(
            Route::parse("10.0.0.1:7420,wifi"),
            Err(RouteParseError::UnknownKind {
                kind: "wifi".into()
            })
        );
    }

    #[test]
    fn only_ascii_whitespace_around_the_parts_is_ignored() {
        assert_eq!(
            route(" \t10.0.0.1:7420\r\n , lan\n").addr,
            route("10.0.0.1:7420").addr
        );
        for text in [
            "\u{a0}10.0.0.1:7420",
            "10.0.0.1:7420\u{2028}",
            "10.0.0.1:7420,\u{85}lan",
        ] {
            assert!(Route::parse(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn ranking_prefers_proven_then_kind_then_rtt() {
        let ms = Duration::from_millis;
        let mut c = vec![
            (route("100.77.0.2:1"), Standing::Proven, Some(ms(1))),
            (route("10.0.0.2:1"), Standing::Down, Some(ms(1))),
            (route("10.0.0.3:1"), Standing::Proven, Some(ms(9))),
            (route("10.0.0.4:1"), Standing::Proven, Some(ms(2))),
            (route("10.0.0.5:1,thunderbolt"), Standing::Proven, None),
            (route("10.0.0.6:1"), Standing::Doubtful, Some(ms(1))),
        ];
        rank_routes(&mut c);
        let order: Vec<String> = c.iter().map(|(r, ..)| r.addr.to_string()).collect();
        assert_eq!(
            order,
            [
                "10.0.0.5:1",
                "10.0.0.4:1",
                "10.0.0.3:1",
                "100.77.0.2:1",
                "10.0.0.6:1",
                "10.0.0.2:1"
            ]
        );
    }
}
