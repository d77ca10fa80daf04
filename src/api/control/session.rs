//! Browser sessions for the web dashboard (issue 14 §1): the page never contains a credential.
//!
//! ```text
//! keyhaven dashboard (holds the 0600 token file) ── POST /api/session/nonce, Bearer token ──► engine
//! headless banner (same process) ── Sessions::mint_nonce ─────────────────────────────────────┘
//!   ◄── http://127.0.0.1:PORT/auth?nonce=<128 random bits>   (single use, 60 s)
//! browser ── GET /auth?nonce=… ──► 303 Location: /  +  Set-Cookie: kh_session_PORT=<256 bits>;
//!                                                       HttpOnly; SameSite=Strict; Path=/
//! page ── fetch /api/… (cookie; Origin, Sec-Fetch-Site: same-origin or X-Keyhaven-UI) ──► control API
//! ```
//!
//! Nonces and sessions live in memory only (an engine restart signs every browser out; run
//! `keyhaven dashboard` again). They are stored as SHA-256 digests, so a lookup's timing says
//! nothing about a stored value. A nonce is removed when it is redeemed or expires; a session
//! expires after [`SESSION_IDLE`] without a request. Both sets are bounded: the oldest entry goes
//! first. The cookie's name carries the port because browsers share cookies across the ports of
//! one host.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};

/// How long a one-time dashboard link works.
pub const NONCE_TTL: Duration = Duration::from_secs(60);
/// A session ends after this long without a request.
pub const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
const MAX_NONCES: usize = 32;
const MAX_SESSIONS: usize = 64;

type Digest32 = [u8; 32];

fn digest(value: &str) -> Digest32 {
    Sha256::digest(value.as_bytes()).into()
}

#[derive(Debug, Default)]
struct Inner {
    /// Nonce digest → when it was minted.
    nonces: HashMap<Digest32, Stamp>,
    /// Session digest → last use.
    sessions: HashMap<Digest32, Stamp>,
    /// Orders stamps taken within one clock tick.
    seq: u64,
}

/// A time and a sequence number, so "oldest" is well defined.
type Stamp = (Instant, u64);

impl Inner {
    fn stamp(&mut self, now: Instant) -> Stamp {
        self.seq += 1;
        (now, self.seq)
    }
}

/// The engine's dashboard nonces and browser sessions.
#[derive(Debug)]
pub struct Sessions {
    cookie: String,
    nonce_ttl: Duration,
    idle: Duration,
    inner: Mutex<Inner>,
}

/// Drops expired entries, then the oldest ones until there is room for one more.
fn prune(map: &mut HashMap<Digest32, Stamp>, ttl: Duration, max: usize, now: Instant) {
    map.retain(|_, (t, _)| now.saturating_duration_since(*t) < ttl);
    while map.len() >= max {
        let Some(oldest) = map.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k) else { break };
        map.remove(&oldest);
    }
}

impl Sessions {
    /// Sessions for the listener on `port`, with the default lifetimes.
    pub fn new(port: u16) -> Sessions {
        Sessions::with_lifetimes(port, NONCE_TTL, SESSION_IDLE)
    }

    /// Sessions with other lifetimes (tests).
    pub fn with_lifetimes(port: u16, nonce_ttl: Duration, idle: Duration) -> Sessions {
        Sessions { cookie: format!("kh_session_{port}"), nonce_ttl, idle, inner: Mutex::new(Inner::default()) }
    }

    /// The session cookie's name.
    pub fn cookie_name(&self) -> &str {
        &self.cookie
    }

    /// A new one-time nonce (128 random bits, hex), valid for the nonce lifetime.
    pub fn mint_nonce(&self) -> String {
        let nonce = hex::encode(rand::random::<[u8; 16]>());
        let now = Instant::now();
        if let Ok(mut inner) = self.inner.lock() {
            prune(&mut inner.nonces, self.nonce_ttl, MAX_NONCES, now);
            let stamp = inner.stamp(now);
            inner.nonces.insert(digest(&nonce), stamp);
        }
        nonce
    }

    /// Trades a nonce for a new session id (256 random bits, hex). `None` when the nonce is
    /// unknown, used or expired; a nonce never works twice.
    pub fn redeem(&self, nonce: &str) -> Option<String> {
        let now = Instant::now();
        let mut inner = self.inner.lock().ok()?;
        let (minted, _) = inner.nonces.remove(&digest(nonce))?;
        if now.saturating_duration_since(minted) >= self.nonce_ttl {
            return None;
        }
        let session = hex::encode(rand::random::<[u8; 32]>());
        prune(&mut inner.sessions, self.idle, MAX_SESSIONS, now);
        let stamp = inner.stamp(now);
        inner.sessions.insert(digest(&session), stamp);
        Some(session)
    }

    /// Whether the request carries a live session cookie (and refreshes its idle timer).
    pub fn verify(&self, headers: &HeaderMap) -> bool {
        let Some(value) = self.presented(headers) else { return false };
        let now = Instant::now();
        let Ok(mut inner) = self.inner.lock() else { return false };
        let key = digest(value);
        let stamp = inner.stamp(now);
        match inner.sessions.get_mut(&key) {
            Some(last) if now.saturating_duration_since(last.0) < self.idle => {
                *last = stamp;
                true
            }
            Some(_) => {
                inner.sessions.remove(&key);
                false
            }
            None => false,
        }
    }

    /// The value of this listener's session cookie, if the request has one.
    fn presented<'a>(&self, headers: &'a HeaderMap) -> Option<&'a str> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == self.cookie)
            .map(|(_, value)| value.trim())
    }

    /// The `Set-Cookie` value for a new session.
    pub fn set_cookie(&self, session: &str) -> String {
        format!("{}={session}; HttpOnly; SameSite=Strict; Path=/", self.cookie)
    }
}

#[cfg(test)]
mod tests;
