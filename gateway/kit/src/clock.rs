//! The kit's clock: tokio's, the app's runtime's, so an app's test that pauses time moves the
//! kit's deadlines with it. The one place in the kit that reads a clock (`clippy.toml` bans
//! `Instant::now` elsewhere); the kit links neither `ferry-core` nor `ferry-peer`, whose clock
//! modules the rest of Ferry reads.

/// Now, on tokio's clock.
#[allow(clippy::disallowed_methods)]
pub(crate) fn now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}
